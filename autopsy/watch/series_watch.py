"""Early warnings from the series points each poll brings: non-finite values, spikes, a
plateau at chance, an LR off its configured value.

Each detector keeps a small bounded state per (log, metric) and looks only at the new
points, so its cost per poll is proportional to what arrived. Findings use the ids and
fingerprint keys of the post-mortem rules (``loss.nonfinite:<metric>``, ``loss.spike:<metric>``,
``loss.plateau:chance``, ``lr.mismatch:watch``) so that the full evaluation of the same rule later
updates the early warning instead of repeating it, and thresholds come from the cards' params.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autopsy.engine.types import Card
from autopsy.metrics import GRAD_NORM, LOSS, LR, canonical_metric, split_of
from autopsy.model import Evidence, Finding, Severity
from autopsy.watch.live_log import NewPoint

WINDOW = 64  # points kept per series for the running median
REFRESH = 16  # the median and MAD baselines are recomputed every this many points (not per point)


def relevant_tag(tag: str) -> bool:
    """A training loss, grad norm or LR series (what the detectors read)."""
    return canonical_metric(tag) in (LOSS, GRAD_NORM, LR) and split_of(tag) in ("", "train")


@dataclass
class _Track:
    metric: str
    tag: str
    path: str
    recent: deque[tuple[int | None, float]] = field(default_factory=lambda: deque(maxlen=WINDOW))
    n: int = 0
    nonfinite_done: bool = False
    spikes: int = 0
    median: float | None = None  # of ``recent`` when last refreshed
    mad: float = 0.0
    stale: int = REFRESH  # points since the last refresh
    lr_max: float = 0.0  # the highest LR seen past warmup
    lr_done: bool = False


def _ev(tr: _Track, p: NewPoint) -> Evidence:
    return Evidence(path=tr.path, line=p.lineno, tag=tr.tag, step=p.step)


def _fmt(v: float) -> str:
    return f"{v:.4g}"


@dataclass
class SeriesWatch:
    """Detectors over the points of every followed log (one instance per watcher)."""

    cards: Mapping[str, Card]
    config: Mapping[str, float] = field(default_factory=dict)  # canonical key -> value (vocab_size, learning_rate...)
    tracks: dict[tuple[str, str], _Track] = field(default_factory=dict)
    _params: dict[str, float] = field(default_factory=dict)

    def _param(self, rule: str, name: str, default: float) -> float:
        key = f"{rule}/{name}"
        got = self._params.get(key)
        if got is None:
            card = self.cards.get(rule)
            got = default
            if card is not None and name in card.params:
                try:
                    got = float(card.params[name])
                except (TypeError, ValueError):
                    got = default
            self._params[key] = got
        return got

    def _finding(self, rule: str, message: str, key: str, facts: dict[str, Any], evidence: list[Evidence],
                 step: int | None, severity: Severity | None = None, wall: float | None = None) -> Finding | None:
        card = self.cards.get(rule)
        if card is None:  # the rule is not selected
            return None
        return Finding(rule=rule, severity=severity or card.severity, confidence=card.confidence, title=card.title,
                       message=message, facts={**facts, "watch": True}, evidence=tuple(evidence), key=key,
                       step=step, wall_time=wall)

    def feed(self, path: str, points: list[NewPoint]) -> list[Finding]:
        out: list[Finding] = []
        for p in points:
            if not relevant_tag(p.tag):
                continue
            metric = canonical_metric(p.tag)
            assert metric is not None
            tr = self.tracks.get((path, metric))
            if tr is None:
                tr = self.tracks[(path, metric)] = _Track(metric, p.tag, path)
            f = self._point(tr, p)
            if f is not None:
                out.append(f)
        return out

    def _point(self, tr: _Track, p: NewPoint) -> Finding | None:
        tr.n += 1
        v = p.value
        if not math.isfinite(v):
            if tr.metric == LR or tr.nonfinite_done:
                return None
            tr.nonfinite_done = True
            before = [(s, x) for s, x in tr.recent][-5:]
            excerpt = ", ".join(f"step {s}: {_fmt(x)}" for s, x in before) if before else None
            where = f"step {p.step}" if p.step is not None else f"line {p.lineno}"
            msg = (f"{tr.metric} became {v} at {where} ({tr.tag} in {tr.path}:{p.lineno})"
                   + (f", after {_fmt(before[0][1])} .. {_fmt(before[-1][1])}" if before else "")
                   + ": the run is training on non-finite values from here on.")
            facts = {"metric": tr.metric, "tag": tr.tag, "path": tr.path, "first_step": p.step, "first_value": str(v),
                     "line": p.lineno, "values_before": [[s, x] for s, x in before]}
            return self._finding("loss.nonfinite", msg, f"loss.nonfinite:{tr.metric}", facts,
                                 [Evidence(path=tr.path, line=p.lineno, tag=tr.tag, step=p.step, excerpt=excerpt)],
                                 p.step, wall=p.wall_time)
        out = None
        if tr.metric == LR:
            out = None if tr.lr_done else self._lr(tr, p)
        else:
            out = self._spike(tr, p)
            if tr.metric == LOSS and out is None:
                out = self._plateau(tr, p)
        tr.recent.append((p.step, v))
        tr.stale += 1
        return out

    def _baseline(self, tr: _Track) -> float | None:
        """The running median (and MAD) of the window, refreshed every REFRESH points."""
        if tr.stale >= REFRESH and tr.recent:
            vals = [x for _, x in tr.recent]
            tr.median = statistics.median(vals)
            tr.mad = statistics.median(abs(x - tr.median) for x in vals)
            tr.stale = 0
        return tr.median

    def _spike(self, tr: _Track, p: NewPoint) -> Finding | None:
        if len(tr.recent) < self._param("loss.spike", "min_window_points", 10):
            return None
        med = self._baseline(tr)
        if med is None or med <= 0:
            return None
        ratio = p.value / med
        limit = self._param("loss.spike", "ratio_to_median" if tr.metric == GRAD_NORM else "loss_ratio_to_median",
                            10.0 if tr.metric == GRAD_NORM else 1.5)
        if tr.metric == LOSS and (p.value - med) / (tr.mad or 1e-12) < self._param("loss.spike", "loss_robust_z", 8.0):
            return None
        if ratio < limit:
            return None
        tr.spikes += 1
        msg = (f"{tr.metric} jumped to {_fmt(p.value)} at step {p.step}, {ratio:.1f}x its running median "
               f"{_fmt(med)} ({tr.tag} in {tr.path}:{p.lineno}).")
        facts = {"metric": tr.metric, "step": p.step, "value": p.value, "median_before": med, "ratio": round(ratio, 2),
                 "spikes_so_far": tr.spikes}
        return self._finding("loss.spike", msg, f"loss.spike:{tr.metric}", facts, [_ev(tr, p)], p.step,
                             severity=Severity.WARNING, wall=p.wall_time)

    def _plateau(self, tr: _Track, p: NewPoint) -> Finding | None:
        vocab = self.config.get("vocab_size")
        warmup = self.config.get("warmup_steps") or 0
        min_pts = int(self._param("loss.plateau", "min_points", 20))
        if not vocab or vocab < 2 or tr.n < min_pts or (p.step is not None and p.step <= warmup):
            return None
        if len(tr.recent) < WINDOW // 2 or tr.n % REFRESH:
            return None  # judged every REFRESH points: a plateau is a matter of hundreds
        chance = math.log(vocab)
        tol = self._param("loss.plateau", "chance_relative_tolerance", 0.1)
        vals = [x for _, x in tr.recent]
        half = len(vals) // 2
        first, last = statistics.median(vals[:half]), statistics.median(vals[half:])
        improve = (first - last) / abs(first) if first else 0.0
        if last < chance * (1 - tol) or improve >= self._param("loss.plateau", "chance_max_relative_improvement", 0.05):
            return None
        msg = (f"loss sits at {_fmt(last)} after step {p.step}, the chance level ln({int(vocab)}) = {chance:.3f}, "
               f"and improved {improve:.1%} over the last {len(vals)} points: the model is not learning.")
        facts = {"loss": last, "chance": round(chance, 4), "vocab_size": int(vocab),
                 "relative_improvement": round(improve, 4),
                 "step": p.step}
        return self._finding("loss.plateau", msg, "loss.plateau:chance", facts, [_ev(tr, p)], p.step,
                             wall=p.wall_time)

    def _lr(self, tr: _Track, p: NewPoint) -> Finding | None:
        lr = self.config.get("learning_rate")
        warmup = self.config.get("warmup_steps") or 0
        if not lr or lr <= 0 or p.step is None or p.step <= warmup or p.value <= 0:
            return None
        tr.lr_max = peak = max(tr.lr_max, p.value)
        ratio = peak / lr
        thr = self._param("lr.mismatch", "ratio_threshold", 10.0)
        if 1 / thr <= ratio <= thr:
            return None
        msg = (f"the logged LR is {_fmt(peak)} at step {p.step}, past warmup ({int(warmup)} steps), while the config "
               f"says learning_rate {_fmt(lr)} ({ratio:.3g}x): the schedule is not the one configured.")
        facts = {"observed_max_lr": peak, "configured_lr": lr, "ratio": ratio, "warmup_steps": warmup, "step": p.step}
        tr.lr_done = True  # said once per series: its evidence is the first point past warmup that shows it
        return self._finding("lr.mismatch", msg, "lr.mismatch:watch", facts, [_ev(tr, p)], p.step, wall=p.wall_time)
