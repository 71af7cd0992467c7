"""ISSUES-log entries in Markdown, in exactly the format of shared/issue-template.md.

One entry per root cause: the primary finding, then every other finding that nothing
explains (severity warning or worse). Findings explained by a root cause become its
symptoms. Headings, their order and bold markup are fixed; entries are separated by a
``---`` line; the date is the failure's date from the artifacts (UTC).

Generic rule text comes from the rule cards (``docs.why``, ``docs.action``, ``docs.references``),
run-specific steps from :mod:`autopsy.report.advice`. Every piece of text read from the run
goes through :mod:`autopsy.report.sanitize` (no raw HTML, fences longer than any backtick run).
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any

from autopsy.model import Finding, Report, Severity
from autopsy.report.advice import advice_for, config_evidence
from autopsy.report.common import (
    accepted_summary,
    clean_verdict,
    damaged_artifacts,
    failure_time,
    fmt_date,
    fmt_fact,
    fmt_step,
    fmt_time,
    is_cause_link,
    nothing_readable,
    ordered_findings,
    struck_at,
    unique_evidence,
)
from autopsy.report.fix import _default_catalog, card_docs, explained, fix_for, fix_text_md
from autopsy.report.sanitize import md_code, md_code_block, md_text, truncate

STATUS_IN_PROGRESS = "⏳ IN PROGRESS"
ENTRY_SEPARATOR = "\n---\n\n"
MAX_EVIDENCE_BULLETS = 5
MAX_RELATED_BULLETS = 2  # per linked finding: its message says most of it
FINGERPRINT_LABEL = "autopsy fingerprint"


# ------------------------------------------------------------------------- catalog


# -------------------------------------------------------------------------- entries


def root_causes(report: Report) -> list[Finding]:
    """The primary finding, then unexplained findings of severity error or worse.

    Warnings that nothing explains are risks, not failures: they stay in the terminal,
    JSON and HTML reports but get no ISSUES-log entry of their own. A report whose worst
    findings are warnings (no primary) gets an entry for its worst one.
    """
    out: list[Finding] = []
    for f in ordered_findings(report):
        if any(c.rule == f.rule for c in out):
            continue  # a second finding of the same rule (loss and grad_norm both NaN) is the same failure
        if f.primary or (f.explained_by is None and f.severity >= Severity.ERROR):
            out.append(f)
    if not out:
        top = next((f for f in ordered_findings(report) if f.severity >= Severity.WARNING), None)
        out = [top] if top is not None else []
    return out


def _evidence_bullet(ev: Any) -> str:
    if not ev.path and ev.tag is None:  # a run-level detail: no location to show
        return f"- {md_text(truncate(ev.detail or ev.excerpt or '', 200))}"
    loc = md_code(ev.location())
    parts = []
    if ev.excerpt:
        first = ev.excerpt.strip().splitlines()[0] if ev.excerpt.strip() else ""
        parts.append(md_code(truncate(first, 200)))
    if ev.detail:
        parts.append(md_text(truncate(ev.detail, 200)))
    return f"- {loc}: " + " ".join(parts) if parts else f"- {loc}"


def _evidence_key(ev: Any) -> tuple[Any, ...]:
    """Two pieces of evidence that show the user the same thing (same place, or same line of text)."""
    first = (ev.excerpt or "").strip().splitlines()[0] if (ev.excerpt or "").strip() else ""
    if first:
        return (ev.path, first)
    return (ev.path, ev.line, ev.tag, ev.detail)


def _symptoms(report: Report, cause: Finding, related: list[Finding]) -> list[str]:
    """What was observed: the cause's evidence, then each linked finding (once each, no config lines).

    Config lines are not symptoms (they are cited under Root Cause and Files Changed), and a
    linked finding's own evidence is often its message restated: only a few pieces that the
    message does not already say and the cause did not already show are added.
    """
    lines: list[str] = []
    seen: set[tuple[Any, ...]] = set()

    def add(ev: Any) -> bool:
        key = _evidence_key(ev)
        if key in seen or _is_config(report, ev):
            return False
        seen.add(key)
        lines.append(_evidence_bullet(ev))
        return True

    evs = unique_evidence(cause)
    shown = 0
    for ev in evs:
        if shown < MAX_EVIDENCE_BULLETS and add(ev):
            shown += 1
    hidden = sum(1 for ev in evs if _evidence_key(ev) not in seen and not _is_config(report, ev))
    if hidden:
        lines.append(f"- … and {hidden} more locations for {md_code(cause.rule)}")
    for f in related:
        if is_cause_link(f):
            continue  # a contributing cause is told under Root Cause, not as something observed
        lines.append(f"- {md_code(f.rule)} ({f.severity}): {md_text(f.message)}")
        extra = 0
        for ev in unique_evidence(f):
            if extra >= MAX_RELATED_BULLETS:
                break
            restated = ev.line is None and ev.detail is not None and ev.detail in f.message
            if not restated and add(ev):
                extra += 1
    run = report.run
    if run.last_step is not None:
        when = f" ({fmt_time(run.ended)})" if run.ended is not None else ""
        lines.append(f"- The run's last recorded step is {fmt_step(report)}{when}")
    for a in damaged_artifacts(report)[:MAX_EVIDENCE_BULLETS]:
        note = f": {md_text(a.note)}" if a.note else ""
        lines.append(f"- {md_code(a.path)} is {a.status}{note}")
    return lines or ["- (no evidence recorded)"]


def _root_cause(report: Report, cause: Finding, related: list[Finding], docs: Mapping[str, Any]) -> list[str]:
    lines = [md_text(cause.message)]
    excerpt = next((e for e in cause.evidence if e.excerpt and not _is_config(report, e)), None)
    if excerpt is not None and excerpt.excerpt:
        lines += ["", md_code_block(excerpt.excerpt)]
    adv = advice_for(cause.rule)
    told = adv.cause(cause, report, related) if adv else []
    for para in told:
        lines += ["", para]
    cfg = config_evidence(report, [cause, *related])
    if cfg:
        lines += ["", "Configuration involved:"]
        lines += [f"- {md_code((e.excerpt or '').strip())} at {md_code(e.location())}" for e in cfg]
    shown = {k: v for k, v in sorted(cause.facts.items())
             if v is not None and not k.endswith(_ANALYSIS_TIME_SUFFIXES)}
    if shown:
        facts = "; ".join(f"{md_code(k)} = {md_text(fmt_fact(k, v))}" for k, v in shown.items())
        lines += ["", f"Facts: {facts}"]
    causes = list(dict.fromkeys(f.rule for f in related if f.rule != cause.rule and is_cause_link(f)))
    if causes and told:  # the advice paragraph above already tells the cause with its figures
        names = ", ".join(md_code(r) for r in causes)
        lines += ["", f"Contributing cause: {names} (above) led to {md_code(cause.rule)}."]
    elif causes:
        text = "; ".join(f"{md_code(f.rule)} ({f.severity}): {md_text(f.message)}" for f in related
                         if f.rule in causes and f is next(g for g in related if g.rule == f.rule))
        lines += ["", f"Contributing cause (it led to {md_code(cause.rule)}): {text}"]
    others = list(dict.fromkeys(f.rule for f in related if f.rule != cause.rule and not is_cause_link(f)))
    if others:
        names = ", ".join(md_code(r) for r in others)
        lines += ["", f"This cause also explains {names} (see Symptoms)."]
    return lines


# Facts measured on the machine that ran autopsy, not on the run: misleading in an ISSUES log.
_ANALYSIS_TIME_SUFFIXES = ("_now", "_at_analysis")


def _is_config(report: Report, ev: Any) -> bool:
    from autopsy.report.advice import is_config_evidence

    return is_config_evidence(report, ev)


def _solution(report: Report, cause: Finding, catalog: Any) -> list[str]:
    fix = fix_for(report, cause, catalog)
    steps = [fix_text_md(s) for s in fix.steps] if fix is not None else []
    if fix is not None and fix.action:
        action = md_text(fix.action)
        steps.append(f"In general: {action}" if steps else action)
    if fix is not None and fix.resume:
        steps.append(fix_text_md(fix.resume))
    if not steps:
        steps = [f"See {md_code(f'autopsy rules explain {cause.rule}')}."]
    return [f"{i}. {s}" for i, s in enumerate(steps, 1)]


def _files_changed(report: Report, cause: Finding, related: list[Finding]) -> list[str]:
    cfg = config_evidence(report, [cause, *related])
    if not cfg:
        return ["- None identified from the artifacts (see Solution Applied)."]
    return [f"- {md_code(e.path or '')} (line {e.line}): {md_code((e.excerpt or '').strip())}" for e in cfg]


def _lessons(cause: Finding, docs: Mapping[str, Any]) -> list[str]:
    adv = advice_for(cause.rule)
    lessons = list(adv.lesson) if adv and adv.lesson else []
    if docs.get("why"):
        lessons.append(str(docs["why"]).strip())
    if not lessons:
        lessons = [cause.title]
    return [f"{i}. {md_text(s)}" for i, s in enumerate(lessons, 1)]


def _guidelines(report: Report, cause: Finding, docs: Mapping[str, Any]) -> list[str]:
    lines = []
    summary = f": {md_text(str(docs['summary']).strip())}" if docs.get("summary") else ""
    lines.append(f"- {md_code(f'autopsy rules explain {cause.rule}')}{summary}")
    for ref in docs.get("references") or ():
        ref = str(ref).strip()
        if ref.startswith(("http://", "https://")) and not any(c in ref for c in " <>\n"):
            lines.append(f"- <{ref}>")
        elif ref:
            lines.append(f"- {md_text(ref)}")
    lines.append(f"- {FINGERPRINT_LABEL}: {md_code(cause.fingerprint)} (run `{run_identity(report)}`, "
                 f"path {md_code(report.run.path)})")
    return lines


_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def run_identity(report: Report) -> str:
    """``<parent>/<run dir name>@<failure time>``: the run an entry is about, the same from any cwd.

    ``--append`` writes a failure once per (fingerprint, run): the fingerprint says which
    failure, this says which run. The directory's own name (not the path as typed, which
    differs by cwd and machine) with its parent's (two runs named ``output`` in ``exp1/`` and
    ``exp2/`` are two runs), and the failure's time from the artifacts (not a file
    mtime, which a copy rewrites); the last step when no time is known, else ``no-time``.
    """
    raw = report.run.path.rstrip("/\\") or report.run.path
    parts = PurePath(raw).parts
    if not parts or parts[-1] in ("", ".", ".."):
        try:
            parts = Path(raw or ".").resolve().parts
        except OSError:
            pass
    # the directory and its parent as given (exp1/output and exp2/output are two runs); a bare
    # name stays bare (resolving it would make the identity depend on the cwd)
    names = [_UNSAFE_NAME.sub("_", p).strip("_") for p in parts[-2:] if p not in ("/", "\\")]
    name = "/".join(n for n in names if n) or "run"
    run = report.run
    ts = run.failure_time if not (run.failure_time_source or "").endswith("last written") else None
    if ts is None or not math.isfinite(ts):
        ts = run.ended if run.ended is not None and math.isfinite(run.ended) else None
    if ts is not None:
        try:
            stamp = _dt.datetime.fromtimestamp(ts, tz=_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            return f"{name}@{stamp}"
        except (OverflowError, OSError, ValueError):
            pass
    if run.last_step is not None:
        return f"{name}@step-{run.last_step}"
    return f"{name}@no-time"  # always an "@": an entry without one is an older autopsy's path as typed


def entry_date(report: Report, cause: Finding) -> str:
    """The failure's date from the artifacts; the newest artifact mtime when nothing better."""
    date = fmt_date(failure_time(report, cause))
    if date is None and report.artifacts:
        date = fmt_date(max(a.mtime for a in report.artifacts))
    return date or "unknown-date"


def entry_title(cause: Finding) -> str:
    adv = advice_for(cause.rule)
    step = str(cause.step) if cause.step is not None else None
    if adv is not None and ("{step}" not in adv.title or step is not None):
        return adv.title.format(step=step)
    return cause.title + (f" at step {step}" if step is not None else "")


def _issue_line(report: Report, cause: Finding) -> str:
    """When it struck, then the finding's message (``At step 80, 2026-11-21 12:32:38 UTC: ...``)."""
    when = struck_at(report, cause)
    if not when:
        return md_text(cause.message)
    return f"{md_text(when[0].upper() + when[1:])}: {md_text(cause.message)}"


def render_entry(report: Report, cause: Finding, catalog: Any = None) -> str:
    """One ISSUES-log entry for one root cause (no trailing separator)."""
    docs = card_docs(catalog if catalog is not None else _default_catalog(), cause.rule)
    related = explained(report, cause)
    out = [
        f"## {entry_date(report, cause)} - {md_text(entry_title(cause))}",
        "",
        f"**Issue:** {_issue_line(report, cause)}",
        "",
        "**Symptoms:**",
        *_symptoms(report, cause, related),
        "",
        "**Root Cause:**",
        *_root_cause(report, cause, related, docs),
        "",
        "**Solution Applied:**",
        *_solution(report, cause, catalog),
        "",
        "**Files Changed:**",
        *_files_changed(report, cause, related),
        "",
        "**Lesson Learned:**",
        *_lessons(cause, docs),
        "",
        "**Related Guidelines:**",
        *_guidelines(report, cause, docs),
        "",
        f"**Status:** {STATUS_IN_PROGRESS}",
    ]
    return "\n".join(out) + "\n"


def render_entries(report: Report, catalog: Any = None) -> list[tuple[str, str]]:
    """(fingerprint, entry text) for each root cause, primary first."""
    return [(f.fingerprint, render_entry(report, f, catalog)) for f in root_causes(report)]


def render_markdown(report: Report, catalog: Any = None) -> str:
    """The report as ISSUES-log entries; a one-line note when nothing needs an entry."""
    entries = render_entries(report, catalog)
    if not entries:
        empty = nothing_readable(report)
        if empty is not None:
            return f"**autopsy:** nothing autopsy can read in {md_code(report.run.path)}: {md_text(empty)}.\n"
        what, details = clean_verdict(report)
        return f"**autopsy:** {what} in {md_code(report.run.path)} ({md_text(details)}).\n"
    text = ENTRY_SEPARATOR.join(text for _, text in entries)
    known = accepted_summary(report)
    return text if known is None else f"{text.rstrip()}\n\n**autopsy:** {md_text(known)}.\n"


def render_markdown_many(reports: list[Report], catalog: Any = None) -> str:
    parts = [render_markdown(r, catalog) for r in reports]
    return ENTRY_SEPARATOR.join(parts)
