"""loss.plateau's chance-by-accuracy mode: a loss at ln(k) while the accuracy beside it is 1/k.

With no class count or vocabulary size configured, the long-series chance test has no ln(V) to compare with. Two
measurements logged side by side still tell it: a loss within ``chance_short_tolerance`` of ln(k) that does not
improve, and an accuracy (or 1 - an error rate) within ``chance_accuracy_tolerance`` of 1/k, for the same k. Either
alone says little: every loss sits near ln(k) for some k, and an accuracy of 0.1 may be a hard task.
"""

from __future__ import annotations

import math
import re

import numpy as np

from autopsy.checks.series import Series, rounded
from autopsy.engine.types import CheckContext
from autopsy.metrics import split_of
from autopsy.model import Confidence, Finding

# ln of a class count beyond a million: no classifier's chance level
_MAX_LN_CLASSES = 14.0
# An accuracy, or an error rate (1 - accuracy), logged beside a loss: "acc", "accuracy", "top1", "Prec@1"; CNTK's
# "err", "errTop1", "error_rate" and its "Evaluation criterion" (classification error on its classification examples).
_ACCURACY_TAG = re.compile(r"(?i)acc(?:uracy)?(?![a-z])|top-?1(?![0-9])|prec@1")
_ERROR_TAG = re.compile(r"(?i)(?<![a-z])err(?:or)?(?:_?rate)?(?:_?top-?1)?(?![a-z])|(?<![a-z])criterion(?![a-z])")


def chance_by_accuracy(ctx: CheckContext, s: Series) -> Finding | None:
    """A loss sitting at ln(k) while the accuracy logged beside it sits at 1/k: a uniform guess over k classes,
    told by two measurements that agree, with no class count configured (CNTK#638: ``ce = 2.30255688`` = ln 10
    beside ``errTop1 = 0.894``; CNTK#1143: ``CrossEntropy loss = 2.30`` beside an evaluation criterion of 0.875-0.92).
    The loss must not improve over the points that sit there."""
    v = s.values
    need = int(ctx.param("chance_min_points"))
    if v.size < need:
        return None
    level = float(np.median(v[-need:]))
    if not 0 < level < _MAX_LN_CLASSES:
        return None
    k = round(math.exp(level))
    if k < 2:
        return None
    ln_k = math.log(k)
    tol = float(ctx.param("chance_short_tolerance"))
    i = v.size
    while i > 0 and abs(float(v[i - 1]) - ln_k) <= tol * ln_k:
        i -= 1
    run = v[i:]
    if run.size < need:
        return None
    first, best = float(run[0]), float(np.min(run))
    if (first - float(np.min(run[1:]))) / first >= float(ctx.param("short_min_improvement")):
        return None  # still falling: a run passing through ln(k) on its way down
    a, b = int(s.steps[i]), int(s.steps[-1])
    got = _accuracy_beside(ctx, s, a, b)
    if got is None:
        return None
    tag, acc = got
    if abs(acc * k - 1) > float(ctx.param("chance_accuracy_tolerance")):
        return None
    where = f"logged points {i + 1}..{len(s)}" if s.synthetic_steps else f"steps {a}..{b}"
    msg = (f"{s.tag} sits at ln({k}) = {ln_k:.4g} at its last {run.size} points ({where} of {s.path}; first "
           f"{first:.4g}, best {best:.4g}) while {tag} puts the accuracy at {acc:.3g}, about 1/{k}: the model "
           f"predicts no better than a uniform guess over {k} classes (the class count inferred from the loss and "
           "the accuracy agreeing; none is configured).")
    facts: dict[str, object] = {"mode": "chance", "metric": s.metric, "tag": s.tag, "path": s.path,
                                "inferred_classes": k, "ln_classes": rounded(ln_k, 5),
                                "final_loss": rounded(float(v[-1]), 5), "accuracy_tag": tag,
                                "accuracy": rounded(acc, 4), "n_points": int(run.size),
                                "window_start_step": a, "window_end_step": b}
    excerpt = f"{s.tag}: {first:.5g} .. {float(v[-1]):.5g}; {tag} ~ {acc:.3g}"
    ev = [s.evidence(step=a, step_end=b, excerpt=excerpt)]
    return ctx.finding(msg, key="loss.plateau:chance", facts=facts, evidence=ev, step=a, confidence=Confidence.MEDIUM)


def _accuracy_beside(ctx: CheckContext, s: Series, a: int, b: int) -> tuple[str, float] | None:
    """(tag, median accuracy) of an accuracy or error-rate series in the loss's file over its steps ``a..b``
    (an error read as 1 - error, a percentage as a fraction), with at least two points there."""
    df = ctx.run.scalars
    if df.empty:
        return None
    rows = df[(df["path"] == s.path) & (df["step"] >= a) & (df["step"] <= b)]
    split = split_of(s.tag)  # the accuracy of the loss's own split first (val_acc beside val_loss)
    for tag in sorted({str(t) for t in rows["tag"].unique()}, key=lambda t: (split_of(t) != split, t)):
        error = bool(_ERROR_TAG.search(tag))
        if tag == s.tag or not (error or _ACCURACY_TAG.search(tag)):
            continue
        vals = rows.loc[rows["tag"] == tag, "value"].to_numpy(dtype=float)
        vals = vals[np.isfinite(vals)]
        if vals.size < 2 or float(vals.min()) < 0:
            continue
        if float(vals.max()) > 1:
            if float(vals.max()) > 100:
                continue
            vals = vals / 100.0
        med = float(np.median(vals))
        return tag, (1.0 - med if error else med)
    return None
