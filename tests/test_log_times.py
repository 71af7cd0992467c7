"""autopsy.log_times answers what a walk over every timed record of a log answers.

The summary's time lookups (the latest time at or before a line; the first line that printed a
time) bisect sorted columns instead of building a tuple per series point; these tests compare
them with the obvious walk over hits, series points and tracebacks in their natural order, for
a column store (thinned and not) and for a plain list of points.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from autopsy.log_times import TimedLines, series_line_times
from autopsy.parsers.log_store import SeriesStore
from autopsy.parsers.types import Hit, HitList, LogScan, SeriesPoint, Traceback

TIMES = st.one_of(st.none(), st.sampled_from([100.0, 100.0000001, 200.0, 300.5, math.nan, math.inf]))
LINES = st.integers(min_value=1, max_value=60)


def _walk(scan: LogScan) -> list[tuple[int, float]]:
    def ok(t: object) -> bool:
        return isinstance(t, float) and math.isfinite(t)

    out = [(h.lineno, float(h.wall_time)) for hl in scan.hits.values() for h in hl.all_kept()  # type: ignore[arg-type]
           if ok(h.wall_time)]
    out += [(p.lineno, float(p.wall_time)) for p in scan.series if ok(p.wall_time)]  # type: ignore[arg-type]
    out += [(tb.line_start, float(tb.wall_time)) for tb in scan.tracebacks if ok(tb.wall_time)]  # type: ignore[arg-type]
    return out


def _scan(hits: list[tuple[int, float | None]], points: list[tuple[int, float | None, int]],
          tbs: list[tuple[int, float | None]], as_store: bool, cap: int) -> LogScan:
    scan = LogScan(path="train.log", size=0, bytes_read=0, n_lines=60)
    scan.hits["p"] = HitList(first=[Hit("p", "train.log", ln, 0, "x", {}, wall_time=t) for ln, t in hits],
                             count=len(hits))
    scan.tracebacks = [Traceback(path="train.log", line_start=ln, line_end=ln + 2, exc_type="E", message="m",
                                 frames=(), wall_time=t) for ln, t in tbs]
    points = sorted(points, key=lambda p: p[0])  # a scanner appends lines in order
    if as_store:
        store = SeriesStore(cap=cap)
        for ln, t, n in points:
            store.add_line([f"v{i}" for i in range(n)], [1.0] * n, None, ln, t, None)
        scan.series = store  # type: ignore[assignment]
    else:
        scan.series = [SeriesPoint("loss", None, 1.0, ln, t) for ln, t, n in points for _ in range(n)]
    return scan


@settings(max_examples=150, deadline=None)
@given(hits=st.lists(st.tuples(LINES, TIMES), max_size=6),
       points=st.lists(st.tuples(LINES, TIMES, st.integers(min_value=1, max_value=3)), max_size=40),
       tbs=st.lists(st.tuples(LINES, TIMES), max_size=3), as_store=st.booleans(),
       cap=st.sampled_from([8, 1000]), line=st.integers(min_value=0, max_value=65),
       t=st.sampled_from([100.0, 200.0, 300.5, 999.0]))
def test_lookups_equal_the_walk(hits, points, tbs, as_store, cap, line, t) -> None:  # type: ignore[no-untyped-def]
    scan = _scan(hits, points, tbs, as_store, cap)
    walk = _walk(scan)
    index = TimedLines(scan)

    best = None
    for ln, w in walk:
        if ln <= line and (best is None or ln > best[0]):
            best = (ln, w)
    assert index.latest_at_or_before(line) == best

    carriers = [ln for ln, w in walk if ln <= line and abs(w - t) < 1e-6]
    assert index.first_line_with(t, line) == (min(carriers) if carriers else None)


def test_store_lines_thinned_to_nothing_are_not_timed() -> None:
    store = SeriesStore(cap=4)
    for ln in range(1, 20):
        store.add_line(["loss"], [1.0], ln, ln, 1000.0 + ln, None)
    lines, walls = series_line_times(store)
    assert sorted(zip(lines.tolist(), walls.tolist(), strict=True)) == sorted({(p.lineno, p.wall_time) for p in store})
