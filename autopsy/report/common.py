"""Formatting and ordering shared by every renderer, so all formats agree on them.

Output is deterministic: findings are ordered primary first, then by severity (worst
first), rule id and fingerprint; times come from the artifacts and are shown in UTC.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from autopsy.discover import ALIAS_NOTES
from autopsy.model import Artifact, ArtifactKind, Evidence, Finding, OutcomeKind, ParseStatus, Report, Severity
from autopsy.units import fmt_bytes, fmt_duration

# Parse outcomes worth telling the user about ("could not read"); SKIPPED is deliberate.
DAMAGED = (ParseStatus.TRUNCATED, ParseStatus.UNREADABLE, ParseStatus.IN_PROGRESS)


def finding_sort_key(f: Finding) -> tuple[int, int, str, str]:
    return (0 if f.primary else 1, -int(f.severity), f.rule, f.fingerprint)


def ordered_findings(report: Report) -> list[Finding]:
    return sorted(report.findings, key=finding_sort_key)


def verdict_finding(report: Report) -> Finding | None:
    """The primary finding, or (when the engine named none) the worst one."""
    if report.primary is not None:
        return report.primary
    found = ordered_findings(report)
    return found[0] if found else None


# Links where the explained finding is a *cause* of the one that explains it, not a symptom:
# retention filled the disk, so under disk.full it is the contributing cause (taxonomy,
# Precedence). The engine links them the same way (``explained_by``); only wording differs.
CAUSE_LINKS = frozenset({("checkpoint.retention", "disk.full")})


def is_cause_link(f: Finding) -> bool:
    return f.explained_by is not None and (f.rule, f.explained_by) in CAUSE_LINKS


def link_phrase(f: Finding) -> str:
    """``cause of disk.full`` or ``explained by disk.full`` ("" when the finding is not linked)."""
    if f.explained_by is None:
        return ""
    return f"cause of {f.explained_by}" if is_cause_link(f) else f"explained by {f.explained_by}"


def damaged_artifacts(report: Report) -> list[Artifact]:
    return sorted((a for a in report.artifacts if a.status in DAMAGED), key=lambda a: a.path)


# Kinds autopsy parses; OTHER files (scripts, images) are listed but never read.
_PARSED_KINDS = (ArtifactKind.LOG, ArtifactKind.TFEVENTS, ArtifactKind.TRAINER_STATE, ArtifactKind.CONFIG,
                 ArtifactKind.LAUNCH_SCRIPT, ArtifactKind.CHECKPOINT_FILE, ArtifactKind.METRICS, ArtifactKind.EXIT_CODE)
_INPUT_NAMES = (("logs", (ArtifactKind.LOG,)),
                ("scalars", (ArtifactKind.TFEVENTS, ArtifactKind.TRAINER_STATE, ArtifactKind.METRICS)),
                ("checkpoints", (ArtifactKind.CHECKPOINT_FILE,)),
                ("configs", (ArtifactKind.CONFIG, ArtifactKind.LAUNCH_SCRIPT)))


def _readable(a: Artifact) -> bool:
    return a.kind in _PARSED_KINDS and a.status is not ParseStatus.UNREADABLE and a.status is not ParseStatus.SKIPPED \
        and a.size > 0


def notable_artifacts(report: Report) -> list[tuple[Artifact, str]]:
    """Artifacts the reader should know were not (fully) read: (artifact, short state).

    Damaged ones (truncated, unreadable, in progress), deliberately skipped ones that carry a
    note (a binary file named like a log), and parsed kinds that are empty or carry a note
    ("empty event file"). Plain skipped files (scripts, images) are not listed.
    """
    out = []
    for a in sorted(report.artifacts, key=lambda a: a.path):
        if a.status is ParseStatus.SKIPPED and a.note and a.note.endswith(ALIAS_NOTES):
            continue  # a symlink to a file or directory of the run: read under the target's name
        if a.status in DAMAGED or (a.status is ParseStatus.SKIPPED and a.note):
            out.append((a, str(a.status)))
        elif a.kind in _PARSED_KINDS and a.kind is not ArtifactKind.EXIT_CODE and (a.size == 0 or a.note):
            out.append((a, "0 bytes" if a.size == 0 else str(a.status)))
    return out


def nothing_readable(report: Report) -> str | None:
    """Why autopsy had nothing to read in this run (None when something was read).

    Only asked when no rule fired: a run directory that is empty, or holds only files autopsy
    does not parse, skipped or empty ones, is "nothing to analyse", not "no failure found".
    """
    if report.findings or report.run.last_step is not None or any(_readable(a) for a in report.artifacts):
        return None
    # Only when every rule said so too (a hand-built report without outcomes cannot tell).
    if not report.outcomes or any(o.kind in (OutcomeKind.FIRED, OutcomeKind.NOT_FIRED) for o in report.outcomes):
        return None
    if not report.artifacts:
        return "the directory is empty" + (f" ({report.problems[0]})" if report.problems else "")
    parts = []
    for a, state in notable_artifacts(report)[:3]:
        parts.append(f"{a.path} {state}" + (f" ({a.note})" if a.note else ""))
    n_other = sum(1 for a in report.artifacts if a.kind is ArtifactKind.OTHER and not a.note)
    if n_other:
        parts.append(f"{n_other} other file{'s' if n_other != 1 else ''} that are not training artifacts")
    return "; ".join(parts) if parts else "no logs, event files, checkpoints or configs"


_RANK_FAMILY = "dist."


def clean_verdict(report: Report) -> tuple[str, str]:
    """(what, details) of a run where no rule fired: ``no failure found`` only when every rule
    ran to a verdict and every file was read; otherwise what could not be checked or read.

    ``details`` names the last step, how many rules ran, the rules that could not check (the
    first few by id) and files that were not (fully) read.
    """
    ran = sum(1 for o in report.outcomes if o.kind in (OutcomeKind.FIRED, OutcomeKind.NOT_FIRED))
    unread = notable_artifacts(report)
    parts = [f"last step {fmt_step(report)}", f"{ran} rule{'s' if ran != 1 else ''} checked"]
    # Rules across ranks do not apply to a run with one process: they cannot miss anything there.
    multi_rank = any(a.rank is not None and a.rank > 0 for a in report.artifacts)
    missing = [o for o in report.not_evaluated if multi_rank or not o.rule.startswith(_RANK_FAMILY)]
    n_na = len(report.not_evaluated) - len(missing)
    if n_na:
        parts.append(f"{n_na} not applicable to a single-process run")
    gaps = missing or report.rule_errors or unread or report.problems
    if missing:
        names = sorted(o.rule for o in missing)
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        parts.append(f"{len(names)} could not check ({shown})")
    if report.rule_errors:
        parts.append(f"{len(report.rule_errors)} crashed")
    if unread:
        shown = ", ".join(f"{a.path} {state}" for a, state in unread[:2])
        parts.append(f"{len(unread)} file{'s' if len(unread) != 1 else ''} not fully read ({shown}"
                     + (f" and {len(unread) - 2} more" if len(unread) > 2 else "") + ")")
    what = "no failure found in what autopsy could check" if gaps else "no failure found"
    if report.accepted:  # the run did fail, in ways a baseline accepted: never "no failure found"
        what = "no new failure" + (" in what autopsy could check" if gaps else "")
        parts.insert(0, accepted_summary(report) or "")
    return what, "; ".join(parts)


def missing_inputs(report: Report) -> str | None:
    """``32 rules could not be checked: no logs, scalars, checkpoints or configs found`` when every
    rule lacked inputs (none ran to a verdict), else None: then each rule's reason is worth a line."""
    if not report.outcomes or any(o.kind in (OutcomeKind.FIRED, OutcomeKind.NOT_FIRED) for o in report.outcomes):
        return None
    absent = [name for name, kinds in _INPUT_NAMES
              if not any(a.kind in kinds and _readable(a) for a in report.artifacts)]
    if not absent:
        return None
    listed = absent[0] if len(absent) == 1 else ", ".join(absent[:-1]) + " or " + absent[-1]
    n = len(report.not_evaluated)
    return f"{n} rule{'s' if n != 1 else ''} could not be checked: no {listed} found"


def unique_evidence(f: Finding) -> list[Evidence]:
    """Evidence without exact repeats (two patterns of one rule can hit the same line)."""
    seen: set[Evidence] = set()
    out = []
    for ev in f.evidence:
        if ev not in seen:
            seen.add(ev)
            out.append(ev)
    return out


def worst_severity(reports: Iterable[Report]) -> Severity | None:
    sev = [f.severity for r in reports for f in r.findings]
    return max(sev) if sev else None


def fmt_int(n: int | None) -> str:
    return "?" if n is None else f"{n:,}"


def fmt_step(report: Report) -> str:
    """``9,000/28,000`` or ``9,000`` or ``?``."""
    last, total = report.run.last_step, report.run.max_steps
    if last is None:
        return "?"
    if total and report.run.completed and last == total - 1:
        return f"{last:,} of 0..{last:,}"  # range(total) done: its last index, not one short of total
    return f"{last:,}/{total:,}" if total else f"{last:,}"


def fmt_time(ts: float | None) -> str:
    """Unix seconds as ``2025-10-24 14:03:11 UTC`` (UTC: the same on every machine)."""
    if ts is None or not math.isfinite(ts):
        return "?"
    try:
        return _dt.datetime.fromtimestamp(ts, tz=_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return "?"


def fmt_date(ts: float | None) -> str | None:
    if ts is None or not math.isfinite(ts):
        return None
    try:
        return _dt.datetime.fromtimestamp(ts, tz=_dt.timezone.utc).strftime("%Y-%m-%d")
    except (OverflowError, OSError, ValueError):
        return None


def failure_time(report: Report, finding: Finding | None) -> float | None:
    """When the failure struck, from the artifacts: the finding, the run's failure, its end."""
    # The primary's own time has already been vetted by the summary (a stale timestamp from far
    # above the failure is rejected there): use the summary's answer for it.
    own = finding.wall_time if finding is not None and not finding.primary else None
    for ts in (own, report.run.failure_time, report.run.ended):
        if ts is not None and math.isfinite(ts):
            return ts
    return None


def fmt_value(v: Any) -> str:
    """A fact value for people: floats short, big ints with separators, lists abbreviated."""
    if isinstance(v, bool) or v is None:
        return str(v).lower() if isinstance(v, bool) else "null"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10000 else str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e6):
            return f"{v:.3g}"
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        items = [fmt_value(x) for x in v[:5]]
        more = f", … ({len(v)} in all)" if len(v) > 5 else ""
        return "[" + ", ".join(items) + more + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {fmt_value(x)}" for k, x in sorted(v.items())[:5]) + "}"
    return str(v)


# Facts that are identifiers, not quantities: printed as they are (pid=16683, port 29500), never 16,683.
_ID_FACT = re.compile(r"(?:^|_)(?:pid|pids|ppid|port|ports|id|ids|jobid|job_id|uid|gid|rank|ranks|local_rank|"
                      r"exitcode|exit_code|code|signal|signum|errno|line|lines|seed|version|year)$")


def fmt_fact(name: str, v: Any) -> str:
    """Facts whose name says bytes are shown in GB/MB; identifiers as they are; the rest by type."""
    if "bytes" in name and isinstance(v, (int, float)) and not isinstance(v, bool):
        return fmt_bytes(v)
    if _ID_FACT.search(name.lower()):
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
        if isinstance(v, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            return "[" + ", ".join(str(x) for x in v[:5]) + (f", … ({len(v)} in all)" if len(v) > 5 else "") + "]"
    # Unix times (an mtime, a wall time) read as dates, not as 1.8e+09.
    if (name.endswith(("mtime", "_time", "_wall_time")) and isinstance(v, float) and math.isfinite(v)
            and v > 1e8):
        return fmt_time(v)
    return fmt_value(v)


def fmt_facts(facts: dict[str, Any], limit: int = 8) -> str:
    items = sorted(facts.items())
    text = ", ".join(f"{k}={fmt_fact(k, v)}" for k, v in items[:limit])
    if len(items) > limit:
        text += f", … (+{len(items) - limit})"
    return text


def struck_at(report: Report, finding: Finding) -> str:
    """``at step 9,000, 2025-10-24 14:03:11 UTC`` (only the parts that are known)."""
    parts = []
    if finding.step is not None:
        parts.append(f"step {finding.step:,}")
    own = not finding.primary and finding.wall_time is not None and math.isfinite(finding.wall_time)
    ts = finding.wall_time if own else (report.run.failure_time if finding.primary else None)
    if ts is not None and math.isfinite(ts):
        when = fmt_time(ts)
        source = report.run.failure_time_source
        if not own and source and source.endswith("last written"):
            when += f" ({source})"  # a file's mtime is only an upper bound: say where it comes from
        parts.append(when)
    return ("at " + ", ".join(parts)) if parts else ""


def lost_work(report: Report) -> str:
    """``1,000 steps, 1h 02m`` since the latest valid checkpoint, or ``-`` when unknown.

    A time that the artifacts do not give is said to be unknown, never shown as ``0s``.
    """
    run = report.run
    if run.steps_lost is None:
        return "-" if run.seconds_lost is None else fmt_duration(run.seconds_lost)
    if run.steps_lost == 0:
        return "nothing (the checkpoint is from the last step)"
    steps = f"{run.steps_lost:,} step{'s' if run.steps_lost != 1 else ''}"
    return f"{steps}, {fmt_duration(run.seconds_lost) if run.seconds_lost is not None else 'time unknown'}"


def run_finished(report: Report) -> bool:
    """The run reached its planned step count: a problem in it was not a crash that lost work."""
    run = report.run
    return run.completed or (run.max_steps is not None and run.last_step is not None and run.last_step >= run.max_steps)


def plain_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for r in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return out


def accepted_summary(report: Report, limit: int = 4) -> str | None:
    """``2 known findings accepted by the baseline: oom.host, run.stalled`` (None: none accepted)."""
    n = len(report.accepted)
    if not n:
        return None
    rules = sorted({f.rule for f in report.accepted})
    shown = ", ".join(rules[:limit]) + (f" and {len(rules) - limit} more" if len(rules) > limit else "")
    return f"{n} known finding{'s' if n != 1 else ''} accepted by the baseline: {shown}"
