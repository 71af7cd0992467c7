"""Early warnings from the run's progress and its checkpoints, evaluated at every poll:
the disk-fill forecast, a stall, an empty log.

They report under the post-mortem's rule ids and fingerprint keys (``checkpoint.retention``
with the key ``checkpoint.retention:forecast``, ``run.stalled``, ``log.empty:<path>``) and
take their thresholds from those cards' ``watch_*`` params.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from autopsy.model import Confidence, Evidence, Finding, Severity
from autopsy.units import fmt_bytes
from autopsy.watch.progress import fmt_duration, last_line_evidence, norm_path

if TYPE_CHECKING:
    from autopsy.watch.watcher import Watcher


# The last line of a run that finished (no stall then): HF Trainer's final metrics dict, Lightning's
# "`Trainer.fit` stopped: `max_steps=200` reached.", and scripts' own "Training complete/finished/done".
_FINISHED = re.compile(r"(?i)'train_runtime'|\bTrainer\.fit` stopped"
                       r"|\btraining (?:is )?(?:complete|completed|finished|done)\b"
                       r"|\bfinished training\b")


def _param(w: Watcher, rule: str, name: str, default: float) -> float | None:
    card = w.card_map.get(rule)
    if card is None:
        return None  # the rule is not selected
    try:
        return float(card.params.get(name, default))
    except (TypeError, ValueError):
        return default


def _finding(w: Watcher, rule: str, msg: str, key: str, facts: dict[str, Any], ev: list[Evidence],
             step: int | None, severity: Severity | None = None, confidence: Confidence | None = None) -> Finding:
    card = w.card_map[rule]
    return Finding(rule=rule, severity=severity or card.severity, confidence=confidence or card.confidence,
                   title=card.title, message=msg, facts={**facts, "watch": True}, evidence=tuple(ev), key=key,
                   step=step)


def progress_findings(w: Watcher, now: float) -> list[Finding]:
    out: list[Finding] = []
    for fn in (disk_forecast, stall, empty_logs):
        out.extend(fn(w, now))
    return out


def disk_forecast(w: Watcher, now: float) -> list[Finding]:
    horizon = _param(w, "checkpoint.retention", "watch_fill_horizon_seconds", 6 * 3600)
    if horizon is None or not w.ckpts.known or any(f.finding.rule == "disk.full" for f in w.fired.values()):
        return []  # nothing to forecast, or the disk already filled (disk.full says so)
    vol = w._volume()
    if vol is None:
        return []
    total, free = vol
    fc = w.ckpts.forecast(total, free)
    w.status.forecast = fc
    w.status.fill_seconds = None
    if fc is None:
        return []
    step = w.progress.step if w.progress.step is not None else fc.last_save_step
    rate = w.progress.rate()
    eta = (fc.fill_step - step) / rate if rate and fc.fill_step > step else None
    w.status.fill_seconds = eta
    planned = w.progress.max_steps
    before_end = planned is not None and fc.fill_step <= planned
    if not ((eta is not None and eta <= horizon) or (eta is None and before_end)):
        return []
    where = "the run directory" if fc.volume_path == "." else f"{fc.volume_path}/"
    when = ""
    if eta is not None and rate:
        when = f", in {fmt_duration(eta)} at {rate:.3g} steps/s" if eta < 1 else (
            f", in about {fmt_duration(eta)} at {rate:.3g} steps/s")
    end = f", before the planned {planned:,}" if before_end and planned is not None else ""
    msg = (f"The volume holding {where} fills at step ~{fc.fill_step:,}{when}{end}: each save every "
           f"{fc.cadence_steps:.0f} steps adds {fmt_bytes(fc.growth_per_save)} and {fmt_bytes(fc.free_bytes)} of "
           f"{fmt_bytes(fc.total_bytes)} is free, room for {fc.saves_that_fit} more save(s); "
           "the save at that step will fail with ENOSPC.")
    facts = {"forecast": True, "forecast_fill_step": fc.fill_step,
             "forecast_seconds": None if eta is None else round(eta, 1), "lead_steps": fc.fill_step - step,
             "step_now": step, "steps_per_second": None if rate is None else round(rate, 4),
             "volume_path": fc.volume_path, "volume_total_bytes": fc.total_bytes, "volume_free_bytes": fc.free_bytes,
             "growth_per_save_bytes": fc.growth_per_save, "save_every_steps": fc.cadence_steps,
             "forecast_saves_that_fit": fc.saves_that_fit, "growth_basis": fc.basis, "horizon_seconds": horizon,
             "max_steps": planned}
    cur = w.ckpts.current()
    ev = [Evidence(path=c.path, detail=f"step {c.step}, {fmt_bytes(c.bytes)}") for c in cur[-3:]]
    ev.append(Evidence(path=where, detail=f"{fmt_bytes(fc.free_bytes)} free of {fmt_bytes(fc.total_bytes)} "
                                          "(measured while watching)"))
    return [_finding(w, "checkpoint.retention", msg, "checkpoint.retention:forecast", facts, ev, step,
                     severity=Severity.WARNING, confidence=Confidence.MEDIUM)]


def stall(w: Watcher, now: float) -> list[Finding]:
    factor = _param(w, "run.stalled", "watch_stall_factor", 10.0)
    min_s = _param(w, "run.stalled", "watch_min_stall_seconds", 120.0)
    if factor is None or min_s is None:
        return []
    got = w.progress.stall(now, factor, min_s)
    planned, step = w.progress.max_steps, w.progress.step
    if got is None or (planned is not None and step is not None and step + 1 >= planned):
        return []  # progressing, or at its planned last step (finished, not stalled)
    idle, threshold = got
    newest = max(w.logs.values(), key=lambda ll: ll.mtime, default=None)
    last = newest.last_line() if newest is not None else None
    if last is not None and _FINISHED.search(last[1]):
        return []
    step = w.progress.step
    med = w.progress.median_step_seconds()
    pace = f"the run's median is {med:.3g} s per step" if med is not None else "its pace was not seen yet"
    msg = f"No new step for {fmt_duration(idle)} after step {step} ({pace}; warned past {fmt_duration(threshold)})"
    ev: list[Evidence] = []
    if newest is not None:
        msg += f"; the last line of {newest.rel} is: {last[1][:200]}" if last else ""
        quiet = fmt_duration(max(0.0, now - newest.mtime))
        ev.append(last_line_evidence(newest.rel, last, f"last written {quiet} ago"))
    facts = {"last_step": step, "idle_seconds": round(idle, 1), "threshold_seconds": round(threshold, 1),
             "median_step_seconds": None if med is None else round(med, 4)}
    return [_finding(w, "run.stalled", msg + ".", "run.stalled", facts, ev, step, severity=Severity.WARNING)]


def empty_logs(w: Watcher, now: float) -> list[Finding]:
    after = _param(w, "log.empty", "watch_empty_after_seconds", 300.0)
    if after is None:
        return []
    out = []
    for ll in w.logs.values():
        if ll.size or not ll.tail.ident or now - ll.mtime < after:
            continue
        empty_for = now - ll.mtime
        others = [c for c in w.ckpts.current() if c.mtime > ll.mtime]
        msg = (f"{ll.rel} has been empty (0 bytes) for {fmt_duration(empty_for)} since it was created: the process "
               "hangs before its first print, or its stdout is block-buffered (nohup python without -u; "
               "set PYTHONUNBUFFERED=1)")
        if others:
            msg += f"; yet {others[-1].path} was written after it, so the process runs and its output is buffered"
        facts = {"path": ll.rel, "empty_seconds": round(empty_for, 1), "threshold_seconds": after,
                 "newer_checkpoints": len(others)}
        out.append(_finding(w, "log.empty", msg + ".", f"log.empty:{norm_path(ll.rel)}", facts,
                            [Evidence(path=ll.rel, detail=f"0 bytes, created {fmt_duration(empty_for)} ago")], None,
                            severity=Severity.WARNING))
    return out
