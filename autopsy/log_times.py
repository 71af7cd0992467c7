"""The timed records of one log as sorted columns, so the summary's time lookups bisect.

A log's records that carry a wall time are its pattern hits (a few kept per pattern), its
series lines (up to millions: every HF dict line) and its tracebacks. The summary asks two
questions of them (:mod:`autopsy.summary`): the latest time printed at or before a line, and
the first line that printed a given time. Walking every series point in Python for each
question cost seconds on a large log; here the series columns are read with numpy once per
log, sorted by line (stable, so records of one line keep the order hits, series, tracebacks),
and each question is a bisection.
"""

from __future__ import annotations

import math
from typing import Any

_SAME_TIME = 1e-6  # two times closer than this are the same printed time


class TimedLines:
    """(line, wall time) of every timed record of one log, sorted by line."""

    __slots__ = ("lines", "times")

    def __init__(self, scan: Any) -> None:
        import numpy as np

        hit_lines: list[int] = []
        hit_times: list[float] = []
        for hits in scan.hits.values():  # a bounded number kept per pattern
            for h in hits.all_kept():
                if _finite(h.wall_time):
                    hit_lines.append(h.lineno)
                    hit_times.append(float(h.wall_time))
        tb_lines = [tb.line_start for tb in scan.tracebacks if _finite(tb.wall_time)]
        tb_times = [float(tb.wall_time) for tb in scan.tracebacks if _finite(tb.wall_time)]
        s_lines, s_times = series_line_times(scan.series)
        lines = np.concatenate((np.asarray(hit_lines, dtype=np.int64), s_lines, np.asarray(tb_lines, dtype=np.int64)))
        times = np.concatenate((np.asarray(hit_times, dtype=np.float64), s_times,
                                np.asarray(tb_times, dtype=np.float64)))
        order = np.argsort(lines, kind="stable")
        self.lines = lines[order]
        self.times = times[order]

    def __len__(self) -> int:
        return len(self.lines)

    def latest_at_or_before(self, line: int) -> tuple[int, float] | None:
        """(line, time) of the last timed line at or before ``line``; of several records on that
        line, the first (hits before series points before tracebacks)."""
        import numpy as np

        k = int(np.searchsorted(self.lines, line, side="right"))
        if k == 0:
            return None
        at = self.lines[k - 1]
        first = int(np.searchsorted(self.lines, at, side="left"))
        return int(at), float(self.times[first])

    def first_line_with(self, t: float, line: int) -> int | None:
        """The first line at or before ``line`` whose record carries the time ``t``, or None."""
        import numpy as np

        k = int(np.searchsorted(self.lines, line, side="right"))
        same = np.flatnonzero(np.abs(self.times[:k] - t) < _SAME_TIME)
        return int(self.lines[same[0]]) if len(same) else None


def series_line_times(series: Any) -> tuple[Any, Any]:
    """(line numbers, wall times) of the series lines that carry a finite time, as numpy arrays.

    A :class:`~autopsy.parsers.log_store.SeriesStore` keeps line, time and rank once per log
    line: those columns are read directly (lines left without a point by thinning skipped);
    any other sequence of :class:`~autopsy.parsers.types.SeriesPoint` is read point by point.
    """
    import numpy as np

    l_lineno = getattr(series, "l_lineno", None)
    if l_lineno is not None:
        lines = np.frombuffer(l_lineno, dtype=np.int64)
        walls = np.frombuffer(series.l_wall, dtype=np.float64)
        counts = np.diff(np.append(np.frombuffer(series.l_start, dtype=np.int64), len(series.value)))
        keep = np.isfinite(walls) & (counts > 0)
        return lines[keep], walls[keep]
    pts = [(p.lineno, float(p.wall_time)) for p in series if _finite(p.wall_time)]
    return (np.asarray([ln for ln, _ in pts], dtype=np.int64), np.asarray([w for _, w in pts], dtype=np.float64))


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
