"""Where to resume from, and with which command.

Weights saved after the loss first went non-finite carry the NaN/Inf (or the blow-up
that produced it): resuming from them repeats the failure, so after a ``loss.nonfinite``
primary the restart point is the newest valid checkpoint saved *before* that step (a checkpoint
with no step: saved before the first file that recorded a non-finite loss was last written).
The resume command itself is built in :mod:`autopsy.resume_plan`.
"""

from __future__ import annotations

from typing import Any

from autopsy.model import Finding

_NONFINITE_RULE = "loss.nonfinite"


def first_nonfinite_step(primary: Finding | None) -> int | None:
    """The first non-finite loss step of a ``loss.nonfinite`` primary, else None."""
    if primary is None or primary.rule != _NONFINITE_RULE:
        return None
    for value in (primary.facts.get("first_step"), primary.facts.get("step"), primary.step):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def clean_checkpoint(run: Any, primary: Finding | None) -> tuple[Any, tuple[str, ...]]:
    """(checkpoint to resume from, paths of valid checkpoints saved at/after the first non-finite step).

    Without a non-finite primary this is simply the run's latest valid checkpoint. A
    checkpoint with no known step cannot be dated against the NaN and stays a candidate
    (ranked below any stepped one).
    """
    latest = run.latest_valid_checkpoint
    first = first_nonfinite_step(primary)
    if first is None or latest is None:
        return latest, ()
    valid = [c for c in run.checkpoint_list if c.valid]
    bound = _nonfinite_written_by(run)
    after = {c.path for c in valid if (c.step is not None and c.step >= first)
             or (c.step is None and bound is not None and c.mtime > bound)}
    poisoned = tuple(c.path for c in valid if c.path in after)
    clean = [c for c in valid if c.path not in after]
    best = max(clean, key=lambda c: (c.step if c.step is not None else -1, c.mtime)) if clean else None
    return best, poisoned


def _nonfinite_written_by(run: Any) -> float | None:
    """A time by which the loss had certainly gone non-finite, from file mtimes: the earliest mtime
    of a file holding a non-finite loss (a file is last written after every row it holds). A
    checkpoint with no step but a later mtime was saved after the NaN (Keras' best.weights.h5
    written after CSVLogger's NaN row). None when the mtimes are not the run's own (a copy)."""
    import numpy as np

    if not run.clock.mtimes_trusted:
        return None
    df = run.scalars
    if df.empty:
        return None
    bad = df[df["metric"].isin(("loss", "eval_loss")) & ~np.isfinite(df["value"].to_numpy(dtype="float64"))]
    if bad.empty:
        return None
    paths = set(bad["path"].astype(str))
    times = [a.mtime for a in run.artifact_list if a.path in paths and np.isfinite(a.mtime)]
    return min(times) if times else None
