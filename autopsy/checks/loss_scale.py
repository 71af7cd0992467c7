"""fp16 dynamic loss scaling that collapsed: the scaler skips (almost) every step, the model never updates.

Every dynamic loss scaler (apex amp, DeepSpeed, fairseq, Megatron) skips a step whose
gradients overflowed and halves its scale. A few skips at the start (calibrating down from
2^16..2^32) or now and then are the scaler working. When the gradients are non-finite at
every step, the scale halves at every step instead: down to 1 / ``min_loss_scale``
(DeepSpeed and fairseq then raise, Megatron keeps skipping) or, with apex's unbounded
scaler, to 1e-205. Little of that shows in a loss series (skipped steps log no loss, or a
stale one), so this reads the scalers' own lines, given to ``loss.nonfinite`` as ``ctx.hits``.

Three kinds of line: one per skipped step (apex, DeepSpeed, fairseq), a count over the log
interval (Megatron's "number of skipped iterations"), a running total (DeepSpeed's
"step=N, skipped=M"). Each file and rank is one stream; a stream collapsed when, strongest first:
  * the scaler gave up ("Current loss scale already at minimum", fairseq "Minimum loss scale reached");
  * with step numbers: the skips from some step up to the last step logged cover at least
    ``min_skipped_fraction`` of those steps, number ``min_skips`` or more, and begin after
    ``calibration_steps`` (or the scale is already at ``collapsed_loss_scale``);
  * without step numbers: ``min_skips`` or more skips and the scale ended at or below
    ``collapsed_loss_scale`` (1.0: the gradients overflow fp16 even unscaled).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autopsy.metrics import LOSS, canonical_metric
from autopsy.model import Evidence, Finding, Severity

if TYPE_CHECKING:
    from autopsy.engine.types import CheckContext
    from autopsy.parsers.types import Hit


@dataclass(frozen=True)
class ScalerPatterns:
    """Pattern names of the card, by what a line means (loss.nonfinite names them)."""

    per_skip: tuple[str, ...]  # one line per skipped step
    interval: tuple[str, ...]  # a skipped count over the log interval ending at an iteration
    running: tuple[str, ...]  # a running total of skipped steps at a step
    gave_up: tuple[str, ...]  # the scaler at its minimum, giving up
    labels: Mapping[str, str]  # pattern name -> the program, for facts


@dataclass(frozen=True)
class _Record:
    hit: Hit
    first: int | None  # first step the line covers (None: no step numbers)
    last: int | None  # last step it covers
    skipped: int  # skipped steps among them


@dataclass(frozen=True)
class _Verdict:
    records: list[_Record]
    how: str
    facts: dict[str, object]


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _rank(h: Hit) -> int:
    rank = _int(h.groups.get("ds_rank"))
    if rank is None:
        rank = h.rank
    return -1 if rank is None else rank


def _streams(hits: Mapping[str, Sequence[Hit]], pats: ScalerPatterns) -> list[tuple[str, list[_Record]]]:
    """(kind, records) per kind of line, file and rank, in line order."""
    groups: dict[tuple[str, str, int], list[Hit]] = {}
    for kind, names in (("per_skip", pats.per_skip), ("interval", pats.interval), ("running", pats.running)):
        for name in names:
            for h in hits.get(name, ()):
                groups.setdefault((kind, h.path, _rank(h)), []).append(h)
    out = []
    for (kind, _path, _r), hs in sorted(groups.items()):
        hs.sort(key=lambda h: h.lineno)
        out.append((kind, _to_records(kind, hs)))
    return out


def _to_records(kind: str, hs: Sequence[Hit]) -> list[_Record]:
    if kind == "per_skip":
        return [_Record(h, h.step, h.step, 1) for h in hs]
    out: list[_Record] = []
    prev_step: int | None = None
    prev_total = 0
    for h in hs:
        step = _int(h.groups.get("iteration") or h.groups.get("step"))
        skipped = _int(h.groups.get("skipped"))
        if step is None or skipped is None:
            continue
        if kind == "running":  # a running total: this line's share is the difference
            skipped, prev_total = max(0, skipped - prev_total), skipped
        first = prev_step + 1 if prev_step is not None and step > prev_step else None
        out.append(_Record(h, first, step, skipped))
        prev_step = step
    # The first line has no previous one: it covers the log interval (the next gap), or all steps up to it.
    r0 = out[0] if out else None
    if r0 is not None and r0.first is None and r0.last is not None:
        end = r0.last
        gap = next((r.last - r.first + 1 for r in out[1:] if r.first is not None and r.last is not None), None)
        start = end - gap + 1 if kind == "interval" and gap else 1
        out[0] = _Record(r0.hit, max(1, min(start, end - r0.skipped + 1)), end, r0.skipped)
    return [r for r in out if r.first is not None]


def _last_step_seen(ctx: CheckContext, path: str, records: Sequence[_Record]) -> int | None:
    steps = [r.last for r in records if r.last is not None]
    steps += [int(s.last_step) for s in ctx.run.logs if s.path == path and s.last_step is not None]
    return max(steps) if steps else None


def _final_scale(hits: Mapping[str, Sequence[Hit]], path: str) -> tuple[float | None, float | None]:
    """(first, last) loss scale the file's scaler lines print (the attempted one first, when given)."""
    seen = sorted((h for hs in hits.values() for h in hs if h.path == path and (
        h.groups.get("scale") is not None or h.groups.get("attempted") is not None)), key=lambda h: h.lineno)
    if not seen:
        return None, None
    g0 = seen[0].groups
    first = _num(g0.get("attempted")) if g0.get("attempted") is not None else _num(g0.get("scale"))
    last = next((v for h in reversed(seen) if (v := _num(h.groups.get("scale"))) is not None), None)
    if last is None:
        last = _num(seen[-1].groups.get("attempted"))
    return first, last


def _still_learning(ctx: CheckContext, records: Sequence[_Record], min_drop: float) -> bool:
    """The file's training loss, logged between and after the skip lines, falls by ``min_drop`` or more.

    Without step numbers, a run of skips cannot be measured against the steps taken. A
    collapsed scaler skips every step, so the weights stop moving and the loss it logs stays
    where it was; a loss that keeps falling across the skips (fairseq's "overflow detected,
    setting loss scale to: 0.0039" between progress lines whose loss goes 14.35 -> 12.64) is
    a model that updates, the skips are the scaler working.
    """
    path = records[0].hit.path
    first_line = min(r.hit.lineno for r in records)
    last_line = max(r.hit.lineno for r in records)
    values = [p.value for s in ctx.run.logs if s.path == path for p in s.series
              if p.lineno > first_line and canonical_metric(p.tag) == LOSS and math.isfinite(p.value)]
    after = any(p.lineno > last_line for s in ctx.run.logs if s.path == path for p in s.series
                if canonical_metric(p.tag) == LOSS)
    if len(values) < 2 or not after or values[0] <= 0:
        return False
    return values[-1] <= (1.0 - min_drop) * values[0] and values[-1] == min(values)


def _streak(records: Sequence[_Record], last_seen: int, min_fraction: float) -> tuple[int, int, int]:
    """(index of the first record, skips, steps spanned) of the skips that run up to the last step seen.

    Walks back from the last record while the skips keep covering ``min_fraction`` of the
    steps from there to the last step seen: one healthy stretch ends the streak.
    """
    start, skips, span = len(records), 0, 0
    for i in range(len(records) - 1, -1, -1):
        r = records[i]
        if r.first is None or r.last is None:
            break
        if r.skipped < min_fraction * (r.last - r.first + 1):
            break
        cand = last_seen - r.first + 1
        if cand <= 0 or skips + r.skipped < min_fraction * cand:
            break
        start, skips, span = i, skips + r.skipped, cand
    return start, skips, span


def _judge(ctx: CheckContext, kind: str, records: list[_Record], low_scale: bool,
           pats: ScalerPatterns) -> _Verdict | None:
    min_skips = int(ctx.param("min_skips"))
    min_fraction = float(ctx.param("min_skipped_fraction"))
    calibration = int(ctx.param("calibration_steps"))
    path = records[0].hit.path
    if kind == "per_skip":
        # The scanner counts every line; kept hits are capped (first and last few per file).
        keys = {f"{ctx.card.id}/{n}" for n in pats.per_skip}
        counted = sum(hl.count for s in ctx.run.logs if s.path == path for k, hl in s.hits.items() if k in keys)
        ranks = {_rank(r.hit) for r in records}
        total = max(len(records), counted // max(1, len(ranks)))
    else:  # interval counts, or the differences of a running total (their sum is its last value)
        total = sum(r.skipped for r in records)
    facts: dict[str, object] = {"skipped_steps": total}
    last_seen = _last_step_seen(ctx, path, records)
    if last_seen is None or any(r.last is None for r in records[-min_skips:]):
        if total >= min_skips and low_scale and not _still_learning(ctx, records, float(ctx.param("learning_drop"))):
            return _Verdict(records, f"{total} steps were skipped (the log gives no step numbers)", facts)
        return None
    start, skips, span = _streak(records, last_seen, min_fraction)
    firsts = [r.first for r in records if r.first is not None]
    firsts += [p.step for s in ctx.run.logs if s.path == path for p in s.series[:1] if p.step is not None]
    facts.update({"steps_seen": last_seen - max(1, min(firsts)) + 1 if firsts else None,
                  "last_step_seen": last_seen, "streak_skips": skips, "streak_steps": span,
                  "skipped_fraction": round(skips / span, 4) if span else 0.0})
    if start >= len(records) or skips < min_skips:
        return None
    begins = records[start].first or 0
    facts["streak_start_step"] = begins  # the first step the streak's first line covers
    facts["streak_end_step"] = records[-1].last
    if begins <= calibration and not low_scale:
        return None  # the scale calibrating down from its initial value at the start of the run
    how = f"{skips} of the {span} steps from step {begins} to the last one logged ({last_seen}) were skipped"
    return _Verdict(records[start:], how, facts)


def scale_collapse(ctx: CheckContext, pats: ScalerPatterns) -> list[Finding]:
    """A finding when the fp16 loss scaler skips (almost) every step, else []."""
    hits = ctx.hits
    gave_up = [h for name in pats.gave_up for h in hits.get(name, ())]
    streams = _streams(hits, pats)
    if not streams and not gave_up:
        return []
    collapsed = float(ctx.param("collapsed_loss_scale"))
    verdicts = []
    for kind, records in streams:
        if not records:
            continue
        first_scale, final_scale = _final_scale(hits, records[0].hit.path)
        low = final_scale is not None and final_scale <= collapsed
        v = _judge(ctx, kind, records, low, pats)
        if v is not None:
            v.facts.update({"first_loss_scale": first_scale, "final_loss_scale": final_scale,
                            "scaler": pats.labels.get(v.records[0].hit.key.rsplit("/", 1)[-1])})
            verdicts.append(v)
    if not verdicts and not gave_up:
        return []
    best = max(verdicts, key=lambda v: int(v.facts["skipped_steps"])) if verdicts else None  # type: ignore[call-overload]
    facts: dict[str, object] = dict(best.facts) if best else {}
    how = best.how if best else "the scaler gave up at its minimum loss scale"
    if best is None:
        first_scale, final_scale = _final_scale(hits, gave_up[0].path)
        n = sum(len(recs) if kind == "per_skip" else sum(r.skipped for r in recs) for kind, recs in streams
                if recs and recs[0].hit.path == gave_up[0].path)
        if n:
            how += f" after {n} skipped step{'s' if n != 1 else ''}"
        facts.update({"skipped_steps": n, "first_loss_scale": first_scale, "final_loss_scale": final_scale,
                      "scaler": pats.labels.get(gave_up[0].key.rsplit("/", 1)[-1])})
    elif gave_up:
        how += ", then the scaler gave up at its minimum loss scale"
    records = best.records if best else []
    path = records[0].hit.path if records else gave_up[0].path
    facts.update({"metric": "loss_scale", "path": path, "gave_up": bool(gave_up),
                  "min_skips": int(ctx.param("min_skips")),
                  "min_skipped_fraction": float(ctx.param("min_skipped_fraction")),
                  "collapsed_loss_scale": collapsed})
    fs, ls = facts.get("first_loss_scale"), facts.get("final_loss_scale")
    scale_txt = ""
    if isinstance(ls, float):
        scale_txt = f" (loss scale {fs:.4g} -> {ls:.4g})" if isinstance(fs, float) and fs != ls \
            else f" (loss scale {ls:.4g})"
    msg = (f"fp16 loss scaling collapsed: {how}{scale_txt}. Each skip is a gradient overflow: the gradients are "
           "non-finite at (almost) every step, so the optimizer skips them all and the model no longer "
           "updates (a NaN/inf already in the forward pass or the weights, not a scale still calibrating). Resume "
           "from a checkpoint saved before the skips began, in bf16 or with a lower LR (raising min_loss_scale "
           "only hides it).")
    ev = []
    if records:
        ev.append(_ev(records[0].hit))
        if len(records) > 1:
            ev.append(_ev(records[-1].hit))
    ev.extend(_ev(h) for h in gave_up[:1])
    step = records[0].first if records else gave_up[0].step
    when = records[0].hit.wall_time if records else gave_up[0].wall_time
    return [ctx.finding(msg, key="loss.nonfinite:loss_scale", facts=facts, evidence=ev,
                        severity=Severity.CRITICAL if gave_up else Severity.ERROR, step=step, wall_time=when)]


def _ev(h: Hit) -> Evidence:
    return Evidence(path=h.path, line=h.lineno, excerpt=h.text.strip()[:300], rank=h.rank, step=h.step)


# ----------------------------------------------------------------------------- stopped on NaN

# who stopped the run, by the loss.nonfinite pattern that saw it
_STOPPED_BY = {"tf_nan_loss": "tensorflow NanTensorHook", "keras_terminate_nan": "keras TerminateOnNaN",
               "jax_debug_nans": "JAX debug_nans", "nan_loss_abort": "its own NaN check",
               "nan_guard_stopped": "its own NaN check", "cntk_nan_criterion": "CNTK's NaN check"}


def nan_stop(ctx: CheckContext, names: Sequence[str], *, series_step: int | None = None) -> list[Finding]:
    """The framework itself stopped on a non-finite loss (TF NanTensorHook, Keras TerminateOnNaN), told by
    the card's patterns ``names``: the run ended there, so the finding is critical, whatever series were logged.

    ``series_step``: the first non-finite step of a logged loss series, the step of the stop when its
    line states none (Keras prints only the batch within the epoch), so that the recovery can tell
    the checkpoints saved after it."""
    named = sorted(((h, n) for n in names for h in ctx.hits.get(n, ())), key=lambda hn: (hn[0].path, hn[0].lineno))
    if not named:
        return []
    hits = [h for h, _ in named]
    lead = hits[0]
    jax_op = lead.groups.get("jax_op")
    facts: dict[str, object] = {"stopped_by": _STOPPED_BY.get(named[0][1], "its own NaN check"),
                                "line": lead.text.strip()[:300]}
    for g in ("batch", "step"):
        value = lead.groups.get(g)
        if value is not None and value.isdigit():
            facts[g] = int(value)
    step = lead.step if lead.step is not None else series_step
    if step is not None:
        facts.setdefault("step", step)
    at = f" at step {facts['step']}" if "step" in facts else ""
    what = (f"A {lead.groups.get('value') or 'nan'} value came out of {jax_op}" if jax_op
            else "The loss became NaN")
    msg = (f"{what}{at} and {facts['stopped_by']} stopped training ({lead.path}:{lead.lineno}): "
           "lower the learning rate, check the inputs and labels for NaN/Inf, clip gradients.")
    ev = [Evidence(path=h.path, line=h.lineno, excerpt=h.text.strip()[:300], rank=h.rank) for h in hits[:3]]
    return [ctx.finding(msg, key="loss.nonfinite:stopped", facts=facts, evidence=ev, severity=Severity.CRITICAL,
                        step=step if isinstance(step, int) else None, wall_time=lead.wall_time)]
