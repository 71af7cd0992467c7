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

from autopsy.log_times import TimedLines
from autopsy.model import ArtifactKind, Finding, RunSummary, Severity
from autopsy.recovery import clean_checkpoint
from autopsy.resume_plan import plan_resume

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
    # after a non-finite loss only a checkpoint saved before it is clean (autopsy.recovery)
    ckpt, poisoned = safe("checkpoints", lambda: clean_checkpoint(run, primary), (None, ()))
    failure_time, failure_source = safe("failure time", lambda: failure_moment(run, primary), (None, None))

    ckpt_path = ckpt.path if ckpt is not None else None
    ckpt_step = ckpt.step if ckpt is not None else None
    steps_lost: int | None = None
    seconds_lost: float | None = None
    end = failure_time if failure_time is not None else ended
    completed = last_step is not None and max_steps is not None and last_step >= max_steps
    # a loop over range(max_steps) that logs its index ends at max_steps - 1: that is its last step
    completed = completed or bool(safe("planned steps reached", lambda: _reached_plan(run), False))
    crashed = primary is not None and primary.severity >= Severity.CRITICAL
    if last_step is not None and not (completed and not crashed):
        # A run that reached its planned steps has nothing to resume: no work was lost,
        # whatever it saved (unless a crash finding says it died on its very last step).
        if ckpt is None:
            steps_lost = last_step  # no checkpoint at all: everything done so far is lost
            if end is not None and started is not None:
                seconds_lost = end - started
        elif ckpt_step is not None:
            steps_lost = max(0, last_step - ckpt_step)
        if ckpt is not None and end is not None:
            saved_at = safe("checkpoint time", lambda: step_time(run, ckpt_step)) if ckpt_step is not None else None
            if saved_at is None and _mtimes_trusted(run):
                saved_at = ckpt.mtime
            if _finite(saved_at):
                seconds_lost = end - saved_at
    if seconds_lost is not None and (not _finite(seconds_lost) or seconds_lost <= 0) and steps_lost != 0:
        seconds_lost = None  # steps were lost but the clocks cannot say how long they took: unknown, not 0 s
    elif seconds_lost is not None and seconds_lost < 0:
        seconds_lost = 0.0
    plan = safe("resume command", lambda: plan_resume(run, ckpt, path, _entries(run))) if ckpt is not None else None

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
        resume_hint=plan.command if plan is not None else None,
        resume=plan,
        failure_time=failure_time,
        failure_time_source=failure_source,
        disk_at_analysis=disk_at_analysis(run),
        poisoned_checkpoints=poisoned,
        completed=completed,
    )


def _reached_plan(run: Any) -> bool:
    from autopsy.checks.run_state import reached_plan

    return reached_plan(run)


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


# A log timestamp dates a line only when it was printed shortly before it: a timestamp on
# the job's first line (a glog or launcher header) followed by thousands of untimed lines
# says when the job started, not when it failed. A long traceback fits in this many lines.
MAX_TIMESTAMP_LINES = 200
# Nor when more training steps than this ran between them: tqdm redraws its bar with \r, so
# hundreds of steps after a timed checkpoint save can sit on one physical line.
MAX_TIMESTAMP_STEPS = 5
# A timestamp printed before any training step (a launcher's start-up lines) dates a failure at
# step N only when it is on the line right above it.
MAX_UNSTEPPED_TIMESTAMP_LINES = 1
_CLOCK_TEXT = re.compile(r"\b\d{1,2}:\d{2}:\d{2}\b|\b1[5-9]\d{8}(?:\.\d+)?\b")


def failure_moment(run: Any, primary: Finding | None) -> tuple[float | None, str | None]:
    """(unix time, where it comes from) of the moment the primary finding struck.

    In order: torchrun's error record for the failed rank (crashes only: it is written
    when the process died); the finding's own wall time; a timestamp on (or shortly
    before) one of its evidence lines: the pattern hit, the traceback, any other timed
    line of that log before it; the event-file wall time at or just before its step;
    and, for a crash whose evidence is among the last lines of a log without timestamps,
    that log's last write (said so in the source). A log timestamp more than
    ``MAX_TIMESTAMP_LINES`` lines before the evidence is not the failure's time.
    """
    if primary is None:
        return None, None
    crash = primary.severity >= Severity.CRITICAL
    if crash:
        child = _child_failure_time(run, primary)
        if child is not None:
            return child, "torchrun error record"
    # A span's first line is where it starts (a traceback's header): other lines of the span
    # may be other processes' output interleaved with it.
    lines = [(ev.path, ev.line, ev.excerpt) for ev in primary.evidence if ev.path is not None and ev.line is not None]
    scans = {scan.path: scan for scan in run.logs}
    timing = _Timing()
    if _finite(primary.wall_time) and not any(
            timing.stale(scans[p], ln, float(primary.wall_time), text)  # type: ignore[arg-type]
            for p, ln, text in lines[:1] if p in scans):
        return float(primary.wall_time), "finding"  # type: ignore[arg-type]
    refused: list[float] = []  # stale log times: a series point at the step may carry them too
    for path, line, _text in lines:
        scan = scans.get(path)
        if scan is None:
            continue
        for hits in scan.hits.values():
            for h in hits.all_kept():
                if h.lineno == line and _finite(h.wall_time):
                    if not timing.stale(scan, line, h.wall_time, h.text):
                        return float(h.wall_time), f"log timestamp ({path})"  # type: ignore[arg-type]
                    refused.append(float(h.wall_time))  # type: ignore[arg-type]
        for tb in scan.tracebacks:
            if (tb.line_start <= line <= tb.line_end and _finite(tb.wall_time)
                    and not timing.stale(scan, tb.line_start, tb.wall_time, None, tb.step)):
                return float(tb.wall_time), f"log timestamp ({path})"  # type: ignore[arg-type]
    for path, line, _text in lines:
        scan = scans.get(path)
        t = timing.timestamp_before(scan, line) if scan is not None else None
        if t is not None:
            return t, f"log timestamp before {path}:{line}"
    step = primary.step if primary.step is not None else next(
        (ev.step for ev in primary.evidence if ev.step is not None), None)
    if step is not None:
        t = step_time(run, step, sources=("tensorboard",))
        if t is not None:
            return t, f"event-file wall time at step {step}"
        t = step_time(run, step)
        if t is not None and not any(abs(t - r) < 1e-6 for r in refused):
            return t, f"logged wall time at step {step}"
    if crash and _mtimes_trusted(run):  # not a copy's mtimes (autopsy.clock)
        for path, line, _text in lines:
            scan = scans.get(path)
            if scan is None or not scan.tail or line < scan.tail[0][0]:
                continue  # only the last lines of a log were written at (about) its mtime
            mtime = next((a.mtime for a in run.discovery.artifacts if a.path == path), None)
            if _finite(mtime):
                return float(mtime), f"{path} last written"  # type: ignore[arg-type]
    return None, None


class _Timing:
    """The time lookups of one :func:`failure_moment` call, each log's timed records indexed once
    (:class:`~autopsy.log_times.TimedLines`: bisection, not a walk over every series point)."""

    def __init__(self) -> None:
        self._index: dict[int, tuple[Any, TimedLines]] = {}

    def timed(self, scan: Any) -> TimedLines:
        got = self._index.get(id(scan))
        if got is None or got[0] is not scan:
            got = self._index[id(scan)] = (scan, TimedLines(scan))
        return got[1]

    def stale(self, scan: Any, line: int, t: Any, text: str | None, step: int | None = None) -> bool:
        """Whether the log time ``t`` given to ``line`` was printed too far before it to date it.

        Exact where a pattern hit says which line its time was read from (``Hit.wall_time_line``):
        the hit on ``line`` with that time, else the nearest hit before it dated by the same time.
        Otherwise (tracebacks and series points do not say) the earliest record carrying the same
        time bounds it, and the log's very first time may be a header printed at the job's start.
        """
        if not _finite(t):
            return False
        source, source_step, line_step = _time_source(scan, line, float(t))
        step = line_step if step is None else step
        if step is not None and source_step is not None and step - source_step > MAX_TIMESTAMP_STEPS:
            return True
        if (step is not None and step > MAX_TIMESTAMP_STEPS and source is not None and source_step is None
                and line - source > MAX_UNSTEPPED_TIMESTAMP_LINES):
            return True  # timed before any training step was seen (a launcher banner), failure at step N
        if source is not None:
            return line - source > MAX_TIMESTAMP_LINES
        if text and _CLOCK_TEXT.search(text):
            return False  # the line carries its own time
        first_carrier = self.timed(scan).first_line_with(float(t), line)
        if first_carrier is not None and line - first_carrier > MAX_TIMESTAMP_LINES:
            return True
        first = scan.first_wall_time
        # The log's first time and a line far into it that has no time of its own: the time may be
        # a header's from the job's start, with nothing to say how far before the line it was printed.
        return _finite(first) and abs(float(first) - float(t)) < 1e-6 and line > MAX_TIMESTAMP_LINES

    def timestamp_before(self, scan: Any, line: int) -> float | None:
        """The latest timed line of a log shortly before ``line`` (pattern hits, series points, tracebacks)."""
        best = self.timed(scan).latest_at_or_before(line)
        if best is None or self.stale(scan, line, best[1], None):
            return None
        return best[1]


def _time_source(scan: Any, line: int, t: float) -> tuple[int | None, int | None, int | None]:
    """(the line the time ``t`` of ``line`` was read from, the step current there, the step of a hit
    on ``line``), where the scanner's hits say so (None where they do not)."""
    best: int | None = None
    best_step: int | None = None
    line_step = next((h.step for hits in scan.hits.values() for h in hits.all_kept()
                      if h.lineno == line and h.step is not None), None)
    for hits in scan.hits.values():
        for h in hits.all_kept():
            src = h.wall_time_line
            if src is None or src > line or not _finite(h.wall_time) or abs(float(h.wall_time) - t) >= 1e-6:
                continue
            if h.lineno == line:
                return int(src), h.wall_time_step, line_step
            if best is None or src > best:
                best, best_step = int(src), h.wall_time_step
    return best, best_step, line_step


_CHILD_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[_ T](\d{2}):(\d{2}):(\d{2})$")


def _child_failure_time(run: Any, primary: Finding) -> float | None:
    """torchrun's ``time : 2026-11-21_12:32:22`` for the primary's rank (else the root-cause row).

    Read as UTC like every naive log time (torchrun prints the node's local time).
    """
    failures = [cf for cf in (getattr(run, "all_child_failures", None) or ()) if cf.time]
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


def _entries(run: Any) -> list[Any]:
    return list(getattr(run, "config_entries", None) or ())


def _mtimes_trusted(run: Any) -> bool:
    """File mtimes are the run's own writes, not a copy's (``autopsy.clock``; runs without one: yes)."""
    clock = getattr(run, "clock", None)
    return bool(getattr(clock, "mtimes_trusted", True))


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
