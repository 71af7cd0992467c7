"""The parsed run: every artifact of a run directory, read lazily and cached.

``load_run(path)`` only walks the directory. Each parsed view (``scalars``,
``checkpoints``, ``config``...) is computed on first use and cached on the Run with
``functools.cached_property``; nothing expensive is recomputed behind a property.
The DataFrame views are built in :mod:`autopsy.run_frames`; pandas is imported there on
first use, never by ``import autopsy``.
"""

from __future__ import annotations

import html
import math
import os
import time
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autopsy.discover import Discovery, WalkLimits, discover
from autopsy.model import Artifact, ArtifactKind, ParseStatus
from autopsy.parsers.numbers import bounded_int
from autopsy.parsers.safe_open import confine_to, open_binary
from autopsy.parsers.types import (
    Checkpoint,
    ChildFailure,
    ConfigEntry,
    DiskUsage,
    LogScan,
    MetricRows,
    Parsed,
    PatternSpec,
    Traceback,
    TrainerState,
)

if TYPE_CHECKING:
    import pandas as pd

    from autopsy.clock import Clock

DEFAULT_MAX_BYTES_PER_FILE = 8 * 1024**3  # 8 GiB: beyond this a log is only partly read


class RunError(Exception):
    """The run directory itself cannot be analysed (missing, not a directory, unreadable)."""


@dataclass(frozen=True)
class LoadOptions:
    """How to read a run. ``patterns`` are the log patterns of the loaded rule cards."""

    patterns: tuple[PatternSpec, ...] = ()
    max_bytes_per_file: int = DEFAULT_MAX_BYTES_PER_FILE
    max_depth: int = 12
    max_files: int = 200_000
    # TensorBoard record CRCs: off by default because checking costs 60-100% of the read time
    # (issue 6 allows on-by-default only under 20%); truncation is still detected without it.
    check_crc: bool = False
    # A partial file modified this recently is "in progress" (only while Run.clock says live).
    in_progress_seconds: float = 120.0
    now: float | None = None  # analysis time (tests pin it); defaults to time.time()


def load_run(path: str | os.PathLike[str], options: LoadOptions | None = None) -> Run:
    """Open a run directory: walk and classify its files. Parsing happens on first use.

    Raises :class:`RunError` when ``path`` does not exist, is not a directory, or cannot
    be listed; damage inside the run never raises.
    """
    root = Path(path)
    if not root.exists():
        raise RunError(f"{path}: no such directory")
    if not root.is_dir():
        raise RunError(f"{path}: not a directory (autopsy analyses a run directory)")
    if not os.access(root, os.R_OK | os.X_OK):
        raise RunError(f"{path}: permission denied")
    return Run(root, options or LoadOptions())


class Run:
    """A run directory and everything autopsy parsed from it.

    DataFrame views (``artifacts``, ``scalars``, ``checkpoints``, ``tracebacks``,
    ``config``) are built on first access and cached; their columns are documented on
    each property.
    """

    def __init__(self, root: Path, options: LoadOptions) -> None:
        self.root = root
        self.options = options
        self.now = options.now if options.now is not None else time.time()
        # Parse damage found after discovery, by artifact path: (status, note).
        self._damage: dict[str, tuple[ParseStatus, str | None]] = {}
        confine_to(root)  # files are opened from the root down, never through a swapped-in link

    def __repr__(self) -> str:
        return f"Run({str(self.root)!r})"

    # ------------------------------------------------------------------ discovery

    @cached_property
    def discovery(self) -> Discovery:
        """The walk: every file with its kind, plus directories that could not be walked."""
        return discover(self.root, WalkLimits(self.options.max_depth, self.options.max_files))

    def artifacts_of(self, kind: ArtifactKind) -> list[Artifact]:
        return [a for a in self.discovery.artifacts if a.kind is kind and a.status is not ParseStatus.UNREADABLE]

    def fs_path(self, rel_path: str) -> Path:
        return self.root / rel_path

    def record_damage(self, rel_path: str, status: ParseStatus, note: str | None) -> None:
        """Parsers' damage lands here and shows in ``artifact_list`` / ``artifacts``."""
        if status is ParseStatus.OK and note is None:
            return
        # Stored as the parser saw it: whether a cut-short file is "in progress" depends on
        # self.clock, which reads the logs and event files being parsed right now.
        self._damage[rel_path] = (status, note)

    def parse_status(self, rel_path: str) -> ParseStatus:
        """What the parser said of a file (OK when it recorded nothing), before in-progress judgement."""
        return self._damage.get(rel_path, (ParseStatus.OK, None))[0]

    @cached_property
    def clock(self) -> Clock:
        """Whether file mtimes are the run's own and whether it may still be running.

        Copies, clones and archives rewrite every mtime; every mtime-based judgement goes
        through this (see :mod:`autopsy.clock`).
        """
        from autopsy.clock import assess

        return assess(self)

    def in_progress(self, art: Artifact) -> bool:
        """A partial file is being written right now rather than damaged: the run is live
        (``clock.live``) and the file was modified within ``in_progress_seconds``."""
        return self.clock.live and self.now - art.mtime < self.options.in_progress_seconds

    @property
    def artifact_list(self) -> list[Artifact]:
        """Every artifact with the status its parser gave it (parses what is not parsed yet)."""
        self._parse_all()
        out = []
        for a in self.discovery.artifacts:
            if a.path in self._damage:
                status, note = self._damage[a.path]
                if status is ParseStatus.TRUNCATED and self.in_progress(a):
                    status = ParseStatus.IN_PROGRESS
                    note = f"{note}; modified seconds ago, probably still being written" if note else None
                a = replace(a, status=status, note=note)
            out.append(a)
        return out

    def _parse_all(self) -> None:
        _ = self.logs, self.tfevents, self.trainer_states, self.config_entries, self.checkpoint_list, self.metric_files

    # ------------------------------------------------------------------ parsed data

    @cached_property
    def logs(self) -> list[LogScan]:
        """One :class:`LogScan` per text log, scanned once with every pattern of the loaded cards."""
        from autopsy.parsers.logs import compile_patterns, scan_log

        compiled = compile_patterns(self.options.patterns)
        scans = []
        for art in self.artifacts_of(ArtifactKind.LOG):
            scan = scan_log(self.fs_path(art.path), art.path, compiled,
                            max_bytes=self.options.max_bytes_per_file, rank=art.rank)
            self.record_damage(art.path, scan.status, scan.note)
            scans.append(scan)
        if any(scan.steps_inferred for scan in scans):  # HF dicts without a bar: ordinals, not steps
            from autopsy.step_align import align_log_steps, logging_steps_of

            entries = [*self._file_config_entries, *(e for scan in scans for e in scan.config)]
            align_log_steps(scans, self.trainer_states, logging_steps_of(self.trainer_states, entries))
        return scans

    @cached_property
    def tfevents(self) -> list[tuple[str, pd.DataFrame]]:
        """(path, frame with tag/step/wall_time/value) per event file."""
        from autopsy.parsers.tensorboard import read_scalars

        out = []
        for art in self.artifacts_of(ArtifactKind.TFEVENTS):
            parsed = read_scalars(self.fs_path(art.path), max_bytes=self.options.max_bytes_per_file,
                                  check_crc=self.options.check_crc)
            self.record_damage(art.path, parsed.status, parsed.note)
            if parsed.value is not None:
                out.append((art.path, parsed.value))
        return out

    @cached_property
    def metric_files(self) -> list[MetricRows]:
        """Series of every metric file (CSV/JSONL tables, MLflow metrics, W&B summaries and logs)."""
        from autopsy.parsers.metric_files import read_metric_file

        out = []
        for art in self.artifacts_of(ArtifactKind.METRICS):
            parsed = read_metric_file(self.fs_path(art.path), art.path, art.detail,
                                      max_bytes=self.options.max_bytes_per_file)
            self.record_damage(art.path, parsed.status, parsed.note)
            if parsed.value is not None and parsed.value.values:
                out.append(parsed.value)
        return out

    @cached_property
    def trainer_states(self) -> list[TrainerState]:
        """Every readable ``trainer_state.json`` (root and checkpoints), root first then by step."""
        from autopsy.parsers.trainer_state import read_trainer_state

        out = []
        for art in self.artifacts_of(ArtifactKind.TRAINER_STATE):
            parsed = read_trainer_state(self.fs_path(art.path), art.path)
            self.record_damage(art.path, parsed.status, parsed.note)
            if parsed.value is not None:
                out.append(parsed.value)
        out.sort(key=lambda ts: (ts.path.count("/"), -(ts.global_step or 0)))
        return out

    @cached_property
    def trainer_state(self) -> TrainerState | None:
        """The most advanced trainer_state (highest global_step), or None."""
        if not self.trainer_states:
            return None
        return max(self.trainer_states, key=lambda ts: (ts.global_step or -1, -ts.path.count("/")))

    @cached_property
    def config_entries(self) -> list[ConfigEntry]:
        """Every flattened config value of configs, launch scripts and argument dumps."""
        entries = list(self._file_config_entries)
        from autopsy.parsers.tb_config import read_tb_config

        for art in self.artifacts_of(ArtifactKind.TFEVENTS):  # HF's TrainingArguments text, Lightning's hparams
            entries.extend(read_tb_config(self.fs_path(art.path), art.path))
        for scan in self.logs:  # configuration the program printed (source "log")
            entries.extend(scan.config)
        for rows in self.metric_files:  # settings a tracker recorded beside its metrics (W&B records)
            entries.extend(rows.config)
        return entries

    @cached_property
    def _file_config_entries(self) -> list[ConfigEntry]:
        """Config values of files (not logs): the log scan may need them to align its steps."""
        from autopsy.parsers.configs import read_config

        entries: list[ConfigEntry] = []
        for art in self.discovery.artifacts:
            if (art.kind not in (ArtifactKind.CONFIG, ArtifactKind.LAUNCH_SCRIPT)
                    or art.status is ParseStatus.UNREADABLE):
                continue
            parsed = read_config(self.fs_path(art.path), art.path, art.kind, art.detail)
            self.record_damage(art.path, parsed.status, parsed.note)
            entries.extend(parsed.value or ())
        return entries

    def config_value(self, key: str, default: Any = None) -> ConfigEntry | None:
        """The entry for a canonical key, preferring what the run was launched with.

        Precedence: launch-script flags, then argument dumps, then what the log printed, then
        training configs, then what a framework recorded it used (HF's
        TrainingArguments or Lightning's hparams in TensorBoard), then model/tokenizer configs,
        then trainer_state; within one kind,
        the shallowest path; within one log, the last line (a later override won).
        """
        # "log": what the program printed it used (nanoGPT overrides, HF's "Running training").
        rank = {"launch_flag": 0, "args_dump": 1, "log": 1.5, "hydra": 2, "yaml": 3, "json": 3, "toml": 3,
                "meta": 4, "tensorboard": 4, "hf_config": 5, "tokenizer": 6, "trainer_state": 7}
        cands = [e for e in self.config_entries if e.key == key and e.value is not None]
        if not cands:
            return default
        return min(cands, key=lambda e: (rank.get(e.source, 5), e.path.count("/"), e.path,
                                         -(e.line or 0) if e.source == "log" else e.line or 0))

    @cached_property
    def checkpoint_list(self) -> list[Checkpoint]:
        """Every checkpoint found, sorted by step (unknown steps first), integrity checked."""
        from autopsy.parsers.checkpoints import find_checkpoints

        cps = find_checkpoints(self.root, self.discovery.artifacts, now=self.now,
                               in_progress_seconds=self.options.in_progress_seconds, live=self.clock.live)
        # A damaged weights/optimizer file shows in the artifact list too, not only on its checkpoint.
        for cp in cps:
            for fc in cp.files:
                if not fc.ok and fc.path not in self._damage:
                    self.record_damage(fc.path, _file_check_status(fc.problem), fc.problem)
        return sorted(cps, key=lambda c: (c.step if c.step is not None else -1, c.path))

    @property
    def latest_valid_checkpoint(self) -> Checkpoint | None:
        """The newest checkpoint that can be resumed from (highest step, else newest mtime)."""
        valid = [c for c in self.checkpoint_list if c.valid]
        if not valid:
            return None
        return max(valid, key=lambda c: (c.step if c.step is not None else -1, c.mtime))

    @cached_property
    def disk(self) -> DiskUsage:
        """Bytes of the run and its checkpoints; the filesystem's size/free *at analysis time*."""
        import shutil

        run_bytes = sum(a.size for a in self.discovery.artifacts)
        ckpt_bytes = sum(c.bytes for c in self.checkpoint_list)
        try:
            du = shutil.disk_usage(self.root)
            return DiskUsage(run_bytes, ckpt_bytes, du.total, du.free, du.used)
        except OSError:
            return DiskUsage(run_bytes, ckpt_bytes, None, None, None)

    @cached_property
    def exit_codes(self) -> list[tuple[str, int]]:
        """(path, code) from exit-code files such as ``exit_code`` or ``returncode``."""
        out = []
        for art in self.artifacts_of(ArtifactKind.EXIT_CODE):
            try:
                with open_binary(self.fs_path(art.path)) as fh:
                    text = fh.read(64).decode("ascii", "replace").strip()
                out.append((art.path, int(text.split()[0])))
            except (OSError, ValueError, IndexError):
                self.record_damage(art.path, ParseStatus.UNREADABLE, "not an integer exit code")
        return out

    @property
    def all_tracebacks(self) -> list[Traceback]:
        return [tb for scan in self.logs for tb in scan.tracebacks]

    @property
    def all_child_failures(self) -> list[ChildFailure]:
        return [cf for scan in self.logs for cf in scan.child_failures]

    # ------------------------------------------------------------------ DataFrames

    @cached_property
    def scalars(self) -> pd.DataFrame:
        """Every numeric series in one long frame (cached).

        Columns: ``source`` ("tensorboard", "trainer_state", "log", and metric files: "csv",
        "jsonl", "json", "mlflow", "wandb"), ``path`` (the file),
        ``tag`` (as written), ``metric`` (canonical name such as "loss", "lr", "grad_norm",
        or None), ``split`` ("train", "eval", "val", "test", or "" when the tag and its source
        do not say: ``eval_loss`` is "eval", ``val/acc`` "val", an unprefixed trainer_state key
        "train"), ``step`` (Int64), ``wall_time`` (float unix seconds, NaN when unknown),
        ``value`` (float64, NaN/inf kept), ``rank`` (Int64, NA when not per-rank).
        """
        from autopsy.run_frames import scalars_frame

        return scalars_frame(self.tfevents, self.trainer_state, self.logs, self.metric_files)

    def series(self, metric: str, *, source: str | None = None, rank: int | None = None) -> pd.DataFrame:
        """The rows of ``scalars`` for one canonical metric from the best single source.

        Without ``source``, picks the source with the most points (tensorboard, then
        trainer_state, then log on ties) so rules never mix two copies of one series.
        Sorted by step, duplicates of a step keep the last written. A log whose steps are
        only dict ordinals (``LogScan.steps_inferred``) is used only when nothing else has the metric.
        """
        from autopsy.run_frames import best_series

        inferred = frozenset(scan.path for scan in self.logs if scan.steps_inferred)
        return best_series(self.scalars, metric, source=source, rank=rank, inferred_paths=inferred,
                           rows=self.metric_rows(metric))

    def metric_rows(self, metric: str) -> pd.DataFrame:
        """The rows of ``scalars`` whose ``metric`` is ``metric``, in frame order: what
        ``scalars[scalars["metric"] == metric]`` gives, from positions computed once for every
        metric (one pass over the string column, not one per question)."""
        pos = self._metric_positions.get(metric)
        return self.scalars.iloc[pos] if pos is not None else self.scalars.iloc[:0]

    @cached_property
    def _metric_positions(self) -> dict[str, Any]:
        from autopsy.run_frames import positions_by_value

        return positions_by_value(self.scalars["metric"])

    @cached_property
    def artifacts(self) -> pd.DataFrame:
        """One row per file: path, kind, detail, size, mtime, status, note, rank (cached)."""
        from autopsy.run_frames import artifacts_frame

        return artifacts_frame(self.artifact_list)

    @cached_property
    def checkpoints(self) -> pd.DataFrame:
        """One row per checkpoint: path, layout, step, n_files, bytes, mtime, valid, missing, problems."""
        from autopsy.run_frames import checkpoints_frame

        return checkpoints_frame(self.checkpoint_list)

    @cached_property
    def tracebacks(self) -> pd.DataFrame:
        """One row per traceback: path, line_start, line_end, rank, exc_type, message, innermost frame, chain."""
        from autopsy.run_frames import tracebacks_frame

        return tracebacks_frame(self.all_tracebacks)

    @cached_property
    def config(self) -> pd.DataFrame:
        """Flattened config: key (canonical), raw_key, value, text, path, line, source (cached)."""
        from autopsy.run_frames import config_frame

        return config_frame(self.config_entries)

    # ------------------------------------------------------------------ summaries

    @cached_property
    def last_step(self) -> int | None:
        """The highest training step any artifact reached."""
        steps: list[int] = []
        s = self.scalars["step"].dropna()
        if len(s):
            steps.append(int(s.max()))
        if self.trainer_state and self.trainer_state.global_step is not None:
            steps.append(self.trainer_state.global_step)
        steps.extend(c.step for c in self.checkpoint_list if c.step is not None)
        steps.extend(scan.last_step for scan in self.logs if scan.last_step is not None)
        return max(steps) if steps else None

    @cached_property
    def max_steps(self) -> int | None:
        """The planned number of steps: trainer_state, config, or a ``step N/M`` log line."""
        if self.trainer_state and self.trainer_state.max_steps and self.trainer_state.max_steps > 0:
            return self.trainer_state.max_steps
        entry = self.config_value("max_steps")
        if entry is not None and isinstance(entry.value, (int, float)) and entry.value > 0:
            # .inf or beyond int64 is no plan (the config parser already reads them as unset)
            return bounded_int(math.floor(entry.value)) if math.isfinite(entry.value) else None
        seen = [s.max_steps_seen for s in self.logs if s.max_steps_seen]
        return max(seen) if seen else None

    def _repr_html_(self) -> str:
        arts = self.artifact_list
        kinds: dict[str, int] = {}
        for a in arts:
            kinds[a.kind.value] = kinds.get(a.kind.value, 0) + 1
        damaged = [a for a in arts if a.status not in (ParseStatus.OK, ParseStatus.SKIPPED)]
        latest = self.latest_valid_checkpoint
        rows = [
            ("root", str(self.root)),
            ("artifacts", ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))),
            ("last step", self.last_step),
            ("max steps", self.max_steps),
            ("scalar points", len(self.scalars)),
            ("checkpoints", len(self.checkpoint_list)),
            ("latest valid checkpoint", latest.path if latest else None),
            ("damaged artifacts", ", ".join(f"{a.path} ({a.status.value})" for a in damaged) or "none"),
        ]
        body = "".join(
            f"<tr><th style='text-align:left'>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
            for k, v in rows
        )
        return f"<table class='autopsy-run'>{body}</table>"


def _file_check_status(problem: str | None) -> ParseStatus:
    """Artifact status for a failed checkpoint-file check: cut short (the usual case) or unreadable."""
    text = (problem or "").lower()
    if text.startswith(("unreadable", "cannot open", "read error")) or "not valid json" in text:
        return ParseStatus.UNREADABLE
    return ParseStatus.TRUNCATED


__all__ = ["LoadOptions", "Parsed", "Run", "RunError", "load_run"]
