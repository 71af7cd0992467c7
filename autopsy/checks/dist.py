"""Distributed-run rules from per-rank series: stragglers (step time) and divergence (loss).

Per-rank series come from rank-prefixed log lines (``[rank3]: step 100 | dt 0.41``) or
per-rank files (torchrun ``attempt_0/3/stdout.log``, ``rank3.log``). Only the steps every
compared rank logged are used, and the first points (compilation, warm-up) are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from autopsy.checks.series import Series, per_rank_series, rounded
from autopsy.engine.types import CheckContext, NotEvaluated
from autopsy.model import Finding


def _common(series: dict[int, Series], skip: int) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """Steps logged by every rank (after the first ``skip`` of each) and each rank's values there."""
    trimmed = {r: s.finite() for r, s in series.items()}
    trimmed = {r: s for r, s in trimmed.items() if len(s) > skip}
    if len(trimmed) < 2:
        return np.array([], dtype=np.int64), {}
    steps = None
    for s in trimmed.values():
        st = s.steps[skip:]
        steps = st if steps is None else np.intersect1d(steps, st)
    assert steps is not None
    vals = {r: s.values[np.searchsorted(s.steps, steps)] for r, s in trimmed.items()}
    return steps, vals


# ----------------------------------------------------------------------------- dist.straggler


def straggler(ctx: CheckContext) -> Iterable[Finding]:
    """One rank's step time (or throughput) much worse than the median rank's."""
    run = ctx.run
    min_points = int(ctx.param("min_points"))
    skip = int(ctx.param("skip_first_points"))
    for metric in ("step_time", "throughput"):
        series = per_rank_series(run, metric, min_points=min_points)
        if len(series) >= 2:
            break
    else:
        raise NotEvaluated("no per-rank step_time or throughput series (needs at least 2 ranks)")
    slower_is_higher = metric == "step_time"  # s/step: higher is slower; throughput: lower is slower
    steps, vals = _common(series, skip)
    if steps.size < min_points:
        raise NotEvaluated(f"ranks share only {steps.size} logged steps (need {min_points})")
    medians = {r: float(np.median(v)) for r, v in vals.items()}
    table = {str(r): rounded(m, 4) for r, m in sorted(medians.items())}
    worst = max(medians, key=lambda r: medians[r] if slower_is_higher else -medians[r])
    others = [m for r, m in medians.items() if r != worst]
    ref = float(np.median(others))
    if ref <= 0 or medians[worst] <= 0:
        return []
    ratio = medians[worst] / ref if slower_is_higher else ref / medians[worst]
    if ratio < float(ctx.param("slow_ratio")):
        return []
    # A straggler is slow at most steps, not in one long pause (a save, an eval on rank 0).
    if slower_is_higher:
        slow_share = float(np.mean(vals[worst] > np.median(np.vstack([vals[r] for r in vals if r != worst]), axis=0)))
    else:
        slow_share = float(np.mean(vals[worst] < np.median(np.vstack([vals[r] for r in vals if r != worst]), axis=0)))
    if slow_share < float(ctx.param("min_slow_share")):
        return []
    s = series[worst]
    unit = "s/step" if metric == "step_time" else "throughput"
    facts = {"metric": metric, "slow_rank": worst, "ratio": rounded(ratio, 3), "rank_medians": table,
             "others_median": rounded(ref, 4), "steps_compared": int(steps.size), "slow_share": rounded(slow_share, 3),
             "n_ranks": len(medians)}
    ev = [series[r].evidence(step=int(steps[0]), step_end=int(steps[-1]), excerpt=f"median {medians[r]:.4g} {unit}")
          for r in sorted(medians)][:8]
    msg = (f"Rank {worst} is a straggler: its median {metric} is {medians[worst]:.4g} vs {ref:.4g} on the other "
           f"{len(others)} ranks ({ratio:.2f}x slower over {steps.size} shared steps, {s.where}); every collective "
           "waits for it.")
    return [ctx.finding(msg, key=f"dist.straggler:{metric}", facts=facts, evidence=ev, step=int(steps[-1]))]


# ----------------------------------------------------------------------------- dist.divergence


def divergence(ctx: CheckContext) -> Iterable[Finding]:
    """Per-rank losses that drift apart: one rank's loss systematically off the others' late in the run."""
    run = ctx.run
    min_points = int(ctx.param("min_points"))
    series = per_rank_series(run, "loss", min_points=min_points)
    if len(series) < 2:
        raise NotEvaluated("no per-rank loss series (needs at least 2 ranks)")
    steps, vals = _common(series, 0)
    if steps.size < min_points:
        raise NotEvaluated(f"ranks share only {steps.size} logged loss steps (need {min_points})")
    ranks = sorted(vals)
    mat = np.vstack([vals[r] for r in ranks])  # ranks x steps
    center = np.median(mat, axis=0)
    dev = mat - center
    k = max(3, int(steps.size * float(ctx.param("edge_fraction"))))
    early = np.median(dev[:, :k], axis=1)
    late = np.median(dev[:, -k:], axis=1)
    level = float(np.median(np.abs(center[-k:])))
    # Ranks see different micro-batches, so their losses differ step by step; what matters is
    # a bias that persists over the late window and was not there early on.
    noise = float(np.median(np.abs(dev[:, :k]))) if k else 0.0
    i = int(np.argmax(np.abs(late)))
    bias = float(late[i])
    threshold = max(float(ctx.param("relative_bias")) * max(level, 1e-12), float(ctx.param("noise_factor")) * noise)
    if abs(bias) < threshold or abs(bias) < 2 * abs(float(early[i])):
        return []
    rank = ranks[i]
    facts = {"divergent_rank": rank, "late_bias": rounded(bias, 4), "early_bias": rounded(float(early[i]), 4),
             "median_loss_late": rounded(level, 4), "relative_bias": rounded(abs(bias) / max(level, 1e-12), 4),
             "rank_late_medians": {str(r): rounded(float(np.median(vals[r][-k:])), 4) for r in ranks},
             "steps_compared": int(steps.size), "n_ranks": len(ranks)}
    ev = [series[r].evidence(step=int(steps[-k]), step_end=int(steps[-1]),
                             excerpt=f"late median {float(np.median(vals[r][-k:])):.4g}") for r in ranks][:8]
    direction = "above" if bias > 0 else "below"
    msg = (f"Rank {rank}'s loss drifted {abs(bias):.4g} {direction} the other ranks' median over the last {k} shared "
           f"steps (it was {float(early[i]):+.4g} early on): the ranks no longer train the same model "
           "(unsynchronised seeds or weights, a desynced sampler, a rank skipping all-reduce).")
    return [ctx.finding(msg, key="dist.divergence", facts=facts, evidence=ev, step=int(steps[-1]))]
