"""The run summary: how far the run got, when, and where to resume from.

Every time comes from the artifacts (log timestamps, event-file wall times, and file
mtimes only when neither exists), never from the clock at analysis time, so reports of
the same run directory are identical whenever they are made.
"""

from __future__ import annotations

import calendar
import math
import re
from typing import Any

from autopsy.model import ArtifactKind, Finding, RunSummary, Severity

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
    failure_time, failure_source = safe("failure time", lambda: failure_moment(run, primary), (None, None))

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
        if saved_at is None and _mtimes_trusted(run):
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
        failure_time_source=failure_source,
        disk_at_analysis=disk_at_analysis(run),
    )


def disk_at_analysis(run: Any) -> dict[str, int] | None:
    """The run's volume as measured now (size, free, used): labelled, since it is not the run's."""
    try:
        disk = run.disk
    except Exception:  # statvfs of an odd mount: the report simply has no volume figures
        return None
    figures = {"fs_total_bytes": disk.fs_total_bytes, "fs_free_bytes": disk.fs_free_bytes,
               "fs_used_bytes": disk.fs_used_bytes}
    out = {k: int(v) for k, v in figures.items() if isinstance(v, int) and not isinstance(v, bool)}
    return out or None


def failure_moment(run: Any, primary: Finding | None) -> tuple[float | None, str | None]:
    """(unix time, where it comes from) of the moment the primary finding struck.

    In order: the finding's own wall time; a timestamp on (or the nearest before) one of its
    evidence lines: the pattern hit, the traceback, any other timed line of that log before
    it; torchrun's error record for the failed rank (crashes only); the event-file wall time
    at or just before its step; and, for a crash whose evidence is among the last lines of
    a log without timestamps, that log's last write (said so in the source).
    """
    if primary is None:
        return None, None
    if _finite(primary.wall_time):
        return float(primary.wall_time), "finding"  # type: ignore[arg-type]
    # A span's first line is where it starts (a traceback's header): other lines of the span
    # may be other processes' output interleaved with it.
    lines = [(ev.path, ev.line) for ev in primary.evidence if ev.path is not None and ev.line is not None]
    scans = {scan.path: scan for scan in run.logs}
    for path, line in lines:
        scan = scans.get(path)
        if scan is None:
            continue
        for hits in scan.hits.values():
            for h in hits.all_kept():
                if h.lineno == line and _finite(h.wall_time):
                    return float(h.wall_time), f"log timestamp ({path})"  # type: ignore[arg-type]
        for tb in scan.tracebacks:
            if tb.line_start <= line <= tb.line_end and _finite(tb.wall_time):
                return float(tb.wall_time), f"log timestamp ({path})"  # type: ignore[arg-type]
    crash = primary.severity >= Severity.CRITICAL
    if crash:
        child = _child_failure_time(run, primary)
        if child is not None:
            return child, "torchrun error record"
    for path, line in lines:
        scan = scans.get(path)
        t = _timestamp_before(scan, line) if scan is not None else None
        if t is not None:
            return t, f"log timestamp before {path}:{line}"
    step = primary.step if primary.step is not None else next(
        (ev.step for ev in primary.evidence if ev.step is not None), None)
    if step is not None:
        t = step_time(run, step, sources=("tensorboard",))
        if t is not None:
            return t, f"event-file wall time at step {step}"
        t = step_time(run, step)
        if t is not None:
            return t, f"logged wall time at step {step}"
    if crash and _mtimes_trusted(run):  # not a copy's mtimes (autopsy.clock)
        for path, line in lines:
            scan = scans.get(path)
            if scan is None or not scan.tail or line < scan.tail[0][0]:
                continue  # only the last lines of a log were written at (about) its mtime
            mtime = next((a.mtime for a in run.discovery.artifacts if a.path == path), None)
            if _finite(mtime):
                return float(mtime), f"{path} last written"  # type: ignore[arg-type]
    return None, None


def _timestamp_before(scan: Any, line: int) -> float | None:
    """The latest timed line of a log at or before ``line`` (pattern hits and series points)."""
    best: tuple[int, float] | None = None
    candidates = [(h.lineno, h.wall_time) for hits in scan.hits.values() for h in hits.all_kept()]
    candidates += [(p.lineno, p.wall_time) for p in scan.series]
    candidates += [(tb.line_start, tb.wall_time) for tb in scan.tracebacks]
    for lineno, t in candidates:
        if lineno <= line and _finite(t) and (best is None or lineno > best[0]):
            best = (lineno, float(t))
    return best[1] if best else None


_CHILD_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[_ T](\d{2}):(\d{2}):(\d{2})$")


def _child_failure_time(run: Any, primary: Finding) -> float | None:
    """torchrun's ``time : 2026-11-21_12:32:22`` for the primary's rank (else the root-cause row).

    Read as UTC like every naive log time (torchrun prints the node's local time).
    """
    failures = [cf for cf in run.all_child_failures if cf.time]
    if not failures:
        return None
    ranks = {ev.rank for ev in primary.evidence if ev.rank is not None}
    for key in ("rank", "failed_rank"):
        v = primary.facts.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            ranks.add(v)
    ordered = ([cf for cf in failures if cf.rank in ranks] + [cf for cf in failures if cf.root_cause]
               + failures)
    for cf in ordered:
        m = _CHILD_TIME.match(cf.time.strip())
        if m is None:
            continue
        try:
            return float(calendar.timegm((*(int(g) for g in m.groups()), 0, 0, 0)))
        except (ValueError, OverflowError):
            continue
    return None


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
    # Not after a copy or a clone (run.clock): every mtime is then the copy's time.
    if not _mtimes_trusted(run):
        return None, None
    mtimes = [a.mtime for a in run.discovery.artifacts if a.kind in _TIMED_KINDS and _finite(a.mtime)]
    if not mtimes:
        return None, None
    return min(mtimes), max(mtimes)


def step_time(run: Any, step: int, sources: tuple[str, ...] | None = None) -> float | None:
    """The wall time at which training reached ``step`` (latest point at or before it)."""
    df = run.scalars
    if df.empty:
        return None
    if sources is not None:
        df = df[df["source"].isin(sources)]
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


def _mtimes_trusted(run: Any) -> bool:
    """File mtimes are the run's own writes, not a copy's (``autopsy.clock``; runs without one: yes)."""
    clock = getattr(run, "clock", None)
    return bool(getattr(clock, "mtimes_trusted", True))


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
