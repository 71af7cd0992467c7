"""Checkpoint rules: retention (count vs limit, disk forecast), corrupt checkpoints, work lost since the last one.

They read ``run.checkpoint_list`` (integrity-checked by the checkpoint parser from headers
only), the save settings of the config, and ``run.disk`` whose filesystem figures are
taken *at analysis time*: after a disk-full crash the volume may have been cleaned, so
forecasts say which figures they used.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import regex

from autopsy.checks.checkpoint_load import load_failures
from autopsy.checks.run_state import end_signals, epoch_progress_time, reached_plan, trained_after
from autopsy.checks.series import cite, config_entry, config_evidence, config_float, median_cadence, rounded
from autopsy.engine.types import CheckContext, NotEvaluated
from autopsy.model import Confidence, Evidence, Finding, Severity
from autopsy.parsers.types import Checkpoint, ConfigEntry
from autopsy.run import Run
from autopsy.units import fmt_bytes, fmt_duration

LIMIT_KEYS = ("save_total_limit", "keep_last_n", "keep_last", "max_to_keep", "keep_checkpoint_max",
              "max_checkpoints", "num_checkpoints_to_keep", "save_top_k", "checkpoints_total_limit")
SAVE_STEPS_KEYS = ("save_steps", "save_every", "save_interval", "checkpoint_every", "checkpointing_steps",
                   "every_n_train_steps", "ckpt_every")
# What ENOSPC / EDQUOT look like in a traceback message or a log line.
_ENOSPC = regex.compile(r"No space left on device|os error 28|Errno 28\b|ENOSPC|Disk quota exceeded|EDQUOT",
                        regex.IGNORECASE)


def _complete(cps: Sequence[Checkpoint]) -> list[Checkpoint]:
    return [c for c in cps if not c.in_progress]


def _rotating(cps: Sequence[Checkpoint]) -> list[Checkpoint]:
    """The checkpoints a keep-last-N rotation manages: the dominant layout, without final loose weights.

    HF writes the final model to output_dir/model.safetensors beside its checkpoint-N/
    directories; that export is not rotated and must not count against save_total_limit.
    """
    managed = [c for c in cps if c.layout != "loose"]
    if not managed:
        return list(cps)
    layouts: dict[str, int] = {}
    for c in managed:
        layouts[c.layout] = layouts.get(c.layout, 0) + 1
    top = max(layouts, key=lambda k: layouts[k])
    return [c for c in managed if c.layout == top]


def _enospc_evidence(run: Run) -> list[Evidence]:
    """Where the run reported ENOSPC: traceback messages first, then log tail lines."""
    out: list[Evidence] = []
    for tb in run.all_tracebacks:
        if _ENOSPC.search(tb.message) or _ENOSPC.search(tb.exc_type):
            out.append(Evidence(path=tb.path, line=tb.line_start, line_end=tb.line_end,
                                excerpt=f"{tb.exc_type}: {tb.message}"[:300], rank=tb.rank))
    for scan in run.logs:
        for lineno, line in scan.tail:
            if _ENOSPC.search(line) and not any(e.path == scan.path and e.line == lineno for e in out):
                out.append(Evidence(path=scan.path, line=lineno, excerpt=line.strip()[:300], rank=scan.rank))
    return out[:5]


def save_cadence(run: Run, cps: Sequence[Checkpoint]) -> tuple[float | None, str | None]:
    """Steps between saves: the configured save_steps, else the median step delta of checkpoints."""
    v, entry = config_float(run, SAVE_STEPS_KEYS)
    if v is not None and v > 0:
        return v, cite(entry)
    med = median_cadence(c.step for c in cps if c.step is not None)
    return (med, "checkpoint step deltas") if med else (None, None)


def checkpoint_tally(run: Run) -> dict[str, int]:
    """The one definition of the checkpoint figures every rule and report states.

    Over the checkpoints a rotation manages (finished writes only): ``complete_checkpoints``
    (resumable), ``partial_checkpoints`` (a save cut short: missing or truncated files),
    ``bytes_per_checkpoint`` (median size of the complete ones: a partial one says nothing
    about how big a save is) and ``checkpoint_bytes`` (all of them, partial ones included:
    what they occupy on disk).
    """
    cps = _rotating(_complete(run.checkpoint_list))
    complete = [c for c in cps if c.valid]
    sizes = [c.bytes for c in (complete or cps) if c.bytes > 0]
    return {"complete_checkpoints": len(complete), "partial_checkpoints": len(cps) - len(complete),
            "bytes_per_checkpoint": int(np.median(sizes)) if sizes else 0,
            "checkpoint_bytes": int(sum(c.bytes for c in cps))}


def count_phrase(tally: dict[str, int], each: bool = True) -> str:
    """``7 complete checkpoints of 106.9 KB each plus 1 partial one (750.8 KB in all)``."""
    n, partial = tally["complete_checkpoints"], tally["partial_checkpoints"]
    text = f"{n} complete checkpoint{'s' if n != 1 else ''}"
    if each and tally["bytes_per_checkpoint"]:
        text += f" of {fmt_bytes(tally['bytes_per_checkpoint'])} each"
    if partial:
        text += f" plus {partial} partial one{'s' if partial != 1 else ''}"
    return text + f" ({fmt_bytes(tally['checkpoint_bytes'])} in all)"


# Said beside every figure derived from the volume as measured when autopsy ran.
ANALYSIS_TIME_BASIS = "volume size and free space measured at analysis time (run.disk_at_analysis), not at the crash"


# ----------------------------------------------------------------------------- checkpoint.retention


def retention(ctx: CheckContext) -> Iterable[Finding]:
    """More checkpoints than the configured limit, or checkpoints on course to fill the disk."""
    run = ctx.run
    cps = _rotating(_complete(run.checkpoint_list))
    if not cps:
        raise NotEvaluated("no checkpoints found")
    # A save killed half-way leaves limit+1 directories (rotation runs after a save): only
    # valid checkpoints count against the limit.
    tally = checkpoint_tally(run)
    count = tally["complete_checkpoints"]
    per_ckpt = float(tally["bytes_per_checkpoint"])
    total = float(tally["checkpoint_bytes"])
    limit_entry = config_entry(run, LIMIT_KEYS)
    limit = None
    if limit_entry is not None:
        try:
            limit = int(float(limit_entry.value))
        except (TypeError, ValueError):
            limit = None
        if limit is not None and limit <= 0:
            limit = None  # -1 / 0 / None: keep everything (Lightning save_top_k=-1, HF None)
    cadence, cadence_src = save_cadence(run, cps)
    facts: dict[str, object] = {
        "count": count, "count_incomplete": len(cps) - count, "limit": limit,
        "limit_source": cite(limit_entry) if limit is not None else None,
        "bytes_per_checkpoint": int(per_ckpt), "checkpoint_bytes": int(total),
        "save_every_steps": rounded(cadence) if cadence else None, "save_every_source": cadence_src,
        "last_step": run.last_step, "max_steps": run.max_steps,
    }
    ev: list[Evidence] = []
    reasons: list[str] = []
    if limit_entry is not None and limit is not None:
        ev.append(config_evidence(limit_entry))
    # HF keeps the best checkpoint on top of save_total_limit when load_best_model_at_end is set.
    allowance = 1 if run.trainer_state is not None and run.trainer_state.best_model_checkpoint else 0
    over = limit is not None and count > limit + allowance
    if over and limit is not None:
        assert limit_entry is not None
        reasons.append(f"but {cite(limit_entry)} sets {limit_entry.raw_key}: {limit}, so old checkpoints are "
                       "not being deleted")
        hint = misplaced_setting(run, limit_entry)
        if hint is not None:
            facts["limit_section_mismatch"] = hint[1]
            reasons.append(hint[0])
            ev.append(config_evidence(hint[2]))
        oldest = [c for c in cps if c.valid][: count - limit]
        ev.extend(Evidence(path=c.path, detail=f"step {c.step}, {fmt_bytes(c.bytes)}") for c in oldest[:5])
    disk = run.disk
    enospc = _enospc_evidence(run)
    facts["disk_full_seen"] = bool(enospc)
    growing = limit is None or over
    forecast_hit = False
    if disk.fs_total_bytes and per_ckpt > 0:
        # The volume figures themselves go to report.run.disk_at_analysis (one labelled place);
        # what is derived from them here says so.
        facts["volume_basis"] = ANALYSIS_TIME_BASIS
        share = total / disk.fs_total_bytes
        facts["checkpoint_share_of_volume"] = rounded(share, 3)
        if growing and cadence and disk.fs_free_bytes is not None and disk.fs_used_bytes is not None:
            # After ENOSPC the volume measured now tells about the crash only while it is still
            # full; a forecast far past the crash means it was cleaned, resized or copied elsewhere.
            other = max(0.0, disk.fs_used_bytes - total)
            room = disk.fs_total_bytes - other
            n_fit = int(room // per_ckpt)
            first_step = min((c.step for c in cps if c.step is not None), default=int(cadence))
            fill_step = int(first_step + n_fit * cadence)
            crash_step = run.last_step
            stale = bool(enospc) and crash_step is not None and fill_step > crash_step + 2 * cadence
            if stale:
                facts["forecast_skipped"] = ("the volume measured at analysis time has room: it is not the "
                                             "volume as it was when the disk filled")
            else:
                facts["forecast_fill_step"] = fill_step
                facts["forecast_saves_that_fit"] = n_fit
            planned = run.max_steps
            if planned is not None and fill_step <= planned and not stale:
                forecast_hit = True
                reasons.append(
                    f"at {fmt_bytes(per_ckpt)} per save every {cadence:.0f} steps, a {fmt_bytes(disk.fs_total_bytes)} "
                    f"volume with {fmt_bytes(other)} used by other files (at analysis time) fills at step "
                    f"~{fill_step:,}, before the planned {planned:,}")
        if share >= float(ctx.param("max_volume_share")) and not over:
            reasons.append(f"checkpoints take {share:.0%} of the {fmt_bytes(disk.fs_total_bytes)} volume")
    if enospc and (over or growing or share_ok(facts, ctx)):
        ev.extend(enospc)
        reasons.append("the disk filled up (ENOSPC) while they accumulated")
    if not reasons:
        return []
    severity = Severity.CRITICAL if enospc and (over or share_ok(facts, ctx) or forecast_hit) else Severity.WARNING
    confidence = Confidence.HIGH if over else Confidence.MEDIUM
    msg = f"{count_phrase(tally)} are on disk" + _join_reasons(reasons) + "."
    return [ctx.finding(msg, key="checkpoint.retention", facts=facts, evidence=ev, severity=severity,
                        confidence=confidence, step=run.last_step)]


def _join_reasons(reasons: list[str]) -> str:
    """``, but X sets ...; the disk filled up ...``: the limit reason reads on from the count."""
    out = ""
    for i, r in enumerate(reasons):
        out += (" " if r.startswith("but ") else ": " if i == 0 else "; ") + r
    return out


def misplaced_setting(run: Run, entry: ConfigEntry) -> tuple[str, str, ConfigEntry] | None:
    """A limit written outside the section that holds the file's other save settings.

    ``save_total_limit: 3`` at the top level beside ``checkpointing: {save_steps: 10}`` is the
    classic way a limit never reaches the trainer: the script reads ``checkpointing.save_total_limit``.
    Returns (reason, the section, the sibling save setting) or None.
    """
    section = entry.raw_key.rpartition(".")[0]
    for other in run.config_entries:
        if other.path != entry.path or other is entry:
            continue
        other_section, _, leaf = other.raw_key.rpartition(".")
        if other_section and other_section != section and (leaf in SAVE_STEPS_KEYS or other.key in SAVE_STEPS_KEYS):
            here = f"under {section}:" if section else "at the top level"
            reason = (f"the limit is {here} while {other.raw_key} is under {other_section}: (line {other.line}): "
                      f"a script reading {other_section}.{entry.raw_key.rpartition('.')[2]} never sees it")
            return reason, other_section, other
    return None


def share_ok(facts: dict[str, object], ctx: CheckContext) -> bool:
    """Checkpoints are a large enough share of the volume to be the reason it filled."""
    share = facts.get("checkpoint_share_of_volume")
    return isinstance(share, float) and share >= float(ctx.param("enospc_min_share"))


# ----------------------------------------------------------------------------- checkpoint.corrupt


# The card's patterns of a failed load (frames_ ones gated by the frames: checkpoint_load, tb_causes).
_LOAD_PATTERNS = ("load_stream_reader", "load_safetensors_header", "load_unexpected_eof", "load_hf_weights",
                  "load_lfs_pointer", "frames_unpickling", "frames_eof", "frames_bad_zip")


def corrupt(ctx: CheckContext) -> Iterable[Finding]:
    """Checkpoints that cannot be resumed from: truncated or unreadable files, missing files."""
    run = ctx.run
    cps = run.checkpoint_list
    from_log = load_failures(ctx, _LOAD_PATTERNS)  # a load that failed on a damaged file, told by the log
    if not cps:
        if from_log:
            return from_log
        raise NotEvaluated("no checkpoints found, and no failed checkpoint load in the logs")
    latest_valid = run.latest_valid_checkpoint
    newest_step = max((c.step for c in cps if c.step is not None and not c.in_progress), default=None)
    out: list[Finding] = list(from_log)
    bad = [c for c in cps if not c.valid and not c.in_progress]
    for c in bad[: int(ctx.param("max_findings"))]:
        bad_files = [f for f in c.files if not f.ok]
        facts: dict[str, object] = {
            "checkpoint": c.path, "step": c.step, "layout": c.layout, "problems": list(c.problems),
            "missing": list(c.missing), "bad_files": [{"path": f.path, "problem": f.problem} for f in bad_files],
            "latest_valid_checkpoint": latest_valid.path if latest_valid else None,
            "latest_valid_step": latest_valid.step if latest_valid else None,
        }
        ev = [Evidence(path=f.path, detail=f.problem or "unreadable") for f in bad_files[:5]]
        ev.extend(Evidence(path=c.path, detail=f"missing {m}") for m in c.missing[:5])
        if not ev:
            ev.append(Evidence(path=c.path, detail="; ".join(c.problems)[:300]))
        what = "; ".join([*c.problems, *(f"missing {m}" for m in c.missing)])[:400]
        is_newest = c.step is not None and c.step == newest_step
        newer_valid = latest_valid is not None and (latest_valid.step or -1) > (c.step or -1)
        if latest_valid is None:
            instead = "and there is no valid checkpoint to resume from"
        elif newer_valid:
            instead = f"a newer valid checkpoint exists: {latest_valid.path}"
        else:
            at = f" (step {latest_valid.step})" if latest_valid.step is not None else ""
            instead = f"resume from {latest_valid.path}{at} instead"
        # An old checkpoint with a valid newer one costs no work: resuming is unaffected, so it is
        # reported (INFO) but never the run's primary over what stopped it (a time limit, a crash).
        severity = Severity.INFO if newer_valid and not is_newest else Severity.ERROR
        out.append(ctx.finding(f"Checkpoint {c.path} cannot be resumed from ({what}); {instead}.",
                               key=f"checkpoint.corrupt:{c.layout}:{regex.sub(r'[0-9]+', 'N', c.path)}",
                               facts=facts, evidence=ev, severity=severity, step=c.step))
    return out


# ----------------------------------------------------------------------------- checkpoint.gap


def gap(ctx: CheckContext) -> Iterable[Finding]:
    """Work lost by a crash or stop: steps and hours since the latest valid checkpoint."""
    run = ctx.run
    last, planned = run.last_step, run.max_steps
    if last is None:
        raise NotEvaluated("no training step found in any artifact")
    if reached_plan(run):
        return []  # it finished (HF's last step one short included): a traceback printed on the way was survived
    # (a line training went on after did not end the run: "Killed" of a checkpoint converter, a caught error)
    signals = [s for s in end_signals(run) if not (s.kind in ("termination", "error_line")
                                                   and trained_after(run, s.evidence.path, s.evidence.line))]
    stopped_short = planned is not None and last < planned and _inactive(run, ctx)
    if not signals and not stopped_short:
        return []  # finished, or still running: nothing was lost
    latest = run.latest_valid_checkpoint
    ck_step = (latest.step or 0) if latest is not None else 0
    steps_lost = last - ck_step
    if steps_lost <= 0:
        return []
    cps = run.checkpoint_list
    cadence, cadence_src = save_cadence(run, cps)
    seconds = _seconds_between(run, ck_step, last) if latest is not None else _seconds_between(run, None, last)
    facts: dict[str, object] = {
        "last_step": last, "checkpoint": latest.path if latest else None,
        "checkpoint_step": ck_step if latest else None,
        "steps_lost": steps_lost, "seconds_lost": round(seconds, 1) if seconds is not None else None,
        "save_every_steps": rounded(cadence) if cadence else None, "save_every_source": cadence_src,
        "ended_by": signals[0].text if signals else "stopped before max_steps",
    }
    min_steps = int(ctx.param("min_steps_lost"))
    min_seconds = float(ctx.param("min_seconds_lost"))
    big = steps_lost >= min_steps or (seconds is not None and seconds >= min_seconds)
    if cadence and steps_lost > float(ctx.param("cadence_factor")) * cadence:
        big = True  # a save that should have happened did not
        facts["missed_saves"] = int(steps_lost // cadence)
    if not big:
        return []
    hours = f" (~{fmt_duration(seconds)})" if seconds is not None else ""
    if latest is None:
        msg = f"The run stopped at step {last} with no valid checkpoint at all: all {steps_lost} steps{hours} are lost."
    else:
        msg = (f"The run stopped at step {last}; the latest valid checkpoint is {latest.path} (step {ck_step}), "
               f"so {steps_lost} steps{hours} must be redone")
        msg += f" (saves every {cadence:.0f} steps per {cadence_src})." if cadence else "."
    ev = [signals[0].evidence] if signals else []
    if latest is not None:
        ev.append(Evidence(path=latest.path, detail=f"latest valid checkpoint, step {ck_step}"))
    return [ctx.finding(msg, key="checkpoint.gap", facts=facts, evidence=ev, step=last)]


def _inactive(run: Run, ctx: CheckContext) -> bool:
    # Event wall times or real mtimes (run.clock): a copy's mtimes say nothing about activity. With no
    # clock at all the log's lines just stop, which a cut paste or a live run shows too (run.incomplete
    # says it cannot tell): not a stop to count lost work from.
    t_prog, _ = epoch_progress_time(run)
    return t_prog is not None and run.now - t_prog > float(ctx.param("inactive_seconds"))


def _seconds_between(run: Run, step_a: int | None, step_b: int) -> float | None:
    """Wall seconds between two steps, from the series with the most wall times (one clock)."""
    df = run.scalars
    rows = df[df["wall_time"].notna() & df["step"].notna()]
    if rows.empty:
        return None
    best = rows.groupby(["source", "path"], observed=True).size().idxmax()
    grp = rows[(rows["source"] == best[0]) & (rows["path"] == best[1])]
    per_step = grp.groupby("step")["wall_time"].min().sort_index()
    xs = per_step.index.to_numpy(dtype="float64")
    ys = per_step.to_numpy(dtype="float64")
    if xs.size < 2:
        return None
    t_b = float(np.interp(step_b, xs, ys))
    t_a = float(np.interp(step_a, xs, ys)) if step_a is not None else float(ys[0])
    if step_b > xs[-1]:
        rate = (ys[-1] - ys[0]) / max(xs[-1] - xs[0], 1.0)
        t_b = float(ys[-1] + (step_b - xs[-1]) * rate)
    d = t_b - t_a
    return d if math.isfinite(d) and d >= 0 else None
