"""Typed results the parsers hand to the rest of autopsy.

These are the contract between parsers (which are lenient and never raise on damage)
and rules (which are strict). DataFrames are built from them on the :class:`~autopsy.run.Run`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from autopsy.model import ParseStatus

# ----------------------------------------------------------------------------- logs


@dataclass(frozen=True)
class PatternSpec:
    """One regex a pattern rule wants found in the logs.

    ``key`` is unique across the catalog (``"<rule id>/<name>"``). ``regex`` is the source
    of a pattern for the ``regex`` module with named groups only. ``literals``: the line
    cannot match unless it contains at least one of these substrings (case-sensitive);
    the scanner uses them as a C-speed prefilter. Empty means "no prefilter possible".
    ``ignore_case`` compiles with IGNORECASE (and the prefilter lower-cases).
    """

    key: str
    regex: str
    literals: tuple[str, ...] = ()
    ignore_case: bool = False
    # False for the built-in cards, whose patterns tests/test_hostile_patterns.py proves free of
    # catastrophic backtracking: searched with no timeout, so their hits never depend on how
    # loaded the machine is. A user card's pattern is unchecked: per-search timeout and budget.
    guarded: bool = True


@dataclass(frozen=True)
class Hit:
    """One line that matched a :class:`PatternSpec`. ``lineno`` is 1-based."""

    key: str
    path: str
    lineno: int
    offset: int
    text: str  # the line (rank prefix and ANSI stripped), capped at a few KB
    groups: dict[str, str]
    rank: int | None = None
    wall_time: float | None = None  # from a timestamp on this line or the nearest before
    step: int | None = None  # the last training step seen in this file before the hit
    wall_time_line: int | None = None  # the line the wall time was read from (this line or one before)
    wall_time_step: int | None = None  # the training step current at that line (None: not known)


@dataclass
class HitList:
    """Hits of one pattern in one file: first ``cap`` and last ``cap`` kept, all counted."""

    first: list[Hit] = field(default_factory=list)
    last: list[Hit] = field(default_factory=list)  # the last hits after ``first`` filled
    count: int = 0

    def all_kept(self) -> list[Hit]:
        return self.first + self.last


@dataclass(frozen=True)
class Frame:
    file: str
    line: int | None
    function: str | None
    code: str | None = None


@dataclass(frozen=True)
class Traceback:
    """A Python traceback found in a log, with its chain.

    ``cause`` is the traceback this one was raised from or during (the one printed
    above it) and ``chain`` says how: ``"cause"`` for "The above exception was the direct
    cause", ``"context"`` for "During handling of the above exception".
    """

    path: str
    line_start: int
    line_end: int
    exc_type: str  # e.g. "torch.OutOfMemoryError", "RuntimeError"
    message: str
    frames: tuple[Frame, ...]
    rank: int | None = None
    cause: Traceback | None = None
    chain: str | None = None
    step: int | None = None
    wall_time: float | None = None

    @property
    def innermost(self) -> Frame | None:
        return self.frames[-1] if self.frames else None


@dataclass(frozen=True)
class ChildFailure:
    """One failure row of torchrun's ``ChildFailedError`` report."""

    path: str
    line: int
    rank: int | None
    local_rank: int | None
    exitcode: int | None
    signal: str | None
    host: str | None
    pid: int | None
    error_file: str | None
    traceback: str | None
    time: str | None
    root_cause: bool = False  # listed under "Root Cause (first observed failure)"


@dataclass(frozen=True)
class SeriesPoint:
    """One value from a log line (HF dict line, ``step 100 | loss 2.3``, progress bar)."""

    tag: str  # as written in the log ("loss", "learning_rate", "grad_norm", "lrm", "it/s")
    step: int | None
    value: float
    lineno: int
    wall_time: float | None = None
    rank: int | None = None


@dataclass
class LogScan:
    """Everything autopsy took from one text log, in one streaming pass."""

    path: str
    size: int
    bytes_read: int
    n_lines: int
    status: ParseStatus = ParseStatus.OK
    note: str | None = None
    rank: int | None = None  # rank of the file, when the path or every prefixed line tells
    ranks_seen: tuple[int, ...] = ()  # ranks from line prefixes ([rank3]:, [default3]:)
    hits: dict[str, HitList] = field(default_factory=dict)  # PatternSpec.key -> hits
    tracebacks: list[Traceback] = field(default_factory=list)
    child_failures: list[ChildFailure] = field(default_factory=list)
    series: list[SeriesPoint] = field(default_factory=list)
    head: list[str] = field(default_factory=list)  # first lines (up to ~20), cleaned
    tail: list[tuple[int, str]] = field(default_factory=list)  # (lineno, line) of the last ~50
    first_wall_time: float | None = None
    last_wall_time: float | None = None
    last_step: int | None = None
    max_steps_seen: int | None = None  # e.g. from "step 250/3520" or "| 250/3520 ["
    max_epochs_seen: int | None = None  # e.g. from Keras "Epoch 3/60" or "Epoch [3/10]"
    last_epoch_seen: int | None = None  # the epoch (as printed) of the last training line stating one
    last_epoch_unfinished: bool = False  # its last "Step [200/390]" leaves that epoch's loop unfinished
    binary_fraction: float = 0.0  # share of NUL / undecodable bytes in what was read
    config: list[ConfigEntry] = field(default_factory=list)  # configuration the program printed
    # max_bytes read the head and the tail: line numbers from this one on are estimated (~)
    approx_lines_from: int | None = None
    # HF dict lines with no bar, step line or step key before them: their steps (series, hits,
    # last_step) are the dicts' ordinals 1, 2, 3..., not training steps; the Run aligns them
    # to real steps when trainer_state / config allow (autopsy.step_align) and clears this.
    steps_inferred: bool = False


# --------------------------------------------------------------------- trainer_state


@dataclass(frozen=True)
class TrainerState:
    """The fields of an HF ``trainer_state.json`` that rules use, and all others in ``extra``."""

    path: str
    global_step: int | None
    max_steps: int | None
    num_train_epochs: float | None
    epoch: float | None
    save_steps: int | None
    logging_steps: int | None
    eval_steps: int | None
    train_batch_size: int | None
    best_model_checkpoint: str | None
    log_history: Sequence[dict[str, Any]]  # a tuple, or a lazy columnar view for big files
    extra: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------- configs


@dataclass(frozen=True)
class ConfigEntry:
    """One flattened config value with where it was written.

    ``key`` is the canonical name when the raw key is a known alias (``lr`` ->
    ``learning_rate``, ``save_every`` -> ``save_steps``), else the raw leaf key.
    ``raw_key`` is the dotted path as written (``training.optim.lr``, ``--lr``).
    """

    key: str
    raw_key: str
    value: Any  # int / float / bool / str / None, parsed leniently
    text: str  # the value as written
    path: str
    line: int | None
    source: str  # "yaml", "json", "hf_config", "tokenizer", "launch_flag", "args_dump", "trainer_state", "meta"


# ---------------------------------------------------------------------- checkpoints


@dataclass(frozen=True)
class FileCheck:
    """The integrity check of one checkpoint file (headers only, never tensors)."""

    path: str
    size: int
    format: str  # "safetensors", "zip", "json", "index", "other"
    ok: bool
    problem: str | None = None  # "header says 2.1 GB of tensors, file has 0.4 GB"
    note: str | None = None  # not a problem: "legacy pickle format, not inspected"
    entries: int | None = None  # tensors in a safetensors header, members of a zip


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint: an HF ``checkpoint-N/`` dir, a nanochat step triple, or loose weights."""

    path: str  # directory (HF) or the common prefix / file (others), relative to the root
    layout: str  # "hf", "nanochat", "loose", "sharded"
    step: int | None
    files: tuple[FileCheck, ...]
    bytes: int
    mtime: float
    missing: tuple[str, ...] = ()  # files the layout needs but are absent
    problems: tuple[str, ...] = ()  # every reason it cannot be resumed from
    in_progress: bool = False  # modified seconds ago: still being written

    @property
    def valid(self) -> bool:
        return not self.problems and not self.missing


@dataclass(frozen=True)
class DiskUsage:
    run_bytes: int
    checkpoint_bytes: int
    fs_total_bytes: int | None  # of the filesystem holding the run, "at analysis time"
    fs_free_bytes: int | None
    fs_used_bytes: int | None


# --------------------------------------------------------------------------- common


@dataclass(frozen=True)
class Parsed:
    """What a parser returns: the value it could read, and the damage it saw.

    Parsers never raise on damaged input; they return ``status``/``note`` instead and keep
    whatever they read before the damage.
    """

    value: Any
    status: ParseStatus = ParseStatus.OK
    note: str | None = None


# --------------------------------------------------------------------- metric files


@dataclass
class MetricRows:
    """Series read from one metric file (a CSV/JSONL table, MLflow metric files, a W&B summary).

    Columnar, one entry per value: ``tags[i]`` at ``steps[i]`` (None: no step axis) had
    ``values[i]`` (NaN/inf kept); ``splits[i]`` is "train", "eval", "val", "test" or "" when
    the file does not say. ``source`` is the scalars ``source`` ("csv", "jsonl", "json",
    "mlflow", "wandb"); ``config`` holds the settings the file (or its store) recorded.
    """

    path: str
    source: str
    tags: list[str] = field(default_factory=list)
    steps: list[int | None] = field(default_factory=list)
    wall_times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    splits: list[str] = field(default_factory=list)
    config: list[ConfigEntry] = field(default_factory=list)
    rows_read: int = 0
    bad_rows: int = 0
    epochs_done: int | None = None  # a table whose step axis is its epoch column: the epochs its last row closes
    first_bad: str | None = None  # "line 17: 3 fields, header has 5"

    def add(self, tag: str, step: int | None, wall_time: float, value: float, split: str) -> None:
        self.tags.append(tag)
        self.steps.append(step)
        self.wall_times.append(wall_time)
        self.values.append(value)
        self.splits.append(split)

    def bad(self, where: str) -> None:
        self.bad_rows += 1
        if self.first_bad is None:
            self.first_bad = where[:200]
