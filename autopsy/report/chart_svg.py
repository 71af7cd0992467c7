"""Geometry of the inline SVG charts: scales, ticks, paths, axis titles, label positions.

Why hand-written SVG: a chart is ~10-40 KB of markup, needs no JavaScript to appear,
prints, works offline and from e-mail, and is testable as text. A charting library would
add 50-900 KB of inlined JS per report (uPlot ~50 KB, Vega-Lite ~800 KB) for plots that are
lines, vertical markers and bands. The template (``_chart.html.j2``) only places what this
module computes; every label goes through Jinja's autoescape there.

An SVG scales its text with its width, so one drawing cannot be readable both on a phone and
on a wide screen: each chart is laid out twice, :data:`WIDE` (900 units, shown when the chart
is at least 720 px wide: text >= 10 px) and :data:`NARROW` (360 units, shown below that: text
>= 10.5 px from a 390 px phone on), and the stylesheet shows one of them by the chart's own
width (a container query). Hover (step and value) is a small vanilla-JS layer
(``assets/report.js``) that reads the display points from a JSON block next to the chart;
without JS the chart is still complete, and the legend's source toggles are plain checkboxes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autopsy.report.chart_format import byte_ticks, fmt_num, linear_ticks, log_ticks, step_ticks
from autopsy.report.chart_labels import (
    ASCENT_EM,
    DESCENT_EM,
    ROW_EM,
    LevelLabel,
    TopLabel,
    fit,
    place_levels,
    place_rows,
    text_width,
)
from autopsy.report.charts import Chart, Line, minmax_indices


@dataclass(frozen=True)
class Size:
    """One drawing of a chart: its width in SVG units, plot height and text size."""

    name: str
    width: int
    plot_height: int
    font: float
    x_ticks: int
    y_ticks: int
    buckets: int  # display points kept per line: min/max of this many x-buckets


WIDE = Size("wide", 900, 170, 13.0, 7, 4, 300)
NARROW = Size("narrow", 360, 160, 12.0, 4, 4, 120)
SIZES = (WIDE, NARROW)


@dataclass
class Tick:
    pos: float
    label: str


@dataclass
class DrawnLine:
    d: str
    css: str
    label: str
    dashed: bool
    nonfinite: list[tuple[float, float, str, str]]  # strip (x, width, "NaN", tooltip) per run of NaN/inf
    caption: str
    index: int = 0
    hidden: bool = False
    metric: str = ""
    nonfinite_label: tuple[float, str, bool, float] | None = None  # (x, text, anchor at end, y) of the first run


@dataclass
class DrawnMarker:
    kind: str
    css: str
    label: str
    rule: str
    anchor: str
    x: float = 0.0
    x2: float = 0.0
    y: float = 0.0
    label_x: float = 0.0
    label_y: float = 0.0
    anchor_end: bool = False
    text: str = ""  # the label as drawn (cut to fit); ``label`` stays whole in the tooltip
    value: float | None = None  # a level's value (hline), on the element for tests and tools


@dataclass
class DrawnChart:
    id: str
    title: str
    width: int
    height: int
    plot: tuple[float, float, float, float]  # left, top, width, height
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    lines: list[DrawnLine]
    markers: list[DrawnMarker]
    log_y: bool
    notes: list[str]
    data_json: str  # display points for the hover layer; already safe inside <script>
    summary: str  # text alternative: what the chart shows
    extra_paths: list[tuple[str, str]] = field(default_factory=list)  # (d, css) e.g. forecast
    size: str = WIDE.name
    font: float = WIDE.font
    x_title: str = ""
    y_title: str = ""
    x_title_pos: tuple[float, float] = (0.0, 0.0)
    y_title_pos: tuple[float, float] = (0.0, 0.0)
    x_tick_y: float = 0.0  # baseline of the step tick labels


@dataclass
class ChartView:
    """What the template draws for one chart: both drawings, one legend, one data block."""

    id: str
    title: str
    log_y: bool
    notes: list[str]
    legend: list[DrawnLine]
    toggles: bool  # the legend keys are checkboxes (a chart with several sources of a metric)
    drawings: list[DrawnChart]
    data_json: str
    summary: str


def nice_ticks(lo: float, hi: float, n: int = 5, *, integer: bool = False) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 x 10^k) covering [lo, hi]; whole numbers only with ``integer``."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    if integer:  # steps are counted: no tick at step 0.5, and 2.5 x 10^k only from 25 up
        step = max(1.0, step if step >= 10 or float(step).is_integer() else math.ceil(step))
    first = math.ceil(lo / step - 1e-9) * step
    ticks: list[float] = []
    v = first
    while v <= hi + step * 1e-9 and len(ticks) < 50:
        ticks.append(0.0 if abs(v) < step * 1e-9 else v)
        v += step
    return ticks


def _log_ticks(lo: float, hi: float) -> list[float]:
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    stride = max(1, math.ceil((b - a) / 6))
    return [10.0**k for k in range(a, b + 1, stride) if lo <= 10.0**k <= hi]


def _round(v: float) -> float:
    return round(v, 1)


def _ranges(chart: Chart) -> tuple[float, float, float, float, bool]:
    """(x0, x1, y0, y1, log_y): the data and every marker inside the axes."""
    xs = [ln.steps for ln in chart.lines] + [np.array(ln.x_range) for ln in chart.lines if ln.x_range]
    for m in chart.markers:
        xs.append(np.array([v for v in (m.step, m.step_end) if v is not None]))
    allx = np.concatenate([x for x in xs if len(x)]) if any(len(x) for x in xs) else np.array([0.0, 1.0])
    x0, x1 = float(allx.min()), float(allx.max())
    if x1 <= x0:
        x0, x1 = x0 - 1, x1 + 1
    ys = [ln.values for ln in chart.lines] + [np.array([m.value]) for m in chart.markers
                                              if m.kind in ("hline", "point") and m.value is not None]
    ally = np.concatenate([y for y in ys if len(y)]) if any(len(y) for y in ys) else np.array([0.0, 1.0])
    ally = ally[np.isfinite(ally)]
    log_y = chart.log_y and len(ally) > 0 and bool(ally.min() > 0)
    if not len(ally):
        ally = np.array([0.0, 1.0])
    y0, y1 = float(ally.min()), float(ally.max())
    if log_y:
        y0, y1 = 10 ** math.floor(math.log10(y0)), 10 ** math.ceil(math.log10(y1))
        if y1 <= y0:
            y1 = y0 * 10
    else:
        if y1 <= y0:
            y0, y1 = (y0 - 1, y1 + 1) if y0 == 0 else (y0 - abs(y0) * 0.1, y1 + abs(y1) * 0.1)
        pad = (y1 - y0) * 0.05
        y0, y1 = (y0 - pad if y0 - pad < 0 or y0 < 0 else max(0.0, y0 - pad)), y1 + pad
        if chart.y_format == "bytes":
            y0 = 0.0  # bytes on disk: the distance from zero is the point
    return x0, x1, y0, y1, log_y


def _y_axis(chart: Chart, y0: float, y1: float, log_y: bool, n: int) -> tuple[list[float], list[str], str]:
    """Tick values, their labels (one format for the axis) and the axis title."""
    title = chart.y_title or chart.title
    if log_y:
        values = _log_ticks(y0, y1)
        return values, log_ticks(values), f"{title} (log scale)"
    values = nice_ticks(y0, y1, n)
    if chart.y_format == "bytes":
        labels, unit = byte_ticks(values)
        return values, labels, f"{title} ({unit})"
    labels, factor = linear_ticks(values)
    return values, labels, f"{title} ({factor})" if factor else title


def _x_axis(x0: float, x1: float, n: int, room: float, font: float) -> tuple[list[float], list[str]]:
    """Step ticks, as many as fit side by side (``n`` at most) without their labels touching."""
    for k in range(n, 1, -1):
        values = nice_ticks(x0, x1, k, integer=True)
        labels = step_ticks(values)
        if len(values) < 2:
            return values, labels
        spacing = room * (values[1] - values[0]) / (x1 - x0)
        if max(text_width(s, font) for s in labels) + font <= spacing:
            return values, labels
    values = [x0, x1] if x1 > x0 else [x0]
    return values, step_ticks(values)


def layout(chart: Chart, size: Size = WIDE) -> DrawnChart:
    """Place a chart at one size: scales from the data and markers, then every path and label."""
    f = size.font
    x0, x1, y0, y1, log_y = _ranges(chart)
    y_vals, y_labels, y_title = _y_axis(chart, y0, y1, log_y, size.y_ticks)
    pl = 4 + max((text_width(s, f) for s in y_labels), default=0.0) + 6
    pr = 10.0
    pw = size.width - pl - pr
    x_vals, x_labels = _x_axis(x0, x1, size.x_ticks, pw, f)
    if x_labels:  # the last tick's label is centred on it: keep it inside the drawing
        pr = max(pr, text_width(x_labels[-1], f) / 2 + 2 - pw * (x1 - x_vals[-1]) / (x1 - x0))
        pw = size.width - pl - pr

    def sx(v: float | np.ndarray) -> Any:
        return pl + (np.asarray(v, dtype="float64") - x0) / (x1 - x0) * pw

    # labels above the plot: markers' steps, windows, first non-finite step of each line
    tops: list[tuple[TopLabel, Any]] = []
    for m in chart.markers:
        if m.kind in ("vline", "band") and m.step is not None:
            tops.append((TopLabel(float(sx(m.step)), m.label), m))
    for i, ln in enumerate(chart.lines):
        if ln.nonfinite_runs:
            a = ln.nonfinite_runs[0]
            tops.append((TopLabel(float(sx(a[0])), f"{a[2]} from step {fmt_num(a[0])}"), i))
    rows = place_rows([t for t, _ in tops], f, 2.0, size.width - 2.0)
    row_h = f * ROW_EM
    # row 0 holds the y-axis title (horizontal, readable at any width), marker labels the rows below
    pt = 4 + (rows + 1) * row_h + f * 0.6  # the top y tick label reaches 0.6 em above the plot
    ph = float(size.plot_height)
    # x tick labels clear the lowest y tick label (baseline 0.35 em under its tick), the x title
    # sits a row under them
    x_tick_base = f * (0.35 + DESCENT_EM + ASCENT_EM) + 2
    x_title_base = x_tick_base + f * ROW_EM
    pb = x_title_base + f * DESCENT_EM + 4
    height = math.ceil(pt + ph + pb)

    def sy(v: float | np.ndarray) -> Any:
        a = np.asarray(v, dtype="float64")
        if log_y:
            a = np.log10(np.maximum(a, 1e-300))
            lo, hi = math.log10(y0), math.log10(y1)
        else:
            lo, hi = y0, y1
        return pt + ph - (a - lo) / (hi - lo) * ph

    def row_y(row: int) -> float:  # baseline of marker-label row ``row`` (the title's row is -1)
        return _round(4 + (row + 2) * row_h - f * 0.35)

    x_ticks = [Tick(_round(float(sx(v))), s) for v, s in zip(x_vals, x_labels, strict=True)]
    y_ticks = [Tick(_round(float(sy(v))), s) for v, s in zip(y_vals, y_labels, strict=True)]
    lines = [_draw_line(ln, i, sx, sy, size) for i, ln in enumerate(chart.lines)]
    for top, owner in tops:
        if isinstance(owner, int):
            lines[owner].nonfinite_label = (top.label_x, top.text, top.anchor_end, row_y(top.row))
    markers = []
    levels: list[tuple[LevelLabel, DrawnMarker]] = []
    by_marker = {id(owner): top for top, owner in tops if not isinstance(owner, int)}
    for m in chart.markers:
        dm = DrawnMarker(kind=m.kind, css=m.css, label=m.label, rule=m.rule, anchor=m.anchor, text=m.label)
        if m.kind in ("vline", "band") and m.step is not None:
            top = by_marker[id(m)]
            dm.x = _round(float(sx(m.step)))
            dm.x2 = _round(float(sx(m.step_end))) if m.step_end is not None else dm.x
            dm.label_x, dm.label_y, dm.anchor_end, dm.text = top.label_x, row_y(top.row), top.anchor_end, top.text
            dm.y = _round(dm.label_y + f * 0.3)  # a vline's leader runs up to its label
        elif m.kind == "hline" and m.value is not None:
            dm.y = _round(float(sy(m.value)))
            dm.x, dm.x2, dm.value = pl, pl + pw, m.value
            levels.append((LevelLabel(dm.y, m.label), dm))
        elif m.kind == "point" and m.step is not None and m.value is not None:
            dm.x, dm.y = _round(float(sx(m.step))), _round(float(sy(m.value)))
        else:
            continue
        markers.append(dm)
    place_levels([lv for lv, _ in levels], f, pl, pl + pw, pt, pt + ph)
    y_title = fit(y_title, f, size.width - 8)
    for lv, dm in levels:
        dm.label_x, dm.label_y, dm.anchor_end, dm.text = lv.label_x, lv.label_y, lv.anchor_end, lv.text
    return DrawnChart(id=chart.id, title=chart.title, width=size.width, height=height,
                      plot=(_round(pl), _round(pt), _round(pw), ph), x_ticks=x_ticks, y_ticks=y_ticks, lines=lines,
                      markers=markers, log_y=log_y, notes=list(chart.notes), data_json=_data_json(chart, x0, x1),
                      summary=_summary(chart), size=size.name, font=f, x_title=chart.x_title, y_title=y_title,
                      x_title_pos=(_round(pl + pw / 2), _round(pt + ph + x_title_base)),
                      x_tick_y=_round(pt + ph + x_tick_base), y_title_pos=(4.0, _round(4 + row_h - f * 0.35)))


def draw(chart: Chart) -> ChartView:
    """Both drawings of a chart, with its legend and hover data."""
    drawings = [layout(chart, size) for size in SIZES]
    legend = drawings[0].lines
    return ChartView(id=chart.id, title=chart.title, log_y=drawings[0].log_y, notes=list(chart.notes),
                     legend=legend, toggles=any(ln.hidden for ln in legend), drawings=drawings,
                     data_json=drawings[0].data_json, summary=drawings[0].summary)


def _data_json(chart: Chart, x0: float, x1: float) -> str:
    data = {
        "x": [x0, x1],
        "lines": [
            {"label": ln.label, "css": ln.css, "s": [_num_json(s) for s in ln.steps.tolist()],
             "v": [_num_json(v) for v in ln.values.tolist()],
             "bad": [[s, name] for s, name in ln.nonfinite]}
            for ln in chart.lines
        ],
        "fmt": chart.y_format,
    }
    return script_json(data)


def _summary(chart: Chart) -> str:
    return "; ".join(
        f"{ln.label}: {ln.n_points} points"
        + (f", {ln.n_nonfinite} non-finite (first at step {fmt_num(ln.nonfinite[0][0])})" if ln.nonfinite else "")
        + (" (hidden by default)" if ln.hidden else "")
        for ln in chart.lines
    )


def _num_json(v: float) -> float | int:
    if float(v).is_integer() and abs(v) < 2**53:
        return int(v)
    return float(f"{v:.6g}")


def _thin(ln: Line, buckets: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The line's display points cut to ``buckets`` x-buckets (min/max kept), segments intact."""
    steps, values, starts = ln.steps, ln.values, ln.starts
    if len(steps) <= 4 * buckets:
        return steps, values, starts
    seg = np.cumsum(starts)
    keep = minmax_indices(steps, values, buckets)
    first = np.flatnonzero(starts)
    last = np.concatenate((first[1:] - 1, [len(steps) - 1]))
    keep = np.union1d(np.union1d(keep, first), last)
    kept_seg = seg[keep]
    return steps[keep], values[keep], np.diff(kept_seg, prepend=-1) != 0


def _draw_line(ln: Line, index: int, sx: Any, sy: Any, size: Size) -> DrawnLine:
    parts = []
    steps, values, starts = _thin(ln, size.buckets)
    if len(steps):
        px, py = sx(steps), sy(values)
        for x, y, start in zip(px.tolist(), py.tolist(), starts.tolist(), strict=True):
            parts.append(f"{'M' if start else 'L'}{x:.1f} {y:.1f}")
        if len(steps) == 1:  # a single point: a zero-length path shows nothing, draw a dot
            parts.append("h0.01")
    bad = []
    for a, b, kinds, count in ln.nonfinite_runs:
        xa, xb = float(sx(a)), float(sx(b))
        where = f"step {fmt_num(a)}" if a == b else f"steps {fmt_num(a)}..{fmt_num(b)}"
        bad.append((_round(xa - 1.5), _round(max(3.0, xb - xa + 3)), kinds, f"{kinds} at {where} ({count} points)"))
    caption = ln.label + (f" (also in {', '.join(ln.also_in)})" if ln.also_in else "")
    return DrawnLine(d="".join(parts), css=ln.css, label=ln.label, dashed=ln.dashed, nonfinite=bad, caption=caption,
                     index=index, hidden=ln.hidden, metric=ln.metric)


def script_json(data: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``: no ``<``, ``>``, ``&``
    (so ``</script>`` in a tag name cannot end the block), no NaN (not JSON)."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
