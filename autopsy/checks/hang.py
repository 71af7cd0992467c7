"""Hangs told by what the process was doing when it was stopped, or by where its log stops.

* An interrupted hang: a KeyboardInterrupt / SIGTERM traceback (the user's Ctrl-C, a scheduler's
  or torchrun's SIGTERM) whose innermost frame *waits* - a queue ``get``, the DataLoader's
  ``_data_queue.get``, a ``threading`` wait or lock, ``select``/``poll``, a socket ``recv``, a
  barrier or collective, ``time.sleep``. The process was idle, not computing, when it was
  stopped: the run hung there. Judged from the frames (file, function, code line), not from
  the exception's wording, which is the same for a stop in the middle of a healthy step.
* A log that ends on a setup message (loading a checkpoint, ``init_process_group``, DDP's
  "Reducer buckets have been rebuilt", compiling, "waiting for ...") with no end marker after
  it: the next thing the program would print never came. Weaker: a paste cut there looks the
  same, so it is reported with low confidence.
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

from autopsy.checks.common import frame_text, other_rule_fired_lines
from autopsy.engine.types import CheckContext
from autopsy.model import Confidence, Evidence, Finding
from autopsy.parsers.log_series import parse_bar
from autopsy.parsers.types import Frame, Hit, LogScan, Traceback
from autopsy.run import Run

# How a stop request surfaces in Python: Ctrl-C, torchrun's SignalException, or a handler's own
# exception naming the signal.
_STOP_TYPES = ("KeyboardInterrupt", "SignalException")
_STOP_MESSAGE = regex.compile(r"\bSIG(?:TERM|INT)\b|\bsignal (?:15|2)\b|got signal: (?:15|2)\b")

# Functions that block until something else happens (stdlib, multiprocessing, torch.distributed).
_WAIT_FUNCTIONS = frozenset({
    "wait", "_wait", "wait_for", "_wait_for_tstate_lock", "acquire", "join", "sleep",
    "waitpid", "_try_wait", "recv", "recv_into", "_recv", "recv_bytes", "_recv_bytes", "recvfrom", "accept",
    "poll", "_poll", "select", "epoll", "_try_get_data", "_get_data",
    "barrier", "monitored_barrier", "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object",
    "broadcast", "broadcast_object_list", "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
    "synchronize", "_store_based_barrier", "rendezvous", "next_rendezvous",
})
# A wait in a module whose ``get`` / ``put`` block (queue.Queue, multiprocessing queues, a c10d store).
_WAIT_MODULE = regex.compile(r"(?:^|[/\\])(?:queue|queues|threading|selectors|connection|socket|synchronize"
                             r"|subprocess|popen_\w+|distributed_c10d|c10d_logger|store)\.py$")
# The code line of the innermost frame calling something that blocks (builtins get no frame of their own:
# "time.sleep(5)", "self._data_queue.get(timeout=timeout)", "work.wait()", "sock.recv(4096)").
_WAIT_CALL = regex.compile(
    r"\b(?:time\.)?sleep\(|\bos\.waitpid\(|_?queue\.get\(|\.get\(\s*(?:block=True|timeout)|\.wait\(|\.join\(|\.recv(?:_into|from)?\("
    r"|\.accept\(|select\.(?:select|poll|epoll)\(|\.poll\(|\.acquire\(|\bbarrier\(|\.synchronize\("
    r"|\ball_reduce\(|\ball_gather\w*\(|\bbroadcast\w*\(|_store\.get\(|store\.wait\(")


@dataclass(frozen=True)
class InterruptedWait:
    """A stop traceback whose innermost frame waits."""

    traceback: Traceback
    frame: Frame

    @property
    def frame_text(self) -> str:
        return frame_text(self.frame) or self.frame.file


def is_stop(tb: Traceback, run: Run | None = None) -> bool:
    """A traceback that is how a stop request (Ctrl-C, SIGTERM) surfaced, not a program error.

    With ``run``, a traceback cut before its exception line counts when the terminal's echo of
    Ctrl-C ("^C") opens its header line or ends the line above it (``^CTraceback (most recent
    call last):``, a bar ``58/71 [23:09<05:11, 23.96s/it]^C``), and so does one right below
    torchrun's relay of the stop to its workers (:func:`marked_stop`).
    """
    last = tb.exc_type.rsplit(".", 1)[-1]
    if last in _STOP_TYPES or bool(last and _STOP_MESSAGE.search(tb.message.split("\n", 1)[0])):
        return True
    return run is not None and not tb.exc_type and marked_stop(run, tb) is not None


# torchrun's elastic agent relaying a stop to its workers, printed right before the workers' tracebacks:
# "Received 2 death signal, shutting down workers" (torch/distributed/elastic/agent/server/api.py; the
# signal number in torch 1.x, "Signals.SIGINT" in 2.x) and "Sending process 4797 closing signal SIGINT"
# (torch/distributed/elastic/multiprocessing/api.py).
_RELAYED_STOP = regex.compile(r"Received (?:Signals\.)?(SIGINT|SIGTERM|2|15) death signal, shutting down workers"
                              r"|Sending process \d+ closing signal (SIGINT|SIGTERM)\b")
_RELAY_WINDOW = 3  # non-blank lines above a traceback's header searched for the relay
_FOLLOW_GAP = 1  # non-blank lines allowed between a KeyboardInterrupt traceback and a cut one below it
# The agent's report of a rank that failed by itself ("failed (exitcode: 1) local_rank: 3 (pid: 33054) of binary"):
# the "Sending process N closing signal SIGTERM" lines above it are the agent stopping that rank's siblings, and
# the traceback below it is torchrun's own report of the failure, not a relayed stop. An exit code of SIGTERM or
# SIGINT (-15, -2) is the stop reaching the rank, and leaves the relay a stop.
_AGENT_FAILED = regex.compile(r"failed \(exitcode: (-?\d+)\) local_rank: \d+")
_STOP_EXITCODES = frozenset({"-15", "-2", "15", "2", "143", "130"})


def marked_stop(run: Run, tb: Traceback) -> str | None:
    """How a traceback cut before its exception line is marked as a stop: "KeyboardInterrupt",
    "SIGTERM", or None.

    "KeyboardInterrupt" when the terminal's "^C" opens its header line or ends the line above it,
    or when torchrun's relay of SIGINT to its workers is among the few lines right above it;
    "SIGTERM" for torchrun's relay of SIGTERM. Read from the log's tail, where a stop's traceback is.
    """
    scan = next((s for s in run.logs if s.path == tb.path), None)
    if scan is None:
        return None
    lines = dict(scan.tail)
    head, above = lines.get(tb.line_start, ""), lines.get(tb.line_start - 1, "")
    if head.lstrip().startswith("^C") or above.rstrip().endswith("^C"):
        return "KeyboardInterrupt"
    if _follows_keyboard_interrupt(run, tb, lines):
        return "KeyboardInterrupt"
    seen = 0
    for lineno in range(tb.line_start - 1, max(0, tb.line_start - 1 - 4 * _RELAY_WINDOW), -1):
        line = lines.get(lineno)
        if line is None or not line.strip():
            continue
        failed = _AGENT_FAILED.search(line)
        if failed is not None and failed.group(1) not in _STOP_EXITCODES:
            return None
        m = _RELAYED_STOP.search(line)
        if m is not None:
            return "SIGTERM" if (m.group(1) or m.group(2)) in ("SIGTERM", "15") else "KeyboardInterrupt"
        seen += 1
        if seen >= _RELAY_WINDOW:
            break
    return None


def _follows_keyboard_interrupt(run: Run, tb: Traceback, lines: dict[int, str]) -> bool:
    """Right below another traceback of the same log that ends in KeyboardInterrupt, or is itself a cut
    one so marked (nothing but blank lines and at most one other line between, all in the log's tail):
    Ctrl-C reaches every process of the group and each prints its traceback (a DataLoader finalizer's
    "Exception ignored in", the workers', the main one), so a cut one below is the same stop."""
    prev = max((t for t in run.all_tracebacks if t.path == tb.path and t.line_end < tb.line_start),
               key=lambda t: t.line_end, default=None)
    if prev is None or tb.line_start not in lines or prev.line_end not in lines:
        return False
    between = [n for n in range(prev.line_end + 1, tb.line_start) if lines.get(n, "").strip()]
    if len(between) > _FOLLOW_GAP:
        return False
    if prev.exc_type:
        return prev.exc_type.rsplit(".", 1)[-1] == "KeyboardInterrupt"
    return _follows_keyboard_interrupt(run, prev, lines)


def ctrl_c_marked(run: Run, tb: Traceback) -> bool:
    """A traceback cut before its exception line that a stop marks (:func:`marked_stop`)."""
    return marked_stop(run, tb) is not None


def is_hang_dump(tb: Traceback) -> bool:
    """A stop, or a stack with no exception line, whose innermost frame waits."""
    return (is_stop(tb) or not tb.exc_type) and waiting_frame(tb) is not None


def waiting_frame(tb: Traceback) -> Frame | None:
    """The innermost frame when it blocks (a wait, a queue get, a collective, a sleep), else None."""
    if not tb.frames:
        return None
    frame = tb.frames[-1]
    func = (frame.function or "").strip()
    path = frame.file.replace("\\", "/")
    if func in _WAIT_FUNCTIONS and (func not in ("join", "acquire", "select", "poll") or _WAIT_MODULE.search(path)
                                    or "/multiprocessing/" in path):
        return frame
    if func in ("get", "put") and (_WAIT_MODULE.search(path) or "/multiprocessing/" in path):
        return frame
    # a lock taken by ``with lock:`` (multiprocessing's SemLock, threading's Lock / Condition): its
    # ``__enter__`` blocks like ``acquire`` ("return self._semlock.__enter__()" in synchronize.py)
    if func == "__enter__" and (path.endswith(("/multiprocessing/synchronize.py", "/threading.py"))):
        return frame
    # the DataLoader fetching the next batch from its workers (a quote cut before the queue's frames)
    if func in ("__next__", "_next_data", "_get_data", "_try_get_data") \
            and path.endswith("torch/utils/data/dataloader.py"):
        return frame
    if frame.code and _WAIT_CALL.search(frame.code):
        return frame
    return None


def _reports_a_dead_worker(tb: Traceback, worker_deaths: list[Hit]) -> bool:
    """A stack cut before its exception line, right below a DataLoader worker's death message
    ("ERROR: Unexpected segmentation fault encountered in worker."): the main process raising that
    death from ``_try_get_data`` while it waited for the batch, not a hang."""
    return any(h.path == tb.path and tb.line_start - 3 <= h.lineno < tb.line_start for h in worker_deaths)


def interrupted_waits(run: Run) -> list[InterruptedWait]:
    """Every stop traceback of the run whose innermost frame waits, in log order; a stack with no
    exception line at all (py-spy / faulthandler dump of a live process, or a cut Ctrl-C) counts too,
    unless a DataLoader worker's death is reported right above it."""
    out = []
    worker_deaths: list[Hit] | None = None
    for tb in run.all_tracebacks:
        if not is_stop(tb, run) and tb.exc_type:
            continue
        if not tb.exc_type:
            if worker_deaths is None:
                worker_deaths = other_rule_fired_lines(run, "data.worker")
            if _reports_a_dead_worker(tb, worker_deaths):
                continue
        frame = waiting_frame(tb)
        if frame is not None:
            out.append(InterruptedWait(tb, frame))
    return sorted(out, key=lambda w: (w.traceback.path, w.traceback.line_start))


def _last_meaningful(scan: LogScan, ignorable: regex.Pattern[str], before: int | None = None) -> tuple[int, str] | None:
    for lineno, line in reversed(scan.tail):
        if before is not None and lineno >= before:
            continue
        if line.strip() and not ignorable.search(line):
            return lineno, line
    return None


def _bar_moved(text: str) -> bool:
    """The line's last redraw is a progress bar past its first item ("85/5049 [00:48<46:01, 1.80it/s]")."""
    bar = parse_bar(text.rsplit("\r", 1)[-1])
    return bar is not None and bar.n > 0


def setup_stall_hits(run: Run, setup_hits: list[Hit], ignorable: regex.Pattern[str],
                     before: dict[str, int] | None = None) -> list[Hit]:
    """Setup messages that are the last meaningful line of their log (warnings, banners and NCCL INFO
    after them are ignored): the log stops where the next stage should have begun. With ``before``
    (path -> line of the user's first Ctrl-C), only the lines above that stop count."""
    by_path: dict[str, list[Hit]] = {}
    for h in setup_hits:
        by_path.setdefault(h.path, []).append(h)
    out = []
    for scan in run.logs:
        hits = by_path.get(scan.path)
        if not hits:
            continue
        cut = (before or {}).get(scan.path)
        last = _last_meaningful(scan, ignorable, cut)
        hits = [h for h in hits if cut is None or h.lineno < cut]
        if not hits:
            continue
        lead = max(hits, key=lambda h: h.lineno)
        # the setup line itself may be one of the ignorable ones (NCCL INFO, a 0% bar)
        if last is None or lead.lineno >= last[0]:
            if last is not None and lead.lineno == last[0] and _bar_moved(last[1]):
                continue  # tqdm's redraws after the 0% bar on the same line: the loop got its batches
            out.append(lead)
    return out


# ----------------------------------------------------------------------------- findings (run.stalled)

def interrupted_hang_finding(ctx: CheckContext, waits: list[InterruptedWait]) -> Finding:
    """run.stalled from a stop traceback caught waiting: where it waited is the evidence."""
    lead = waits[-1]  # the last stop is the one that ended the run
    tb = lead.traceback
    last = ctx.run.last_step
    stop = tb.exc_type.rsplit(".", 1)[-1] or marked_stop(ctx.run, tb) or "stack dump"
    facts: dict[str, object] = {"stop": stop, "waiting_frame": lead.frame_text,
                                "waiting_function": lead.frame.function, "last_step": last,
                                "max_steps": ctx.run.max_steps, "count": len(waits)}
    if lead.frame.code:
        facts["waiting_code"] = lead.frame.code.strip()[:200]
    ranks = sorted({w.traceback.rank for w in waits if w.traceback.rank is not None})
    if ranks:
        facts["ranks"] = ranks
    ev = [Evidence(path=w.traceback.path, line=w.traceback.line_start, line_end=w.traceback.line_end,
                   rank=w.traceback.rank, excerpt=(w.frame.code or w.frame_text).strip()[:300],
                   detail=f"{w.traceback.exc_type.rsplit('.', 1)[-1]} while waiting in {w.frame_text}")
          for w in waits[-3:]]
    at = f" after step {last}" if last is not None else " before its first step"
    what = "interrupted (Ctrl-C)" if facts["stop"] == "KeyboardInterrupt" else "stopped by a signal"
    code = f" (`{facts['waiting_code']}`)" if "waiting_code" in facts else ""
    msg = (f"The run hung{at}: it was {what} while waiting in {lead.frame_text}{code}, not while computing "
           f"({tb.path}:{tb.line_start}-{tb.line_end}); find what it waited for (a DataLoader worker, a peer rank, "
           "a lock, a socket) instead of treating the stop as a crash.")
    return ctx.finding(msg, key=f"run.stalled:waiting:{lead.frame.function or '?'}", facts=facts, evidence=ev,
                       confidence=Confidence.MEDIUM, step=last, wall_time=tb.wall_time)


def setup_stall_finding(ctx: CheckContext, hits: list[Hit], interrupted: bool = False) -> Finding:
    """run.stalled (low confidence) from a log whose last meaningful line is a setup message."""
    lead = max(hits, key=lambda h: (h.wall_time or 0.0, h.path, h.lineno))
    last = ctx.run.last_step
    name = lead.key.rsplit("/", 1)[-1]
    facts: dict[str, object] = {"last_line": lead.text.strip()[:300], "stage": name.removeprefix("setup_"),
                                "last_step": last, "max_steps": ctx.run.max_steps}
    at = f"after step {last}" if last is not None else "before its first step"
    # Only a log whose real mtime is long past says it stayed there; otherwise it may be a cut paste or a
    # run still in that stage (analysed right now): low confidence, and said so.
    # (a copied run's mtimes, or identical ones, are the copy's time and say nothing about the run)
    mtime = next((ctx.run.clock.mtime(a) for a in ctx.run.discovery.artifacts if a.path == lead.path),
                 None) if ctx.run.clock.mtimes_trusted else None
    idle = ctx.run.now - mtime if mtime is not None else None
    long_idle = idle is not None and idle > float(ctx.param("min_stall_seconds"))
    if idle is not None:
        facts["seconds_since_log_written"] = round(idle, 1)
    if interrupted:
        facts["interrupted"] = True
        msg = (f"The log stops {at} on a setup message ({lead.path}:{lead.lineno}: {lead.text.strip()[:120]!r}), then "
               "the user's Ctrl-C and nothing else - no step, no error: the run most likely hung in that stage and was "
               "interrupted there (or the stage was slow and the user gave up on it).")
        return ctx.finding(msg, key=f"run.stalled:setup:{facts['stage']}", facts=facts,
                           evidence=[Evidence(path=lead.path, line=lead.lineno, excerpt=lead.text.strip()[:300],
                                              rank=lead.rank)],
                           confidence=Confidence.MEDIUM, step=last, wall_time=lead.wall_time)
    msg = (f"The log stops {at} on a setup message ({lead.path}:{lead.lineno}: {lead.text.strip()[:120]!r}) with "
           "nothing after it - no step, no error, no exit: the run most likely hung in that stage "
           + (f"(the log has not been written for {idle / 3600:.1f} h)." if long_idle and idle is not None else
              "(or the log was cut there, or the run is still in that stage: analyse it again later)."))
    return ctx.finding(msg, key=f"run.stalled:setup:{facts['stage']}", facts=facts,
                       evidence=[Evidence(path=lead.path, line=lead.lineno, excerpt=lead.text.strip()[:300],
                                          rank=lead.rank)],
                       confidence=Confidence.MEDIUM if long_idle else Confidence.LOW, step=last,
                       wall_time=lead.wall_time)
