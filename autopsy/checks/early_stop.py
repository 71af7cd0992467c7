"""Early stopping told by the metrics: a run whose best validation value is ``patience`` evaluations
before its last one stopped because its early-stopping callback said so, not from outside.

ultralytics (``patience: 20`` in ``args.yaml``), Keras' ``EarlyStopping(patience=...)`` and HF's
``early_stopping_patience`` stop a run once the monitored validation value has not improved for
``patience`` epochs; the run's epoch count is then short of its planned one by design. The best value
is read from a higher-is-better validation metric (mAP, accuracy) when the run logs one (ultralytics
monitors its fitness, mostly ``metrics/mAP50-95(B)``), else from the validation loss. Each table row
is one evaluation (one epoch in these per-epoch tables), so distances are counted in points.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import regex

if TYPE_CHECKING:
    from autopsy.run import Run

_WORDS = regex.compile(r"[^a-z0-9]+")


def early_stopped(run: Run) -> dict[str, object] | None:
    """What shows the run ended by early stopping (patience, the monitored tag, its best and last
    points), or None."""
    entry = run.config_value("patience")
    if entry is None or not isinstance(entry.value, (int, float)) or isinstance(entry.value, bool):
        return None
    patience = float(entry.value)
    if not math.isfinite(patience) or patience < 1:
        return None
    df = run.scalars
    files = df[(df["source"] != "log") & df["value"].notna()]
    if not len(files):
        return None
    tags = [str(t) for t in files["tag"].unique()]
    higher = [t for t in tags if _higher_is_better(t)]
    lower = [t for t in tags if _validation_loss(t)]
    picked = (sorted(higher, key=lambda t: ("50-95" not in t, t))[:1], True) if higher else (sorted(lower)[:1], False)
    if not picked[0]:
        return None
    tag, maximise = picked[0][0], picked[1]
    vals = files[files["tag"] == tag].sort_values("step")["value"].to_numpy(dtype="float64")
    vals = vals[np.isfinite(vals)]
    if len(vals) <= patience:
        return None
    best = int(np.argmax(vals)) if maximise else int(np.argmin(vals))
    since = len(vals) - 1 - best
    if since < patience:
        return None
    return {"early_stopping_patience": int(patience), "patience_source": f"{entry.raw_key} ({entry.path})",
            "monitored": tag, "best_point": best + 1, "points": len(vals), "points_since_best": since}


def _higher_is_better(tag: str) -> bool:
    words = [w for w in _WORDS.split(tag.lower()) if w]
    return any(w.startswith("map") or w in ("acc", "accuracy", "top1") for w in words) and "train" not in words


def _validation_loss(tag: str) -> bool:
    words = [w for w in _WORDS.split(tag.lower()) if w]
    return any(w in ("val", "valid", "validation", "eval") for w in words) and any("loss" in w for w in words)
