"""Which chart shows what: the metric charts, their axis titles, and the markers findings put on them.

A finding points at a chart through the metric its facts or evidence name (``metric:
grad_norm``, an evidence tag ``train/loss``), else through its rule family; on that chart
it marks every step, window and level it names (first NaN step, a spike, a plateau window,
an LR floor against the configured minimum). The primary finding's step is marked on every
chart, so the root cause lines up with whatever the reader is looking at.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autopsy.metrics import canonical_metric
from autopsy.model import Finding
from autopsy.report.chart_format import fmt_num

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
# Y-axis titles with their unit where the quantity has one (loss, LR and norms are plain
# numbers: no unit is claimed for them). Throughput's unit comes from the tags (see y_title).
Y_TITLES = {
    "loss": "loss",
    "eval_loss": "eval loss",
    "lr": "learning rate",
    "lr_multiplier": "LR multiplier (× base LR)",
    "grad_norm": "gradient norm",
    "throughput": "throughput (per second)",
    "step_time": "time per step (s)",
    "loss_scale": "loss scale",
}
X_TITLE = "training step"
_THROUGHPUT_UNITS = (("tok", "tokens/s"), ("sample", "samples/s"), ("it/s", "iterations/s"))

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


def y_title(chart_id: str, tags: Sequence[str]) -> str:
    """The y-axis title of a metric chart; throughput says tokens/s or samples/s when its tags do."""
    if chart_id == "throughput":
        units = {unit for tag in tags for key, unit in _THROUGHPUT_UNITS if key in tag.lower()}
        if len(units) == 1:
            return f"throughput ({units.pop()})"
    return Y_TITLES.get(chart_id, chart_id.replace("_", " "))


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


def primary_chart_of(f: Finding, available: Sequence[str]) -> str | None:
    """The chart to show right under the verdict for the primary finding ``f``: the chart its
    markers are on, the checkpoint timeline for disk and checkpoint failures, the per-rank chart
    for rank failures, else the loss chart (it carries the root cause's step)."""
    family = f.rule.split(".", 1)[0]
    wanted = [chart_of_finding(f)]
    if family in ("disk", "checkpoint"):
        wanted.insert(0, "checkpoints")
    if family == "dist":
        wanted.append("ranks")
    wanted += ["loss", *available]
    return next((c for c in wanted if c is not None and c in available), None)


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
