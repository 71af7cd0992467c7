"""``disk.full``: which write hit ENOSPC/EDQUOT, what was being saved, and where to resume from.

The failing path comes from the message ("No space left on device: '/data/ckpt/...'"),
else from the traceback's frames (``save_pretrained``, ``Trainer._save_checkpoint``,
``torch.save``, safetensors ``save_file``), else from the last "Saving model checkpoint
to ..." line before the error. Checkpoint bytes and the latest valid checkpoint come from
the run's checkpoint scan (``checkpoint_tally``: the figures checkpoint.retention states too).
The filesystem's size and free space, measured at analysis time, are not facts of this
finding: the report keeps them apart (``run.disk_at_analysis``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from autopsy.checks.checkpoint import checkpoint_tally, count_phrase
from autopsy.checks.common import (
    config_evidence,
    config_lookup,
    earliest,
    evidence_for,
    frame_text,
    group,
    hits_of,
    is_library_frame,
    rank_phrase,
    ranks_of,
    recovered,
    traceback_at,
    where,
)
from autopsy.checks.tb_causes import gate_closed
from autopsy.engine.types import CheckContext
from autopsy.model import Confidence, Evidence, Finding
from autopsy.parsers.types import Frame, Hit, Traceback

# Frame function -> what was being written. Checked innermost first.
_SAVERS = (
    ("save_file", "safetensors file"),
    ("_save_optimizer_and_scheduler", "optimizer/scheduler state"),
    ("_save_rng_state", "RNG state"),
    ("save_pretrained", "model weights (save_pretrained)"),
    ("_save_checkpoint", "checkpoint (Trainer._save_checkpoint)"),
    ("save_checkpoint", "checkpoint (save_checkpoint)"),
    ("save_model", "model (save_model)"),
    ("save_state", "training state (save_state)"),
    ("_save", "checkpoint (torch.save)"),
    ("save", "checkpoint (torch.save)"),
)
# Patterns that fire the rule; the quota ones alone make it a quota error, the torch zip writer's
# alone (no errno in the text) lower the confidence.
_QUOTA = frozenset({"quota", "quota_errno", "quota_edquot", "pbs_jobfs_quota"})
_STREAM_WRITER = frozenset({"stream_writer", "stream_writer_pos"})
_FIRING = ("enospc", "errno_28", "rust_os_error_28", "enospc_name", *sorted(_QUOTA), "safetensors_io",
           *sorted(_STREAM_WRITER), "frames_resource_exhausted")


def _what_from_frames(tb: Traceback | None) -> tuple[str | None, Frame | None]:
    """(what was being saved, the frame that saved it) from a traceback's frames."""
    if tb is None:
        return None, None
    matched = [(frame, what) for frame in reversed(tb.frames) for name, what in _SAVERS
               if (frame.function or "") == name]
    if not matched:
        return None, None
    # The innermost saver is the write that failed; a trainer-level saver above it says what it was part of.
    writer = matched[0][0]
    outer = next((what for _, what in matched if what.startswith(("checkpoint (T", "checkpoint (save_c",
                                                                  "training state", "model"))), None)
    return outer or matched[0][1], writer


def write_frames(tb: Traceback, writer: Frame | None = None) -> tuple[str | None, str | None]:
    """(the innermost frame of the user's code, the library frame that wrote) for a failed write.

    "Where in your code" is the innermost frame outside installed packages and the standard
    library; the writing frame (``writer``, else the innermost saver) is kept apart when it is
    library code (safetensors' ``save_file``, ``torch.save``), None when it is the user's own.
    """
    if writer is None:
        writer = _what_from_frames(tb)[1]
    project = next((f for f in reversed(tb.frames) if not is_library_frame(f)), None)
    if writer is not None and not is_library_frame(writer):
        return frame_text(writer), None
    library = writer if writer is not None else tb.innermost
    if library is not None and not is_library_frame(library):
        library = None
    return frame_text(project), frame_text(library)


def _last_save_announcement(ctx: CheckContext, hit: Hit) -> Hit | None:
    before = [h for h in ctx.hits.get("ctx_saving", ()) if h.path == hit.path and h.lineno <= hit.lineno]
    return before[-1] if before else None


def _consequence_of_another_error(ctx: CheckContext, hit: Hit, disk_lines: set[tuple[str, int]]) -> bool:
    """The zip writer's short write raised while handling an error that is no disk error of its own.

    torch's "unexpected pos N vs M" says only that the writer's position is off; when it follows
    "During handling of the above exception" after a MemoryError (Dreambooth on Windows, a 6 GB
    checkpoint), the write failed of that error, not of a full disk.
    """
    if not any(hit in ctx.hits.get(n, ()) for n in _STREAM_WRITER):
        return False
    tb = traceback_at(ctx.run, hit)
    cause = tb.cause if tb is not None and tb.chain == "context" else None
    if cause is None:
        return False
    return not any((cause.path, line) in disk_lines for line in range(cause.line_start, cause.line_end + 1))


def full(ctx: CheckContext) -> Iterable[Finding]:
    min_after = int(ctx.params.get("progress_after_steps", 2))
    shm = tuple(ctx.params.get("shm_markers", ()))
    hits = [h for h in hits_of(ctx, *_FIRING)
            if not any(m in h.text for m in shm) and not recovered(ctx.run, h, min_after)
            and not gate_closed(ctx, h)]
    disk_lines = {(h.path, h.lineno) for h in hits}
    hits = [h for h in hits if not _consequence_of_another_error(ctx, h, disk_lines)]
    if not hits:
        return []
    lead = earliest(hits)
    names = {n for n in _FIRING for h in ctx.hits.get(n, ()) if h in hits}
    facts: dict[str, Any] = {"error_lines": len(hits)}  # log lines reporting the failed write
    facts["error"] = "quota" if names <= _QUOTA else "ENOSPC"
    confidence = Confidence.MEDIUM if names <= _STREAM_WRITER else Confidence.HIGH
    path = next((group(h, "path") for h in hits if group(h, "path")), None)
    tb = traceback_at(ctx.run, lead)
    what, writer = _what_from_frames(tb)
    frame, library = write_frames(tb, writer) if tb is not None and writer is not None else (None, None)
    announce = _last_save_announcement(ctx, lead)
    evidence: list[Evidence] = evidence_for([lead, *[h for h in hits if h is not lead]])
    if path:
        facts["failed_path"] = path
    if what:
        facts["saving"] = what
    if frame:
        facts["frame"] = frame
    if library:
        facts["library_frame"] = library
    if tb is not None and (frame or library):
        inside = f"{frame} (inside {library})" if frame and library else frame or library
        evidence.append(Evidence(path=tb.path, line=tb.line_start, line_end=tb.line_end, rank=tb.rank,
                                 excerpt=f"{tb.exc_type}: {tb.message.splitlines()[0] if tb.message else ''}",
                                 detail=f"write failed in {inside}"))
    if announce is not None:
        facts["saving_path"] = group(announce, "path")
        facts.setdefault("saving", "checkpoint")
        evidence.append(Evidence(path=announce.path, line=announce.lineno, excerpt=announce.text.strip(),
                                 step=announce.step, detail="save in progress when the disk filled"))
    step = lead.step if lead.step is not None else (announce.step if announce is not None else None)
    if step is not None:
        facts["step"] = step
    ranks = ranks_of(hits, ctx.run)
    if ranks:
        facts["ranks"] = ranks
    _checkpoint_facts(ctx, facts, evidence)
    msg = _message(facts, lead)
    return [ctx.finding(msg, key=f"disk.full:{facts['error']}:{facts.get('saving', 'write')}", facts=facts,
                        evidence=evidence, confidence=confidence, step=step, wall_time=lead.wall_time)]


def _checkpoint_facts(ctx: CheckContext, facts: dict[str, Any], evidence: list[Evidence]) -> None:
    run = ctx.run
    try:
        cps = run.checkpoint_list
        latest = run.latest_valid_checkpoint
    except Exception:  # a checkpoint-parser bug must not hide the disk-full finding
        return
    # The same figures, by the same definition, as checkpoint.retention states beside this finding.
    facts.update(checkpoint_tally(run))
    broken = [c for c in cps if not c.valid and not c.in_progress]
    if broken:
        facts["invalid_checkpoints"] = [c.path for c in broken]
        for c in broken[-2:]:
            evidence.append(Evidence(path=c.path, step=c.step,
                                     detail="; ".join([*c.problems, *(f"missing {m}" for m in c.missing)])[:300]))
    if latest is not None:
        facts["latest_valid_checkpoint"] = latest.path
        if latest.step is not None:
            facts["latest_valid_step"] = latest.step
    for key in ("save_total_limit", "save_steps"):
        entry = config_lookup(run, [key])
        if entry is not None:
            facts[key] = entry.value
            evidence.append(config_evidence(entry))


def _message(facts: dict[str, Any], lead: Hit) -> str:
    what = "the disk quota was exceeded" if facts["error"] == "quota" else "the disk was full"
    doing = f" while saving {facts['saving']}" if "saving" in facts else ""
    target = facts.get("failed_path") or facts.get("saving_path")
    at = f" to {target}" if target else ""
    step = f" at step {facts['step']}" if "step" in facts else ""
    n = facts.get("complete_checkpoints")
    held = f"; {count_phrase(facts, each=False)} are on disk" if n is not None and facts.get("checkpoint_bytes") else ""
    lim = facts.get("save_total_limit")
    limit = ""
    if isinstance(lim, int) and not isinstance(lim, bool):
        limit = (f" although save_total_limit is {lim}" if isinstance(n, int) and n > lim
                 else f" (save_total_limit {lim})")
    resume = (f"; resume from {facts['latest_valid_checkpoint']}" if "latest_valid_checkpoint" in facts
              else "; no valid checkpoint to resume from" if n is not None else "")
    return (f"A write failed because {what}{doing}{at}{step}{rank_phrase(facts)} ({where(lead)})"
            f"{held}{limit}{resume}.")
