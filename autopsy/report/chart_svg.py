"""Geometry of the inline SVG charts: scales, ticks, paths, marker positions.

Why hand-written SVG: a chart is ~10-40 KB of markup, needs no JavaScript to appear,
prints, works offline and from e-mail, and is testable as text. A charting library would
add 50-900 KB of inlined JS per report (uPlot ~50 KB, Vega-Lite ~800 KB) for plots that are
lines, vertical markers and bands. The template (``_chart.html.j2``) only places what this
module computes; every label goes through Jinja's autoescape there.

Hover (step and value) is a small vanilla-JS layer (``assets/report.js``) that reads the
display points from a JSON block next to each SVG; without JS the chart is still complete.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autopsy.report.charts import Chart, Line, fmt_bytes, fmt_num

WIDTH, HEIGHT = 900, 250
PAD_L, PAD_R, PAD_T, PAD_B = 64, 16, 44, 30
LABEL_ROWS = 3  # rows of marker labels above the plot
CHAR_PX = 6.2  # rough width of a 10.5px label character, to keep labels from overlapping


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
    nonfinite_label: tuple[float, str, bool] | None = None  # (x, text, anchor at end) for the first run


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


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 x 10^k) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
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


def _tick_label(v: float, fmt: str) -> str:
    if fmt == "log":  # decades: 1e+08 reads better than 100,000,000
        return fmt_num(v) if 1e-2 <= v < 1e4 else f"{v:.0e}"
    if fmt == "bytes":
        return fmt_bytes(v)
    if fmt == "step":
        if abs(v) >= 10_000 and v % 1000 == 0:
            return f"{v / 1000:g}k"
        return fmt_num(v)
    return fmt_num(v)


def _round(v: float) -> float:
    return round(v, 1)


def layout(chart: Chart) -> DrawnChart:
    """Place a chart: scales from the data and markers, then every path and label."""
    pl, pt = PAD_L, PAD_T
    pw, ph = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_T - PAD_B
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

    def sx(v: float | np.ndarray) -> Any:
        return pl + (np.asarray(v, dtype="float64") - x0) / (x1 - x0) * pw

    def sy(v: float | np.ndarray) -> Any:
        a = np.asarray(v, dtype="float64")
        if log_y:
            a = np.log10(np.maximum(a, 1e-300))
            lo, hi = math.log10(y0), math.log10(y1)
        else:
            lo, hi = y0, y1
        return pt + ph - (a - lo) / (hi - lo) * ph

    x_ticks = [Tick(_round(float(sx(v))), _tick_label(v, "step")) for v in nice_ticks(x0, x1, 7)]
    y_vals = _log_ticks(y0, y1) if log_y else nice_ticks(y0, y1, 4)
    y_fmt = "log" if log_y and chart.y_format == "num" else chart.y_format
    y_ticks = [Tick(_round(float(sy(v))), _tick_label(v, y_fmt)) for v in y_vals]

    lines = [_draw_line(ln, sx, sy, pt) for ln in chart.lines]
    markers = []
    for m in chart.markers:
        dm = DrawnMarker(kind=m.kind, css=m.css, label=m.label, rule=m.rule, anchor=m.anchor)
        if m.kind in ("vline", "band") and m.step is not None:
            dm.x = _round(float(sx(m.step)))
            dm.x2 = _round(float(sx(m.step_end))) if m.step_end is not None else dm.x
            dm.label_x, dm.label_y = dm.x + 3, pt - 6
            dm.anchor_end = dm.x > pl + pw * 0.7
            if dm.anchor_end:
                dm.label_x = dm.x - 3
        elif m.kind == "hline" and m.value is not None:
            dm.y = _round(float(sy(m.value)))
            dm.x, dm.x2 = pl, pl + pw
            dm.label_x, dm.label_y, dm.anchor_end = pl + 4, dm.y - 4, False
        elif m.kind == "point" and m.step is not None and m.value is not None:
            dm.x, dm.y = _round(float(sx(m.step))), _round(float(sy(m.value)))
        else:
            continue
        markers.append(dm)
    _place_labels(markers, pl, pt, pw)
    data = {
        "plot": [pl, pt, pw, ph],
        "x": [x0, x1],
        "lines": [
            {"label": ln.label, "css": ln.css, "s": [_num_json(s) for s in ln.steps.tolist()],
             "v": [_num_json(v) for v in ln.values.tolist()],
             "bad": [[s, name] for s, name in ln.nonfinite]}
            for ln in chart.lines
        ],
        "fmt": chart.y_format,
    }
    summary = "; ".join(
        f"{ln.label}: {ln.n_points} points"
        + (f", {ln.n_nonfinite} non-finite (first at step {fmt_num(ln.nonfinite[0][0])})" if ln.nonfinite else "")
        for ln in chart.lines
    )
    return DrawnChart(id=chart.id, title=chart.title, width=WIDTH, height=HEIGHT, plot=(pl, pt, pw, ph),
                      x_ticks=x_ticks, y_ticks=y_ticks, lines=lines, markers=markers, log_y=log_y,
                      notes=list(chart.notes), data_json=script_json(data), summary=summary)


def _place_labels(markers: list[DrawnMarker], pl: float, pt: float, pw: float) -> None:
    """Greedy rows for vline labels above the plot (so close markers do not overprint);
    band labels go inside the top of their band."""
    rows_end: list[float] = []
    for dm in sorted((m for m in markers if m.kind == "vline"), key=lambda m: m.x):
        width = len(dm.label) * CHAR_PX
        dm.anchor_end = dm.x + 3 + width > pl + pw + PAD_R
        start = dm.x - 3 - width if dm.anchor_end else dm.x + 3
        dm.label_x = dm.x - 3 if dm.anchor_end else dm.x + 3
        row = next((i for i, end in enumerate(rows_end) if end < start), len(rows_end))
        if row == len(rows_end):
            rows_end.append(0.0)
        rows_end[row] = start + width + 6
        dm.label_y = pt - 6 - 12 * row if row < LABEL_ROWS else pt + 12 * (row - LABEL_ROWS + 1)
    for dm in markers:
        if dm.kind == "band":
            dm.label_x, dm.label_y = dm.x + 4, pt + 24
            width = len(dm.label) * CHAR_PX
            dm.anchor_end = dm.x + 4 + width > pl + pw
            if dm.anchor_end:
                dm.label_x = dm.x2 - 4


def _num_json(v: float) -> float | int:
    if float(v).is_integer() and abs(v) < 2**53:
        return int(v)
    return float(f"{v:.6g}")


def _draw_line(ln: Line, sx: Any, sy: Any, top: float) -> DrawnLine:
    parts = []
    if len(ln.steps):
        px, py = sx(ln.steps), sy(ln.values)
        for x, y, start in zip(px.tolist(), py.tolist(), ln.starts.tolist(), strict=True):
            parts.append(f"{'M' if start else 'L'}{x:.1f} {y:.1f}")
        if len(ln.steps) == 1:  # a single point: a zero-length path shows nothing, draw a dot
            parts.append("h0.01")
    bad = []
    for a, b, kinds, count in ln.nonfinite_runs:
        xa, xb = float(sx(a)), float(sx(b))
        where = f"step {fmt_num(a)}" if a == b else f"steps {fmt_num(a)}..{fmt_num(b)}"
        bad.append((_round(xa - 1.5), _round(max(3.0, xb - xa + 3)), kinds, f"{kinds} at {where} ({count} points)"))
    caption = ln.label + (f" (also in {', '.join(ln.also_in)})" if ln.also_in else "")
    label = None
    if bad:
        x, w, kinds, _tip = bad[0]
        text = f"{kinds} from step {fmt_num(ln.nonfinite_runs[0][0])}"
        right = float(sx(ln.x_range[1])) if ln.x_range else x + w
        label = (x - 3, text, True) if x + len(text) * CHAR_PX > right else (x + 2, text, False)
    return DrawnLine(d="".join(parts), css=ln.css, label=ln.label, dashed=ln.dashed, nonfinite=bad, caption=caption,
                     nonfinite_label=label)


def script_json(data: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``: no ``<``, ``>``, ``&``
    (so ``</script>`` in a tag name cannot end the block), no NaN (not JSON)."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
