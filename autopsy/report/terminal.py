"""The terminal report: a one-line verdict, findings by severity with evidence, recovery.

Plain text unless ``color=True`` (the CLI decides: a TTY, no ``NO_COLOR``, no ``--no-color``).
Every excerpt is stripped of escape and control sequences first, so a log cannot move
the cursor, retitle the window or hide text; excerpt lines sit behind a ``|`` gutter so
that no line of the report starts with text taken from the run (CI runners read lines
starting with ``::`` as commands).
"""

from __future__ import annotations

from collections.abc import Sequence

from autopsy.model import Evidence, Finding, Report, Severity
from autopsy.report.advice import poisoned_words, resume_advised, resume_words
from autopsy.report.common import (
    fmt_facts,
    fmt_int,
    fmt_step,
    link_phrase,
    lost_work,
    missing_inputs,
    notable_artifacts,
    nothing_readable,
    ordered_findings,
    plain_table,
    run_finished,
    struck_at,
    unique_evidence,
    verdict_finding,
)
from autopsy.report.sanitize import strip_terminal, truncate

MAX_EVIDENCE = 5
MAX_EXCERPT_LINES = 8
EXCERPT_WIDTH = 160
MESSAGE_WIDTH = 600  # a finding's message is its diagnosis: shown whole unless absurdly long

_SEV_STYLE = {
    Severity.CRITICAL: "\x1b[1;31m",
    Severity.ERROR: "\x1b[31m",
    Severity.WARNING: "\x1b[33m",
    Severity.INFO: "\x1b[36m",
}
_BOLD, _DIM, _GREEN, _RESET = "\x1b[1m", "\x1b[2m", "\x1b[32m", "\x1b[0m"


class _Style:
    def __init__(self, color: bool) -> None:
        self.color = color

    def sev(self, sev: Severity, text: str) -> str:
        return f"{_SEV_STYLE[sev]}{text}{_RESET}" if self.color else text

    def bold(self, text: str) -> str:
        return f"{_BOLD}{text}{_RESET}" if self.color else text

    def dim(self, text: str) -> str:
        return f"{_DIM}{text}{_RESET}" if self.color else text

    def ok(self, text: str) -> str:
        return f"{_GREEN}{text}{_RESET}" if self.color else text


def _clean(text: str, limit: int = EXCERPT_WIDTH) -> str:
    return truncate(strip_terminal(text, one_line=True), limit)


def render_verdict(report: Report, *, color: bool = False) -> str:
    """One line: where, what (primary rule and message), when (step, time)."""
    st = _Style(color)
    top = verdict_finding(report)
    path = strip_terminal(report.run.path, one_line=True)
    if top is None:
        empty = nothing_readable(report)
        if empty is not None:
            return f"nothing autopsy can read in {path}: {_clean(empty, 400)}"
        what = st.ok("no failure found")
        gaps = [f"last step {fmt_step(report)}"]
        if report.not_evaluated:
            gaps.append(f"{len(report.not_evaluated)} rules not evaluated")
        if report.rule_errors:
            gaps.append(f"{len(report.rule_errors)} rule errors")
        return f"{path}: {what} ({', '.join(gaps)})"
    when = _clean(struck_at(report, top), 200)  # the time's source may name a file of the run
    when = f" {when}" if when else ""
    label = st.sev(top.severity, f"{top.severity.name} {top.rule}")
    return f"{path}: {label}{when}: {_clean(top.message, 240)}"


def _evidence_lines(ev: Evidence, st: _Style, shown: set[str] | None = None) -> list[str]:
    """Location, detail and excerpt; an excerpt already shown for this finding is not repeated."""
    loc = strip_terminal(ev.location(), one_line=True)
    if ev.rank is not None and "rank" not in loc:
        loc += f" [rank {ev.rank}]"
    out = [f"    {st.dim(loc)}" + (f"  {_clean(ev.detail)}" if ev.detail else "")]
    text = (ev.excerpt or "").strip()
    if shown is not None and text:
        if text in shown:
            return out
        shown.add(text)
    if ev.excerpt:
        lines = strip_terminal(ev.excerpt).strip("\n").splitlines()
        for line in lines[:MAX_EXCERPT_LINES]:
            out.append(f"      | {truncate(line.replace(chr(9), '    '), EXCERPT_WIDTH)}")
        if len(lines) > MAX_EXCERPT_LINES:
            out.append(f"      | … ({len(lines) - MAX_EXCERPT_LINES} more lines)")
    return out


def _finding_lines(report: Report, f: Finding, st: _Style) -> list[str]:
    tag = " [primary]" if f.primary else (f" ({link_phrase(f)})" if f.explained_by else "")
    when = _clean(struck_at(report, f), 200)
    when = f"  {when[3:]}" if when else ""  # drop the leading "at "
    head = f"  {st.sev(f.severity, f'{f.severity.name:<8}')} {st.bold(f.rule)}{tag}{when}"
    out = [head, f"    {_clean(f.message, MESSAGE_WIDTH)}"]
    evidence = unique_evidence(f)
    shown: set[str] = set()
    for ev in evidence[:MAX_EVIDENCE]:
        out += _evidence_lines(ev, st, shown)
    if len(evidence) > MAX_EVIDENCE:
        out.append(f"    … {len(evidence) - MAX_EVIDENCE} more")
    if f.facts:
        out.append(f"    {st.dim('facts:')} {_clean(fmt_facts(f.facts), 240)}")
    return out


def _recovery_lines(report: Report) -> list[str]:
    run = report.run
    top = verdict_finding(report)
    if top is None or (run.latest_valid_checkpoint is None and run.resume_hint is None and run.last_step is None):
        return []  # nothing failed (or nothing known): no recovery to advise
    out = ["Recovery"]
    if run_finished(report):
        out.append(f"  the run finished its planned steps ({fmt_step(report)}): no work was lost to a crash")
        if not resume_advised(top.rule):
            out.append(f"  the trained model carries {top.rule}: fix it, then train again (resuming keeps it)")
            out += _restart_point(report, top)
        return out
    if run.latest_valid_checkpoint:
        step = f" (step {run.latest_valid_step:,})" if run.latest_valid_step is not None else ""
        out.append(f"  latest valid checkpoint: {strip_terminal(run.latest_valid_checkpoint, one_line=True)}{step}")
    elif run.poisoned_checkpoints:
        out.append("  latest valid checkpoint: none clean (all saved after the loss became non-finite)")
    else:
        out.append("  latest valid checkpoint: none found (a restart begins from scratch)")
    if (poisoned := poisoned_words(report)) is not None:
        out.append(f"  {strip_terminal(poisoned, one_line=True)}")
    out.append(f"  last step: {fmt_step(report)}")
    out.append(f"  lost since the checkpoint: {lost_work(report)}")
    if not resume_advised(top.rule):
        since = f" from a checkpoint saved before step {top.step:,} (or from scratch)" \
            if top.step is not None and not (run.poisoned_checkpoints and not run.latest_valid_checkpoint) else ""
        out.append(f"  fix {top.rule} before restarting{since}: resuming as it is repeats the problem")
        out += _restart_point(report, top)
    elif run.resume is not None and run.resume.command:
        out.append(f"  resume, run from {strip_terminal(run.resume.cwd, one_line=True)}:")
        out.append(f"    {strip_terminal(run.resume.command, one_line=True)}")
    elif run.resume is not None and run.resume.note:
        out.append(f"  resume: {strip_terminal(run.resume.note, one_line=True)}")
    elif run.latest_valid_checkpoint:
        out.append(f"  resume: {strip_terminal(resume_words(report), one_line=True)}")
    return out


def _restart_point(report: Report, top: Finding) -> list[str]:
    """A checkpoint saved before the problem began is a sound restart point once it is fixed."""
    run = report.run
    if run.latest_valid_checkpoint is None or run.latest_valid_step is None or top.step is None:
        return []
    if run.latest_valid_step >= top.step:
        return []
    ckpt = strip_terminal(run.latest_valid_checkpoint, one_line=True)
    return [f"  {ckpt} (step {run.latest_valid_step:,}) predates it (step {top.step:,}): once fixed, "
            "restart from there rather than from scratch"]


def render_terminal(report: Report, *, color: bool = False) -> str:
    """The full report for one run."""
    st = _Style(color)
    out = [render_verdict(report, color=color), ""]
    findings = ordered_findings(report)
    if findings:
        out.append(f"Findings ({len(findings)})")
        for f in findings:
            out += _finding_lines(report, f, st)
        out.append("")
    rec = _recovery_lines(report)
    if rec:
        out += [*rec, ""]
    collapsed = missing_inputs(report)
    if collapsed is not None:
        out += [f"Not evaluated ({len(report.not_evaluated)})", f"  {collapsed}", ""]
    elif report.not_evaluated:
        out.append(f"Not evaluated ({len(report.not_evaluated)})")
        for o in sorted(report.not_evaluated, key=lambda o: o.rule):
            out.append(f"  {o.rule}: {_clean(o.reason or 'no reason given')}")
        out.append("")
    if report.rule_errors:
        out.append(f"Rule errors ({len(report.rule_errors)})")
        for o in sorted(report.rule_errors, key=lambda o: o.rule):
            out.append(f"  {o.rule}: {_clean(o.reason or 'no reason given')}")
        out.append("")
    notable = notable_artifacts(report)
    if notable or report.problems:
        out.append(f"Unreadable, skipped or empty ({len(notable) + len(report.problems)})")
        for a, state in notable:
            note = f": {_clean(a.note)}" if a.note else ""
            out.append(f"  {_clean(a.path)} ({state}){note}")
        for p in sorted(report.problems):
            out.append(f"  {_clean(p)}")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def render_table(reports: Sequence[Report], *, color: bool = False) -> str:
    """Many runs: one row per run (verdict, last step, lost work)."""
    st = _Style(color)
    rows = []
    for r in reports:
        top = verdict_finding(r)
        verdict = ("nothing readable" if nothing_readable(r) is not None else "ok") if top is None \
            else f"{top.severity} {top.rule}"
        n = len(r.findings)
        lost = lost_work(r) if top is not None and top.severity >= Severity.ERROR else "-"  # only a failure loses work
        rows.append([_clean(r.run.path, 60), verdict, fmt_step(r), lost, fmt_int(n)])
    lines = plain_table(["RUN", "VERDICT", "LAST STEP", "LOST", "FINDINGS"], rows)
    if color:
        lines[0] = st.bold(lines[0])
    return "\n".join(lines) + "\n"
