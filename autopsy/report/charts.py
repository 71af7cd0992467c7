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

from autopsy.metrics import canonical_metric
from autopsy.model import Finding

if TYPE_CHECKING:
    import pandas as pd

DISPLAY_BUCKETS = 300  # x-buckets per line; <= 4 points each: ~1200 points, enough for a 760 px plot
MAX_LINES_PER_CHART = 6  # more lines are unreadable; the caption says how many were left out
MAX_NONFINITE_MARKS = 50  # per line: the first ones are what matters (the first NaN step)

# (chart id, title, metrics drawn in it). Order is the order in the report.
METRIC_CHARTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("loss", "Loss (train and eval)", ("loss", "eval_loss")),
    ("lr", "Learning rate", ("lr",)),
    ("lr_multiplier", "LR multiplier", ("lr_multiplier",)),
    ("grad_norm", "Gradient norm", ("grad_norm",)),
    ("throughput", "Throughput", ("throughput",)),
    ("step_time", "Step time (s)", ("step_time", "data_time")),
    ("loss_scale", "Loss scale", ("loss_scale",)),
)
# Metrics whose range can span decades (a spike 1e4x the baseline): drawn on a log axis then.
LOG_FRIENDLY = {"loss", "grad_norm", "loss_scale"}
SOURCE_ORDER = {"tensorboard": 0, "trainer_state": 1, "log": 2}

# Which chart a rule family points at when neither its evidence nor its facts name a metric.
FAMILY_CHART = {"loss": "loss", "lr": "lr", "data": "throughput"}
RULE_CHART = {"loss.spike": "grad_norm", "data.stall": "throughput", "dist.straggler": "step_time"}
# Facts that are horizontal levels on the chart of the finding (name -> label shown).
LEVEL_FACTS = {
    "observed_floor": "observed floor",
    "configured_min": "configured min",
    "configured_min_lr": "configured min",
    "min_lr": "configured min",
    "observed_final_lr": "final LR",
    "configured_lr": "configured LR",
    "configured_peak": "configured peak",
    "peak_lr": "peak LR",
    "ln_vocab": "ln(vocab)",
    "chance_loss": "chance level",
    "baseline": "baseline",
    "running_median": "running median",
}
# Pairs of facts that bound a step window (plateau, stall, divergence).
WINDOW_FACTS = (
    ("window_start", "window_end"),
    ("window_start_step", "window_end_step"),
    ("start_step", "end_step"),
    ("plateau_start", "plateau_end"),
)


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


@dataclass(frozen=True)
class Marker:
    """Something a finding points at: ``vline`` (a step), ``band`` (a window), ``hline`` (a level),
    ``point`` (a step and value, e.g. a checkpoint)."""

    kind: str
    label: str
    rule: str = ""
    css: str = ""  # severity / status class
    step: float | None = None
    step_end: float | None = None
    value: float | None = None
    anchor: str = ""  # id of the finding it belongs to, for the link


@dataclass
class Chart:
    id: str
    title: str
    lines: list[Line]
    markers: list[Marker] = field(default_factory=list)
    log_y: bool = False
    y_format: str = "num"  # "num" | "bytes"
    notes: list[str] = field(default_factory=list)


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
    nonfinite = [(float(steps[i]), _nonfinite_name(values[i])) for i in bad_idx[:MAX_NONFINITE_MARKS]]
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
        kinds = sorted({_nonfinite_name(v) for v in values[a:b][:1000]})
        runs.append((float(steps[a]), float(steps[b - 1]), ", ".join(kinds), int(b - a)))
        if len(runs) >= MAX_NONFINITE_MARKS:
            break
    return runs


def _nonfinite_name(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    return "+inf" if v > 0 else "-inf"


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
        chart = Chart(id=chart_id, title=title, lines=_lines_for(sel, metrics))
        if not chart.lines:
            continue
        finite_vals = np.concatenate([ln.values for ln in chart.lines]) if chart.lines else np.array([])
        if chart_id in LOG_FRIENDLY and len(finite_vals) and finite_vals.min() > 0:
            chart.log_y = bool(finite_vals.max() / finite_vals.min() > 1e3)
        chart.markers = markers_for(chart_id, findings, crash_step=crash_step)
        n_groups = sel.groupby(["source", "path", "tag", "rank"], observed=True, dropna=False).ngroups
        shown = len(chart.lines) + sum(len(ln.also_in) for ln in chart.lines)
        if n_groups > shown:
            chart.notes.append(f"{n_groups - shown} more series not shown (ranks or files beyond the first "
                               f"{MAX_LINES_PER_CHART})")
        charts.append(chart)
    return charts


def _group_sort_key(item: tuple[tuple[Any, ...], pd.DataFrame], metrics: Sequence[str]) -> tuple[Any, ...]:
    (source, path, tag, rank), frame = item
    metric = frame["metric"].iloc[0]
    r = _rank_of(rank)
    return (metrics.index(metric) if metric in metrics else 9, 0 if r is None else 1,
            -1 if r is None else r, SOURCE_ORDER.get(str(source), 9), -len(frame), str(path), str(tag))


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


# ----------------------------------------------------------------------- finding markers


def finding_anchor(index: int) -> str:
    return f"finding-{index + 1}"


def chart_of_finding(f: Finding) -> str | None:
    """The metric chart a finding's markers belong on, or None (crashes, checkpoints)."""
    for key in ("metric", "tag", "series"):
        v = f.facts.get(key)
        if isinstance(v, str):
            m = canonical_metric(v) or (v if v in {c[0] for c in METRIC_CHARTS} else None)
            if m:
                return _chart_id_of_metric(m)
    for ev in f.evidence:
        if ev.tag:
            m = canonical_metric(ev.tag)
            if m:
                return _chart_id_of_metric(m)
    if f.rule in RULE_CHART:
        return RULE_CHART[f.rule]
    return FAMILY_CHART.get(f.rule.split(".", 1)[0])


def _chart_id_of_metric(metric: str) -> str | None:
    for chart_id, _title, metrics in METRIC_CHARTS:
        if metric in metrics:
            return chart_id
    return None


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def finding_markers(f: Finding, index: int) -> list[Marker]:
    """Every step, window and level a finding names, as markers (chart-independent)."""
    sev = f"sev-{f.severity}"
    anchor = finding_anchor(index)
    out: list[Marker] = []
    seen_steps: set[float] = set()

    def vline(step: float, label: str) -> None:
        if step not in seen_steps:
            seen_steps.add(step)
            out.append(Marker("vline", label, f.rule, sev, step=step, anchor=anchor))

    if f.step is not None:
        vline(float(f.step), f"{f.rule} (root cause)" if f.primary else f.rule)
    for key, value in f.facts.items():
        v = _num(value)
        if v is not None and key.endswith("_step") and not key.startswith(("window", "start", "end", "plateau")) \
                and "forecast" not in key:
            vline(v, f"{f.rule}: {key.removesuffix('_step').replace('_', ' ')}")
    for a, b in WINDOW_FACTS:
        s, e = _num(f.facts.get(a)), _num(f.facts.get(b))
        if s is not None and e is not None:
            out.append(Marker("band", f"{f.rule} window", f.rule, sev, step=s, step_end=e, anchor=anchor))
            break
    for ev in f.evidence:
        if ev.tag and ev.step is not None:
            if ev.step_end is not None and ev.step_end != ev.step:
                if not any(m.kind == "band" for m in out):
                    out.append(Marker("band", f"{f.rule} window", f.rule, sev, step=float(ev.step),
                                      step_end=float(ev.step_end), anchor=anchor))
            else:
                vline(float(ev.step), f.rule)
    for key, label in LEVEL_FACTS.items():
        v = _num(f.facts.get(key))
        if v is not None:
            out.append(Marker("hline", f"{label} {fmt_num(v)}", f.rule, f"{sev} level-{key}", value=v, anchor=anchor))
    return out


def markers_for(chart_id: str, findings: Sequence[Finding], *, crash_step: int | None) -> list[Marker]:
    """Markers for one metric chart: its own findings' markers, the primary's step everywhere."""
    out: list[Marker] = []
    for i, f in enumerate(findings):
        target = chart_of_finding(f)
        if target == chart_id:
            out.extend(finding_markers(f, i))
        elif f.primary and f.step is not None:
            out.append(Marker("vline", f"{f.rule} (root cause)", f.rule, f"sev-{f.severity} primary",
                              step=float(f.step), anchor=finding_anchor(i)))
    primary_steps = {m.step for m in out if m.kind == "vline"}
    if crash_step is not None and float(crash_step) not in primary_steps:
        out.append(Marker("vline", "last step", "", "crash", step=float(crash_step)))
    return out


# ----------------------------------------------------------------------- formatting


def fmt_num(v: float | None) -> str:
    """Short human number: 4 significant digits, scientific notation for tiny/huge values."""
    if v is None:
        return "—"
    if isinstance(v, float) and not math.isfinite(v):
        return _nonfinite_name(v)
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e15):
        return f"{int(v):,}"
    a = abs(v)
    if a != 0 and (a < 1e-3 or a >= 1e6):
        return f"{v:.3g}"
    return f"{v:.4g}"


def fmt_bytes(n: float | None) -> str:
    """The one byte wording of every report (decimal units, :func:`autopsy.report.common.fmt_bytes`);
    an em dash when unknown."""
    from autopsy.report.common import fmt_bytes as shared

    return "—" if n is None else shared(n)
