"""loss.spike on what a short excerpt or a brief jump shows (the running-median test is in :mod:`loss`).

* :func:`short_spike`: a short excerpt (``short_min_points`` up to ``min_points``), each point against the
  median of every point before it.
* :func:`brief_loss_spike`: in a long series, an isolated loss jump that training recovered from is
  reported (low confidence) when the loss itself reached ``brief_loss_ratio`` times its running median
  for a point or two: the brief jump a reader of the log sees, which moves no rolling median.
* :func:`beyond_log_noise`: the running-median test's noise floor in log space, for a positive loss that
  scatters by a factor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autopsy.checks.series import Series, rounded
from autopsy.engine.types import CheckContext, NotEvaluated
from autopsy.model import Confidence, Finding, Severity


def _num(v: Any) -> str:
    from autopsy.checks.loss import _num as num

    return num(v)


def brief_loss_spike(ctx: CheckContext, lf: Series) -> list[Finding]:
    """A loss point (or two) at ``brief_loss_ratio`` times its running median and ``loss_robust_z`` robust
    deviations above it, and above every value the loss had before it, in a long series, that the loss came back
    from: reported with low confidence, the largest one. A smaller recovered bump stays unreported (mini-batch
    noise)."""
    ratio = float(ctx.param("brief_loss_ratio"))
    # above every value the loss had before it (by 10%): a converged loss wobbling by a large factor near 0
    # (0.0014 -> 0.042) stays under its early values, and a run restarted in the same log goes back to its
    # first value (1.8695 at epoch 1, 1.8720 at the restart's epoch 1): neither is the jump a reader sees
    events = [e for e in _loss()._events(lf, ratio, ctx, robust_z=float(ctx.param("loss_robust_z")))
              if int(np.sum((lf.steps >= e["step"]) & (lf.steps <= e["step_end"]))) <= 2
              and float(e["value"]) > 1.1 * float(np.max(lf.values[lf.steps < e["step"]]))]
    window = float(ctx.param("recovery_window_steps"))
    back = []
    for ev in events:
        _loss()._annotate_loss(ev, lf, ctx)
        after = lf.values[(lf.steps > ev["step_end"]) & (lf.steps <= ev["step_end"] + window)]
        # back down: the points logged after the jump sit nearer the level before it than the jump (as for a
        # short excerpt), or the recovery test above says so
        if ev.get("recovered") is True or (after.size and ev.get("recovered") is not False
                                           and float(np.median(after)) < float(ev["baseline"]) * ratio / 2):
            ev["recovered"] = True
            ev.setdefault("loss_after", rounded(float(np.median(after)), 4))
            back.append(ev)
    if not back:
        return []
    events = back
    worst = max(events, key=lambda e: float(e["ratio"]))
    msg = (f"{lf.metric} jumped to {_num(worst['value'])} at step {worst['step']}, {_num(worst['ratio'])}x its "
           f"running median {_num(worst['baseline'])}, and came back (to {_num(worst['loss_after'])}): a brief "
           "loss spike. Training recovered this time; a jump this size is a bad batch or an update far too large.")
    facts: dict[str, object] = {"metric": lf.metric, "tag": lf.tag, "path": lf.path, "n_spikes": len(events),
                                "n_unrecovered": 0, "step": worst["step"], "value": worst["value"],
                                "baseline": worst["baseline"], "ratio": worst["ratio"], "ratio_to_median": ratio,
                                "brief": True, "spikes": events[:10]}
    for k in ("loss_before", "loss_after", "loss_jump", "recovered"):
        if k in worst:
            facts[k] = worst[k]
    evidence = [lf.evidence(step=int(e["step"]), excerpt=f"{lf.tag}={_num(e['value'])} vs median "
                            f"{_num(e['baseline'])}") for e in events[:5]]
    return [ctx.finding(msg, key=f"loss.spike:{lf.metric}:brief", facts=facts, evidence=evidence,
                        severity=Severity.WARNING,
                        confidence=Confidence.LOW, step=int(worst["step"]))]


def short_spike(ctx: CheckContext, gnorm: Series | None, loss: Series | None, min_points: int) -> list[Finding]:
    """A short excerpt (``short_min_points`` up to ``min_points``): no running median can be trusted,
    so each point is compared with the median of every point before it (at least three) and
    must be ``ratio`` times it and ``short_robust_z`` robust deviations above it (the deviation
    floored at ``short_noise_floor`` of the level, so three equal points do not make any wiggle
    infinite). A jump that size among a handful of logged points is what the person who posted
    them saw; it is reported with low confidence even when the points after it come back down."""
    short_min = int(ctx.param("short_min_points"))
    cands = [(s.finite(), float(ctx.param(r))) for s, r in ((gnorm, "ratio_to_median"), (loss, "short_loss_ratio"))
             if s is not None]
    cands = [(s, r) for s, r in cands if len(s) >= short_min]
    if not cands:
        raise NotEvaluated(f"no grad_norm or loss series with at least {short_min} finite points "
                           f"({min_points} for the running-median test)")
    z, floor = float(ctx.param("short_robust_z")), float(ctx.param("short_noise_floor"))
    for s, ratio in cands:
        v = s.values
        hot = np.zeros(len(v), dtype=bool)
        base = np.full(len(v), np.nan)
        for i in range(3, len(v)):
            b = float(np.median(v[:i]))
            spread = max(1.4826 * float(np.median(np.abs(v[:i] - b))), floor * abs(b))
            base[i] = b
            hot[i] = b > 0 and v[i] >= ratio * b and v[i] - b >= z * spread
        if not hot.any():
            continue
        i = int(np.argmax(hot))
        j = i
        while j + 1 < len(v) and hot[j + 1]:
            j += 1
        peak = i + int(np.argmax(v[i:j + 1]))
        b = float(base[i])
        after = v[j + 1:]
        back = bool(after.size and float(np.median(after[-max(1, after.size // 2):])) < b * ratio / 2) \
            if after.size else None
        tail = ("and came back down" if back else "and stayed up" if back is False
                else "at the end of what was logged")
        msg = (f"{s.metric} jumped to {_num(float(v[peak]))} at step {int(s.steps[peak])}, "
               f"{_num(float(v[peak]) / b)}x the median {_num(b)} of the {i} points before the jump began "
               f"(step {int(s.steps[i])}), {tail} (a short series: {len(v)} logged points).")
        facts: dict[str, object] = {"metric": s.metric, "tag": s.tag, "path": s.path, "n_points": len(v),
                                    "step": int(s.steps[peak]), "value": rounded(float(v[peak]), 4),
                                    "baseline": rounded(b, 4), "ratio": rounded(float(v[peak]) / b, 3),
                                    "recovered": back, "short_series": True}
        ev = [s.evidence(step=int(s.steps[k]), excerpt=f"{s.tag}={_num(float(v[k]))} vs median {_num(float(base[k]))}")
              for k in range(i, j + 1)][:5]
        return [ctx.finding(msg, key=f"loss.spike:{s.metric}:short", facts=facts, evidence=ev,
                            severity=Severity.WARNING, confidence=Confidence.LOW, step=int(s.steps[peak]))]
    return []




def _loss() -> Any:
    from autopsy.checks import loss

    return loss


def beyond_log_noise(values: np.ndarray, base: np.ndarray, window: int, min_base: int, z: float) -> np.ndarray:
    """Points whose ratio to the running median stands out from the ratios the series itself shows.

    A per-step loss of small batches scatters by a factor, not by an amount (0.0004 next to 0.35 once the
    model is good: a batch's loss is then set by the few hard examples it happens to hold), so deviations are measured
    in log space, where such noise has a stable spread: the log ratio must exceed ``z`` times the running
    median of the earlier log ratios, over ``window`` points (at least ``noise_window_points``: a median
    of 10 absolute log ratios swings by 2x from one window to the next). A loss steady at 2.3 +- 0.05 that
    jumps to 8 is 1.25 in log against a spread of ~0.02 and fires; a jump by 54x in a series whose points
    routinely differ by 10x does not.
    """
    import pandas as pd

    with np.errstate(invalid="ignore", divide="ignore"):
        log_ratio = np.log(values) - np.log(base)
    spread = pd.Series(np.abs(log_ratio)).rolling(window, min_periods=min_base).median().shift(1).to_numpy()
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(log_ratio, nan=-np.inf) >= z * np.maximum(np.nan_to_num(spread, nan=0.0), 1e-12)
