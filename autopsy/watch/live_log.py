"""One text log followed live: the log scanner of ``autopsy analyze`` fed only new bytes.

:class:`~autopsy.parsers.log_scanner.LogScanner` is a state machine over blocks, and
:func:`~autopsy.parsers.log_blocks.feed_blocks` carries an unterminated last line from one
call to the next: so the scanner analyse carries across polls as it carries across 8 MB
blocks of one file, and each poll costs only the bytes that arrived. A line still being
written (no ``\\n`` yet) waits in the carry until it is complete.

:meth:`LiveLog.snapshot` gives the :class:`~autopsy.parsers.types.LogScan` a post-mortem
would give for the bytes read so far, without disturbing the live scanner (its open
tracebacks are closed on copies). When the file is truncated or replaced the scanner
starts over on the new content (what was read of the old one is gone from the disk too).
"""

from __future__ import annotations

import bisect
import copy
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from autopsy.parsers import log_blocks
from autopsy.parsers.log_match import CompiledPatterns
from autopsy.parsers.log_scanner import LogScanner
from autopsy.parsers.types import LogScan
from autopsy.watch.tail import FileTail, TailChange, TailRead


@dataclass(frozen=True)
class NewPoint:
    """A value a log line gave, read at this poll."""

    tag: str
    step: int | None
    value: float
    lineno: int
    wall_time: float | None


class LiveLog:
    """A followed log: its tail, its scanner, and what of its series was already handed out."""

    def __init__(self, fs_path: Path, rel_path: str, compiled: CompiledPatterns, *, rank: int | None = None,
                 max_bytes_per_poll: int = 64 << 20) -> None:
        self.fs_path = fs_path
        self.rel = rel_path
        self.compiled = compiled
        self.rank = rank
        self.tail = FileTail(fs_path, max_bytes=max_bytes_per_poll)
        self.scanner = self._new_scanner(0)
        self.carry = b""
        self.dropped = 0
        self.last_byte = b""
        self.bytes_scanned = 0
        self.lines_seen = 0  # series lines already handed out by new_points (by line number)
        self._tag_ok: list[bool] = []  # by the store's tag id: does new_points' caller want it
        self.hit_counts: dict[str, int] = {}
        self.restarts = 0
        self.grew_at: float | None = None  # watch time of the last poll that brought bytes

    def _new_scanner(self, size: int) -> LogScanner:
        year = time.gmtime().tm_year
        return LogScanner(self.rel, self.compiled, self.rank, max(size, 1 << 20), year)

    def poll(self, now: float | None = None) -> TailRead:
        """Read and scan what was appended; restart the scanner when the file was cut or replaced."""
        got = self.tail.poll()
        if got.change in (TailChange.TRUNCATED, TailChange.REPLACED):
            self.scanner = self._new_scanner(got.size)
            self.carry, self.dropped, self.last_byte = b"", 0, b""
            self.bytes_scanned = 0
            self.lines_seen = 0
            self._tag_ok = []
            self.hit_counts = {}
            self.restarts += 1
        if got.data:
            self.carry, self.dropped, last = log_blocks.feed_blocks(self.scanner, _one(got.data), self.carry,
                                                                    self.dropped)
            self.last_byte = last or self.last_byte
            self.bytes_scanned += len(got.data)
            self.grew_at = now
        return got

    @property
    def size(self) -> int:
        return self.tail.size

    @property
    def mtime(self) -> float:
        return self.tail.mtime

    @property
    def last_step(self) -> int | None:
        return self.scanner.cur_step

    @property
    def lines(self) -> int:
        """Complete lines scanned so far."""
        return self.scanner.lines_before

    def last_line(self) -> tuple[int, str] | None:
        """The last complete non-empty line (line number, cleaned text), for evidence."""
        for lineno, text in reversed(self.scanner.tail):
            if text.strip():
                return lineno, text
        return None

    def new_hit_keys(self) -> list[str]:
        """Pattern keys (``<rule id>/<pattern>``) that hit a line for the first time since the previous call."""
        out = [key for key in self.scanner.hits.count if key not in self.hit_counts]
        self.hit_counts.update(self.scanner.hits.count)
        return out

    def new_points(self, wanted: Callable[[str], bool] | None = None) -> list[NewPoint]:
        """Series points of the lines scanned since the previous call (line order), only those
        whose tag ``wanted`` accepts (all when None).

        Found by line number, not by index: the store thins itself when it is large, which
        moves indices but never reorders lines. The store's columns are read with numpy and
        only the wanted points become objects (a poll of a busy log holds thousands of bar
        rates and dict values the detectors never look at).
        """
        import numpy as np

        st = self.scanner.series
        lo = bisect.bisect_right(st.l_lineno, self.lines_seen)
        n_lines = len(st.l_start)
        if lo >= n_lines:
            return []
        self.lines_seen = st.l_lineno[n_lines - 1]
        names = st.tag_names
        if wanted is None:
            ok = list(range(len(names)))
        else:
            for i in range(len(self._tag_ok), len(names)):
                self._tag_ok.append(bool(wanted(names[i])))
            ok = [i for i, good in enumerate(self._tag_ok) if good]
        if not ok:
            return []
        first = st.l_start[lo]
        # copies, not views: a live view would stop the store's arrays from growing
        tags = np.frombuffer(st.tag, np.uint32)[first:].copy()
        sel = np.flatnonzero(np.isin(tags, ok)) + first
        if not sel.size:
            return []
        starts = np.frombuffer(st.l_start, np.int64)[lo:n_lines].copy()
        line = np.searchsorted(starts, sel, side="right") - 1 + lo
        steps = np.frombuffer(st.l_step, np.int64)[line].tolist()
        linenos = np.frombuffer(st.l_lineno, np.int64)[line].tolist()
        walls = np.frombuffer(st.l_wall, np.float64)[line].tolist()
        values = np.frombuffer(st.value, np.float64)[sel].tolist()
        tag_ids = tags[sel - first].tolist()
        return [NewPoint(names[t], None if s < -(2**62) else s, v, ln, None if math.isnan(wl) else wl)
                for t, s, v, ln, wl in zip(tag_ids, steps, values, linenos, walls, strict=True)]

    def snapshot(self, *, settled: bool = True) -> LogScan:
        """The LogScan of what was read so far, as ``autopsy analyze`` would build it.

        ``settled=False`` (the log grew moments ago): a traceback still open is left out, since
        it is still being written (the next poll sees it whole) and closing it here would report
        it "cut off before its exception line". A quiet log's open traceback is as whole as it
        gets (the process died on it) and is kept, as the post-mortem keeps it."""
        scan = LogScan(path=self.rel, size=self.tail.size, bytes_read=self.bytes_scanned,
                       n_lines=self.scanner.lines_before + (1 if self.carry else 0), rank=self.rank)
        sc = copy.copy(self.scanner)
        sc.tb = copy.deepcopy(self.scanner.tb)
        sc.cf = copy.deepcopy(self.scanner.cf)
        sc.finish(scan)
        still_open = {st.start for st in self.scanner.tb.open.values()}
        if still_open and not settled:
            scan.tracebacks = [tb for tb in scan.tracebacks if tb.line_start not in still_open]
        return scan


def _one(data: bytes) -> Iterator[bytes]:
    step = log_blocks.BLOCK
    for i in range(0, len(data), step):
        yield data[i:i + step]
