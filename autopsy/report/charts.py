"""Chart data for the HTML report: series picked from the run, downsampled for display.

The report draws its plots server-side as inline SVG (see :mod:`autopsy.report.chart_svg`);
this module decides *what* is drawn: one chart per canonical metric with a line per
source/file/tag/rank, the markers findings point at (first NaN step, a spike, a plateau
window, an LR floor against the configured minimum) and the checkpoint/disk timeline.

Downsampling is for display only and never touches the data rules read. It keeps the
first, last, minimum and maximum point of every x-bucket (the "M4" scheme), so a one-step
spike survives whatever the series length, and non-finite values are kept apart as
markers (a line cannot pass through NaN).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from autopsy.model import Finding
from autopsy.report.chart_format import fmt_bytes, fmt_num, nonfinite_name
from autopsy.report.chart_markers import (
    METRIC_CHARTS,
    X_TITLE,
    Marker,
    chart_of_finding,
    finding_anchor,
    finding_markers,
    markers_for,
    y_title,
)

if TYPE_CHECKING:
    import pandas as pd

# Marker logic and number wording live in chart_markers / chart_format; re-exported here, where
# the report sections and the diff report have always imported them from.
__all__ = ["Chart", "Line", "Marker", "chart_of_finding", "finding_anchor", "finding_markers", "fmt_bytes",
           "fmt_num", "make_line", "markers_for", "metric_charts", "minmax_indices", "sorted_points"]

DISPLAY_BUCKETS = 300  # x-buckets per line; <= 4 points each: ~1200 points, enough for a 760 px plot
MAX_LINES_PER_CHART = 6  # more lines are unreadable; the caption says how many were left out
MAX_NONFINITE_MARKS = 50  # per line: the first ones are what matters (the first NaN step)

SOURCE_ORDER = {"tensorboard": 0, "trainer_state": 1, "log": 2}
# Charts whose series can span decades (an LR warmup from 1e-7, a grad-norm spike 1e4x the
# baseline): drawn on a log axis when their values are all positive and span this many decades.
LOG_FRIENDLY = {"loss", "lr", "grad_norm", "loss_scale"}
LOG_MIN_DECADES = 2.0

@dataclass
class Line:
    """One series as drawn: display points (finite), segment starts, non-finite marks."""

    label: str
    steps: np.ndarray  # float64, display points only
    values: np.ndarray
    starts: np.ndarray  # bool: a new segment starts here (a NaN/inf interrupted the series)
    nonfinite: list[tuple[float, str]] = field(default_factory=list)  # (step, "NaN" / "+inf"), the first ones
    nonfinite_runs: list[tuple[float, float, str, int]] = field(default_factory=list)  # (from, to, kinds, count)
    x_range: tuple[float, float] | None = None  # of all points, finite or not
    n_points: int = 0  # points in the data before downsampling
    n_nonfinite: int = 0
    dashed: bool = False
    css: str = ""  # palette class, set by the chart
    also_in: list[str] = field(default_factory=list)  # identical copies found in other sources
    metric: str = ""
    hidden: bool = False  # drawn but off until its legend key is toggled (another source of a metric)


@dataclass
class Chart:
    id: str
    title: str
    lines: list[Line]
    markers: list[Marker] = field(default_factory=list)
    log_y: bool = False
    y_format: str = "num"  # "num" | "bytes"
    notes: list[str] = field(default_factory=list)
    x_title: str = X_TITLE
    y_title: str = ""


# ----------------------------------------------------------------------- downsampling


def sorted_points(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) as float64, points without a finite step dropped, sorted by step (stable)."""
    steps = np.asarray(steps, dtype="float64")
    values = np.asarray(values, dtype="float64")
    ok = np.isfinite(steps)
    steps, values = steps[ok], values[ok]
    order = np.argsort(steps, kind="stable")
    return steps[order], values[order]


def minmax_indices(steps: np.ndarray, values: np.ndarray, buckets: int = DISPLAY_BUCKETS) -> np.ndarray:
    """Indices to keep so that every x-bucket keeps its first, last, min and max point.

    ``steps`` must be sorted and ``values`` finite. With ``len <= 4 * buckets`` every index
    is kept. Buckets split the step range evenly (not the index range), so a dense stretch
    of the run does not eat the budget of a sparse one.
    """
    n = len(steps)
    if n <= 4 * buckets:
        return np.arange(n)
    lo, hi = float(steps[0]), float(steps[-1])
    span = hi - lo if hi > lo else 1.0
    bucket = np.minimum(((steps - lo) / span * buckets).astype(np.int64), buckets - 1)
    # steps are sorted, so each bucket is one contiguous run of indices.
    bounds = np.flatnonzero(np.diff(bucket)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [n])) - 1
    order = np.lexsort((values, bucket))  # within a bucket: ascending value
    # order is grouped by bucket in the same layout as starts/ends (buckets ascending).
    argmins = order[starts]
    argmaxs = order[ends]
    keep = np.unique(np.concatenate((starts, ends, argmins, argmaxs)))
    return keep


def make_line(label: str, steps: np.ndarray, values: np.ndarray, *, buckets: int = DISPLAY_BUCKETS) -> Line:
    """A display line from raw points (any order, NaN/inf allowed, NaN steps dropped)."""
    steps, values = sorted_points(steps, values)
    finite = np.isfinite(values)
    bad_idx = np.flatnonzero(~finite)
    nonfinite = [(float(steps[i]), nonfinite_name(values[i])) for i in bad_idx[:MAX_NONFINITE_MARKS]]
    # segment id of each finite point: how many non-finite points came before it
    seg = np.cumsum(~finite)[finite]
    fs, fv = steps[finite], values[finite]
    if len(fs) > 4 * buckets:
        keep = minmax_indices(fs, fv, buckets)
        # a segment start must survive downsampling or the gap at the NaN would be bridged
        seg_first = np.flatnonzero(np.diff(seg, prepend=-1) != 0)
        keep = np.union1d(keep, seg_first)
    else:
        keep = np.arange(len(fs))
    kept_seg = seg[keep]
    starts = np.diff(kept_seg, prepend=-1) != 0
    return Line(label=label, steps=fs[keep], values=fv[keep], starts=starts, nonfinite=nonfinite,
                nonfinite_runs=_nonfinite_runs(steps, values, finite), n_points=len(steps), n_nonfinite=len(bad_idx),
                x_range=(float(steps[0]), float(steps[-1])) if len(steps) else None)


def _nonfinite_runs(steps: np.ndarray, values: np.ndarray, finite: np.ndarray) -> list[tuple[float, float, str, int]]:
    """Consecutive non-finite points as (first step, last step, "NaN"/"+inf"/"NaN, +inf", count):
    drawn as one strip each, so 10,000 NaN steps are one mark, not 10,000."""
    bad = ~finite
    if not bad.any():
        return []
    edges = np.flatnonzero(np.diff(np.concatenate(([0], bad.astype(np.int8), [0]))))
    runs = []
    for a, b in zip(edges[::2], edges[1::2], strict=True):
        kinds = sorted({nonfinite_name(v) for v in values[a:b][:1000]})
        runs.append((float(steps[a]), float(steps[b - 1]), ", ".join(kinds), int(b - a)))
        if len(runs) >= MAX_NONFINITE_MARKS:
            break
    return runs


# ----------------------------------------------------------------------- metric charts


def metric_charts(scalars: pd.DataFrame, findings: Sequence[Finding], *, crash_step: int | None) -> list[Chart]:
    """One chart per metric family present in ``scalars``, with the findings' markers."""
    if scalars is None or scalars.empty:
        return []
    df = scalars[scalars["metric"].notna() & scalars["step"].notna()]
    charts = []
    for chart_id, title, metrics in METRIC_CHARTS:
        sel = df[df["metric"].isin(metrics)]
        if sel.empty:
            continue
        chart = Chart(id=chart_id, title=title, lines=_lines_for(sel, metrics),
                      y_title=y_title(chart_id, [str(t) for t in sel["tag"].unique()]))
        if not chart.lines:
            continue
        chart.markers = markers_for(chart_id, findings, crash_step=crash_step)
        chart.log_y = chart_id in LOG_FRIENDLY and spans_decades(chart)
        n_groups = sel.groupby(["source", "path", "tag", "rank"], observed=True, dropna=False).ngroups
        shown = len(chart.lines) + sum(len(ln.also_in) for ln in chart.lines)
        if n_groups > shown:
            chart.notes.append(f"{n_groups - shown} more series not shown (ranks or files beyond the first "
                               f"{MAX_LINES_PER_CHART})")
        charts.append(chart)
    return charts


def spans_decades(chart: Chart, decades: float = LOG_MIN_DECADES) -> bool:
    """Whether every value drawn (lines and level markers) is positive and together they span
    at least ``decades`` powers of ten: a linear axis would flatten all but the largest then."""
    parts = [ln.values for ln in chart.lines]
    parts += [np.array([m.value]) for m in chart.markers if m.kind == "hline" and m.value is not None]
    values = np.concatenate(parts) if parts else np.array([])
    values = values[np.isfinite(values)]
    if len(values) < 2 or values.min() <= 0:
        return False
    return bool(math.log10(values.max() / values.min()) >= decades)


def _group_sort_key(item: tuple[tuple[Any, ...], pd.DataFrame], metrics: Sequence[str]) -> tuple[Any, ...]:
    (source, path, tag, rank), frame = item
    metric = frame["metric"].iloc[0]
    r = _rank_of(rank)
    # whole-run series before per-rank ones, then the densest (it is the one shown by default)
    return (metrics.index(metric) if metric in metrics else 9, 0 if r is None else 1,
            -1 if r is None else r, -len(frame), SOURCE_ORDER.get(str(source), 9), str(path), str(tag))


def _rank_of(value: Any) -> int | None:
    """A group key's rank as int, or None for pandas' NA / NaN (groupby with dropna=False)."""
    try:
        return None if value is None or bool(value != value) or str(value) == "<NA>" else int(value)
    except (TypeError, ValueError):
        return None


def _lines_for(sel: pd.DataFrame, metrics: Sequence[str]) -> list[Line]:
    groups = list(sel.groupby(["source", "path", "tag", "rank"], observed=True, dropna=False, sort=False))
    groups.sort(key=lambda item: _group_sort_key(item, metrics))
    lines: list[Line] = []
    kept_raw: list[tuple[str, np.ndarray, np.ndarray]] = []
    for (source, path, tag, rank), frame in groups:
        steps = frame["step"].to_numpy(dtype="float64", na_value=np.nan)
        values = frame["value"].to_numpy(dtype="float64", na_value=np.nan)
        metric = str(frame["metric"].iloc[0])
        r = _rank_of(rank)
        label = f"{tag}" + (f" rank {r}" if r is not None else "") + f" · {path}"
        dup = _duplicate_of(metric, steps, values, kept_raw)
        if dup is not None:
            lines[dup].also_in.append(f"{path} ({source})")
            continue
        if len(lines) >= MAX_LINES_PER_CHART:
            continue
        line = make_line(label, steps, values)
        line.dashed = metric == "data_time"
        line.metric = metric
        # one source per metric is shown (the densest whole-run series): the others are toggles,
        # since two sources of one loss at different cadences overlaid read as spikes
        line.hidden = any(other.metric == metric for other in lines)
        lines.append(line)
        kept_raw.append((metric, steps, values))
    for i, line in enumerate(lines):
        line.css = f"c{i % 8}"
    return lines


def _duplicate_of(metric: str, steps: np.ndarray, values: np.ndarray,
                  kept: list[tuple[str, np.ndarray, np.ndarray]]) -> int | None:
    """Index of an already drawn series holding the same points (TensorBoard and trainer_state
    often carry the same loss): drawing it twice only hides one under the other."""
    for i, (m, s, v) in enumerate(kept):
        if m != metric or len(s) != len(steps):
            continue
        o1, o2 = np.argsort(s, kind="stable"), np.argsort(steps, kind="stable")
        if np.array_equal(s[o1], steps[o2]) and np.allclose(v[o1], values[o2], rtol=1e-4, equal_nan=True):
            return i
    return None
