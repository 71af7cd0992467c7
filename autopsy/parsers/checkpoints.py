"""Group checkpoint files into checkpoints and check each one's integrity from headers only.

Layouts recognised (one :class:`Checkpoint` row each):

- ``hf``: a Hugging Face ``checkpoint-N/`` directory. It should hold weights
  (``model.safetensors``, ``pytorch_model.bin``, ``adapter_model.safetensors`` or a
  sharded index with its shards; DeepSpeed ``global_stepN/*model_states.pt``, FSDP
  ``pytorch_model_fsdp_*``), ``optimizer.pt``, ``scheduler.pt``, ``trainer_state.json``
  and ``rng_state*.pth``. The Trainer writes ``trainer_state.json`` last, so a directory
  without it is a save that did not finish.
- ``nanochat``: ``model_000250.pt`` / ``meta_000250.json`` / ``optim_000250_rank0.pt``
  in one folder, grouped by (folder, step) and checked as a set.
- ``sharded``: a ``*.safetensors.index.json`` outside a checkpoint dir, with its shards.
- ``loose``: any other weights file (``step_1000.pt``, Lightning's
  ``epoch=3-step=1200.ckpt``, a final ``model.safetensors``), grouped by (folder, step).
  A group needs real weights: ``training_args.bin``, ``rng_state*.pth``, ``optimizer.pt``
  or ``scheduler.pt`` alone (an HF output dir without its model) are no checkpoint.

Every file is checked in constant time whatever its size (:mod:`safetensors_header`,
:mod:`zipcheck`, a look at the end of JSON files); nothing is unpickled or loaded.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from autopsy.model import Artifact, ArtifactKind, ParseStatus
from autopsy.parsers.checkpoint_formats import check_hdf5, check_keras_archive
from autopsy.parsers.numbers import OUT_OF_RANGE, bounded_int
from autopsy.parsers.safe_open import open_regular, read_regular
from autopsy.parsers.safetensors_header import check_safetensors
from autopsy.parsers.types import Checkpoint, FileCheck
from autopsy.parsers.zipcheck import check_torch_file

MAX_RANKS = 1 << 20  # a rank number above this in a file name is not a rank
_HF_DIR = re.compile(r"^checkpoint[-_](?P<step>\d+)$")
_NANOCHAT = re.compile(r"^(?P<part>model|meta|optim)_(?P<step>\d+)(?:_rank(?P<rank>\d+))?\.(?:pt|json)$")
# step_1000.pt, global_step500.pt, iter_0003000.pt, epoch=3-step=1200.ckpt, ckpt-2000.pt, model_1000.safetensors
_NAMED_STEP = re.compile(r"(?i)(?:^|[^a-z])(?:global_step|step|steps|iter|iteration|it)[=_\-]?(?P<step>\d+)")
_TRAILING_NUM = re.compile(r"[_\-](?P<step>\d+)\.[a-z]+$", re.I)
_TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
_INDEX_MAX_BYTES = 64 * 1024 * 1024
# Torch files that hold trainer state, never weights: HF's training_args.bin, rng_state*.pth,
# optimizer.pt, scheduler.pt, scaler.pt; DeepSpeed *optim_states.pt; nanochat-style optim_*.pt.
_AUX_STATE = re.compile(r"^training_args\.bin$|rng_state|optim|scheduler|^scaler\.pt$|trainer_state|lr_sched")

HF_WEIGHT_NAMES = ("model.safetensors", "pytorch_model.bin", "adapter_model.safetensors", "adapter_model.bin",
                   "model.safetensors.index.json", "pytorch_model.bin.index.json")
MISSING_WEIGHTS = "model weights (model.safetensors, pytorch_model.bin, adapter_model.safetensors or an index)"


def find_checkpoints(root: Path, artifacts: Sequence[Artifact], *, now: float,
                     in_progress_seconds: float, live: bool = True) -> list[Checkpoint]:
    """One :class:`Checkpoint` per checkpoint found among ``artifacts`` (paths relative to ``root``).

    A partial checkpoint is ``in_progress`` (being saved, not corrupt) only when ``live``
    (the run may still be writing: ``Run.clock.live``, false for a copy or a process known to
    have ended) and its newest file was modified less than ``in_progress_seconds`` before ``now``.
    """
    if not live:
        in_progress_seconds = -math.inf
    hf: dict[str, list[Artifact]] = defaultdict(list)
    rest: list[Artifact] = []
    for art in artifacts:
        parts = art.path.split("/")
        for i, part in enumerate(parts[:-1]):
            if _HF_DIR.match(part):
                hf["/".join(parts[:i + 1])].append(art)
                break
        else:
            if art.kind is ArtifactKind.CHECKPOINT_FILE:
                rest.append(art)
    for d in _not_hf(hf):  # accelerate's automatic naming is checkpoints/checkpoint_<i>, too
        rest.extend(a for a in hf.pop(d) if a.kind is ArtifactKind.CHECKPOINT_FILE)
    for d in [d for d, arts in hf.items() if _state_only(d, arts)]:
        del hf[d]
    out = [_hf_checkpoint(root, d, arts, now, in_progress_seconds) for d, arts in sorted(hf.items())]

    from autopsy.parsers.checkpoint_layouts import group_framework

    def make(path: str, layout: str, step: int | None, arts: list[Artifact], files: list[FileCheck],
             missing: list[str], base: str | None = None, extra_problems: Sequence[str] = ()) -> Checkpoint:
        return _make(path, layout, step, arts, files, missing, now, in_progress_seconds, extra_problems, base=base)

    framework, rest = group_framework(root, rest, make, _check_file, _step_from_name)
    out.extend(framework)

    nano: dict[tuple[str, str], list[Artifact]] = defaultdict(list)
    indexes: list[Artifact] = []
    loose: list[Artifact] = []
    for art in rest:
        folder, name = _split(art.path)
        m = _NANOCHAT.match(name)
        if m:
            nano[(folder, m.group("step"))].append(art)
        elif name.endswith(".index.json"):
            indexes.append(art)
        else:
            loose.append(art)
    ranks = _nanochat_ranks(nano)
    for (folder, digits), arts in sorted(nano.items()):
        out.append(_nanochat_checkpoint(root, folder, digits, arts, now, in_progress_seconds, ranks.get(folder, 1)))

    by_path = {a.path: a for a in loose}
    for idx in indexes:
        folder, _ = _split(idx.path)
        shards = [by_path.pop(_join(folder, s)) for s in _index_shards(root / idx.path) if _join(folder, s) in by_path]
        files = [_check_file(root, idx)] + [_check_file(root, a) for a in shards]
        out.append(_make(idx.path, "sharded", _step_from_name(idx.path), [idx, *shards], files, [],
                         now, in_progress_seconds))

    groups: dict[tuple[str, int | None], list[Artifact]] = defaultdict(list)
    for art in by_path.values():
        folder, name = _split(art.path)
        groups[(folder, _step_from_name(name))].append(art)
    for (folder, step), arts in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1)):
        if not any(is_weights_file(a.path) for a in arts):
            continue  # training_args.bin, optimizer/scheduler/RNG state alone: nothing to resume from
        arts.sort(key=lambda a: a.path)
        path = arts[0].path if len(arts) == 1 else (folder or ".")
        files = [_check_file(root, a) for a in arts]
        # several weight files of no known layout: listed as such, each checked from its header
        layout = "loose" if sum(is_weights_file(a.path) for a in arts) <= 1 else "unknown"
        out.append(_make(path, layout, step, arts, files, [], now, in_progress_seconds))
    return out


# ----------------------------------------------------------------------------- layouts


_HF_MARKERS = re.compile(r"^(?:trainer_state\.json|optimizer\.pt|scheduler\.pt|rng_state(?:_\d+)?\.pth"
                         r"|training_args\.bin)$")
_ACCELERATE_MARKERS = re.compile(r"^(?:optimizer|scheduler|sampler)(?:_\d+)?\.bin$|^random_states_\d+\.pkl$")


def _not_hf(hf: dict[str, list[Artifact]]) -> list[str]:
    """``checkpoint_<n>`` directories that accelerate wrote (``save_state``), not the HF Trainer:
    accelerate's files and no HF Trainer file, or, cut before any, no HF file beside such siblings."""
    def tops(d: str) -> set[str]:
        return {a.path[len(d) + 1:] for a in hf[d] if "/" not in a.path[len(d) + 1:]}

    acc = {d for d in hf if any(_ACCELERATE_MARKERS.match(n) for n in tops(d))
           and not any(_HF_MARKERS.match(n) for n in tops(d))}
    parents = {_split(d)[0] for d in acc}
    acc |= {d for d in hf if _split(d)[0] in parents and not any(_HF_MARKERS.match(n) for n in tops(d))}
    return sorted(acc)


def _state_only(directory: str, arts: list[Artifact]) -> bool:
    """A ``checkpoint-<n>/`` holding HF's ``trainer_state.json`` and none of the files it is saved after
    (weights, optimizer, scheduler, RNG state): the Trainer writes the state last, so this is no save cut
    short but a copy that left the large files behind (a repository that committed only the small ones:
    subro608/Deep_learning_Bert_project2's ``checkpoint-2400/trainer_state.json``). Not a checkpoint;
    its state is still read as the run's ``trainer_state``."""
    top = {a.path[len(directory) + 1:] for a in arts if "/" not in a.path[len(directory) + 1:]}
    payload = [a for a in arts if a.kind is ArtifactKind.CHECKPOINT_FILE
               and not a.path.endswith("/training_args.bin")]
    return "trainer_state.json" in top and not payload


def _hf_checkpoint(root: Path, directory: str, arts: list[Artifact], now: float, window: float) -> Checkpoint:
    arts.sort(key=lambda a: a.path)
    names = {a.path[len(directory) + 1:] for a in arts}
    top = {n for n in names if "/" not in n}
    files = [_check_file(root, a) for a in arts]
    missing: list[str] = []
    deepspeed = [n for n in names if re.match(r"global_step\d+/", n)]
    has_weights = (bool(top.intersection(HF_WEIGHT_NAMES)) or any(n.endswith(".safetensors") for n in top)
                   or any(n.endswith("model_states.pt") for n in deepspeed)
                   or any(n.startswith("pytorch_model_fsdp") for n in names))
    if not has_weights:
        missing.append(MISSING_WEIGHTS)
    has_optim = ("optimizer.pt" in top or "optimizer.bin" in top
                 or any(n.endswith("optim_states.pt") for n in deepspeed)
                 or any(n.startswith("optimizer_") for n in names))
    if not has_optim:
        missing.append("optimizer.pt")
    if "scheduler.pt" not in top:
        missing.append("scheduler.pt")
    if "trainer_state.json" not in top:
        missing.append("trainer_state.json")
    if not any(re.match(r"rng_state(_\d+)?\.pth$", n) for n in top):
        missing.append("rng_state.pth")
    extra: list[str] = []
    for art in arts:
        if art.path.endswith(".index.json"):
            folder, _ = _split(art.path)
            absent = [s for s in _index_shards(root / art.path) if _join(folder, s)[len(directory) + 1:] not in names]
            if absent:
                extra.append(f"{art.path[len(directory) + 1:]}: {len(absent)} shard(s) it names are missing: "
                             + ", ".join(sorted(absent)[:5]))
    ds_tag = _deepspeed_latest(root / directory / "latest") if "latest" in top else None
    if ds_tag is not None:
        # DeepSpeed keeps optimizer and model states in <tag>/ (named by ``latest``), never as
        # optimizer.pt; a missing <tag>/ is what makes such a checkpoint unusable.
        missing = [m for m in missing if m != "optimizer.pt" or not deepspeed]
        if not any(n.startswith(ds_tag + "/") for n in names):
            missing = [m for m in missing if m != "optimizer.pt"]
            extra.append(f"`latest` names {ds_tag}/ but that directory is missing: the DeepSpeed engine "
                         "state (optimizer and model states) was never written")
    digits = _HF_DIR.match(directory.rsplit("/", 1)[-1]).group("step")  # type: ignore[union-attr]
    step = bounded_int(digits)
    if step is None:
        extra.append(f"step number {digits[:30]}... is {OUT_OF_RANGE} (over 2^63-1)")
    return _make(directory, "hf", step, arts, files, missing, now, window, extra)


def _deepspeed_latest(path: Path) -> str | None:
    """The tag DeepSpeed's ``latest`` file names (``global_step240``), read as a few bytes of text."""
    try:
        text = read_regular(path, 256).decode("utf-8", "replace").strip()
    except OSError:
        return None
    return text if re.fullmatch(r"[\w.\-]{1,128}", text) else None


def _nanochat_ranks(nano: dict[tuple[str, str], list[Artifact]]) -> dict[str, int]:
    """Optimizer shards per step in each folder: the most ranks of a step that has all of its
    ``rank0..N-1`` (every rank saves its own ``optim_<step>_rank<r>.pt``)."""
    out: dict[str, int] = {}
    for (folder, _), arts in nano.items():
        got = _optim_ranks(arts)
        if got and got == set(range(len(got))):
            out[folder] = max(out.get(folder, 1), len(got))
    return out


def _optim_ranks(arts: list[Artifact]) -> set[int]:
    ranks = set()
    for a in arts:
        m = _NANOCHAT.match(_split(a.path)[1])
        if m and m.group("part") == "optim":
            rank = bounded_int(m.group("rank") or 0)
            if rank is not None and rank < MAX_RANKS:  # optim_1_rank99999999999.pt names no real rank
                ranks.add(rank)
    return ranks


def _nanochat_checkpoint(root: Path, folder: str, digits: str, arts: list[Artifact], now: float,
                         window: float, n_ranks: int = 1) -> Checkpoint:
    arts.sort(key=lambda a: a.path)
    parts = {_NANOCHAT.match(_split(a.path)[1]).group("part") for a in arts}  # type: ignore[union-attr]
    missing = []
    if "model" not in parts:
        missing.append(f"model_{digits}.pt")
    if "meta" not in parts:
        missing.append(f"meta_{digits}.json")
    have = _optim_ranks(arts)
    # ranks the folder's complete steps had; a step with none names them all (a save cut
    # before any optimizer shard), one cut part-way names those it lacks
    missing.extend(f"optim_{digits}_rank{r}.pt" for r in range(max(n_ranks, max(have, default=-1) + 1))
                   if r not in have)
    files = [_check_file(root, a) for a in arts]
    path = _join(folder, f"model_{digits}")
    step = bounded_int(digits)
    extra = [] if step is not None else [f"step number {digits[:30]}... is {OUT_OF_RANGE} (over 2^63-1)"]
    return _make(path, "nanochat", step, arts, files, missing, now, window, extra)


def _make(path: str, layout: str, step: int | None, arts: list[Artifact], files: list[FileCheck],
          missing: list[str], now: float, window: float, extra_problems: Sequence[str] = (),
          base: str | None = None) -> Checkpoint:
    if base is None:
        base = path if layout == "hf" else _split(path)[0]
    problems = [f"{_rel(f.path, base)}: {f.problem}" for f in files if not f.ok]
    problems.extend(extra_problems)
    mtime = max((a.mtime for a in arts), default=0.0)
    partial = bool(problems or missing)
    return Checkpoint(
        path=path,
        layout=layout,
        step=step,
        files=tuple(files),
        bytes=sum(f.size for f in files),
        mtime=mtime,
        missing=tuple(missing),
        problems=tuple(problems),
        in_progress=partial and now - mtime < window,
    )


# ------------------------------------------------------------------------------- files


def _check_file(root: Path, art: Artifact) -> FileCheck:
    """Constant-time integrity check of one file, dispatched on its name."""
    if art.status is ParseStatus.UNREADABLE:
        return FileCheck(art.path, art.size, "other", False, f"unreadable: {art.note or 'cannot open'}")
    fs_path = root / art.path
    name = art.path.rsplit("/", 1)[-1].lower()
    try:
        fd = open_regular(fs_path)
    except OSError as exc:
        return FileCheck(art.path, art.size, "other", False, f"cannot open: {exc.strerror or exc}")
    try:
        size = os.fstat(fd).st_size
        if name.endswith(".safetensors"):
            return check_safetensors(art.path, fd, size)
        if name.endswith(_TORCH_SUFFIXES):
            return check_torch_file(art.path, str(fs_path), fd, size)
        if name.endswith(".keras"):
            return check_keras_archive(art.path, str(fs_path), fd, size)
        if name.endswith((".h5", ".hdf5")):
            return check_hdf5(art.path, fd, size)
        if name.endswith(".pkl") or name == ".metadata":
            return _check_pickle_end(art.path, fd, size)
        if name.endswith(".index.json"):
            return _check_index(art.path, fs_path, size)
        if name.endswith(".json"):
            return _check_json_end(art.path, fd, size)
        if size == 0 and art.kind is ArtifactKind.CHECKPOINT_FILE:
            return FileCheck(art.path, size, "other", False, "empty file (0 bytes)")
        return FileCheck(art.path, size, "other", True)
    except OSError as exc:
        return FileCheck(art.path, art.size, "other", False, f"read error: {exc.strerror or exc}")
    finally:
        os.close(fd)


def _check_pickle_end(path: str, fd: int, size: int) -> FileCheck:
    """A pickle stream ends with its STOP opcode ``.``: a file cut mid-write does not (checked
    from its first and last byte, nothing unpickled)."""
    if size == 0:
        return FileCheck(path, size, "pickle", False, "empty file (0 bytes)")
    first, last = os.pread(fd, 1, 0), os.pread(fd, 1, size - 1)
    if first != b"\x80":
        return FileCheck(path, size, "pickle", True, note="not a binary pickle stream; not inspected")
    if last != b".":
        return FileCheck(path, size, "pickle", False, "pickle stream without its final STOP opcode: cut short")
    return FileCheck(path, size, "pickle", True)


def _check_json_end(path: str, fd: int, size: int) -> FileCheck:
    """A JSON file cut mid-write does not end with its closing brace (checked without parsing)."""
    if size == 0:
        return FileCheck(path, size, "json", False, "empty file (0 bytes)")
    tail = os.pread(fd, min(size, 256), max(0, size - 256)).rstrip()
    if not tail.endswith((b"}", b"]")):
        return FileCheck(path, size, "json", False, "JSON cut short (does not end with a closing brace)")
    return FileCheck(path, size, "json", True)


def _check_index(path: str, fs_path: Path, size: int) -> FileCheck:
    if size == 0:
        return FileCheck(path, size, "index", False, "empty file (0 bytes)")
    if size > _INDEX_MAX_BYTES:
        return FileCheck(path, size, "index", True, note="index too large to read; shards not checked")
    shards = _index_shards(fs_path)
    if not shards:
        return FileCheck(path, size, "index", False, "not a valid index (no weight_map with shard names)")
    return FileCheck(path, size, "index", True, entries=len(shards))


def _index_shards(fs_path: Path) -> list[str]:
    """Shard file names a ``*.index.json`` names in its weight_map ([] when unreadable)."""
    try:
        obj = json.loads(read_regular(fs_path, _INDEX_MAX_BYTES + 1))
    except (OSError, ValueError, RecursionError):
        return []
    wmap = obj.get("weight_map") if isinstance(obj, dict) else None
    if not isinstance(wmap, dict):
        return []
    return sorted({v for v in wmap.values() if isinstance(v, str) and v and ".." not in v and not v.startswith("/")})


# ----------------------------------------------------------------------------- helpers


def is_weights_file(path: str) -> bool:
    """A file that holds model weights (safetensors, a torch/Lightning file that is not only
    trainer state): what makes a group of loose files a checkpoint at all."""
    name = path.rsplit("/", 1)[-1].lower()
    if name.endswith(".safetensors"):
        return True
    return name.endswith(_TORCH_SUFFIXES) and _AUX_STATE.search(name) is None


def _step_from_name(name: str) -> int | None:
    base = name.rsplit("/", 1)[-1]
    m = _NAMED_STEP.search(base)
    if m:
        return bounded_int(m.group("step"))
    m = _TRAILING_NUM.search(base)
    if m and "rank" not in base.lower() and "of" not in base.lower().split("-"):
        return bounded_int(m.group("step"))
    return None


def _split(path: str) -> tuple[str, str]:
    folder, _, name = path.rpartition("/")
    return folder, name


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def _rel(path: str, base: str) -> str:
    return path[len(base) + 1:] if base and path.startswith(base + "/") else path
