"""Walk a run directory and classify every file into an artifact kind.

Classification uses the name *and* a sniff of the first bytes, so an event file named
``.txt`` is still an event file and a binary file named ``.log`` is not read as text.
The walk is bounded (depth, file count), never follows a symlink out of the run or into
a loop, and never opens anything that is not a regular file (a FIFO named ``train.log``
must not block the analysis).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from autopsy.model import Artifact, ArtifactKind, ParseStatus
from autopsy.parsers.checkpoint_formats import raw_data_bin
from autopsy.parsers.metric_tables import sniff_table_head
from autopsy.parsers.py_config import looks_like_py_dump
from autopsy.parsers.safe_open import open_binary
from autopsy.parsers.tracker_stores import sniff_mlflow_metric

# Notes of a symlink to a file or directory of the run: its content is read under the target's
# name, so the link itself is not a file left unread (reports do not list it as one).
READ_UNDER_TARGET = "(read under that name)"
WALKED_UNDER_TARGET = "(walked under that name)"
ALIAS_NOTES = (READ_UNDER_TARGET, WALKED_UNDER_TARGET)

DEFAULT_MAX_DEPTH = 12
DEFAULT_MAX_FILES = 200_000
SNIFF_BYTES = 512

# Directories that never hold run artifacts but can hold very many files.
_SKIP_DIRS = frozenset({".git", "__pycache__", ".ipynb_checkpoints", "node_modules", ".venv", "venv"})

_LOG_SUFFIXES = frozenset({".log", ".out", ".err", ".txt", ".stdout", ".stderr"})
# Scheduler and rotation names: PBS / SGE / LSF job output "<job>.o7082041" / ".e7082041" (".po", ".pe"
# for parallel environments), the bare ".o" / ".e" a job script names with `#SBATCH -e SOAP_42.e`
# (a binary object file "x.o" is told apart by the sniff), numbered copies "train.out-30", "train.log.1",
# "run.err_2".
_NUMBERED_LOG = re.compile(r"\.(?:o|e|po|pe)(?:\d{2,})?$|\.(?:log|out|err)[-._]\d+$")
_LOG_NAMES = frozenset({"nohup.out", "stdout", "stderr", "output", "log", "console", "train_log"})
_NOT_LOG_TXT = re.compile(
    r"(?i)^(merges|vocab|requirements.*|license.*|readme.*|notice.*|spm|added_tokens|dict|labels)\.txt$"
)
# A training log committed as markdown (the console output in a fenced block): named as a log
# ("log_cifar100.md", "log_output.md", "training_log.md", "README-logs.md"), not a changelog or docs.
_MARKDOWN_LOG = re.compile(r"(?i)(?:^|[_\-.])(?:logs?|output|console|stdout)(?:[_\-.]|$)")
# ... or a job's console output saved under the job's own name ("test_4_1.md", "SundayFix_0.md": a course
# repository's LSF outputs), told by its first bytes: no markdown structure first, and a line only a console
# holds - a scheduler's report (LSF's "Sender: LSF System <...>", "PBS Job Id:", slurmstepd), wandb's
# prefix, a Python traceback or "can't open file", a shell's signal word on its own line.
_DOC_MD = re.compile(r"(?i)^(?:readme|changelog|changes|contributing|license|history|code_of_conduct|security|authors)")
_MARKDOWN_START = re.compile(r"\s*(?:#|<|\||```|---|\[|!\[|> )")
_CONSOLE_LINE = re.compile(
    r"(?m)^(?:Sender: LSF System <|PBS Job Id: |slurmstepd: |wandb: |Traceback \(most recent call last\):"
    r"|python[\d.]*: can't open file |(?:Killed|Terminated|Aborted \(core dumped\)|Segmentation fault \(core dumped\)"
    r"|User defined signal [12])\s*$)")
_CONFIG_SUFFIXES = frozenset({".yaml", ".yml", ".json", ".toml", ".cfg", ".ini"})
_NOT_CONFIG_JSON = frozenset({"vocab.json", "special_tokens_map.json", "added_tokens.json"})
_LAUNCH_SUFFIXES = frozenset({".sh", ".sbatch", ".slurm", ".bash", ".qsub", ".pbs"})
_WEIGHT_SUFFIXES = frozenset({".safetensors", ".pt", ".pth", ".bin", ".ckpt", ".pkl", ".npz", ".gguf", ".keras",
                              ".distcp"})
# HDF5 is also a data format: only model-like names are checkpoints (Keras' model.h5, weights.03-0.41.hdf5)
_H5_CHECKPOINT = re.compile(r"(?i)\.weights\.h5$|(model|weight|ckpt|checkpoint|epoch|best|last).*\.(h5|hdf5)$")
_CHECKPOINT_NAMES = frozenset({".metadata", "latest"})  # torch DCP metadata, DeepSpeed's newest tag
_EXIT_CODE_NAMES = frozenset({"exit_code", "exitcode", "returncode", "return_code", "exit_status", "exit_code.txt"})
_NANOCHAT_META = re.compile(r"^meta_\d+\.json$")
_TABLE_SUFFIXES = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
# metrics.json (detectron2 writes JSON lines under it), eval_metrics.json, history.json (Keras)
# mmengine's LocalVisBackend writes vis_data/scalars.json (JSON lines, one per log interval)
_METRIC_JSON = re.compile(r"(?i)^(?:.*[_\-.])?metrics(?:[_\-.].*)?\.json$|^history\.json$|^scalars\.json$")
JSON_SNIFF_BYTES = 16 * 1024  # a JSON-lines log's first record can be longer than SNIFF_BYTES
# A log-named file that may hold records: a JSON line, or a JSON list whose first item is an object.
_RECORDS_HEAD = re.compile(rb'\{"|\s*\[\s*\{\s*"')
_FIRST_LISTED_RECORD = re.compile(rb"\[\s*(\{[^{}]*\})")  # a flat first record (Chainer's LogReport)

# torchrun --log-dir: <log_dir>/<run_id>/attempt_<n>/<local_rank>/{stdout,stderr}.log
_TORCHRUN_RANK = re.compile(r"(?:^|/)attempt_\d+/(?P<rank>\d+)/(?:stdout|stderr|error)\.(?:log|json)$")
# rank3.log, log_rank_3.txt, train-rank03.out, worker_rank2.err
_NAME_RANK = re.compile(r"(?i)(?:^|[^a-z])rank[_\-.]?(?P<rank>\d{1,5})(?:\D|$)")


@dataclass(frozen=True)
class WalkLimits:
    max_depth: int = DEFAULT_MAX_DEPTH
    max_files: int = DEFAULT_MAX_FILES


@dataclass(frozen=True)
class Discovery:
    """What the walk found: the artifacts, and anything it could not walk into."""

    artifacts: tuple[Artifact, ...]
    problems: tuple[str, ...]  # one line each: "configs/: permission denied"
    truncated: bool  # the walk stopped at max_files


def rank_from_path(rel_path: str) -> int | None:
    """The rank a log's path tells (torchrun's per-rank dirs, ``rank3.log``), else None."""
    match = _TORCHRUN_RANK.search(rel_path)
    if match:
        return int(match.group("rank"))
    match = _NAME_RANK.search(rel_path.rsplit("/", 1)[-1])
    if match:
        return int(match.group("rank"))
    return None


def _sniff(path: Path) -> tuple[bytes | None, str | None]:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        return None, _os_error_note(exc)
    try:
        return os.read(fd, SNIFF_BYTES), None
    except OSError as exc:
        return None, _os_error_note(exc)
    finally:
        os.close(fd)


def _os_error_note(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "permission denied"
    return exc.strerror or type(exc).__name__


def is_tfevents_bytes(head: bytes) -> bool:
    """An event file starts with a record whose payload is an Event with ``file_version``."""
    return len(head) >= 16 and b"brain.Event:" in head[:128]


def looks_binary(head: bytes) -> bool:
    """True when the bytes are not text: NULs or mostly non-printable (UTF-16 logs are text)."""
    if not head:
        return False
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16 BOM: a text log from Windows tools
        return False
    if head[:4] in (b"PK\x03\x04", b"\x7fELF") or head[:2] == b"\x80\x02" or head[:1] == b"\x80":
        return True
    nul = head.count(0)
    if nul > len(head) // 8:
        # UTF-16 without BOM has NUL in every other byte but is text.
        if head[1::2].count(0) > len(head) // 4 or head[0::2].count(0) > len(head) // 4:
            return False
        return True
    # Text logs hold almost no C0 controls besides BS/TAB/LF/CR/ESC; random bytes hold ~10%.
    # Backspace is text: Keras 3's Progbar erases each redraw with one "\b" per column before its
    # "\r" (dynamic display is on wherever the posix module is loaded, so in every Linux log file).
    control = sum(1 for b in head if b < 8 or 13 < b < 27 or 27 < b < 32 or b == 127)
    return control > len(head) // 25


def classify(rel_path: str, head: bytes | None) -> tuple[ArtifactKind, str | None]:
    """Decide the kind (and sub-kind) of one file from its relative path and first bytes."""
    name = rel_path.rsplit("/", 1)[-1]
    lower = name.lower()
    suffix = os.path.splitext(lower)[1]
    if "tfevents" in lower or (head is not None and is_tfevents_bytes(head)):
        return ArtifactKind.TFEVENTS, None
    if lower == "trainer_state.json":
        return ArtifactKind.TRAINER_STATE, None
    if lower in _EXIT_CODE_NAMES:
        return ArtifactKind.EXIT_CODE, None
    metric = _metric_file(rel_path, lower, suffix, head)
    if metric is not None:
        return ArtifactKind.METRICS, metric
    if suffix == ".bin" and head is not None and raw_data_bin(head):
        return ArtifactKind.OTHER, "data"  # nanoGPT's train.bin/val.bin, Megatron's .bin+.idx: token arrays
    if suffix in _WEIGHT_SUFFIXES:
        return ArtifactKind.CHECKPOINT_FILE, suffix.lstrip(".")
    if suffix in (".h5", ".hdf5") and _H5_CHECKPOINT.search(lower):
        return ArtifactKind.CHECKPOINT_FILE, "h5"
    if lower in _CHECKPOINT_NAMES and (lower != "latest" or (head is not None and _is_tag(head))):
        return ArtifactKind.CHECKPOINT_FILE, lower.lstrip(".")
    if lower.endswith(".safetensors.index.json") or lower.endswith(".bin.index.json"):
        return ArtifactKind.CHECKPOINT_FILE, "index"
    if _NANOCHAT_META.match(lower):
        return ArtifactKind.CHECKPOINT_FILE, "meta"
    if suffix in _LAUNCH_SUFFIXES:
        return ArtifactKind.LAUNCH_SCRIPT, None
    if suffix == ".py" and head is not None and looks_like_py_dump(head):
        return ArtifactKind.CONFIG, "py_dump"  # OpenMMLab's dumped config (vis_data/config.py)
    if suffix in _CONFIG_SUFFIXES:
        if lower in _NOT_CONFIG_JSON:
            return ArtifactKind.OTHER, None
        if lower == "config.json":
            return ArtifactKind.CONFIG, "hf_config"
        if lower in {"tokenizer.json", "tokenizer_config.json"}:
            return ArtifactKind.CONFIG, "tokenizer"
        if lower == "generation_config.json":
            return ArtifactKind.CONFIG, "generation_config"
        if rel_path.endswith(".hydra/config.yaml"):
            return ArtifactKind.CONFIG, "hydra"
        if lower in {"args.json", "training_args.json", "hparams.yaml", "cmd_args.json"}:
            return ArtifactKind.CONFIG, "args_dump"
        return ArtifactKind.CONFIG, None
    is_log_name = (
        suffix in _LOG_SUFFIXES and not _NOT_LOG_TXT.match(lower)
    ) or lower in _LOG_NAMES or lower.startswith("slurm-") or _NUMBERED_LOG.search(lower) is not None \
        or (suffix == ".md" and (_MARKDOWN_LOG.search(lower[:-3]) is not None or _console_markdown(lower, head)))
    if head is not None and looks_binary(head):
        if is_log_name:
            return ArtifactKind.OTHER, "binary"
        return ArtifactKind.OTHER, None
    if is_log_name:
        return ArtifactKind.LOG, None
    return ArtifactKind.OTHER, None


def _console_markdown(lower: str, head: bytes | None) -> bool:
    """A ``.md`` file whose first bytes are a job's console output, not a document (see _CONSOLE_LINE)."""
    if head is None or _DOC_MD.match(lower):
        return False
    text = head.decode("utf-8", "replace").lstrip("\ufeff")
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    return not _MARKDOWN_START.match(first) and _CONSOLE_LINE.search(text) is not None


def _is_tag(head: bytes) -> bool:
    """DeepSpeed's ``latest``: one short word such as ``global_step240``."""
    return re.fullmatch(rb"\s*[\w.\-]{1,128}\s*", head) is not None


def _metric_file(rel_path: str, lower: str, suffix: str, head: bytes | None) -> str | None:
    """The metric-file sub-kind of a file ("csv", "jsonl", "json", "mlflow", "wandb_summary",
    "wandb_log"), or None when it is not one."""
    if lower == "wandb-summary.json":
        return "wandb_summary"
    if suffix == ".wandb":
        return "wandb_log"
    if lower == "wandb-history.jsonl":
        return "wandb_history"
    if suffix in _TABLE_SUFFIXES:
        return _TABLE_SUFFIXES[suffix]
    if suffix == ".json" and _METRIC_JSON.match(lower):
        return "json"
    if head is None:
        return None
    if not suffix and sniff_mlflow_metric(rel_path, head):
        return "mlflow"
    if suffix in (".log", ".txt") and not looks_binary(head):
        # Keras CSVLogger("training.log"), DETR/mmcv JSON-lines "log.txt"
        return sniff_table_head(head)  # JSON-lines ones are confirmed by the walk (_confirm_records)
    return None


_RECORD_LIST_END = re.compile(rb"\}\s*\]\s*\Z")


def _confirm_records(path: str) -> str | None:
    """"jsonl" for a ``.log``/``.txt`` whose first line is a JSON object of mostly numbers (a metrics log),
    "json" for a file holding a JSON list of such records (Chainer's LogReport ``result/log``, ESPnet1's
    ``results/log``: pretty-printed, no suffix), None for anything else (a structured text log
    ``{"level": "info", "message": ...}``)."""
    import json

    tail = b""
    try:
        with open_binary(path) as fh:
            data = fh.read(JSON_SNIFF_BYTES).lstrip()
            listed = _FIRST_LISTED_RECORD.match(data)
            if listed:  # and its last bytes, in the same open: does the list close at the file's end?
                fh.seek(max(0, fh.seek(0, 2) - 256))
                tail = fh.read(256)
    except OSError:
        return None
    first, detail = (listed.group(1), "json") if listed else (data.split(b"\n", 1)[0], "jsonl")
    try:
        obj = json.loads(first)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not obj:
        return None
    if any(k in obj for k in ("message", "msg", "event", "levelname", "level")):
        return None
    numbers = sum(isinstance(v, (int, float)) and not isinstance(v, bool) for v in obj.values())
    if numbers < max(2, len(obj) // 2):
        return None
    if listed and not _RECORD_LIST_END.search(tail):
        # a log that opens with a JSON list (a hyper-parameter dump) and goes on with step lines and a
        # traceback is a log: read as a table it would fail to parse and never be scanned. A whole JSON
        # list's last non-blank bytes close its last record and the list ("}" then "]").
        return None
    return detail


def _refine_trackers(artifacts: list[Artifact]) -> list[Artifact]:
    """Files whose kind depends on their neighbours: an MLflow run's ``params/*``, ``tags/*`` and
    ``meta.yaml`` (a folder holding ``meta.yaml`` and ``metrics/`` or ``params/``)."""
    metas = {a.path[: -len("meta.yaml")] for a in artifacts if a.path.endswith("meta.yaml")}
    if not metas:
        return artifacts
    runs = set()
    for a in artifacts:
        if "params/" in a.path or "metrics/" in a.path:
            for marker in ("/params/", "/metrics/"):
                if marker in "/" + a.path:
                    run = ("/" + a.path).split(marker, 1)[0].lstrip("/")
                    if (f"{run}/" if run else "") in metas:
                        runs.add(run)
    if not runs:
        return artifacts
    # An experiment's own meta.yaml (``mlruns/<exp>/meta.yaml``, the Default experiment's
    # ``mlruns/0/meta.yaml``) is MLflow's bookkeeping (ids, creation times), not the run's settings.
    stores = {run.rsplit("/", 2)[0] if run.count("/") >= 2 else "" for run in runs if "/" in run}
    out = []
    for a in artifacts:
        folder = a.path[: -len("/meta.yaml")] if a.path.endswith("/meta.yaml") else None
        if folder is not None and folder not in runs and folder.count("/") >= 1 \
                and folder.rsplit("/", 1)[0] in stores:
            out.append(replace(a, kind=ArtifactKind.OTHER, detail="mlflow_experiment", status=ParseStatus.SKIPPED,
                               note=None))
            continue
        for run in runs:
            prefix = f"{run}/" if run else ""
            if not a.path.startswith(prefix) or a.status is ParseStatus.UNREADABLE:
                continue
            rest = a.path[len(prefix):]
            if rest.startswith("params/"):
                a = replace(a, kind=ArtifactKind.CONFIG, detail="mlflow_param", status=ParseStatus.OK, note=None)
            elif rest.startswith("tags/"):
                # a run tag (mlflow.user, mlflow.source.name) is not a setting: skipped as a script is,
                # with no note, so reports do not list it among files left unread
                a = replace(a, kind=ArtifactKind.OTHER, detail="mlflow_tag", status=ParseStatus.SKIPPED, note=None)
            elif rest == "meta.yaml":
                a = replace(a, detail="mlflow_meta")
            break
        out.append(a)
    return out


def discover(root: Path, limits: WalkLimits | None = None) -> Discovery:
    """Walk ``root`` and return every file as an :class:`Artifact` with its kind.

    Unreadable files are artifacts with status ``unreadable``; directories the walk
    could not enter are listed in ``problems``. Raises nothing for damage inside the run.
    """
    limits = limits or WalkLimits()
    root = root.resolve()
    artifacts: list[Artifact] = []
    problems: list[str] = []
    truncated = False
    for entry in _walk(root, limits, problems):
        if len(artifacts) >= limits.max_files:
            truncated = True
            problems.append(f"stopped listing after {limits.max_files} files")
            break
        artifacts.append(entry)
    artifacts.sort(key=lambda a: a.path)
    return Discovery(tuple(_refine_trackers(artifacts)), tuple(problems), truncated)


def _walk(root: Path, limits: WalkLimits, problems: list[str]) -> Iterator[Artifact]:
    root_real = os.path.realpath(root)
    seen_dirs: set[tuple[int, int]] = set()
    try:
        st = os.stat(root)
        seen_dirs.add((st.st_dev, st.st_ino))
    except OSError:
        pass
    stack: list[tuple[str, int]] = [(str(root), 0)]
    while stack:
        dir_path, depth = stack.pop()
        rel_dir = os.path.relpath(dir_path, root).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        try:
            with os.scandir(dir_path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            problems.append(f"{rel_dir or './'}: {_os_error_note(exc)}")
            continue
        subdirs: list[str] = []
        for entry in entries:
            rel = rel_dir + entry.name
            try:
                is_link = entry.is_symlink()
                target = os.path.realpath(entry.path) if is_link else ""
                # A link out of the run is judged by where it points, before anything is looked up
                # there: the target is never touched, and whether it exists on the machine doing the
                # analysis (W&B's debug-core.log -> ~/.cache/wandb/...) does not change the report.
                if is_link and target != root_real and not target.startswith(root_real + os.sep):
                    yield Artifact(
                        rel, ArtifactKind.OTHER, 0, 0.0, ParseStatus.SKIPPED,
                        "symlink that points outside the run directory (not followed)",
                    )
                    continue
                st = os.stat(entry.path) if is_link else entry.stat(follow_symlinks=False)
            except OSError as exc:
                why = "broken symlink" if isinstance(exc, FileNotFoundError) else _os_error_note(exc)
                yield Artifact(rel, ArtifactKind.OTHER, 0, 0.0, ParseStatus.UNREADABLE, why)
                continue
            if is_link:
                if not stat.S_ISDIR(st.st_mode):
                    # A link to a file of the run (``latest.log -> train_0412.log``): the target
                    # is read under its own name; reading both would count every line twice.
                    target_rel = os.path.relpath(target, root_real).replace(os.sep, "/")
                    yield Artifact(rel, ArtifactKind.OTHER, st.st_size, st.st_mtime, ParseStatus.SKIPPED,
                                   f"symlink to {target_rel} {READ_UNDER_TARGET}")
                    continue
                here = os.path.realpath(dir_path)
                if not (here == target or here.startswith(target + os.sep)):
                    # A link to a directory of the run (W&B's ``wandb/latest-run``): walk the
                    # target under its real name only, so file:line citations stay valid after
                    # the link moves to the next run, and nothing is read twice.
                    target_rel = os.path.relpath(target, root_real).replace(os.sep, "/")
                    yield Artifact(rel, ArtifactKind.OTHER, 0, st.st_mtime, ParseStatus.SKIPPED,
                                   f"symlink to {target_rel}/ {WALKED_UNDER_TARGET}")
                    continue
            if stat.S_ISDIR(st.st_mode):
                if entry.name in _SKIP_DIRS:
                    continue
                key = (st.st_dev, st.st_ino)
                if key in seen_dirs:
                    if is_link:
                        problems.append(f"{rel}/: symlink loop or repeated directory (not followed)")
                    continue
                seen_dirs.add(key)
                if depth + 1 > limits.max_depth:
                    problems.append(f"{rel}/: deeper than {limits.max_depth} levels (not walked)")
                    continue
                subdirs.append(entry.path)
                continue
            if not stat.S_ISREG(st.st_mode):
                what = "FIFO" if stat.S_ISFIFO(st.st_mode) else "device or socket"
                yield Artifact(
                    rel, ArtifactKind.OTHER, 0, st.st_mtime, ParseStatus.UNREADABLE,
                    f"not a regular file ({what}); not opened",
                )
                continue
            head, err = _sniff(Path(entry.path)) if st.st_size else (b"", None)
            kind, detail = classify(rel, head)
            if kind is ArtifactKind.LOG and head and _RECORDS_HEAD.match(head):
                records = _confirm_records(entry.path)  # DETR / mmcv JSON-lines "log.txt", Chainer's "log"
                if records is not None:
                    kind, detail = ArtifactKind.METRICS, records
            status = ParseStatus.OK
            note = None
            if err is not None:
                status, note = ParseStatus.UNREADABLE, err
            elif kind is ArtifactKind.OTHER:
                status = ParseStatus.SKIPPED
                note = "binary content in a file named like a log" if detail == "binary" else None
            rank = rank_from_path(rel) if kind is ArtifactKind.LOG else None
            yield Artifact(rel, kind, st.st_size, st.st_mtime, status, note, rank, detail)
        for sub in reversed(subdirs):
            stack.append((sub, depth + 1))
