"""The run summary: how far the run got, when, and where to resume from.

Every time comes from the artifacts (log timestamps, event-file wall times, and file
mtimes only when neither exists), never from the clock at analysis time, so reports of
the same run directory are identical whenever they are made.
"""

from __future__ import annotations

import math
from typing import Any

from autopsy.model import ArtifactKind, Finding, RunSummary

_TIMED_KINDS = (ArtifactKind.LOG, ArtifactKind.TFEVENTS, ArtifactKind.TRAINER_STATE, ArtifactKind.CHECKPOINT_FILE)


def summarize(run: Any, primary: Finding | None = None, *, display_path: str | None = None,
              problems: list[str] | None = None) -> RunSummary:
    """Build the :class:`RunSummary` of a run; a view that fails to parse is left empty.

    ``problems`` (when given) receives one line per view that raised, so a parser bug
    shows in the report instead of taking the whole analysis down.
    """
    path = display_path if display_path is not None else str(run.root)

    def safe(name: str, fn: Any, default: Any = None) -> Any:
        try:
            return fn()
        except Exception as exc:  # parsers are lenient, but a summary must never crash analyze
            if problems is not None:
                problems.append(f"run summary: {name}: {type(exc).__name__}: {exc}")
            return default

    last_step = safe("last step", lambda: run.last_step)
    max_steps = safe("max steps", lambda: run.max_steps)
    started, ended = safe("start/end times", lambda: run_times(run), (None, None))
    ckpt = safe("checkpoints", lambda: run.latest_valid_checkpoint)
    failure_time = primary.wall_time if primary is not None and _finite(primary.wall_time) else None

    ckpt_path = ckpt.path if ckpt is not None else None
    ckpt_step = ckpt.step if ckpt is not None else None
    steps_lost: int | None = None
    seconds_lost: float | None = None
    end = failure_time if failure_time is not None else ended
    if last_step is not None:
        if ckpt is None:
            steps_lost = last_step  # no checkpoint at all: everything done so far is lost
            if end is not None and started is not None:
                seconds_lost = max(0.0, end - started)
        elif ckpt_step is not None:
            steps_lost = max(0, last_step - ckpt_step)
    if ckpt is not None and end is not None:
        saved_at = safe("checkpoint time", lambda: step_time(run, ckpt_step)) if ckpt_step is not None else None
        if saved_at is None:
            saved_at = ckpt.mtime
        if _finite(saved_at):
            seconds_lost = max(0.0, end - saved_at)

    return RunSummary(
        path=path,
        last_step=last_step,
        max_steps=max_steps,
        started=started,
        ended=ended,
        latest_valid_checkpoint=ckpt_path,
        latest_valid_step=ckpt_step,
        steps_lost=steps_lost,
        seconds_lost=seconds_lost,
        resume_hint=resume_hint(path, ckpt) if ckpt is not None else None,
        failure_time=failure_time,
    )


def run_times(run: Any) -> tuple[float | None, float | None]:
    """(started, ended): min/max of log timestamps and event wall times; mtimes as fallback."""
    stamps: list[float] = []
    for scan in run.logs:
        stamps.extend(t for t in (scan.first_wall_time, scan.last_wall_time) if _finite(t))
    for _path, frame in run.tfevents:
        if len(frame):
            wt = frame["wall_time"].dropna()
            if len(wt):
                stamps.extend((float(wt.min()), float(wt.max())))
    if stamps:
        return min(stamps), max(stamps)
    # No timestamps inside any file: the files' own mtimes bound the run (an mtime is a
    # last write, so "started" is only the earliest artifact write).
    mtimes = [a.mtime for a in run.discovery.artifacts if a.kind in _TIMED_KINDS and _finite(a.mtime)]
    if not mtimes:
        return None, None
    return min(mtimes), max(mtimes)


def step_time(run: Any, step: int) -> float | None:
    """The wall time at which training reached ``step`` (latest point at or before it)."""
    df = run.scalars
    if df.empty:
        return None
    sel = df[(df["step"] <= step) & df["wall_time"].notna()]
    if sel.empty:
        return None
    best = sel[sel["step"] == sel["step"].max()]
    value = float(best["wall_time"].max())
    return value if _finite(value) else None


def resume_hint(run_path: str, ckpt: Any) -> str | None:
    """The flag to resume from a checkpoint: HF Trainer's, else a nanochat-style step flag."""
    if ckpt.layout == "hf":
        base = run_path.rstrip("/")
        return f"--resume_from_checkpoint {base}/{ckpt.path}" if base else f"--resume_from_checkpoint {ckpt.path}"
    if ckpt.step is not None:
        return f"--resume_from_step {ckpt.step}"
    return None


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
