"""checkpoint.corrupt from the log: a load that failed on a damaged or wrong checkpoint file.

The checkpoint files themselves may be gone or never copied with the log; the exception a load
raised still says the file was damaged: decisive wordings (PytorchStreamReader's missing central
directory, safetensors' HeaderTooLarge, "unexpected EOF"), or an exception type that means it only
inside a checkpoint load (an UnpicklingError - "invalid load key, 'v'" is a Git LFS pointer file -,
an EOFError, a BadZipFile), whose frames :mod:`tb_causes` checks.
"""

from __future__ import annotations

from typing import Any

from autopsy.checks.common import evidence_for, frame_evidence, group, project_frame, recovered, traceback_at, where
from autopsy.checks.tb_causes import gated
from autopsy.engine.types import CheckContext
from autopsy.model import Finding, Severity

_LFS_HINT = ("a Git LFS pointer file (a few lines of text starting 'version https://git-lfs') sits where the "
             "weights should be: run `git lfs pull` or download the real file")


def load_failures(ctx: CheckContext, names: tuple[str, ...], progress_after_steps: int = 2) -> list[Finding]:
    """One finding for the failed checkpoint loads in the logs (the last one leads), or none."""
    named = [(n, h) for n in names for h in ctx.hits.get(n, ()) if not recovered(ctx.run, h, progress_after_steps)]
    kept = gated(ctx.run, ctx.card.id, named)
    if not kept:
        return []
    name, lead = max(kept, key=lambda nh: (nh[1].path, nh[1].lineno))
    facts: dict[str, Any] = {"source": "log", "pattern": name, "error": group(lead, "error") or lead.text.strip()[:200]}
    for g in ("load_key", "missing_bytes", "path"):
        if group(lead, g):
            facts[g] = group(lead, g)
    lfs = group(lead, "load_key") == "v"
    facts["lfs_pointer_suspected"] = lfs
    evidence = evidence_for([lead, *[h for _, h in kept if h is not lead]])
    tb = traceback_at(ctx.run, lead)
    frame = project_frame(tb) if tb is not None else None
    if tb is not None and frame is not None:
        facts["frame"] = f"{frame.file}:{frame.line}"
        evidence.append(frame_evidence(tb, frame))
    if lead.step is not None:
        facts["step"] = lead.step
    hint = (f": {_LFS_HINT}" if lfs
            else ": the file is truncated, not a checkpoint of that format, or was cut by a failed save")
    msg = (f"Loading a checkpoint failed because the file is damaged ({facts['error'][:160]}) ({where(lead)}){hint}; "
           "replace it or resume from another checkpoint.")
    return [ctx.finding(msg, key=f"checkpoint.corrupt:load:{name}", facts=facts, evidence=evidence,
                        severity=Severity.CRITICAL, step=lead.step, wall_time=lead.wall_time)]
