"""HTML rendering of a :class:`~autopsy.compare.RunDiff`: one self-contained file.

Both runs are drawn on the same charts (the good runs in the palette's calm colours, the bad
run last), the divergence step marked, with the ranked differences as a table above. Charts
reuse the analyze report's SVG machinery (``charts.make_line`` / ``chart_svg.draw``) and its
inline CSS/JS, so the two reports look and behave alike; everything from a run is escaped by
Jinja's autoescape.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autopsy.compare.model import RunDiff
from autopsy.report.chart_markers import Y_TITLES
from autopsy.report.chart_svg import draw
from autopsy.report.charts import Chart, Marker, make_line
from autopsy.report.diff_text import KIND_TITLES, _headline, _verdict, _where

CHART_TITLES = {"loss": "Loss", "eval_loss": "Eval loss", "grad_norm": "Gradient norm", "lr": "Learning rate",
                "throughput": "Throughput"}
LOG_METRICS = {"loss", "eval_loss", "grad_norm", "lr"}


def diff_charts(rd: RunDiff) -> list[Chart]:
    divergence = {r["metric"]: r for r in rd.rows.get("metrics", []) if r.get("diverged")}
    charts = []
    for metric, parts in rd.series.items():
        lines = []
        for i, g in enumerate(parts["good"]):
            ln = make_line(g["label"], np.asarray(g["steps"], float), np.asarray(g["values"], float))
            ln.css = f"c{1 + i % 4}"
            ln.dashed = True
            lines.append(ln)
        b = parts["bad"]
        ln = make_line("bad", np.asarray(b["steps"], float), np.asarray(b["values"], float))
        ln.css = "c0"
        lines.append(ln)
        markers = []
        d = divergence.get(metric)
        if d is not None and d.get("step") is not None:
            markers.append(Marker("vline", f"diverges at step {d['step']}", rule="diff", css="sev-error",
                                  step=float(d["step"])))
        values = np.concatenate([np.asarray(x["values"], float) for x in (*parts["good"], b)])
        finite = values[np.isfinite(values) & (values > 0)]
        log_y = metric in LOG_METRICS and len(finite) > 1 and finite.max() / finite.min() > 100
        charts.append(Chart(metric, CHART_TITLES.get(metric, metric), lines, markers, log_y=log_y,
                            y_title=Y_TITLES.get(metric, metric)))
    return charts


def build_context(rd: RunDiff) -> dict[str, Any]:
    ranked = [d for d in rd.differences if d.score >= 0.3] or list(rd.differences[:1])
    sections = []
    for kind, title in KIND_TITLES.items():
        items = [d for d in rd.differences if d.kind == kind]
        if items:
            sections.append({"title": title, "rows": [{"score": f"{d.score:.2f}", "headline": _headline(d),
                                                        "why": d.why, "where": _where(d)} for d in items[:50]],
                             "more": max(0, len(items) - 50)})
    plots = []
    for chart in diff_charts(rd):
        try:
            plots.append(draw(chart))
        except Exception as exc:  # one chart must never hide the diff
            sections.append({"title": f"Chart {chart.id} could not be drawn",
                             "rows": [{"score": "", "headline": f"{type(exc).__name__}: {exc}", "why": "",
                                        "where": ""}], "more": 0})
    return {
        "goods": list(rd.goods), "bad": rd.bad, "verdict": _verdict(rd), "agree": rd.agree,
        "ranked": [{"score": f"{d.score:.2f}", "kind": d.kind, "headline": _headline(d), "why": d.why,
                    "where": _where(d)} for d in ranked[:10]],
        "sections": sections, "plots": plots,
        "calm": [(r["metric"], r["note"]) for r in rd.rows.get("metrics", []) if not r["diverged"]],
        "notes": list(rd.notes),
    }


def render_html(rd: RunDiff) -> str:
    from autopsy.report.html import _asset, _env

    env = _env()
    ctx = build_context(rd)
    ctx.update({"css": _asset("report.css"), "js": _asset("report.js")})
    return env.get_template("diff.html.j2").render(**ctx)
