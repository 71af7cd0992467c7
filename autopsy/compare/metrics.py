"""Metric divergence: the first step at which the bad run leaves the band the good runs span.

Alignment is by step, tolerant to different logging cadences and lengths: each good run is
interpolated onto the bad run's steps inside the range both cover. Comparison is on lightly
smoothed curves (a centred rolling median of ``SMOOTH_POINTS``), because two healthy runs with
different seeds differ point by point but not in their trend. The band is the good runs'
min..max widened by ``NOISE_SIGMAS`` times the noise the good runs show around their own
trend (a robust MAD), with a relative floor (``REL_FLOOR``) for near-deterministic series
such as the learning rate. Divergence needs ``PERSIST_POINTS`` consecutive points outside
(or one non-finite value where the good runs are finite).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Metrics compared, by the canonical name in Run.scalars' `metric` column, most telling first.
METRICS = ("loss", "eval_loss", "grad_norm", "lr", "throughput")
SMOOTH_POINTS = 5
NOISE_SIGMAS = 4.0
REL_FLOOR = {"lr": 0.02, "throughput": 0.5}  # throughput varies with the machine's load
DEFAULT_REL_FLOOR = 0.10  # two healthy seeds of one script differ by a few percent of the loss
PERSIST_POINTS = 3
MIN_POINTS = 4


@dataclass(frozen=True)
class Divergence:
    metric: str
    diverged: bool
    step: int | None
    bad_value: float | None
    band_low: float | None
    band_high: float | None
    direction: str | None  # "above", "below", "non-finite"
    points_compared: int
    note: str


def _smooth(values: np.ndarray, k: int = SMOOTH_POINTS) -> np.ndarray:
    if len(values) < k:
        return values.copy()
    half = k // 2
    padded = np.concatenate([np.repeat(values[:1], half), values, np.repeat(values[-1:], half)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, k)
    return np.nanmedian(windows, axis=1) if np.isnan(values).any() else np.median(windows, axis=1)


def clean_series(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted by step, one value per step (the last one written), steps as float."""
    order = np.argsort(steps, kind="stable")
    s, v = steps[order].astype(float), values[order].astype(float)
    if len(s) > 1:
        keep = np.append(s[1:] != s[:-1], True)
        s, v = s[keep], v[keep]
    return s, v


def _noise(steps: np.ndarray, values: np.ndarray) -> float:
    finite = np.isfinite(values)
    v = values[finite]
    if len(v) < MIN_POINTS:
        return 0.0
    resid = v - _smooth(v)
    return float(1.4826 * np.median(np.abs(resid - np.median(resid))))


def compare_metric(metric: str, goods: Sequence[tuple[np.ndarray, np.ndarray]],
                   bad: tuple[np.ndarray, np.ndarray]) -> Divergence:
    """Where (if anywhere) the bad series leaves the good runs' band."""
    b_steps, b_vals = clean_series(*bad)
    goods = [clean_series(s, v) for s, v in goods if len(s)]
    goods = [(s, v) for s, v in goods if np.isfinite(v).sum() >= MIN_POINTS]
    if not goods or len(b_steps) < MIN_POINTS:
        return Divergence(metric, False, None, None, None, None, None, 0,
                          f"not compared: fewer than {MIN_POINTS} points on one side")
    lo_step = max(min(float(s[0]) for s, _ in goods), float(b_steps[0]))
    hi_step = min(max(float(s[-1]) for s, _ in goods), float(b_steps[-1]))
    inside = (b_steps >= lo_step) & (b_steps <= hi_step)
    if inside.sum() < MIN_POINTS:
        return Divergence(metric, False, None, None, None, None, None, int(inside.sum()),
                          "not compared: the runs share fewer than "
                          f"{MIN_POINTS} logged steps")
    steps = b_steps[inside]
    bad_raw = b_vals[inside]
    curves = []
    noise = 0.0
    for s, v in goods:
        finite = np.isfinite(v)
        sm = _smooth(v[finite])
        curves.append(np.interp(steps, s[finite], sm))
        noise = max(noise, _noise(s, v))
    stack = np.vstack(curves)
    scale = np.nanmax(np.abs(stack), axis=0)
    floor = REL_FLOOR.get(metric, DEFAULT_REL_FLOOR) * scale
    width = np.maximum(NOISE_SIGMAS * noise, floor)
    low = stack.min(axis=0) - width
    high = stack.max(axis=0) + width
    # Non-finite values where every good run is finite: divergence at once.
    nonfinite = ~np.isfinite(bad_raw)
    if nonfinite.any():
        i = int(np.argmax(nonfinite))
        return Divergence(metric, True, int(steps[i]), float(bad_raw[i]), float(low[i]), float(high[i]),
                          "non-finite", len(steps), "non-finite where the good runs are finite")
    bad_sm = _smooth(bad_raw)
    outside = (bad_sm < low) | (bad_sm > high)
    run = 0
    for i, out in enumerate(outside):
        run = run + 1 if out else 0
        if run >= PERSIST_POINTS:
            j = i - PERSIST_POINTS + 1
            direction = "above" if bad_sm[j] > high[j] else "below"
            return Divergence(metric, True, int(steps[j]), float(bad_raw[j]), float(low[j]), float(high[j]),
                              direction, len(steps),
                              f"{PERSIST_POINTS}+ consecutive smoothed points {direction} the band")
    return Divergence(metric, False, None, None, None, None, None, len(steps),
                      f"within the good runs' band at all {len(steps)} shared steps")
