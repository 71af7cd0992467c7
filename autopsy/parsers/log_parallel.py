"""Two processes for one big log, with exactly the result of one sequential scan.

The file is cut at a block boundary of the sequential scan near its middle (the byte after
the last separator before ``k * BLOCK``, as :func:`log_blocks.feed_blocks` would cut it), so
both halves see the very blocks a sequential scan sees. This process scans the first
half; a forked child scans the second, after a *warm-up* on the 2 MB before the cut that
rebuilds the scanner's context there (current step, progress-bar total, last rate step,
epoch guard). The child's result is merged only when that guessed context equals the
parent's real one at the cut, and no traceback, ChildFailedError report or config dump
is open there; otherwise the parent scans the second half itself (same result, no
speed-up). What the child cannot know is patched at the merge: line numbers (shifted by
the first half's newline count), wall times before the second half's first timestamp
(a sentinel, replaced by the first half's last timestamp), config lines whose meaning
depends on the HF section printed before the cut, and the series' thinning stride
(the smallest stride under the cap over both halves: see :mod:`log_store`).

Used for regular files of at least ``MIN_BYTES`` read whole (no ``--max-bytes-per-file``
window, not UTF-16) where ``os.fork`` exists and two CPUs are available; ``AUTOPSY_LOG_WORKERS=1``
turns it off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from autopsy.parsers import log_text as lt
from autopsy.parsers.log_blocks import feed_blocks, utf16_kind
from autopsy.parsers.log_child_failures import MAX_CHILD_FAILURES, ChildFailureTracker
from autopsy.parsers.log_config import MAX_ENTRIES, SECTION_UNKNOWN, LogConfigTracker
from autopsy.parsers.log_match import HITS_KEPT, HitCollector
from autopsy.parsers.log_store import SeriesStore
from autopsy.parsers.log_tracebacks import MAX_TRACEBACKS, TracebackTracker
from autopsy.parsers.types import Hit, Traceback

MIN_BYTES = 64 << 20
WARM_BYTES = 2 << 20
NO_TS_YET = -1.0e300  # the child's "no timestamp seen yet" wall time, replaced at the merge
last_outcome = ""  # "merged" or why the parent scanned the second half itself (tests, benchmarks)


def workers() -> int:
    env = os.environ.get("AUTOPSY_LOG_WORKERS", "").strip()
    if env.isdigit():
        return max(1, int(env))
    try:
        return min(2, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return min(2, os.cpu_count() or 1)


def usable(size: int, limit: int) -> bool:
    import multiprocessing as mp

    return (limit >= MIN_BYTES and limit == size and hasattr(os, "fork") and sys.platform != "darwin"
            and workers() >= 2 and not mp.current_process().daemon)


@dataclasses.dataclass
class Plan:
    cut: int  # first byte of the second half (a sequential block boundary)
    chunk_start: int  # k * BLOCK: the child reads aligned blocks from here
    label_mode: int


def plan(fd: int, limit: int, block: int) -> Plan | None:
    """Where to cut, or None when this file should be scanned in one process."""
    chunks = -(-limit // block)
    if chunks < 2:
        return None
    head = os.pread(fd, min(block, limit), 0)
    cut0 = max(head.rfind(b"\n"), head.rfind(b"\r"))
    if utf16_kind(head) or cut0 < 0:
        return None
    label_mode = lt.detect_label_mode(head[:cut0 + 1][: 1 << 20].split(b"\n", 200)[:200])
    k = chunks // 2
    look = min(lt.MAX_SEGMENT_BYTES, block)
    tail = os.pread(fd, look, k * block - look)
    j = max(tail.rfind(b"\n"), tail.rfind(b"\r"))
    if j < 0:
        return None  # an over-long line at the cut: not a clean block boundary
    return Plan(k * block - look + j + 1, k * block, label_mode)


def _pread_blocks(fd: int, start: int, end: int, block: int) -> Iterator[bytes]:
    pos = start
    while pos < end:
        data = os.pread(fd, min(block, end - pos), pos)
        if not data:
            return
        pos += len(data)
        yield data


def context(sc: Any) -> tuple[Any, ...]:
    """The scanner state that steers what it does next (compared at the cut)."""
    return (sc.cur_step, sc.step_pos >= 0, sc.max_total, sc.last_rate_step, sc.epoch_guard.last,
            sc.epoch_guard.per_epoch, sc.after_gap, sc.reader.epoch, sc.reader.epoch_total, sc.reader.per_epoch)


def _quiet(sc: Any) -> bool:
    return not (sc.tb.active or sc.cf.active or sc.cfg.active or sc.reader.active) and sc.step_pos >= 0


# ---------------------------------------------------------------------------- child


def _child(conn: Any, make: Callable[[], Any], fd: int, p: Plan, limit: int, block: int) -> None:
    sc = make()
    sc.first_buf = False
    sc.label_mode = p.label_mode
    start = max(0, p.cut - WARM_BYTES)
    data = os.pread(fd, p.cut - start, start)
    nl = data.find(b"\n") if start else -1
    sc.base = start + nl + 1
    if nl + 1 < len(data):
        sc.block(data[nl + 1:])
    state, quiet = context(sc), _quiet(sc)
    # outputs start empty; the context stays
    sc.hits = HitCollector(sc.rel, sc.compiled)
    sc.tb = TracebackTracker(sc.rel)
    sc.cf = ChildFailureTracker(sc.rel)
    sc.cfg = LogConfigTracker(sc.rel)
    sc.cfg.section = SECTION_UNKNOWN
    sc.series = SeriesStore(sc.series.cap)
    sc.templates = []
    sc.ranks = set()
    sc.tail.clear()
    sc.lines_before = sc.processed = sc.nul = sc.bad = 0
    sc.first_wall = sc.last_wall = None
    sc.ts_prev = NO_TS_YET
    sc.ts_prev_line = None  # the warm-up's lines are not the child's: its hits before a timestamp get the parent's
    sc.ts_prev_step = None
    sc.base = p.cut
    carry = os.pread(fd, p.chunk_start - p.cut, p.cut)
    read = len(carry)

    def counted() -> Iterator[bytes]:
        nonlocal read
        for b in _pread_blocks(fd, p.chunk_start, limit, block):
            read += len(b)
            yield b

    rest, dropped, last_byte = feed_blocks(sc, counted(), carry)
    if rest:
        sc.block(rest, len(rest) if dropped else -1, dropped)
    sc.tb.close()
    sc.cf.close()
    conn.send({
        "state": state, "quiet": quiet, "hits": (sc.hits.first, sc.hits.last, sc.hits.count, sc.hits.timeouts,
                                              sc.hits.exhausted_at),
        "tb": (sc.tb.first, list(sc.tb.last), sc.tb.peak_first), "cf": sc.cf.results,
        "cfg": (sc.cfg.entries, sc.cfg.provisional, sc.cfg.refused), "tail": list(sc.tail),
        "ranks": sc.ranks, "counts": (sc.processed, sc.nul, sc.bad, sc.lines_before, read),
        "walls": (sc.first_wall, sc.last_wall), "steps": (sc.cur_step, sc.max_steps_seen, sc.max_epochs_seen,
                                                                 sc.reader.last_epoch, sc.reader.batch),
        "unterminated": bool(last_byte) and last_byte != b"\n", "stride": sc.series.stride,
    })
    while True:  # the series, thinned to the stride the parent settles on
        cmd, stride = conn.recv()
        if cmd == "count":
            conn.send(sc.series.counts_by_stride(stride))
        elif cmd == "send":
            sc.series.thin_to(stride)
            conn.send(sc.series)
            return
        else:
            return


def _run_child(conn: Any, *args: Any) -> None:
    try:
        _child(conn, *args)
    except BaseException as exc:  # the parent scans the second half itself
        with contextlib.suppress(Exception):
            conn.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        conn.close()


# ---------------------------------------------------------------------------- parent


def scan(fd: int, sc: Any, limit: int, make: Callable[[], Any], head_blocks: Iterator[bytes],
         p: Plan, block: int) -> tuple[bool, int]:
    """Scan ``[0, limit)`` into ``sc`` with a child for the second half.

    ``head_blocks`` yields the blocks of ``[0, p.chunk_start)`` (counted by the caller).
    Returns (the file ends without a newline, bytes the child read).
    """
    import multiprocessing as mp

    global last_outcome
    ctx = mp.get_context("fork")
    parent_conn, child_conn = ctx.Pipe()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (a progress spinner)
            proc = ctx.Process(target=_run_child, args=(child_conn, make, fd, p, limit, block), daemon=True)
            proc.start()
    except (OSError, AssertionError, ValueError) as exc:  # no fork here (daemonic process, limits)
        parent_conn.close()
        child_conn.close()
        last_outcome = f"no child: {type(exc).__name__}"
        carry, dropped, _ = feed_blocks(sc, head_blocks)
        return _sequential_rest(fd, sc, carry, dropped, p, limit, block), limit - p.chunk_start
    child_conn.close()
    try:
        carry, dropped, _ = feed_blocks(sc, head_blocks)
        got: dict[str, Any] | None = None
        try:
            got = parent_conn.recv()
        except (EOFError, OSError):
            got = None
        why = _refuse(sc, got, carry, dropped, p)
        last_outcome = why or "merged"
        if why or got is None:
            with contextlib.suppress(Exception):
                parent_conn.send(("stop", 0))
            return _sequential_rest(fd, sc, carry, dropped, p, limit, block), limit - p.chunk_start
        _merge_series(sc, parent_conn, got)
        _merge(sc, got)
        return got["unterminated"], got["counts"][4] - len(carry)
    finally:
        parent_conn.close()
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
            proc.join()


def _sequential_rest(fd: int, sc: Any, carry: bytes, dropped: int, p: Plan, limit: int, block: int) -> bool:
    """The second half in this process, continuing the first: the sequential result."""
    rest, dropped, last_byte = feed_blocks(sc, _pread_blocks(fd, p.chunk_start, limit, block), carry, dropped)
    if rest:
        sc.block(rest, len(rest) if dropped else -1, dropped)
    return bool(last_byte) and last_byte != b"\n"


def _refuse(sc: Any, got: dict[str, Any] | None, carry: bytes, dropped: int, p: Plan) -> str | None:
    """Why the child's half cannot be merged (the parent then scans it), or None."""
    if got is None or "error" in got:
        return "child failed: " + (got or {}).get("error", "no answer")
    if dropped or len(carry) != p.chunk_start - p.cut:
        return "not a block boundary"
    if not (got["quiet"] and _quiet(sc)):
        return "traceback, report or config dump open at the cut, or no step known"
    if got["state"] != context(sc):
        return "context at the cut differs"
    _, tb_last, tb_peak = got["tb"]
    if sc.tb.last or tb_last or len(sc.tb.first) + tb_peak >= MAX_TRACEBACKS:
        return "too many tracebacks"  # the kept first/last would depend on the order of removals
    _, provisional, refused = got["cfg"]
    if refused and provisional:
        return "too many config entries"
    return None


def _merge_series(sc: Any, conn: Any, got: dict[str, Any]) -> None:
    mine: SeriesStore = sc.series
    stride = max(mine.stride, got["stride"])
    while True:
        conn.send(("count", stride))
        theirs = conn.recv()
        if mine.counts_by_stride(stride) + theirs < mine.cap or stride >= (1 << 30):
            break
        stride *= 2
    conn.send(("send", stride))
    other: SeriesStore = conn.recv()
    mine.thin_to(stride)
    mine.extend_from(other, sc.lines_before, sc.ts_prev, NO_TS_YET)


def _wall(w: float | None, before: float | None) -> float | None:
    return before if w == NO_TS_YET else w


def _shift_hit(h: Hit, lines: int, before: float | None, before_line: int | None,
               before_step: int | None = None) -> Hit:
    if h.wall_time == NO_TS_YET:
        # dated by the first half's last timestamp, and the step current there
        wall_line, wall_step = before_line, before_step
    else:
        wall_line = h.wall_time_line + lines if h.wall_time_line is not None else None
        wall_step = h.wall_time_step
    return dataclasses.replace(h, lineno=h.lineno + lines, wall_time=_wall(h.wall_time, before),
                               wall_time_line=wall_line, wall_time_step=wall_step)


def _shift_tb(tb: Traceback, lines: int, before: float | None) -> Traceback:
    cause = _shift_tb(tb.cause, lines, before) if tb.cause is not None else None
    return dataclasses.replace(tb, line_start=tb.line_start + lines, line_end=tb.line_end + lines,
                               wall_time=_wall(tb.wall_time, before), cause=cause)


def _merge_hits(coll: HitCollector, got: tuple[Any, ...], lines: int, before: float | None,
                before_line: int | None, before_step: int | None = None) -> None:
    first2, last2, count2, timeouts, exhausted_at = got
    coll.timeouts += timeouts
    if coll.exhausted_at is None and exhausted_at is not None:
        coll.exhausted_at = exhausted_at + lines
    for key, n2 in count2.items():
        n1 = coll.count.get(key, 0)
        seq1 = list(coll.first.get(key, [])) + list(coll.last.get(key, ()))
        kept2 = [_shift_hit(h, lines, before, before_line, before_step) for h in first2[key] + list(last2.get(key, ()))]
        # global index -> hit, for the indexes each half kept
        idx: dict[int, Hit] = {}
        f1 = len(coll.first.get(key, []))
        for i, h in enumerate(seq1):
            idx[i if i < f1 else n1 - (len(seq1) - i)] = h
        f2 = len(first2[key])
        for i, h in enumerate(kept2):
            idx[n1 + (i if i < f2 else n2 - (len(kept2) - i))] = h
        total = n1 + n2
        coll.count[key] = total
        coll.first[key] = [idx[i] for i in range(min(HITS_KEPT, total))]
        tail = [idx[i] for i in range(max(HITS_KEPT, total - HITS_KEPT), total)]
        if tail:
            coll.last[key] = deque(tail, maxlen=HITS_KEPT)
        else:
            coll.last.pop(key, None)


def _merge(sc: Any, got: dict[str, Any]) -> None:
    lines = sc.lines_before
    before = sc.ts_prev
    _merge_hits(sc.hits, got["hits"], lines, before, sc.ts_prev_line, sc.ts_prev_step)
    tb_first, _, _ = got["tb"]
    sc.tb.first.extend(_shift_tb(tb, lines, before) for tb in tb_first)
    room = MAX_CHILD_FAILURES - len(sc.cf.results)
    sc.cf.results.extend(dataclasses.replace(c, line=c.line + lines) for c in got["cf"][:max(0, room)])
    entries, provisional, _ = got["cfg"]
    if sc.cfg.section not in (None, "training"):
        drop = set(provisional)
        entries = [e for i, e in enumerate(entries) if i not in drop]
    room = MAX_ENTRIES - len(sc.cfg.entries)
    sc.cfg.entries.extend(dataclasses.replace(e, line=e.line + lines if e.line is not None else None)
                          for e in entries[:max(0, room)])
    tail2 = [(ln + lines, text) for ln, text in got["tail"]]
    if tail2:
        while sc.tail and sc.tail[-1][0] >= tail2[0][0]:
            sc.tail.pop()
        sc.tail.extend(tail2)
    sc.ranks |= got["ranks"]
    processed, nul, bad, lines2, _ = got["counts"]
    sc.processed += processed
    sc.nul += nul
    sc.bad += bad
    sc.lines_before += lines2
    first_wall, last_wall = got["walls"]
    if sc.first_wall is None:
        sc.first_wall = first_wall
    if last_wall is not None and last_wall != NO_TS_YET:
        sc.last_wall = last_wall
    cur_step, max_steps, max_epochs, last_epoch, batch = got["steps"]
    if last_epoch is not None:
        sc.reader.last_epoch = last_epoch
    if batch is not None:
        sc.reader.batch = batch
    if max_epochs is not None and (sc.max_epochs_seen is None or max_epochs > sc.max_epochs_seen):
        sc.max_epochs_seen = max_epochs
    sc.cur_step = cur_step
    if max_steps is not None and (sc.max_steps_seen is None or max_steps > sc.max_steps_seen):
        sc.max_steps_seen = max_steps

