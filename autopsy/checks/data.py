"""data.stall: the input pipeline, not the model, limits the run.

Two signals, either enough: the time a step waits for data is most of the step time
(``data_time`` vs ``step_time``, as mmengine, Lightning profilers and custom loops log
them), or throughput collapses late in the run compared with its early steady state.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from autopsy.checks.series import Series, load_series, rounded
from autopsy.engine.types import CheckContext, NotEvaluated
from autopsy.model import Evidence, Finding


def stall(ctx: CheckContext) -> Iterable[Finding]:
    run = ctx.run
    min_points = int(ctx.param("min_points"))
    skip = int(ctx.param("skip_first_points"))
    data = load_series(run, "data_time")
    step = load_series(run, "step_time")
    thr = load_series(run, "throughput")
    have_pair = data is not None and step is not None and len(data.finite()) >= min_points
    have_thr = thr is not None and len(thr.finite()) >= min_points
    if not have_pair and not have_thr:
        raise NotEvaluated(f"no data_time+step_time or throughput series with {min_points} points")
    out: list[Finding] = []
    if have_pair:
        assert data is not None and step is not None
        f = _data_share(ctx, data.finite(), step.finite(), skip)
        if f is not None:
            out.append(f)
    if have_thr and not out:
        assert thr is not None
        f = _collapse(ctx, thr.finite(), skip, data)
        if f is not None:
            out.append(f)
    return out


def _data_share(ctx: CheckContext, data: Series, step: Series, skip: int) -> Finding | None:
    steps = np.intersect1d(data.steps[skip:], step.steps[skip:])
    if steps.size < int(ctx.param("min_points")):
        return None
    d = data.values[np.searchsorted(data.steps, steps)]
    t = step.values[np.searchsorted(step.steps, steps)]
    ok = t > 0
    if not ok.any():
        return None
    share = float(np.median(d[ok] / t[ok]))
    if share < float(ctx.param("data_share")):
        return None
    facts = {"signal": "data_time", "data_share": rounded(share, 3),
             "median_data_time": rounded(float(np.median(d)), 4),
             "median_step_time": rounded(float(np.median(t)), 4), "steps_compared": int(steps.size),
             "data_tag": data.tag, "step_tag": step.tag}
    ev = [data.evidence(step=int(steps[0]), step_end=int(steps[-1]), excerpt=f"median {np.median(d):.4g} s"),
          step.evidence(step=int(steps[0]), step_end=int(steps[-1]), excerpt=f"median {np.median(t):.4g} s")]
    msg = (f"Steps wait for data {share:.0%} of the time (median {np.median(d):.3g} s of {np.median(t):.3g} s per "
           f"step over {steps.size} steps): the input pipeline, not the GPU, sets the pace.")
    return ctx.finding(msg, key="data.stall:data_time", facts=facts, evidence=ev, step=int(steps[-1]))


def _collapse(ctx: CheckContext, thr: Series, skip: int, data: Series | None) -> Finding | None:
    vals = thr.values[skip:]
    steps = thr.steps[skip:]
    if vals.size < int(ctx.param("min_points")):
        return None
    k = max(3, int(vals.size * float(ctx.param("edge_fraction"))))
    early = float(np.median(vals[:k]))
    late = float(np.median(vals[-k:]))
    if early <= 0:
        return None
    ratio = late / early
    if ratio > float(ctx.param("collapse_ratio")):
        return None
    facts: dict[str, object] = {"signal": "throughput", "early_throughput": rounded(early, 4),
                                "late_throughput": rounded(late, 4), "ratio": rounded(ratio, 3), "tag": thr.tag,
                                "early_steps": [int(steps[0]), int(steps[k - 1])],
                                "late_steps": [int(steps[-k]), int(steps[-1])]}
    ev: list[Evidence] = [thr.evidence(step=int(steps[0]), step_end=int(steps[-1]),
                                       excerpt=f"median {early:.4g} early, {late:.4g} late")]
    cause = ""
    if data is not None and len(data.finite()) >= k:
        df = data.finite()
        d_early, d_late = float(np.median(df.values[:k])), float(np.median(df.values[-k:]))
        facts.update({"early_data_time": rounded(d_early, 4), "late_data_time": rounded(d_late, 4)})
        if d_late > 2 * max(d_early, 1e-9):
            cause = f"; data wait grew from {d_early:.3g} s to {d_late:.3g} s per step"
    msg = (f"Throughput collapsed to {ratio:.0%} of its early level ({thr.tag}: {early:.4g} -> {late:.4g}){cause}: "
           "check data loading (slow or network storage, too few workers, a growing shuffle buffer) first.")
    return ctx.finding(msg, key="data.stall:throughput", facts=facts, evidence=ev, step=int(steps[-1]))
