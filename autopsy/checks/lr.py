"""Learning-rate rules: the observed LR series against the configured peak, minimum, warmup and schedule.

``lr.floor``: a schedule that stops decaying at a fraction of its peak (``0.1 + 0.9 *
cosine``) while the config asks it to reach 0 (or a lower minimum).
``lr.mismatch``: an observed LR orders of magnitude from the configured one, or a warmup
longer than the run, so the configured peak is never reached.

Both accept an absolute LR series (``lr``) or, for nanochat-style loops, the LR
multiplier (``lrm``), where "peak" is the multiplier's maximum.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from autopsy.checks.series import (
    Series,
    cite,
    config_entry,
    config_evidence,
    config_float,
    load_series,
    rounded,
)
from autopsy.engine.types import CheckContext, NotEvaluated
from autopsy.model import Confidence, Evidence, Finding, Severity

if TYPE_CHECKING:
    from autopsy.parsers.types import ConfigEntry
    from autopsy.run import Run

LR_KEYS = ("learning_rate", "lr", "max_lr", "peak_lr", "base_lr")
MIN_LR_KEYS = ("min_lr", "lr_min", "eta_min", "min_learning_rate", "end_lr", "lr_end", "final_lr",
               "minimum_lr", "final_learning_rate")
MIN_LR_RATIO_KEYS = ("final_lr_frac", "min_lr_ratio", "min_lr_rate", "lr_min_ratio", "final_lr_ratio",
                     "final_div_factor_inverse")
SCHEDULER_KEYS = ("lr_scheduler_type", "lr_scheduler", "scheduler", "lr_schedule", "lr_decay_style",
                  "decay_style", "schedule", "scheduler_type")
DECAY_END_KEYS = ("lr_decay_steps", "lr_decay_iters", "decay_steps", "num_training_steps", "total_steps",
                  "train_iters", "num_iterations", "max_steps")
WARMUP_KEYS = ("warmup_steps", "num_warmup_steps", "lr_warmup_steps", "warmup_iters", "lr_warmup_iters")
WARMUP_RATIO_KEYS = ("warmup_ratio", "lr_warmup_fraction", "warmup_frac", "warmup_fraction")

# Scheduler names whose default end value is 0 (HF get_scheduler, torch CosineAnnealingLR,
# Megatron decay styles) and names that never decay (a floor there is by design).
_DECAY_TO_ZERO = ("cosine", "linear", "polynomial", "poly", "warmup_stable_decay", "wsd", "onecycle", "one_cycle")
_NO_DECAY = ("constant", "inverse_sqrt", "reduce_lr_on_plateau", "plateau", "cosine_with_min_lr",
             "step", "exponential", "multistep")


def _lr_series(ctx: CheckContext) -> Series | None:
    s = load_series(ctx.run, "lr")
    if s is not None and len(s.finite()) >= int(ctx.param("min_points")):
        return s.finite()
    m = load_series(ctx.run, "lr_multiplier")
    if m is not None and len(m.finite()) >= int(ctx.param("min_points")):
        return m.finite()
    return None


def _schedule_type(run: Run) -> tuple[str | None, ConfigEntry | None]:
    """The configured scheduler name, normalised (``cosine``, ``linear``...), and its entry."""
    entry = config_entry(run, SCHEDULER_KEYS)
    if entry is None or not isinstance(entry.value, str):
        return None, None
    return entry.value.strip().lower().replace("-", "_"), entry


# ----------------------------------------------------------------------------- lr.floor


def _stepped_into_floor(values: np.ndarray, final: float, tolerance: float, factor: float) -> bool:
    """The LR reached its final level in one drop of ``factor`` or more between two logged points.

    A schedule with a floor (``0.1 + 0.9 * cosine``, a linear decay clamped at a minimum) glides
    into its last level: the point before the flat tail is only a little above it. A step
    schedule (MultiStepLR, detectron2's WarmupMultiStepLR with gamma 0.1) holds each level and
    drops by its gamma at a milestone: its last level is where the plan put it.
    """
    off = np.flatnonzero(np.abs(values - final) > tolerance * max(abs(final), 1e-30))
    if off.size == 0 or off[-1] + 1 >= len(values):
        return False
    before = float(values[off[-1]])
    return final > 0 and before >= factor * final


def floor(ctx: CheckContext) -> Iterable[Finding]:
    """The LR levels off at a fraction of its peak while the config wants it to reach a lower end."""
    run = ctx.run
    s = _lr_series(ctx)
    if s is None:
        raise NotEvaluated(f"no LR or LR-multiplier series with at least {ctx.param('min_points')} points")
    peak_i = int(np.argmax(s.values))
    peak = float(s.values[peak_i])
    if peak <= 0:
        return []
    k = max(1, int(ctx.param("final_points")))
    final = float(np.median(s.values[-k:]))
    ratio = final / peak
    end, end_entry = config_float(run, DECAY_END_KEYS)
    if end is None and run.max_steps:
        end, end_entry = float(run.max_steps), None
    last = int(s.steps[-1])
    tail_n = max(3, round(len(s) * float(ctx.param("flat_tail_fraction"))))
    tail = s.values[-tail_n:]
    flat_tail = bool(np.ptp(tail) <= float(ctx.param("flat_relative_tolerance")) * max(abs(final), 1e-30))
    reached = end is not None and last >= end * (1 - float(ctx.param("end_tolerance_fraction")))
    if end is None and not flat_tail:
        raise NotEvaluated("no known schedule end (max_steps / lr_decay_steps) and the LR is still moving")
    if not reached and not flat_tail:
        return []  # the schedule has not had the chance to reach its end yet
    if not (float(ctx.param("min_floor_ratio")) <= ratio <= float(ctx.param("max_floor_ratio"))):
        return []  # decayed to ~0 as planned, or never decayed (a constant schedule is a choice)
    sched, sched_entry = _schedule_type(run)
    min_abs, min_entry = config_float(run, MIN_LR_KEYS)
    min_ratio_cfg, ratio_entry = config_float(run, MIN_LR_RATIO_KEYS)
    peak_cfg, _peak_entry = config_float(run, LR_KEYS)
    facts: dict[str, object] = {
        "metric": s.metric, "tag": s.tag, "path": s.path, "peak": rounded(peak), "peak_step": int(s.steps[peak_i]),
        "observed_floor": rounded(final), "final_step": last, "ratio": rounded(ratio, 4),
        "schedule_end_step": int(end) if end is not None else None, "schedule_end_source": cite(end_entry)
        if end_entry is not None else ("max_steps" if end is not None else None), "flat_tail": flat_tail,
    }
    ev: list[Evidence] = [s.evidence(step=int(s.steps[peak_i]), step_end=last,
                                     excerpt=f"peak {peak:.4g} at step {int(s.steps[peak_i])}, "
                                             f"{final:.4g} at step {last}")]
    expected: float | None = None
    confidence = Confidence.HIGH
    if min_ratio_cfg is not None and ratio_entry is not None:
        expected = min_ratio_cfg
        facts.update({"configured_min_ratio": min_ratio_cfg, "configured_min_source": cite(ratio_entry)})
        ev.append(config_evidence(ratio_entry))
    elif min_abs is not None and min_entry is not None:
        ref = peak if s.metric == "lr" else (peak_cfg or peak)
        if s.metric == "lr_multiplier" and peak_cfg is None:
            ref = 0.0
        expected = min_abs / ref if ref else None
        facts.update({"configured_min": min_abs, "configured_min_source": cite(min_entry)})
        if expected is not None:
            facts["configured_min_ratio"] = rounded(expected, 4)
        ev.append(config_evidence(min_entry))
    if sched is not None and sched_entry is not None:
        facts.update({"schedule_type": sched, "schedule_type_source": cite(sched_entry)})
        ev.append(config_evidence(sched_entry))
        if expected is None and any(sched.startswith(n) for n in _NO_DECAY):
            return []  # this scheduler does not go to 0 by design
        if expected is None and any(sched.startswith(n) for n in _DECAY_TO_ZERO):
            expected = 0.0
            confidence = Confidence.MEDIUM
            facts["configured_min_ratio"] = 0.0
            facts["configured_min_source"] = f"default of {sched} (no min configured)"
    if expected is None:
        if not flat_tail:
            return []
        if _stepped_into_floor(s.values, final, float(ctx.param("flat_relative_tolerance")),
                               float(ctx.param("step_drop_factor"))):
            return []  # a step schedule's last level (MultiStepLR, detectron2's steps): planned, not a floor
        # No stated intent: only a schedule that is dead flat at the end reads as a floor.
        confidence = Confidence.LOW
        facts["configured_min_source"] = None
    elif ratio - expected < float(ctx.param("min_gap_ratio")) or ratio < 1.5 * expected:
        return []
    src = facts.get("configured_min_source")
    if expected is None:
        want = "nothing in the config says it should stop there"
    elif expected == 0:
        want = f"the configured minimum is 0 ({src})"
    else:
        want = f"the configured minimum is {expected:.1%} of peak ({src})"
    shape = "flat over the last part of the run" if flat_tail else "still above the end value at the planned end"
    msg = (f"The {'LR multiplier' if s.metric == 'lr_multiplier' else 'learning rate'} stops decaying at "
           f"{ratio:.1%} of its peak ({final:.3g} vs {peak:.3g}, {shape}) while {want}: the schedule has a floor "
           "(e.g. `0.1 + 0.9 * cosine`) and the end of training runs at a much higher LR than planned.")
    return [ctx.finding(msg, key=f"lr.floor:{s.metric}", facts=facts, evidence=ev, confidence=confidence, step=last)]


# ----------------------------------------------------------------------------- lr.mismatch


def mismatch(ctx: CheckContext) -> Iterable[Finding]:
    """Observed LR orders of magnitude from the configured one, or a warmup longer than the run,
    or an LR of 0 at every logged step (no config needed to say that one)."""
    run = ctx.run
    zero = _zero_lr(ctx)
    if zero is not None:
        return [zero]
    cfg, cfg_entry = config_float(run, LR_KEYS)
    warm, warm_entry = config_float(run, WARMUP_KEYS)
    wratio, wratio_entry = config_float(run, WARMUP_RATIO_KEYS)
    planned = run.max_steps
    if warm is None and wratio is not None and planned:
        warm, warm_entry = wratio * planned, wratio_entry
    s = load_series(run, "lr")
    s = s.finite() if s is not None else None
    if s is not None and len(s) == 0:
        s = None
    if cfg is None and warm is None:
        raise NotEvaluated("no configured learning_rate or warmup found")
    facts: dict[str, object] = {}
    ev: list[Evidence] = []
    reasons: list[str] = []
    severity = Severity.ERROR
    if cfg_entry is not None:
        facts.update({"configured": cfg, "configured_source": cite(cfg_entry)})
        ev.append(config_evidence(cfg_entry))
    if warm is not None and warm_entry is not None:
        facts.update({"warmup_steps": rounded(warm), "warmup_source": cite(warm_entry)})
    last = run.last_step
    facts["max_steps"] = planned
    facts["last_step"] = last
    warm_too_long = warm is not None and planned is not None and warm >= planned
    ratio = None
    if s is not None and cfg is not None and cfg > 0 and float(np.max(s.values)) > 0:
        i = int(np.argmax(s.values))
        observed = float(s.values[i])
        ratio = observed / cfg
        facts.update({"observed_max": rounded(observed), "observed_max_step": int(s.steps[i]),
                      "observed_source": f"{s.tag} in {s.path}", "ratio": rounded(ratio, 4)})
        ev.append(s.evidence(step=int(s.steps[0]), step_end=int(s.steps[-1]),
                             excerpt=f"max {observed:.4g} at step {int(s.steps[i])}"))
        threshold = float(ctx.param("ratio_threshold"))
        if ratio <= 1 / threshold or ratio >= threshold:
            why = ""
            if warm is not None and s.steps[-1] < warm:
                if not warm_too_long:  # (else the reason below says it, with the planned length)
                    why = (f"; the warmup ({warm:.0f} steps) is longer than the {int(s.steps[-1])} steps logged, "
                           "so the LR was still ramping up")
                facts["warmup_longer_than_run"] = True
            elif not warm_too_long and ratio < 1 and _still_rising(s.values):
                # A linear ramp to the last step: a warmup longer than the run, computed somewhere
                # the config does not show as steps (tokens, samples, a ratio of the wrong total).
                why = "; it rises steadily up to the last step, so the run never left its warmup"
                other = _warmup_like_entry(run)
                if other is not None:
                    why += f" (check how {other.raw_key} at {cite(other)} is turned into steps)"
                    facts["warmup_setting"] = f"{other.raw_key}: {other.text}"
                    facts["warmup_setting_source"] = cite(other)
                    ev.append(config_evidence(other))
                facts["still_in_warmup"] = True
            elif not warm_too_long:
                why = "; look for a scheduler stepped per sample instead of per step, or an LR scale applied twice"
            direction = "below" if ratio < 1 else "above"
            factor = 1 / ratio if ratio < 1 else ratio
            times = f"{factor:,.0f}x" if factor >= 100 else f"{factor:.3g}x"
            reasons.insert(0, f"the logged LR peaks at {observed:.3g} ({s.tag}), {times} "
                              f"{direction} the configured {cfg:.3g} ({cite(cfg_entry)}){why}")
    elif s is None and not warm_too_long:
        raise NotEvaluated("no LR series found to compare with the configured learning_rate")
    # (an all-zero LR series that _zero_lr did not report, too few points or too coarsely printed
    # to tell from a decayed LR, has no ratio to the configured one: nothing to say about it here)
    if warm_too_long:
        reasons.append(f"the warmup ({warm:.0f} steps, {cite(warm_entry)}) is longer than the whole run "
                       f"({planned} steps), so the configured peak is never reached")
        # The steps a framework recorded it used (HF's TrainingArguments in TensorBoard) were computed
        # from a setting the user wrote in another unit (warmup_tokens): that line is where the fix goes.
        other = _warmup_like_entry(run)
        if other is not None and warm_entry is not None and other.key != warm_entry.key \
                and other.source in _USER_CONFIG_SOURCES and warm_entry.source not in _USER_CONFIG_SOURCES:
            reasons[-1] += f" (check how {other.raw_key} at {cite(other)} is turned into steps)"
            facts["warmup_setting"] = f"{other.raw_key}: {other.text}"
            facts["warmup_setting_source"] = cite(other)
            ev.append(config_evidence(other))
    if warm is not None and warm_entry is not None:  # after the logged LR and the line to fix
        ev.append(config_evidence(warm_entry))
    if not reasons:
        return []
    if warm_too_long:
        facts["warmup_longer_than_run"] = True
    msg = "The learning rate is not what the config says: " + "; and ".join(reasons) + "."
    key = "lr.mismatch:warmup" if facts.get("warmup_longer_than_run") else "lr.mismatch:scale"
    return [ctx.finding(msg, key=key, facts=facts, evidence=ev, severity=severity, step=last)]


def _still_rising(values: np.ndarray) -> bool:
    """True when the LR never falls and ends at its maximum: a ramp still under way."""
    v = np.asarray(values, dtype="float64")
    if v.size < 3 or not np.isfinite(v).all():
        return False
    return bool(v[-1] >= v.max() and v[-1] > v[0] and (np.diff(v) >= -1e-12 * max(abs(v.max()), 1e-30)).all())


# Config sources a user writes (files, launch flags), as opposed to what a framework recorded it used.
_USER_CONFIG_SOURCES = frozenset({"yaml", "json", "toml", "hydra", "launch_flag", "args_dump"})


def _warmup_like_entry(run: Run) -> ConfigEntry | None:
    """A config entry that names warmup in another unit (warmup_tokens, warmup_samples, ...)."""
    cands = [e for e in run.config_entries if "warmup" in e.raw_key.lower() and e.value is not None]
    cands.sort(key=lambda e: (e.source not in ("yaml", "json", "toml", "hydra"), e.path, e.line or 0))
    return cands[0] if cands else None


# ----------------------------------------------------------------------------- lr.mismatch: LR = 0


# ``lr: 0.00000000``, ``'learning_rate': 0.0``, ``learning rate: 0.000E+00``: the value after the tag.
_PRINTED = r"""["']?\s*[:=]\s*["']?(?P<v>[-+]?(?:\d+(?:\.(?P<dec>\d*))?|\.(?P<dec2>\d+))(?P<exp>[eE][-+]?\d+)?)"""


def _printed_zero(run: Run, s: Series) -> tuple[float | None, str | None, int | None]:
    """(bound, line, lineno): how far from 0 a logged LR printed as 0 can be, from the line printing it.

    ``0.000000`` (6 decimals) only says LR < 5e-7, which a step-decayed schedule reaches by
    design; ``0.00000000`` says < 5e-9; ``0.000E+00`` and a Python repr (``'lr': 0.0``) are 0.
    Event files and trainer_state.json hold the float itself: bound 0. None when the line is not
    among the lines kept of the file (head and tail).
    """
    if s.source != "log":
        return 0.0, None, None
    import regex

    pat = regex.compile(r"(?P<q>['\"]?)\b" + regex.escape(s.tag) + _PRINTED)
    for scan in run.logs:
        if scan.path != s.path:
            continue
        lines = [(i + 1, t) for i, t in enumerate(scan.head)] + list(scan.tail)
        for lineno, text in reversed(lines):
            m = pat.search(text)
            if m is None or float(m.group("v")) != 0.0:
                continue
            if m.group("exp") is not None or (m.group("q") and m.group("dec") is not None and text.count("{")):
                return 0.0, text, lineno  # scientific notation or a dict repr: printed exactly
            dec = m.group("dec") if m.group("dec") is not None else (m.group("dec2") or "")
            return 0.5 * 10.0 ** -len(dec), text, lineno
    return None, None, None


def _zero_lr(ctx: CheckContext) -> Finding | None:
    """An LR (or LR multiplier) of exactly 0 at every logged step: the model does not train.

    Not an LR that is 0 only at the start of a warmup or the end of a decay (some point is
    non-zero), not a handful of points (``min_zero_points``), not a 0 printed too coarsely to tell
    from a decayed LR (``max_zero_lr``), and not when the loss falls clearly over the same steps
    (``max_loss_drop_fraction``): then something does train, whatever the printed LR says.
    """
    run = ctx.run
    s = load_series(run, "lr") or load_series(run, "lr_multiplier")
    s = s.finite() if s is not None else None
    if s is None or len(s) < int(ctx.param("min_zero_points")) or bool(np.any(s.values != 0)):
        return None
    bound, line, lineno = _printed_zero(run, s)
    if bound is not None and bound > float(ctx.param("max_zero_lr")):
        return None
    first, last = int(s.steps[0]), int(s.steps[-1])
    facts: dict[str, object] = {"metric": s.metric, "tag": s.tag, "path": s.path, "observed_max": 0.0,
                                "n_points": len(s), "first_step": first, "last_step": last,
                                "printed_bound": bound, "lr_zero_whole_run": True}
    loss = load_series(run, "loss")
    if loss is not None:
        lf = loss.finite()
        lf = lf.since(first) if len(lf) else lf
        lf = Series(lf.metric, lf.source, lf.path, lf.tag, lf.rank, lf.steps[lf.steps <= last],
                    lf.values[lf.steps <= last], lf.wall_times[lf.steps <= last], lf.synthetic_steps)
        if len(lf) >= int(ctx.param("min_zero_points")):
            k = max(1, len(lf) // 3)
            head, tail = float(np.median(lf.values[:k])), float(np.median(lf.values[-k:]))
            drop = (head - tail) / max(abs(head), 1e-12)
            facts.update({"loss_start": rounded(head, 5), "loss_end": rounded(tail, 5), "loss_drop_fraction":
                          rounded(drop, 4)})
            if drop >= float(ctx.param("max_loss_drop_fraction")):
                return None  # the loss falls: the weights do move
    cfg, cfg_entry = config_float(run, LR_KEYS)
    ev: list[Evidence] = [s.evidence(step=first, step_end=last, excerpt=f"{s.tag} = 0 at all {len(s)} points")]
    if line is not None:
        ev.insert(0, Evidence(path=s.path, line=lineno, excerpt=line.strip()[:300], step=last))
    cfg_txt = ""
    if cfg is not None and cfg_entry is not None:
        facts.update({"configured": cfg, "configured_source": cite(cfg_entry)})
        ev.append(config_evidence(cfg_entry))
        cfg_txt = f" while the config says {cfg:.3g} ({cite(cfg_entry)})"
    what = "LR multiplier" if s.metric == "lr_multiplier" else "learning rate"
    loss_txt = ""
    if "loss_drop_fraction" in facts:
        loss_txt = f"; the loss does not fall over those steps ({facts['loss_start']} -> {facts['loss_end']})"
    msg = (f"The {what} is 0 at every logged step ({len(s)} points, steps {first}..{last}, {s.tag} in {s.path})"
           f"{cfg_txt}: the model does not train{loss_txt}. Look for a scheduler that starts at 0 and is never "
           "stepped, a warmup or decay computed from a total of 0 steps, or an LR scaled by 0.")
    return ctx.finding(msg, key="lr.mismatch:zero", facts=facts, evidence=ev, step=first,
                       confidence=Confidence.MEDIUM if bound is None else None)
