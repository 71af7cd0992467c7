"""Rule-specific wording for ISSUES-log entries, in one table keyed by rule id.

The generic text of a rule (why it matters, what to do, references) lives in its card;
this table only adds what needs the facts of one run: which setting to change to what,
which checkpoints can go and how much that frees, the lesson in one line. Every function
tolerates missing facts (a rule may not know them on every run) and returns plain
Markdown-safe strings built with :mod:`autopsy.report.sanitize`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autopsy.model import ArtifactKind, Evidence, Finding, Report
from autopsy.report.common import fmt_bytes, fmt_value
from autopsy.report.sanitize import md_code, md_text

_CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml", ".cfg", ".ini", ".sh", ".bash", ".slurm", ".sbatch")
_STEP_IN_NAME = re.compile(r"(\d+)(?!.*\d)")


@dataclass(frozen=True)
class Advice:
    """``title``: entry title (``{step}`` is filled in); ``steps``: fact-driven fix steps; ``lesson``."""

    title: str
    lesson: tuple[str, ...] = ()
    steps: Callable[[Finding, Report, list[Finding]], list[str]] = field(default=lambda f, r, rel: [])
    resume: bool = True  # whether "resume from the latest valid checkpoint" is sound advice
    # Extra Root Cause paragraphs built from the facts of the findings it explains.
    cause: Callable[[Finding, Report, list[Finding]], list[str]] = field(default=lambda f, r, rel: [])


# ------------------------------------------------------------------ helpers on facts


def fact(findings: list[Finding], *names: str) -> Any:
    """The first of ``names`` present in the facts of any of ``findings`` (in order)."""
    for f in findings:
        for n in names:
            if f.facts.get(n) is not None:
                return f.facts[n]
    return None


def is_config_evidence(report: Report, ev: Evidence) -> bool:
    if not ev.path or ev.line is None:
        return False
    for a in report.artifacts:
        if a.path == ev.path:
            return a.kind in (ArtifactKind.CONFIG, ArtifactKind.LAUNCH_SCRIPT)
    return ev.path.lower().endswith(_CONFIG_SUFFIXES)


def config_evidence(report: Report, findings: list[Finding]) -> list[Evidence]:
    seen: set[tuple[str, int]] = set()
    out = []
    for f in findings:
        for ev in f.evidence:
            if is_config_evidence(report, ev) and (ev.path, ev.line) not in seen:  # type: ignore[comparison-overlap]
                seen.add((ev.path, ev.line))  # type: ignore[arg-type]
                out.append(ev)
    return out


def config_line_for(report: Report, findings: list[Finding], key: str) -> Evidence | None:
    for ev in config_evidence(report, findings):
        if ev.excerpt and re.search(rf"(?<![\w.]){re.escape(key)}\b", ev.excerpt):
            return ev
    return None


def where(ev: Evidence | None) -> str:
    return f" at {md_code(ev.location())}" if ev is not None else ""


def checkpoint_dirs(report: Report, extra: tuple[str, ...] = ()) -> dict[str, int]:
    """Checkpoint directory -> bytes on disk (every file in it), for the directories that hold
    checkpoint files and the ``extra`` ones (a half-written save may hold only its config)."""
    dirs = set(extra)
    for a in report.artifacts:
        if a.kind is ArtifactKind.CHECKPOINT_FILE:
            d = posixpath.dirname(a.path)
            if d and _STEP_IN_NAME.search(posixpath.basename(d)):
                dirs.add(d)
    sizes = dict.fromkeys(dirs, 0)
    for a in report.artifacts:
        d = posixpath.dirname(a.path)
        while d:
            if d in sizes:
                sizes[d] += a.size
                break
            d = posixpath.dirname(d)
    return sizes


def broken_checkpoints(report: Report) -> list[str]:
    """Checkpoints the findings say cannot be resumed from (half-written or corrupt)."""
    out: list[str] = []
    for f in report.findings:
        names = f.facts.get("invalid_checkpoints") if f.rule == "disk.full" else (
            [f.facts.get("checkpoint")] if f.rule == "checkpoint.corrupt" else [])
        for n in names if isinstance(names, list) else []:
            if isinstance(n, str) and n not in out:
                out.append(n)
    return out


def _step_of(path: str) -> int:
    m = _STEP_IN_NAME.search(posixpath.basename(path))
    return int(m.group(1)) if m else -1


def cleanup_step(report: Report) -> str | None:
    """Which checkpoints can be deleted (all but the latest valid one) and what that frees."""
    broken = [b for b in broken_checkpoints(report) if "/" in b or _STEP_IN_NAME.search(b)]
    dirs = checkpoint_dirs(report, tuple(broken))
    keep = report.run.latest_valid_checkpoint
    if keep is None or keep not in dirs or len(dirs) < 2:
        return None
    bad = sorted((d for d in dirs if d in broken), key=_step_of)
    drop = sorted((d for d in dirs if d != keep and d not in broken), key=_step_of)
    text = f"Keep {md_code(keep)} (the latest valid checkpoint)"
    parts = []
    if drop:
        names = ", ".join(md_code(d) for d in drop[:6]) + (f" and {len(drop) - 6} more" if len(drop) > 6 else "")
        parts.append(f"delete the other {len(drop)} complete checkpoint director{'ies' if len(drop) != 1 else 'y'} "
                     f"({names})")
    if bad:
        names = ", ".join(md_code(d) for d in bad[:6]) + (f" and {len(bad) - 6} more" if len(bad) > 6 else "")
        parts.append(f"delete {names} too: {'it' if len(bad) == 1 else 'they'} cannot be resumed from "
                     f"(half-written or corrupt)")
    freed = sum(dirs[d] for d in drop + bad)
    return f"{text} and " + "; ".join(parts) + f"; that frees {fmt_bytes(freed)}."


def limit_step(report: Report, related: list[Finding]) -> str | None:
    limit = fact(related, "save_total_limit", "limit", "configured_limit")
    present = fact([f for f in related if f.rule == "checkpoint.retention"], "count") or fact(
        related, "complete_checkpoints", "n_checkpoints", "checkpoints_present")
    ev = config_line_for(report, related, "save_total_limit")
    if limit is None and ev is None:
        return None
    section = fact(related, "limit_section_mismatch")
    if isinstance(section, str) and ev is not None and ev.path:
        return (f"Move {md_code((ev.excerpt or '').strip())} under {md_code(section + ':')} in {md_code(ev.path)} "
                f"(or make the training script read the key where it is) so the trainer really gets the limit; "
                f"{fmt_value(present)} checkpoints were on disk against a limit of {fmt_value(limit)}.")
    target = 2 if not isinstance(limit, int) or limit > 2 else 1
    now = f" (now {fmt_value(limit)}{where(ev)})" if limit is not None else where(ev)
    seen = f"; {fmt_value(present)} checkpoints were on disk, so check that old ones are really deleted" \
        if isinstance(present, int) and isinstance(limit, int) and present > limit else ""
    return f"Set {md_code(f'save_total_limit: {target}')}{now}{seen}."


def resume_step(report: Report) -> str | None:
    plan = report.run.resume
    if plan is not None and plan.command:
        return f"Resume, from {md_code(plan.cwd)}: {md_code(plan.command)}."
    if plan is not None and plan.note:
        return f"Resume: {md_text(plan.note)}."
    if report.run.latest_valid_checkpoint:
        step = f" (step {report.run.latest_valid_step:,})" if report.run.latest_valid_step is not None else ""
        return (f"Resume: load {md_code(report.run.latest_valid_checkpoint)}{step} with your training script's "
                "resume option (no resume flag was found in its launch command, args or config).")
    return None


def poisoned_words(report: Report) -> str | None:
    """What the report says about checkpoints saved after the loss went non-finite (None: there are none)."""
    from autopsy.recovery import first_nonfinite_step
    from autopsy.report.common import verdict_finding

    bad = report.run.poisoned_checkpoints
    if not bad:
        return None
    first = first_nonfinite_step(verdict_finding(report))
    at = f" at step {first:,}" if first is not None else ""
    names = ", ".join(bad[:4]) + (f" and {len(bad) - 4} more" if len(bad) > 4 else "")
    if report.run.latest_valid_checkpoint is None:
        return (f"no clean checkpoint: every checkpoint was saved after the loss became non-finite{at}; "
                f"restart from scratch or from an earlier run (not from {names})")
    return f"not {names}: saved after the loss became non-finite{at}, so the weights carry it"


def resume_words(report: Report) -> str:
    """Plain-text resume advice when the run names no resume option (never an invented flag)."""
    run = report.run
    step = f" (step {run.latest_valid_step:,})" if run.latest_valid_step is not None else ""
    return f"load {run.latest_valid_checkpoint}{step} with your training script's resume option"


def _keep(*steps: str | None) -> list[str]:
    return [s for s in steps if s]


# ------------------------------------------------------------------------ per rule


def _disk_full(f: Finding, r: Report, rel: list[Finding]) -> list[str]:
    vol = r.run.disk_at_analysis or {}
    # Figures a finding states about the run itself win; the volume as autopsy saw it is labelled.
    free = fact(rel, "fs_free_bytes", "free_bytes")
    if free is None:
        free = vol.get("fs_free_bytes")
    # Only a volume size the run's own evidence states: the one measured now may be another
    # volume altogether (cleaned, resized, or the run copied elsewhere).
    total = fact(rel, "fs_total_bytes", "total_bytes", "volume_bytes")
    per = fact(rel, "bytes_per_checkpoint", "checkpoint_bytes_each")
    size = (f"Make the volume larger than the run needs: it holds {fmt_bytes(total)}"
            + (f", checkpoints take about {fmt_bytes(per)} each" if isinstance(per, (int, float)) else "")
            + "." if isinstance(total, (int, float)) else None)
    return _keep(cleanup_step(r), limit_step(r, rel), size,
                 f"Check free space before restarting ({fmt_bytes(free)} free when autopsy looked)."
                 if isinstance(free, (int, float)) else None)


def retention_cause(rel: list[Finding]) -> list[str]:
    """The retention facts behind a full disk: count vs limit at file:line, bytes per checkpoint."""
    ret = next((f for f in rel if f.rule == "checkpoint.retention"), None)
    if ret is None:
        return []
    g = ret.facts
    count, limit, src = g.get("count"), g.get("limit"), g.get("limit_source")
    per, total = g.get("bytes_per_checkpoint"), g.get("checkpoint_bytes")
    partial = g.get("count_incomplete")
    text = f"Checkpoints were never pruned: {fmt_value(count)} complete checkpoints"
    if isinstance(per, (int, float)) and per:
        text += f" of about {fmt_bytes(per)} each"
    if isinstance(partial, int) and partial:
        text += f" plus {partial} partial one{'s' if partial != 1 else ''}"
    if isinstance(total, (int, float)):
        text += f" ({fmt_bytes(total)} in all)"
    text += " were on disk"
    if limit is not None:
        text += f", against {md_code(f'save_total_limit: {limit}')}" + (f" at {md_code(str(src))}" if src else "")
    text += "."
    section = g.get("limit_section_mismatch")
    if isinstance(section, str):
        text += (f" The limit sits outside the {md_code(section + ':')} section that holds the other save settings, "
                 "so a script that reads it from there never passes it to the trainer.")
    every, every_src = g.get("save_every_steps"), g.get("save_every_source")
    if every is not None:
        text += f" A save every {fmt_value(every)} steps" + (f" ({md_code(str(every_src))})" if every_src else "")
        text += " added one more checkpoint each time until the volume was full."
    return [text]


def _disk_full_cause(f: Finding, r: Report, rel: list[Finding]) -> list[str]:
    return retention_cause(rel)


def _retention(f: Finding, r: Report, rel: list[Finding]) -> list[str]:
    forecast = fact(rel, "forecast_fill_step", "forecast_step")
    planned = r.run.max_steps
    # A fill step far beyond the planned end is no threat to this run: not worth a step.
    soon = isinstance(forecast, int) and (planned is None or forecast <= 2 * planned)
    return _keep(limit_step(r, rel), cleanup_step(r),
                 f"At the current cadence the disk fills near step {fmt_value(forecast)}: act before then."
                 if soon else None)


def _oom_cuda(f: Finding, r: Report, rel: list[Finding]) -> list[str]:
    bs_ev = config_line_for(r, rel, "per_device_train_batch_size") or config_line_for(r, rel, "batch_size")
    bs = fact(rel, "per_device_train_batch_size", "batch_size")
    req = fact(rel, "requested_gib")
    free = fact(rel, "free_gib")
    steps = []
    if bs is not None or bs_ev is not None:
        half = f" to {max(1, int(bs) // 2)}" if isinstance(bs, int) else ""
        steps.append(f"Halve the per-device batch size{half}{where(bs_ev)} and double "
                     f"{md_code('gradient_accumulation_steps')} to keep the effective batch.")
    else:
        steps.append("Lower the per-device batch size (or sequence length) and raise gradient accumulation.")
    # Only suggest memory savers the run does not already use (oom.cuda reads them from the config).
    savers = [name for name, fact_name in (("gradient checkpointing", "gradient_checkpointing_on"),
                                           ("mixed precision (bf16)", "mixed_precision_on"))
              if not fact(rel, fact_name)]
    already = [str(fact(rel, f"{n}_source")) for n in ("gradient_checkpointing", "mixed_precision")
               if fact(rel, f"{n}_on")]
    if isinstance(req, (int, float)) and isinstance(free, (int, float)):
        room = (f"enable {' or '.join(savers)} to make room" if savers
                else "the per-device batch or sequence length has to shrink")
        steps.append(f"The allocation asked for {req:.2f} GiB with {free:.2f} GiB free: {room}"
                     + (f" (already on: {'; '.join(already)})" if already else "") + ".")
    steps.append(f"If reserved memory is much larger than allocated, set "
                 f"{md_code('PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True')} against fragmentation.")
    return steps


def _nonfinite(f: Finding, r: Report, rel: list[Finding]) -> list[str]:
    first = fact(rel, "first_nonfinite_step", "step") or f.step
    clip = config_line_for(r, rel, "max_grad_norm")
    lr_ev = config_line_for(r, rel, "learning_rate")
    run = r.run
    before = (isinstance(first, int) and run.latest_valid_step is not None and run.latest_valid_step < first
              and run.latest_valid_checkpoint)
    return _keep(
        f"Resume from {md_code(run.latest_valid_checkpoint or '')} (step {run.latest_valid_step:,}, "
        f"before the first non-finite step {first:,})"
        + (f"; {poisoned_words(r)}." if run.poisoned_checkpoints else ".") if before and isinstance(first, int)
        and run.latest_valid_step is not None else
        f"Resume from a checkpoint saved before step {fmt_value(first)}, not from one after it."
        if first is not None and run.latest_valid_checkpoint else
        _cap(poisoned_words(r)) + "." if first is not None and run.poisoned_checkpoints
        and not run.latest_valid_checkpoint else
        f"No checkpoint was found: once fixed, train again from scratch (nothing after step {fmt_value(first)} "
        "is usable)." if first is not None else None,
        f"Lower the learning rate{where(lr_ev)} or lengthen warmup.",
        f"Clip gradients ({md_code('max_grad_norm: 1.0')}{where(clip)}).",
        "Prefer bf16 over fp16 when the hardware has it; fp16 overflows at 65504.",
    )


def _cap(text: str | None) -> str:
    return (text[:1].upper() + text[1:]) if text else ""


def _log_empty(f: Finding, r: Report, rel: list[Finding]) -> list[str]:
    return [f"Run Python unbuffered ({md_code('python -u')} or {md_code('PYTHONUNBUFFERED=1')}) "
            "so the log shows where the process stopped.",
            "Check whether the process is alive and where it waits (py-spy dump --pid PID)."]


def _gap(f: Finding, r: Report, rel: list[Finding]) -> list[str]:
    ev = config_line_for(r, rel, "save_steps")
    return [f"Save more often ({md_code('save_steps')}{where(ev)}) so a crash loses less work."]


ADVICE: Mapping[str, Advice] = {
    "disk.full": Advice("Training crash: disk full at step {step}", (
        "Checkpoints grow by the same amount at every save: budget volume size as checkpoints kept x size.",
        "Do not rely on the retention setting alone; verify the number of checkpoint directories.",
    ), _disk_full, cause=_disk_full_cause),
    "checkpoint.retention": Advice("Checkpoints exceed the retention limit at step {step}", (
        "Retention settings can fail silently; count checkpoint directories after each save.",
    ), _retention),
    "checkpoint.gap": Advice("Crash lost the work since the last checkpoint at step {step}", (
        "Choose the save cadence from the work you can afford to lose, not from disk alone.",
    ), _gap),
    "oom.cuda": Advice("Training crash: CUDA out of memory at step {step}", (
        "Memory peaks depend on the longest batch, not the average one: test with the worst case first.",
    ), _oom_cuda),
    "loss.nonfinite": Advice("Loss became NaN/Inf at step {step}", (
        "A NaN poisons every later step and checkpoint: stop early and resume from before it.",
    ), _nonfinite, resume=False),
    "log.empty": Advice("Training log is empty", (
        "Always run long jobs unbuffered so the last line of the log is the last thing that happened.",
    ), _log_empty, resume=False),
}


def advice_for(rule: str) -> Advice | None:
    return ADVICE.get(rule)


# Problems that training itself produced (dynamics, schedules, an empty log): resuming from a
# checkpoint carries them on, so the recovery is a fix and a new run, not a resume.
_NO_RESUME_PREFIXES = ("loss.", "lr.", "log.", "data.stall", "dist.straggler", "dist.divergence", "tokenizer.")


def resume_advised(rule: str) -> bool:
    """Whether "resume from the latest valid checkpoint" is sound advice for this root cause."""
    adv = advice_for(rule)
    if adv is not None and not adv.resume:
        return False
    return not rule.startswith(_NO_RESUME_PREFIXES)
