"""Progress as the watcher sees it: the step over (watch) time, the rate, and the stall and
empty-log warnings that follow from it.

Steps come from the logs' scanners; times from the watcher's clock at the poll that first
saw a step (logs often carry no timestamps, and a live watcher needs none). The median
seconds per step is taken over the last observations, so the stall threshold follows the
run's own pace: ``max(watch_stall_factor x median step time, watch_min_stall_seconds)`` (or
``watch_stall_factor x watch_min_stall_seconds`` while the pace is not known).
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections import deque
from dataclasses import dataclass, field

from autopsy.model import Evidence
from autopsy.units import fmt_duration

__all__ = ["Progress", "fmt_duration", "last_line_evidence", "norm_path"]

HISTORY = 64


def norm_path(path: str) -> str:
    """The path with digits masked, as the post-mortem's log.empty key has it."""
    return re.sub(r"\d+", "N", path)


@dataclass
class Progress:
    """Step observations (watch time, step) and what follows from them."""

    history: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=HISTORY))
    last_change: float | None = None  # watch time at which the step last advanced
    max_steps: int | None = None

    def observe(self, now: float, step: int | None) -> bool:
        """Record the step seen at this poll; True when it advanced."""
        if step is None:
            return False
        if self.history and step <= self.history[-1][1]:
            return False
        self.history.append((now, step))
        self.last_change = now
        return True

    @property
    def step(self) -> int | None:
        return self.history[-1][1] if self.history else None

    def rate(self) -> float | None:
        """Steps per second over the recorded history (None before two observations)."""
        if len(self.history) < 2:
            return None
        (t0, s0), (t1, s1) = self.history[0], self.history[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 and s1 > s0 else None

    def median_step_seconds(self) -> float | None:
        pairs = list(self.history)
        per = [(b[0] - a[0]) / (b[1] - a[1]) for a, b in itertools.pairwise(pairs) if b[1] > a[1]]
        return statistics.median(per) if len(per) >= 2 else None

    def stall(self, now: float, factor: float, min_seconds: float) -> tuple[float, float] | None:
        """(seconds without a new step, the threshold passed) when stalled, else None.

        The threshold is ``max(factor x median seconds per step, min_seconds)``; while the pace
        is not known yet (the watch began after the last step it saw) it is ``factor x min_seconds``.
        """
        if self.last_change is None:
            return None
        med = self.median_step_seconds()
        threshold = max(factor * med, min_seconds) if med is not None else factor * min_seconds
        idle = now - self.last_change
        return (idle, threshold) if idle >= threshold else None


def last_line_evidence(path: str, last: tuple[int, str] | None, detail: str) -> Evidence:
    if last is None:
        return Evidence(path=path, detail=detail)
    return Evidence(path=path, line=last[0], excerpt=last[1], detail=detail)
