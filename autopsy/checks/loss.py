"""Training-dynamics rules on the loss and gradient-norm series: nonfinite, spike, plateau.

All three read one series per metric (see :func:`autopsy.checks.series.load_series`) and
use medians rather than means so one bad batch, an eval pause or fp16 loss-scale skips
do not decide the outcome.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import regex

from autopsy.checks.plateau_rose import rose
from autopsy.checks.series import (
    Series,
    as_float,
    cite,
    config_evidence,
    config_float,
    head_tail_medians,
    load_series,
    points_for_steps,
    rolling_median_before,
    rounded,
    theil_sen_slope,
)
from autopsy.checks.spike_short import beyond_log_noise, brief_loss_spike, short_spike
from autopsy.engine.types import CheckContext, NotEvaluated
from autopsy.model import Confidence, Evidence, Finding, Severity

if TYPE_CHECKING:
    from autopsy.parsers.types import ConfigEntry
    from autopsy.run import Run

VOCAB_KEYS = ("vocab_size", "n_vocab", "padded_vocab_size", "num_tokens")
CLASS_KEYS = ("num_labels", "num_classes", "n_classes")


# ----------------------------------------------------------------------------- loss.spike


def spike(ctx: CheckContext) -> Iterable[Finding]:
    """Grad norm many times its running median (or a loss jump), and whether training recovered."""
    run = ctx.run
    gnorm = load_series(run, "grad_norm")
    loss = load_series(run, "loss")
    min_points = int(ctx.param("min_points"))
    if (gnorm is None or len(gnorm.finite()) < min_points) and (loss is None or len(loss.finite()) < min_points):
        return short_spike(ctx, gnorm, loss, min_points)
    events: list[dict[str, Any]] = []
    used: Series | None = None
    if gnorm is not None and len(gnorm.finite()) >= min_points:
        used = gnorm.finite()
        events = _events(used, float(ctx.param("ratio_to_median")), ctx, robust_z=None)
    lf = loss.finite() if loss is not None else None
    if not events and lf is not None and len(lf) >= min_points:
        used = lf
        events = _events(lf, float(ctx.param("loss_ratio_to_median")), ctx,
                         robust_z=float(ctx.param("loss_robust_z")))
    if not events or used is None:
        return []
    for ev in events:
        _annotate_loss(ev, lf, ctx)
    unrecovered = [e for e in events if e.get("recovered") is False]
    if not unrecovered and len(events) < int(ctx.param("repeated_spikes_min")):
        # An isolated spike that training shrugged off is not a finding, unless the loss itself jumped to
        # several times its running median for a point or two: the brief jump a reader of the log sees.
        return brief_loss_spike(ctx, lf) if lf is not None and len(lf) >= min_points else []
    worst = max(events, key=lambda e: float(e["ratio"]))
    facts: dict[str, object] = {
        "metric": used.metric, "tag": used.tag, "path": used.path, "n_spikes": len(events),
        "n_unrecovered": len(unrecovered), "step": worst["step"], "value": worst["value"],
        "baseline": worst["baseline"], "ratio": worst["ratio"],
        "ratio_to_median": float(ctx.param("ratio_to_median")) if used.metric == "grad_norm"
        else float(ctx.param("loss_ratio_to_median")),
        "spikes": events[:10],
    }
    for k in ("loss_before", "loss_after", "loss_jump", "recovered"):
        if k in worst:
            facts[k] = worst[k]
    first_bad = unrecovered[0] if unrecovered else None
    if first_bad is not None:
        msg = (f"{used.metric} spiked to {worst['value']} at step {worst['step']} "
               f"({worst['ratio']}x its running median {worst['baseline']}) and the loss did not come back "
               f"(from {first_bad.get('loss_before')} to {first_bad.get('loss_after')} "
               f"after step {first_bad['step']}).")
        severity = Severity.WARNING
    else:
        msg = (f"{len(events)} {used.metric} spikes (worst {worst['ratio']}x its running median at step "
               f"{worst['step']}); training recovered each time, but repeated spikes precede divergence.")
        severity = Severity.WARNING
    evidence = [used.evidence(step=int(e["step"]), excerpt=f"{used.tag}={_num(e['value'])} vs median "
                              f"{_num(e['baseline'])}")
                for e in events[:5]]
    return [ctx.finding(msg, key=f"loss.spike:{used.metric}", facts=facts, evidence=evidence, severity=severity,
                        step=int(worst["step"]))]


def _events(s: Series, ratio: float, ctx: CheckContext, robust_z: float | None) -> list[dict[str, Any]]:
    window = points_for_steps(s.steps, float(ctx.param("window_steps")), int(ctx.param("min_window_points")))
    min_base = int(ctx.param("min_window_points"))
    base = rolling_median_before(s.values, window, min_base)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = s.values / base
        hot = (base > 0) & (r >= ratio)
    if robust_z is not None:
        # A loss is noisy around a falling trend: require the jump to stand out from the
        # window's own spread too, not only be a ratio above its median.
        import pandas as pd

        dev = pd.Series(np.abs(s.values - np.nan_to_num(base)))
        spread = dev.rolling(window, min_periods=min_base).median().shift(1).to_numpy()
        with np.errstate(invalid="ignore"):
            hot &= (s.values - base) >= robust_z * np.maximum(spread, 1e-12)
        if bool(np.all(s.values > 0)):
            noise_window = max(window, int(ctx.param("noise_window_points")))
            hot &= beyond_log_noise(s.values, base, noise_window, min_base, float(ctx.param("loss_log_robust_z")))
    hot &= np.isfinite(base)
    events: list[dict[str, Any]] = []
    i = 0
    n = len(s)
    while i < n:
        if not hot[i]:
            i += 1
            continue
        j = i
        while j + 1 < n and hot[j + 1]:
            j += 1
        peak = i + int(np.argmax(s.values[i:j + 1]))
        events.append({"step": int(s.steps[peak]), "step_end": int(s.steps[j]),
                       "value": rounded(float(s.values[peak]), 4), "baseline": rounded(float(base[i]), 4),
                       "ratio": rounded(float(s.values[peak] / base[i]), 3)})
        i = j + 1
    return events


def _annotate_loss(ev: dict[str, Any], loss: Series | None, ctx: CheckContext) -> None:
    """Loss just before the spike, the worst loss after it, and whether it came back."""
    if loss is None or len(loss) < 4:
        return
    step, step_end = int(ev["step"]), int(ev["step_end"])
    window = float(ctx.param("recovery_window_steps"))
    before = loss.values[(loss.steps < step) & (loss.steps >= step - window)]
    after = loss.values[(loss.steps > step_end) & (loss.steps <= step_end + window)]
    at = loss.values[(loss.steps >= step) & (loss.steps <= step_end + max(1, window // 10))]
    if before.size < 2:
        return
    lb = float(np.median(before))
    ev["loss_before"] = rounded(lb, 4)
    if at.size:
        ev["loss_jump"] = rounded(float(np.max(at)) - lb, 4)
    if after.size < 2:
        ev["recovered"] = None  # the run ended (or the log stops) right after the spike
        return
    tail = after[-max(2, after.size // 3):]
    la = float(np.median(tail))
    ev["loss_after"] = rounded(la, 4)
    tol = float(ctx.param("recovery_tolerance"))
    # A per-batch loss scatters around its level: "back" is within the tolerance or within one robust
    # standard deviation (1.4826 x MAD) of the points before the spike, whichever is wider.
    noise = 1.4826 * float(np.median(np.abs(before - lb))) if before.size >= 5 else 0.0
    ev["recovered"] = bool(la <= lb + max(tol * max(abs(lb), 1e-12), noise))


# ----------------------------------------------------------------------------- loss.plateau


def plateau(ctx: CheckContext) -> Iterable[Finding]:
    """A loss that stopped improving without having learned much, or that sits at chance level; on
    any length of series, a frozen or saturated loss and one that never improved from its first
    point (:mod:`autopsy.checks.plateau_short`)."""
    from autopsy.checks.plateau_short import short_plateau

    train = load_series(ctx.run, "loss")
    if train is not None and takes_both_signs(train, float(ctx.param("edge_fraction"))):
        f = train.finite().values
        raise NotEvaluated(f"the training loss '{train.tag}' takes both signs ({float(f.min()):.4g} .. "
                           f"{float(f.max()):.4g}): a signed objective (an RL policy loss with its entropy "
                           "bonus, a log-likelihood) has no floor at 0, so a drop relative to its size says nothing")
    too_short = train is None or len(train.finite()) < int(ctx.param("min_points"))
    try:
        found = _long_plateau(ctx)
    except NotEvaluated as e:
        short = short_plateau(ctx, train_too_short=too_short)
        if short:
            return short
        raise NotEvaluated(f"{e}; no loss-like series is frozen or saturated, and none logged from the run's "
                           "start never improved") from None
    return found or short_plateau(ctx, train_too_short=too_short)


def takes_both_signs(s: Series, edge_fraction: float) -> bool:
    """A loss whose start and end sit on opposite sides of zero: an objective that crosses zero (SB3 PPO's
    ``train/loss`` = policy-gradient loss + value loss - entropy bonus: median -0.0077 at the start, 0.0039
    at the end), whose "improvement" relative to its own size is meaningless. A loss that only scatters
    across zero around a level of one sign (trans4mom's flat ``Train Loss``) is still judged; ``-0.0`` is
    not negative."""
    f = s.finite().values
    if not len(f) or not float(f.min()) < 0 < float(f.max()):
        return False
    head, tail = head_tail_medians(f, edge_fraction)
    return head * tail <= 0


def _long_plateau(ctx: CheckContext) -> list[Finding]:
    """The trend test on one long loss series (``min_points``+): stuck or at chance."""
    from autopsy.checks.plateau_short import pretrained_entry

    run = ctx.run
    s = load_series(run, "loss") or load_series(run, "eval_loss")
    if s is None:
        raise NotEvaluated("no loss series found")
    s = s.finite()
    min_points = int(ctx.param("min_points"))
    if len(s) < min_points:
        raise NotEvaluated(f"loss series has {len(s)} finite points (need {min_points})")
    frac = float(ctx.param("window_fraction"))
    span = float(s.steps[-1] - s.steps[0])
    start = s.steps[-1] - frac * span
    win = s.since(start)
    if len(win) < int(ctx.param("min_window_points")):
        win = Series(s.metric, s.source, s.path, s.tag, s.rank, s.steps[-int(ctx.param("min_window_points")):],
                     s.values[-int(ctx.param("min_window_points")):],
                     s.wall_times[-int(ctx.param("min_window_points")):], s.synthetic_steps)
    x = win.steps.astype("float64")
    slope = theil_sen_slope(x, win.values)
    window_span = float(x[-1] - x[0]) or 1.0
    level = float(np.median(win.values))
    initial, final = head_tail_medians(s.values, float(ctx.param("edge_fraction")))
    _, final_win = head_tail_medians(win.values, 0.25)
    rel_improvement = -slope * window_span / max(abs(level), 1e-12)
    drop_fraction = (initial - final) / max(abs(initial), 1e-12)
    facts: dict[str, object] = {
        "metric": s.metric, "tag": s.tag, "path": s.path,
        "window_start_step": int(win.steps[0]), "window_end_step": int(win.steps[-1]), "window_points": len(win),
        "slope_per_step": rounded(slope, 4), "relative_improvement_in_window": rounded(rel_improvement, 4),
        "initial_loss": rounded(initial, 5), "final_loss": rounded(final, 5),
        "drop_fraction": rounded(drop_fraction, 4),
    }
    ev: list[Evidence] = [s.evidence(step=int(s.steps[0]), step_end=int(s.steps[-1]),
                                     excerpt=f"median {initial:.4g} at the start, {final:.4g} at the end")]
    vocab, entry, kind = _vocab(run, final)
    chance = None
    if vocab is not None and vocab >= 2 and entry is not None:
        chance = math.log(vocab)
        facts.update({"vocab_size": int(vocab), "ln_vocab": rounded(chance, 5), "vocab_source": cite(entry),
                      "vocab_kind": kind})
        ev.append(config_evidence(entry))
    flat = rel_improvement < float(ctx.param("min_relative_improvement"))
    near_chance = chance is not None and final_win >= chance * (1 - float(ctx.param("chance_relative_tolerance")))
    if near_chance and rel_improvement < float(ctx.param("chance_max_relative_improvement")):
        facts["mode"] = "chance"
        # Stuck from the first logged step (it never learned) reads differently from a run that
        # learned and then fell back: say which, and point at the step it began.
        never = drop_fraction < float(ctx.param("min_drop_fraction"))
        facts["never_improved"] = bool(never)
        first = int(s.steps[0]) if never else int(win.steps[0])
        when = (f"for the whole run (steps {s.steps[0]}..{s.steps[-1]}: {initial:.4g} at the start, {final:.4g} "
                "at the end)" if never else f"over steps {win.steps[0]}..{win.steps[-1]} ({final:.4g})")
        msg = (f"The loss sits at chance level {when}, against ln({int(vocab or 0)}) = {chance:.4g} ({kind} from "
               f"{cite(entry)}): the model predicts no better than uniform guessing (\"fake learning\": labels "
               "not reaching the loss, a frozen model, an optimizer not updating the trained parameters, LR ~ 0).")
        return [ctx.finding(msg, key="loss.plateau:chance", facts=facts, evidence=ev, step=first)]
    if not flat:
        return []
    learned = drop_fraction >= float(ctx.param("min_drop_fraction"))
    # Past the unigram level (about 0.7 ln V for text) a loss below this share of ln(V) learned more than
    # the token frequencies: a converged run, even when its first logged point was already that low.
    below_chance = chance is not None and final < chance * float(ctx.param("converged_chance_fraction"))
    if learned or (below_chance and drop_fraction > 0):
        return []  # a converged run: it learned first, then flattened
    if initial > 0 and final > float(ctx.param("diverged_factor")) * initial:
        # Not stuck: it rose. Said as such, except for a reinforcement-learning loss (plateau_rose).
        return rose(ctx, run, s, initial, final, (int(win.steps[0]), int(win.steps[-1])), facts, ev)
    if abs(final_win) <= float(ctx.param("fitted_loss_level")) and float(np.ptp(s.values)) > 0:
        # At zero (at the printing's resolution: "Loss: 0.0000" with the odd 0.0300) there is nothing left to
        # improve: the model fits its (few-shot, small) training set. A loss exactly 0 at every point is left
        # to the frozen checks: a loss that cannot move at all is a bug, not a fit.
        return []
    mid = mid_run_start(run, s)
    if mid is not None:
        # "never learned much" compares the end with the start of training; an excerpt that begins
        # late in the run (the last 32 KB of a log) has no start to compare with.
        raise NotEvaluated(f"the loss series starts mid-run ({mid}): its first points are not the run's initial "
                           "loss, so a flat end says nothing about whether the run learned")
    pretrained = pretrained_entry(ctx) if chance is None else None
    if pretrained is not None:
        # A fine-tune starts near its converged loss: "barely moved since the start" is expected there.
        raise NotEvaluated(f"the run fine-tunes a pretrained model ({pretrained}) and no vocabulary or class "
                           "count gives a chance level: a loss that barely moves from a low start is expected")
    facts["mode"] = "stuck"
    chance_txt = f" (ln(V) = {chance:.4g})" if chance is not None else ""
    msg = (f"The loss stopped improving: {final:.4g} at the end vs {initial:.4g} at the start "
           f"({100 * drop_fraction:.1f}% lower), and over steps {win.steps[0]}..{win.steps[-1]} the robust trend "
           f"changes it by {100 * rel_improvement:.2f}%{chance_txt}.")
    return [ctx.finding(msg, key="loss.plateau:stuck", facts=facts, evidence=ev, step=int(win.steps[0]),
                        confidence=Confidence.MEDIUM if chance is None else None)]


# "Epoch 198/200", "Epoch: [198/200]", "===Epoch:[117/120]===", "Epoch 10/10", "epoch [3/50]"
_EPOCH_OF = regex.compile(r"(?i)\bepoch\b\W{0,4}(\d+)\s*/\s*(\d+)")
# An epoch counter with no total, on the line that logs the loss: "epoch 7 loss 2.1", ESPnet's
# "5epoch:train:3376-3750batch: ... loss=1.733".
_EPOCH_BARE = regex.compile(r"(?i)\bepoch\b\W{0,4}(\d+)(?![\d.]*\s*/)|\b(\d+)\s*epoch\b")


# A run's own progress in percent, logged beside its metrics (fastText's JSON lines "progress":93.4).
_PROGRESS_TAG = regex.compile(r"(?i)^(?:train[/_.])?(?:progress|percent(?:age)?|pct)$")


def _progress_at_start(run: Run, s: Series) -> float | None:
    """The progress percentage its file logs at ``s``'s first point, when it reads as a percentage (some value
    above 1: a series never above 1 is a fraction or the first percent, no evidence either way); else None."""
    df = run.scalars
    if df.empty:
        return None
    tags = [t for t in df["tag"].unique() if _PROGRESS_TAG.match(str(t))]
    if not tags:
        return None
    rows = df[df["tag"].isin(tags) & (df["path"] == s.path)]
    if rows.empty:
        return None
    steps = rows["step"].to_numpy(dtype="float64")
    vals = rows["value"].to_numpy(dtype="float64")
    ok = np.isfinite(steps) & np.isfinite(vals)
    steps, vals = steps[ok], vals[ok]
    if not vals.size or float(vals.max()) <= 1.0 or float(vals.max()) > 100.0:
        return None
    at = vals[steps == float(s.steps[0])]
    return float(at[0]) if at.size else None


def mid_run_start(run: Run, s: Series) -> str | None:
    """Why ``s`` begins late in its run (the quote or file starts mid-training), or None.

    Told by the series' own steps (its first logged step is past a tenth of its last), by an
    ``epoch`` series that starts past epoch 1, by a progress percentage logged with it that is past
    10% at its first point (fastText's ``"progress":93.4``), or by the first lines of the series' log naming
    an epoch past the second of several ("Epoch: [198/200]"), or by the first line that logs the
    series naming epoch 2 or later with no total (ESPnet's "5epoch:train:3376-3750batch").
    """
    first, last = int(s.steps[0]), int(s.steps[-1])
    if not s.synthetic_steps and first > 10 and first > 0.1 * last:
        return f"its first logged step is {first} of {last}"
    pct = _progress_at_start(run, s)
    if pct is not None and pct > 10.0:
        return f"its log's progress is {pct:g}% at its first point"
    ep = load_series(run, "epoch")
    if ep is not None and ep.path == s.path and len(ep):
        # The epoch when the series begins: an evaluation loss is first computed at the end of epoch 1,
        # so only an epoch past that says the series starts mid-run; a training loss starts within epoch 0.
        at = float(ep.values[min(int(np.searchsorted(ep.steps, s.steps[0])), len(ep) - 1)])
        if at > 1.0 or (at >= 1.0 and s.metric != "eval_loss"):
            return f"its log's epoch is {at:g} at its first point"
    for scan in run.logs:
        if scan.path != s.path:
            continue
        for line in scan.head:  # the first epoch counter of the log says where it starts
            m = _EPOCH_OF.search(line)
            if m is not None:
                if 2 <= int(m.group(1)) <= int(m.group(2)) and int(m.group(2)) > 2:
                    return f"the first lines of {scan.path} are in epoch {m.group(1)}/{m.group(2)}"
                break
            # Without a total, only the line that logs this series is trusted to count epochs (a
            # config dump's "epoch: 20" is a setting); epoch 2 and later are past the start whether
            # the counter is 0- or 1-based.
            bare = _EPOCH_BARE.search(line) if s.tag.lower() in line.lower() else None
            if bare is not None:
                epoch = int(bare.group(1) or bare.group(2))
                if epoch >= 2:
                    return f"the first line of {scan.path} that logs {s.tag} is in epoch {epoch}"
                break
    return None


def _model_side(run: Run, keys: Sequence[str]) -> tuple[float | None, ConfigEntry | None]:
    """The size the model really has: its config.json, else the tokenizer files.

    A training config's ``vocab_size`` is often a request (the size asked of a tokenizer
    trainer, which may stop short), so the model/tokenizer files win for ln(V).
    """
    for source in ("hf_config", "tokenizer"):
        found = [e for e in run.config_entries if e.key in keys and e.source == source]
        for e in sorted(found, key=lambda e: (e.path.count("/"), e.path, e.line or 0)):
            v = as_float(e.value)
            if v is not None and math.isfinite(v) and v >= 2:
                return v, e
    return None, None


def _vocab(run: Run, final: float) -> tuple[float | None, ConfigEntry | None, str]:
    """The vocabulary size or number of classes whose chance loss ln(N) is nearest the final loss.

    A classifier's config.json carries the backbone's vocab_size *and* num_labels; the
    loss tells which of the two the training objective is over.
    """
    cands = []
    for keys, kind in ((VOCAB_KEYS, "vocab_size"), (CLASS_KEYS, "num_labels")):
        v, entry = _model_side(run, keys)
        if v is None:
            v, entry = config_float(run, keys)
        if v is not None and v >= 2:
            cands.append((abs(final - math.log(v)) / math.log(v), v, entry, kind))
    if not cands:
        return None, None, ""
    _, v, entry, kind = min(cands, key=lambda c: c[0])
    return v, entry, kind


def _num(v: Any) -> str:
    """A logged value for an excerpt: 4 significant digits (13.0013189 -> 13, 2.2153e10 -> 2.215e+10)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    return f"{v:.4g}"
