"""Which bytes of a log to read when it is larger than ``--max-bytes-per-file``.

A crash is printed at the *end* of a log and the configuration at its *start*, so a log
over the budget is read as its head (the first half of the budget) and its tail (the
second half), both cut at line boundaries. Line numbers stay right in the head; in the
tail they are right too when the skipped middle is small enough to count its newlines
(``bytes.count`` over 8 MB ``pread`` chunks, at memory speed), else they are estimated
from the average line length next to the cut (the end of the head and the start of
the tail, 8 MB each) and the scan says from which line on they are
approximate (``LogScan.approx_lines_from``), so reports can write ``line ~N``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ALIGN_BYTES = 64 << 10  # look this far for the line boundary next to a cut
COUNT_MIDDLE_MAX = 1 << 30  # count the skipped middle's newlines up to this size, else estimate
_CHUNK = 8 << 20


@dataclass(frozen=True)
class Window:
    """Read ``[0, head_end)`` and ``[tail_start, size)``; the middle is skipped."""

    head_end: int
    tail_start: int
    size: int

    @property
    def skipped(self) -> int:
        return self.tail_start - self.head_end

    def note(self, approx_from: int | None) -> str:
        text = (f"read only the first {self.head_end:,} and the last {self.size - self.tail_start:,} bytes of "
                f"{self.size:,} (byte ranges 0-{self.head_end:,} and {self.tail_start:,}-{self.size:,}; "
                f"the {self.skipped:,} bytes between were skipped)")
        if approx_from is not None:
            text += f"; line numbers from ~{approx_from:,} on are estimated (~) from the average line length"
        return text


def plan(fd: int, size: int, max_bytes: int) -> Window | None:
    """The head/tail window for a file of ``size`` bytes, or None when it fits the budget."""
    limit = max(0, int(max_bytes))
    if size <= limit:
        return None
    head = limit // 2
    tail_from = size - (limit - head)
    if head > 0:
        lo = max(0, head - ALIGN_BYTES)
        chunk = os.pread(fd, head - lo, lo)
        nl = chunk.rfind(b"\n")
        if nl >= 0:
            head = lo + nl + 1
    if tail_from < size:
        chunk = os.pread(fd, min(ALIGN_BYTES, size - tail_from) + 1, tail_from - 1)
        # chunk[0] is the byte before the cut: a "\n" there means the cut is a line start already
        nl = chunk.find(b"\n")
        if nl >= 0 and tail_from + nl < size:
            tail_from += nl
    return Window(head, max(tail_from, head), size)


def middle_newlines(fd: int, window: Window) -> tuple[int, bool]:
    """Newlines in the skipped middle, and whether that count is exact (else estimated)."""
    skipped = window.skipped
    if skipped <= 0:
        return 0, True
    if skipped <= COUNT_MIDDLE_MAX:
        count = 0
        pos = window.head_end
        while pos < window.tail_start:
            chunk = os.pread(fd, min(_CHUNK, window.tail_start - pos), pos)
            if not chunk:
                break
            count += chunk.count(b"\n")
            pos += len(chunk)
        return count, True
    lines = nbytes = 0
    for start, end in ((max(0, window.head_end - _CHUNK), window.head_end),
                       (window.tail_start, min(window.size, window.tail_start + _CHUNK))):
        if end > start:
            sample = os.pread(fd, end - start, start)
            lines += sample.count(b"\n")
            nbytes += len(sample)
    return (round(skipped * lines / nbytes) if nbytes else 0), False
