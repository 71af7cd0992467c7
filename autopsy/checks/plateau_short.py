"""loss.plateau on what a short excerpt shows: a frozen loss, a saturated loss, a loss that never improved.

The long-series test in :mod:`autopsy.checks.loss` needs ``min_points`` training-loss points and
a window to fit a trend on. A person reading a handful of logged points still sees three
things, and each has a test whose evidence does not depend on the series being long:

* **frozen**: a loss-like series (training, evaluation or a component loss) whose last
  ``frozen_min_points`` or more points are the same printed value (equal within
  ``frozen_rel_tolerance``: four float32 units in the last place, as a float32 loss printed in full
  jitters in its last bits from one print to the next), the value carrying at least
  ``frozen_min_digits`` significant digits as printed, the file's loss decimals counting: Keras's ``val_loss:
  0.2000`` beside ``loss: 0.1902`` shows four, or exactly 0). Mini-batch noise changes a trained
  loss in its fourth digit at every step, and an evaluation loss changes whenever the weights
  do: the same value printed again and again means nothing is being trained (LR 0, frozen
  parameters, an optimizer that does not step, a loss computed on nothing). Not counted: a value
  repeated in a progress bar's frames (tqdm's ``it/s`` read at the same steps: the bar re-displays
  the last logged value), and a 0 reached after a descent (a converged loss rounded by the
  printing); a loss that is 0 from its first point computes nothing and is counted, unless it is the training
  loss logged beside a non-zero, changing gradient norm (then it is below the printing's resolution). A running
  best/minimum, a distillation teacher's or reference model's loss (frozen by design) and a
  reinforcement-learning objective (a GRPO policy loss is 0 by construction) are not judged frozen.
* **saturated**: the last point of a loss-like series is ``-ln(FLT_MIN)`` = 87.3365 (or
  ``-ln(DBL_MIN)`` = 708.396): a softmax cross-entropy whose probability of the true class
  underflowed to the floating-point minimum, Caffe's and many hand-written losses' clamp. The
  network's outputs saturated; the run diverged without producing a NaN.
* **chance by accuracy**: the last ``chance_min_points`` or more points of a loss-like series sit within
  ``chance_short_tolerance`` of ln(k), k the integer nearest exp of their median, without improving, while an
  accuracy (or 1 - an error rate) logged beside them in the same file, of the loss's split first, is within
  ``chance_accuracy_tolerance`` of 1/k: the two measurements agree on a uniform guess over k classes when no class
  count is configured (CNTK's ``ce = 2.30255688`` = ln 10 beside ``errTop1 = 0.894``). Tried last: a series the
  tests above report is reported as they say.
* **never improved**: a training loss too short for the trend test, or an evaluation loss
  of any length, with at least ``short_min_points`` points logged from the start of the run,
  whose best later point improves on the first by less than ``short_min_improvement`` of it
  and by less than ``short_noise_z`` robust standard deviations of its own point-to-point
  noise (so the threshold widens with a noisy series and needs no long window), when the values
  are printed finely enough to show such an improvement at all. For a
  fine-tune of a pretrained model (a ``pretrained`` / ``model_name_or_path`` setting) a flat
  start is expected, so only a loss that got worse than its first point is reported. Points read
  from a progress bar's frames count once per distinct value.
"""

from __future__ import annotations

import math
import re

import numpy as np

from autopsy.checks.series import Series, as_bool, config_entry, load_series, rounded
from autopsy.engine.types import CheckContext
from autopsy.metrics import EVAL_LOSS, GRAD_NORM, LOSS, LR, split_of
from autopsy.model import Confidence, Finding

# A running best/minimum repeats while nothing improves: not a measurement of this step. A distillation
# teacher's or a reference model's loss (DPO's ref) is computed by a model that is frozen by design.
_RUNNING_BEST = re.compile(r"(?i)best|(?<![a-z])min(?![a-z])|lowest|(?<![a-z])prev|teacher"
                           r"|(?<![a-z])ref(?:erence)?(?![a-z])")
# Reinforcement-learning objectives are not supervised losses: an on-policy policy-gradient loss is 0 by
# construction when the advantages are normalised per group (GRPO), whatever the model learns.
_RL_OBJECTIVE = re.compile(r"(?i)(?<![a-z])(?:pg|policy|actor|critic|value|vf)(?![a-z])")
PRETRAINED_KEYS = ("pretrained", "pretrained_model_name_or_path", "model_name_or_path", "from_pretrained",
                   "pretrained_model", "base_model")


def short_plateau(ctx: CheckContext, *, train_too_short: bool) -> list[Finding]:
    """The frozen, saturated, never-improved and chance-by-accuracy modes, in that order; the first that holds is
    reported.

    ``train_too_short``: the training loss had fewer points than the trend test needs, so the
    never-improved test judges it too (otherwise only the evaluation loss)."""
    from autopsy.checks.nonfinite import loss_like_series
    from autopsy.checks.plateau_chance import chance_by_accuracy

    run = ctx.run
    loss, evl = load_series(run, LOSS), load_series(run, EVAL_LOSS)
    main = [s.finite() for s in (loss, evl) if s is not None]
    done = {(s.source, s.tag) for s in main}
    series = main + [s.finite() for s in loss_like_series(run, skip=done)]
    series = [s for s in series if len(s) and not _RUNNING_BEST.search(s.tag)]
    places = _printed_places(series)
    for s in series:
        if _RL_OBJECTIVE.search(s.tag):
            continue
        f = _frozen(ctx, s, [o.tag for o in series
                             if o is not s and not _RL_OBJECTIVE.search(o.tag)
                             and _frozen_run(ctx, o, places.get(o.path)) is not None], places.get(s.path))
        if f is not None:
            return [f]
    for s in series:
        f = _saturated(ctx, s)
        if f is not None:
            return [f]
    judged = [s for s in (loss if train_too_short else None, evl) if s is not None]
    for s in judged:
        f = _never_improved(ctx, s.finite())
        if f is not None:
            return [f]
    for s in series:
        f = chance_by_accuracy(ctx, s)
        if f is not None:
            return [f]
    return []


def significant_digits(v: float) -> int:
    """How many significant digits a logged value carries (87.3365 -> 6, 0.02 -> 1, 2.0 -> 1)."""
    if v == 0 or not math.isfinite(v):
        return 0
    for d in range(1, 16):
        if math.isclose(float(f"{v:.{d}g}"), v, rel_tol=1e-12, abs_tol=0.0):
            return d
    return 16


_FIXED_PLACES_MAX = 9


def _printed_places(series: list[Series]) -> dict[str, int]:
    """Per file, the most decimals any loss-like value in it shows: the printing's precision. Keras prints
    every loss of an epoch line with four decimals, so ``val_loss: 0.2000`` beside ``loss: 0.1902`` is a value
    known to 1e-4 (0.2 carries one significant digit, the printing four); a logger that prints 0.02 with two
    decimals shows no more than two anywhere. A value showing more than ``_FIXED_PLACES_MAX`` decimals is a
    float written in full (its shortest repr), not a fixed-width format, and says nothing about how the file's
    other losses are rounded: HF's trainer_state.json keeps eval_loss in full beside a train loss rounded to 4
    decimals, where a repeated ``0.0002`` is a converged loss at the rounding's floor, not a frozen one."""
    out: dict[str, int] = {}
    for s in series:
        v = s.values[np.isfinite(s.values)]
        if not v.size:
            continue
        shown = np.full(v.size, -1)
        for d in range(_FIXED_PLACES_MAX, -1, -1):
            shown[np.isclose(np.round(v, d), v, rtol=1e-12, atol=1e-15)] = d
        fixed = shown[shown >= 0]
        if fixed.size:
            out[s.path] = max(out.get(s.path, 0), int(fixed.max()))
    return out


def _frozen_run(ctx: CheckContext, s: Series, places: int | None = None) -> int | None:
    """Start index of the identical run of points ending the series, when it is long and precise enough.
    ``places``: the decimals the file's loss values are printed with (their printing's precision), which can
    show more digits in a repeated value than its own trailing zeros do."""
    v = s.values
    need = int(ctx.param("frozen_min_points"))
    if v.size < need:
        return None
    tol = float(ctx.param("frozen_rel_tolerance"))
    last = float(v[-1])
    i = v.size - 1
    while i > 0 and abs(float(v[i - 1]) - last) <= tol * max(abs(last), 1e-12):
        i -= 1
    if v.size - i < need:
        return None
    if last == 0.0:
        # A loss printed as 0 after falling to it is a converged loss rounded by the printing (HF rounds to
        # 4 decimals); only a loss that is 0 from its first logged point computes nothing.
        return i if i == 0 and not _term_of_moving_total(ctx, s) and not _gradients_flow(ctx, s) else None
    if i == 0 and s.metric != EVAL_LOSS and split_of(s.tag) in ("", "train") and _term_of_moving_total(ctx, s):
        return None  # a training term constant by design beside the moving total (a fixed-std policy's entropy)
    digits = significant_digits(last)
    if places is not None and abs(last) > 0:
        digits = max(digits, places + math.floor(math.log10(abs(last))) + 1)
    if digits < int(ctx.param("frozen_min_digits")):
        return None  # "0.02" printed five times is the printing's precision, not a frozen model
    if _bar_frames(ctx, s, s.steps[i:]):
        return None  # a progress bar re-displays its last logged value on every frame
    if s.metric == EVAL_LOSS and _carried_in_epoch(ctx, s, s.steps[i:]):
        return None  # the last validation loss, carried on every training-step line of one epoch
    return i


def _term_of_moving_total(ctx: CheckContext, s: Series) -> bool:
    """Is ``s`` a component constant from its first point (the caller checks that) beside the file's total loss,
    which moves at those steps? Then the model trains on the other terms and this one contributes nothing there
    or is constant by construction: switched off by the configuration (PaddleOCR DB's ``loss_cbn: 0.000000`` beside
    ``loss: 1.25 -> 1.15``, PaddleOCR#13937; YOLOX's ``l1_loss: 0.0`` until its last no-augmentation epochs beside
    ``total_loss``, YOLOX#308), without a positive sample yet, or the entropy of a Gaussian policy whose standard
    deviation is not learnt (a PPO ``progress.csv``'s ``entropy_loss`` -1.4189385 = -(1 + ln 2 pi)/2 on every row
    beside a moving ``total_loss``). The total is what is judged. A constant component with no total printed beside
    it (ultralytics' ``box_loss`` with no box target matched) is still reported."""
    if s.metric == LOSS:
        return False
    total = load_series(ctx.run, LOSS)
    if total is None or total.path != s.path or total.tag == s.tag:
        return False
    t = total.values[np.isin(total.steps, s.steps)]
    t = t[np.isfinite(t)]
    return t.size >= min(len(s), int(ctx.param("frozen_min_points"))) and np.unique(t).size >= 2


def _gradients_flow(ctx: CheckContext, s: Series) -> bool:
    """Is the training loss printed as 0 from its first point logged beside a gradient norm that is non-zero and
    changes at those steps (and no logged LR of 0)? Then the optimizer receives gradients of that loss: it is not a
    loss computed on nothing but one below the printing's resolution (TRL's GRPO loss, beta x KL ~ 2e-5 with
    zero-mean advantages, rounded to 0.0 by HF's 4 decimals beside grad_norm 0.087-0.106; trl#3452). A component
    loss is not excused so: the gradient norm is that of the total. A loss and a grad norm both 0 stay frozen."""
    if s.metric != LOSS:
        return False
    gn = load_series(ctx.run, GRAD_NORM)
    if gn is None or gn.path != s.path:
        return False
    g = gn.values[np.isin(gn.steps, s.steps)]
    g = g[np.isfinite(g)]
    if g.size < min(len(s), int(ctx.param("frozen_min_points"))) or not bool(np.all(g > 0)) or np.unique(g).size < 2:
        return False
    lr = load_series(ctx.run, LR)
    if lr is not None and lr.path == s.path:
        at = lr.values[np.isin(lr.steps, s.steps)]
        if at.size and not bool(np.any(at > 0)):
            return False  # an LR of 0: nothing moves whatever the gradients
    return True


# An epoch counter on a training-step line: NeMo's "Training epoch 0, iteration 120/149", "epoch 3 step 40".
_LINE_EPOCH = re.compile(r"(?i)\bepoch\b\W{0,4}(\d+)\b(?!\s*/)")


def _carried_in_epoch(ctx: CheckContext, s: Series, steps: np.ndarray) -> bool:
    """Are these evaluation-loss points printed on training-step lines of one epoch, beside a training loss
    that moves on those same lines? NeMo/Megatron print the last measured ``val_loss`` on every iteration line
    ("Training epoch 0, iteration 121/149 | ... | reduced_train_loss: 1.288 | ... | val_loss: 4.106") until the
    next validation: a value carried, not re-measured. A validation loss printed once per epoch (Keras's
    epoch-end "loss: 0.1872 - val_loss: 0.2000", tflearn's "epoch: 003 | ... | val_loss: 0.50179") changes
    epoch from line to line and is still judged. Only lines the scan kept (the log's head and tail) are read."""
    scan = next((sc for sc in ctx.run.logs if sc.path == s.path), None)
    if scan is None:
        return False
    want = {int(x) for x in steps}
    lines = {p.lineno for p in scan.series if p.tag == s.tag and p.step is not None and p.step in want}
    if len(lines) < len(want):
        return False
    text = dict(scan.tail)
    text.update((n, line) for n, line in enumerate(scan.head, 1) if n not in text)
    epochs = set()
    for n in lines:
        m = _LINE_EPOCH.search(text.get(n, ""))
        if m is None:
            return False
        epochs.add(m.group(1))
    train = {p.value for p in scan.series if p.lineno in lines and p.tag != s.tag and "loss" in p.tag.lower()
             and split_of(p.tag) in ("", "train") and math.isfinite(p.value)}
    return len(epochs) == 1 and len(train) >= 2


_BAR_RATES = frozenset({"it/s", "s/it"})


def _bar_frames(ctx: CheckContext, s: Series, steps: np.ndarray) -> bool:
    """Are these points a progress bar's frames (tqdm's it/s or s/it read from the same file at most of
    the same steps)? A bar's postfix shows the value logged last until the next logging step, so a
    value repeated there is not a measurement repeated."""
    df = ctx.run.scalars
    if df.empty:
        return False
    rates = df[(df["path"] == s.path) & df["tag"].isin(_BAR_RATES)]
    if rates.empty:
        return False
    return int(np.isin(steps, rates["step"].dropna().astype("int64").to_numpy()).sum()) * 2 >= len(steps)


def _frozen(ctx: CheckContext, s: Series, others: list[str], places: int | None = None) -> Finding | None:
    i = _frozen_run(ctx, s, places)
    if i is None:
        return None
    k = len(s) - i
    value = float(s.values[-1])
    a, b = int(s.steps[i]), int(s.steps[-1])
    where = f"logged points {i + 1}..{len(s)}" if s.synthetic_steps else f"steps {a}..{b}"
    also = f"; also frozen: {', '.join(others[:5])}" if others else ""
    msg = (f"{s.tag} is {value:.6g} at every one of its last {k} logged points ({where} of {s.path}){also}: a "
           "loss that does not change in its printed digits is not being trained (an LR of 0, frozen parameters, "
           "an optimizer that does not step, or a loss computed on nothing).")
    facts: dict[str, object] = {"mode": "frozen", "metric": s.metric, "tag": s.tag, "path": s.path,
                                "value": rounded(value), "n_frozen": k, "n_points": len(s),
                                "window_start_step": a, "window_end_step": b}
    if others:
        facts["also_frozen"] = others[:20]
    ev = [s.evidence(step=a, step_end=b, excerpt=f"{s.tag}={value:.6g} at {k} consecutive points")]
    return ctx.finding(msg, key="loss.plateau:frozen", facts=facts, evidence=ev, step=a,
                       confidence=Confidence.MEDIUM if k < 2 * int(ctx.param("frozen_min_points")) else None)


def _saturated(ctx: CheckContext, s: Series) -> Finding | None:
    last = float(s.values[-1])
    for level in ctx.param("saturated_losses"):
        if abs(last - float(level)) <= 1e-5 * float(level):
            first = int(np.argmax(np.abs(s.values - float(level)) <= 1e-5 * float(level)))
            before = f", after {float(s.values[first - 1]):.6g} at step {int(s.steps[first - 1])}" if first else ""
            msg = (f"{s.tag} is {last:.6g} from step {int(s.steps[first])} to the end{before}: the value "
                   f"-ln(float minimum) of a cross-entropy whose probability of the true class underflowed and was "
                   "clamped; the network's outputs saturated (the run diverged without a NaN). Lower the learning "
                   "rate, check the input scaling and the weight initialisation.")
            facts: dict[str, object] = {"mode": "saturated", "metric": s.metric, "tag": s.tag, "path": s.path,
                                        "value": rounded(last), "saturation_level": float(level),
                                        "first_saturated_step": int(s.steps[first]), "n_points": len(s)}
            ev = [s.evidence(step=int(s.steps[first]), step_end=int(s.steps[-1]), excerpt=f"{s.tag}={last:.6g}")]
            return ctx.finding(msg, key="loss.plateau:saturated", facts=facts, evidence=ev, step=int(s.steps[first]))
    return None


def pretrained_entry(ctx: CheckContext) -> str | None:
    """The setting that says the run fine-tunes a pretrained model (``pretrained: true``,
    ``model_name_or_path: gpt2``), cited, or None."""
    for key in PRETRAINED_KEYS:
        e = config_entry(ctx.run, (key,))
        if e is None:
            continue
        b = as_bool(e.value)
        if b is False or e.value in (None, "", "None", "null"):
            continue
        return f"{e.raw_key}: {e.text} ({e.path}{':' + str(e.line) if e.line is not None else ''})"
    return None


def _in_warmup(ctx: CheckContext, s: Series) -> bool:
    """Does the logged LR rise at every one of its points over the loss's steps (at least three)? Then the
    excerpt lies inside the LR warmup (YOLOX's first 50 iterations at lr 7.7e-07 -> 1.9e-05): a loss is not
    expected to have improved on its first point yet, and "never improved" is not judged."""
    lr = load_series(ctx.run, "lr")
    if lr is None:
        return False
    lf = lr.finite()
    v = lf.values[(lf.steps >= s.steps[0]) & (lf.steps <= s.steps[-1])]
    return v.size >= 3 and bool(np.all(np.diff(v) > 0))


def _learned_before_first_eval(ctx: CheckContext, first_eval: float) -> bool:
    """Was the first evaluation already far below the training loss's first logged value (less than
    ``learned_eval_fraction`` of it)? Then the model learned before it was first evaluated (an epoch-end
    validation after a whole epoch of training: ``Training Loss: 0.173 Validation Loss: 0.072``), and an
    evaluation loss that stays at that level is a converged one, not a model that never learned: a model that
    learns nothing scores its evaluation set about as badly as its training batches."""
    train = load_series(ctx.run, LOSS)
    if train is None or not len(train.finite()):
        return False
    first_train = float(train.finite().values[0])
    return first_train > 0 and first_eval < float(ctx.param("learned_eval_fraction")) * first_train


def _never_improved(ctx: CheckContext, s: Series) -> Finding | None:
    from autopsy.checks.loss import mid_run_start

    if _bar_frames(ctx, s, s.steps):  # a bar's frames repeat the last logged value: keep each value once
        keep = np.ones(len(s), dtype=bool)
        keep[1:] = s.values[1:] != s.values[:-1]
        s = Series(s.metric, s.source, s.path, s.tag, s.rank, s.steps[keep], s.values[keep], s.wall_times[keep],
                   s.synthetic_steps)
    v = s.values
    if v.size < int(ctx.param("short_min_points")) or mid_run_start(ctx.run, s) is not None:
        return None
    first, best_later = float(v[0]), float(np.min(v[1:]))
    level = max(abs(float(np.median(v))), 1e-12)
    digits = max(significant_digits(float(x)) for x in v)
    if 10.0 ** (math.floor(math.log10(level)) - max(digits, 1) + 1) / level > float(ctx.param("short_min_improvement")):
        return None  # printed too coarsely ("5.0" ten times) to show an improvement of that size
    if float(np.median(v[1:])) > float(ctx.param("short_diverged_factor")) * abs(first):
        return None  # a loss that rose far above its start diverged: loss.spike and loss.nonfinite say so
    improvement = (first - best_later) / max(abs(first), 1e-12)
    # Noise on the scale the improvement is measured on (the first point), or the series' level if that
    # is larger: a loss that fell 100x has a tiny median, and its steps down are a trend, not noise.
    scale = max(abs(first), level)
    noise = 1.049 * float(np.median(np.abs(np.diff(v)))) / scale  # sigma of white noise from |differences|
    threshold = max(float(ctx.param("short_min_improvement")), float(ctx.param("short_noise_z")) * noise)
    pretrained = pretrained_entry(ctx)
    if pretrained is not None:
        threshold = -threshold  # a fine-tune starts near its best: only a loss that got worse counts
    if improvement >= threshold:
        return None
    if improvement >= 0 and s.metric == EVAL_LOSS and _learned_before_first_eval(ctx, first):
        return None
    if s.metric == LOSS and _in_warmup(ctx, s):
        return None
    split = "evaluation" if s.metric == EVAL_LOSS else "training"
    trend = (f"its best later point {best_later:.4g} is {100 * improvement:.2f}% below the first"
             if improvement >= 0 else f"every later point is worse (best {best_later:.4g})")
    msg = (f"The {split} loss never improved: {s.tag} was {first:.4g} at its first point (step {int(s.steps[0])}) "
           f"and {trend}, over {len(s)} points to step {int(s.steps[-1])} (point-to-point noise "
           f"{100 * noise:.2f}% of the level).")
    facts: dict[str, object] = {"mode": "never_improved", "metric": s.metric, "tag": s.tag, "path": s.path,
                                "n_points": len(s), "first_loss": rounded(first, 5), "best_later_loss":
                                rounded(best_later, 5), "relative_improvement": rounded(improvement, 4),
                                "relative_noise": rounded(noise, 4), "threshold": rounded(abs(threshold), 4),
                                "window_start_step": int(s.steps[0]), "window_end_step": int(s.steps[-1])}
    if pretrained is not None:
        facts["pretrained"] = pretrained
    ev = [s.evidence(step=int(s.steps[0]), step_end=int(s.steps[-1]),
                     excerpt=f"{s.tag}: first {first:.4g}, best later {best_later:.4g}, last {float(v[-1]):.4g}")]
    return ctx.finding(msg, key="loss.plateau:never_improved", facts=facts, evidence=ev, step=int(s.steps[0]),
                       confidence=Confidence.MEDIUM)
