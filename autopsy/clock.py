"""Which clocks of a run can be believed: file mtimes, or only the times written inside files.

Why this exists: users rarely analyse a run where it was written. They ``scp`` it, ``cp -r``
it, download a CI artifact or ``git clone`` a repro, and every one of those rewrites every
mtime to the moment of the copy. Judged on such mtimes, a checkpoint SIGKILLed mid-save
three days ago looks "modified seconds ago, still being written", and a log copied five
days after the crash looks "written 120 h after the last step: hung". So every judgement
that reads an mtime (a file in progress, a stall, log/artifact ordering, start/end times)
asks :func:`assess` first, through the cached ``Run.clock``, and falls back to the
run's internal clocks (TensorBoard wall times, log timestamps) when mtimes are not real.

Mtimes are not the run's when either of these holds:

1. *Anchors.* A TensorBoard event file read completely carries its own clock: its mtime
   is its last write, which is within a flush interval (120 s by default) of its last
   event's wall time, even when the run hangs (a hung writer writes nothing). Event files
   modified long after their last event (more than ``ANCHOR_TOLERANCE_S``) prove a copy.
   A file cut short is no anchor: it may hold a newer event we could not read.
2. *A copy's signature.* When (nearly) every file was last written within ``COPY_WINDOW_S`` of
   the newest one, the directory was written in one go: a copy, a clone, an extracted archive.
   A training run writes its configs before it starts and its checkpoints one save apart,
   except a toy run that lasted seconds by its own clocks (``MIN_RUN_SPAN_S``).
3. *A small copy.* Two or more files, every one written within ``COPY_WINDOW_S`` of the others,
   and all of them long after (more than a time-zone offset) the run's own last recorded time
   (log timestamps, event wall times): a run cannot write files after it stopped recording.

A run is *live* (files may still be being written, so a partial file is "in progress" and
not corrupt) only when its mtimes are real, nothing in it says the process ended (an exit
code file, a ``Killed`` line, a traceback or a scheduler/launcher failure at the end of a
log), and its logs' own timestamps, if any, are recent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import regex

from autopsy.model import Artifact, ParseStatus
from autopsy.units import fmt_duration

if TYPE_CHECKING:
    from autopsy.run import Run

# An event file's mtime vs its last wall time: TensorBoard writers flush every 120 s by
# default; 10 minutes leaves room for slow filesystems and clock skew between NFS hosts.
ANCHOR_TOLERANCE_S = 600.0
# Files written within this of the newest one count as written "at once" (a copy).
COPY_WINDOW_S = 2.0
# Share of files (and their minimum number) that must be written at once to call it a copy.
COPY_SHARE = 0.9
COPY_MIN_FILES = 5
# ...or at least this many, all at once, when the run's own clocks ended long before (rule 3).
COPY_MIN_PAIR = 2
# ...unless the run's internal clocks say it lasted less than this (a toy run writes everything at once).
MIN_RUN_SPAN_S = 60.0
# Naive log timestamps are read as UTC but may be local time: offsets reach +14 h / -12 h.
TZ_SLACK_S = 14 * 3600.0

# Termination lines (scheduler, launcher, shell) that end a log of a process that was stopped.
TERMINATION_LINE = regex.compile(
    r"DUE TO TIME LIMIT|DUE TO PREEMPTION|CANCELLED AT \S+"  # slurmstepd
    r"|Received (?:Signals\.)?SIG(?:TERM|INT|HUP|QUIT)|Received (?:15|2|1|3) death signal"  # torchrun elastic agent
    r"|Received SIGTERM: 15"  # PyTorch Lightning signal connector
    r"|Detected KeyboardInterrupt, attempting graceful shutdown"  # PyTorch Lightning caught Ctrl-C
    r"|got signal: (?:15|2|1)\b"  # torchrun SignalException (SIGTERM, SIGINT, SIGHUP)
    r"|\b\d+ Terminated\s"  # bash job control: "12345 Terminated   python train.py"
    r"|^zsh: terminated\s|^\[\d+\][ +-]+\d+ terminated\s"  # zsh job control
    r"|interrupted by signal (?:15|2)[:：]"  # PyCharm: "exit code 143 (interrupted by signal 15: SIGTERM)"
    r"|TERM_(?:RUNLIMIT|OWNER|ADMIN|PREEMPT):|PBS: job killed: walltime|qmaster enforced h_rt"  # LSF, PBS, SGE
    r"|exceeded hard wallclock time|timeout: sending signal"  # SGE execd, coreutils timeout
    r"|\*\*\* \[[^\]\n]+\] Error 124\b"  # make's report of a recipe that coreutils timeout ended
    r"|\bpreempted\b|\bpreemption notice\b",
    regex.IGNORECASE,
)
# Error lines that end a crashed process's log (native crashes, bare kills, one-line errors).
ERROR_LINE = regex.compile(
    r"^(?:[\w.]+\.)?\w*(?:Error|Exception)\b:|Segmentation fault|Fatal Python error|core dumped"
    r"|^Killed\s*$|No space left on device|out of memory|Traceback \(most recent call last\)"
    r"|zsh: (?:killed|segmentation fault|bus error|abort)\s"  # zsh, for a foreground job (glued to a bar too)
    r"|^\[\d+\][ +-]+\d+ (?:killed|segmentation fault|bus error|abort)\s"  # zsh job report
    r"|\bAbort trap: 6"  # bash on macOS (SIGABRT)
    r"|0xC0000005|-1073741819|3221225477|0xC00000FD|-1073741571|TERM_MEMLIMIT|PBS: job killed: p?v?mem"
    r"|(?i:0xC0000409|0xC0000094|0xC000001D)|-1073740791|3221226505|-1073741676|3221225620"  # fail-fast, /0, SIGILL
)


@dataclass(frozen=True)
class Clock:
    """What a run's clocks say; ``Run.clock`` computes it once (see the module docstring)."""

    mtimes_trusted: bool
    reason: str  # one sentence: why the mtimes are (not) believed
    internal_start: float | None  # earliest time written inside a file (event wall time, log timestamp)
    internal_end: float | None  # latest such time
    ended: str | None  # the trace saying the process ended ("exit code 137 (exit_code)"), or None
    live: bool  # files may still be being written: a partial file may be "in progress"

    def mtime(self, art: Artifact) -> float | None:
        """The artifact's mtime when mtimes can be believed, else None."""
        return art.mtime if self.mtimes_trusted and math.isfinite(art.mtime) else None


def assess(run: Run) -> Clock:
    """Judge the run's mtimes and whether it may still be running (reads logs and event files)."""
    arts = [a for a in run.discovery.artifacts if math.isfinite(a.mtime)]
    mtimes = {a.path: a.mtime for a in arts}
    tb_spans = _tb_spans(run)
    log_spans = [(s.path, float(s.first_wall_time), float(s.last_wall_time)) for s in run.logs
                 if s.first_wall_time is not None and s.last_wall_time is not None
                 and _finite(s.first_wall_time) and _finite(s.last_wall_time)]
    times = [t for _, a, b in [*tb_spans, *log_spans] for t in (a, b)]
    start, end = (min(times), max(times)) if times else (None, None)
    span = end - start if start is not None and end is not None else None

    trusted, reason = _judge_mtimes(run, arts, mtimes, tb_spans, span)
    ended = ended_trace(run)
    live = trusted and ended is None
    if live and log_spans:
        newest_log = max(b for _, _, b in log_spans)
        if newest_log < run.now - TZ_SLACK_S - run.options.in_progress_seconds:
            live = False  # its logs' own clocks stopped long ago, whatever the files' mtimes say
    return Clock(trusted, reason, start, end, ended, live)


def _judge_mtimes(run: Run, arts: list[Artifact], mtimes: dict[str, float],
                  tb_spans: list[tuple[str, float, float]], span: float | None) -> tuple[bool, str]:
    if not arts:
        return False, "no file mtimes"
    # 1. complete event files: a copy moves their mtime far past their last event. (An mtime
    # before the last event is clock skew between the writing host and the file server, or a
    # restored mtime: not a copy's signature, so it does not count against the mtimes.)
    anchors = [(p, mtimes[p] - last) for p, _, last in tb_spans
               if p in mtimes and run.parse_status(p) is ParseStatus.OK]
    late = [(p, d) for p, d in anchors if d > ANCHOR_TOLERANCE_S]
    if anchors and 2 * len(late) > len(anchors):
        p, d = late[0]
        return False, (f"{p} was last modified {fmt_duration(d)} after its last event: the files were copied "
                       "(cp, scp, git, an archive), so their mtimes are the copy's, not the run's")
    # 2. every file written at once, though the run's own clocks (if any) say it ran for a while
    # (a toy run can write everything within two seconds; an event file's flushes cannot lie)
    newest = max(mtimes.values())
    at_once = sum(1 for t in mtimes.values() if t >= newest - COPY_WINDOW_S)
    if (len(mtimes) >= COPY_MIN_FILES and at_once >= COPY_SHARE * len(mtimes)
            and (span is None or span >= MIN_RUN_SPAN_S)):
        return False, (f"{at_once} of {len(mtimes)} files were last modified within {COPY_WINDOW_S:.0f} s of each "
                       "other: the directory was copied, cloned or extracted, so mtimes are not the run's")
    # 3. a small run (a few files after scp or a CI artifact download) written at once, whose own
    # clocks stopped long before: files written by the run itself cannot all postdate its last
    # recorded moment by more than a time zone's offset (naive log times may be local time).
    internal_end = max([*(b for _, _, b in tb_spans), *_log_ends(run)], default=None)
    oldest = min(mtimes.values())
    if (len(mtimes) >= COPY_MIN_PAIR and at_once == len(mtimes) and internal_end is not None
            and oldest - internal_end > TZ_SLACK_S + COPY_WINDOW_S):
        return False, (f"all {len(mtimes)} files were last modified within {COPY_WINDOW_S:.0f} s of each other, "
                       f"{fmt_duration(oldest - internal_end)} after the run's last recorded time: the directory was "
                       "copied, so mtimes are not the run's")
    if anchors:
        return True, f"event file mtimes match their event times ({anchors[0][0]})"
    return True, "file mtimes are spread like a run's writes"


def _log_ends(run: Run) -> list[float]:
    return [float(s.last_wall_time) for s in run.logs if s.last_wall_time is not None and _finite(s.last_wall_time)]


def _tb_spans(run: Run) -> list[tuple[str, float, float]]:
    out = []
    for path, frame in run.tfevents:
        if len(frame):
            wt = frame["wall_time"].dropna()
            wt = wt[(wt > 0) & (wt < 1e11)]
            if len(wt):
                out.append((path, float(wt.min()), float(wt.max())))
    return out


def ended_trace(run: Run) -> str | None:
    """The first trace saying the training process is gone, or None.

    Exit-code files (any status: a file is written when the process returned), torchrun's
    child failure reports, and a log whose last lines hold a traceback, a termination line
    (slurm CANCELLED/TIME LIMIT, SIGTERM), a bare ``Killed`` or a one-line fatal error.
    A traceback printed mid-run and survived does not count: only one in the log's tail.
    """
    if run.exit_codes:
        path, code = run.exit_codes[0]
        return f"exit code {code} ({path})"
    if run.all_child_failures:
        cf = run.all_child_failures[0]
        return f"child process failure reported in {cf.path}:{cf.line}"
    for scan in run.logs:
        if not scan.tail:
            continue
        first_tail = scan.tail[0][0]
        for tb in scan.tracebacks:
            if tb.line_end is not None and tb.line_end >= first_tail:
                return f"{tb.exc_type} at the end of {scan.path}:{tb.line_start}"
        for lineno, line in reversed(scan.tail):
            text = line.strip()
            if TERMINATION_LINE.search(text) or ERROR_LINE.search(text):
                return f"{text[:120]!r} at the end of {scan.path}:{lineno}"
    return None


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
