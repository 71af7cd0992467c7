"""The terminal report: the verdict, its evidence, the fix and the recovery, then the rest.

At most ``width`` (100) columns, wrapped between words (a path longer than a line stays
whole), so that a person sees the whole verdict and what to do on the first screen; other
findings, files that could not be read and (last, short) rules that could not be checked
follow. ``verbose`` shows every fact, all evidence and each rule's reason.

Plain text unless ``color=True`` (the CLI decides: a TTY, no ``NO_COLOR``, no ``--no-color``).
Every excerpt is stripped of escape and control sequences first, so a log cannot move
the cursor, retitle the window or hide text; excerpt lines sit behind a ``|`` gutter so
that no line of the report starts with text taken from the run (CI runners read lines
starting with ``::`` as commands).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from autopsy.model import Evidence, Finding, Report, Severity
from autopsy.report.advice import poisoned_words, resume_advised, resume_words
from autopsy.report.common import (
    clean_verdict,
    finding_sort_key,
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
from autopsy.report.fix import fix_for, fix_text_plain
from autopsy.report.sanitize import strip_terminal, truncate

MAX_EVIDENCE = 5
MAX_EXCERPT_LINES = 8
EXCERPT_WIDTH = 160
MESSAGE_WIDTH = 600  # a finding's message is its diagnosis: shown whole unless absurdly long
VERDICT_WIDTH = 2000  # the verdict is never cut (only a hostile, absurdly long message is)
MAX_PRIMARY_EVIDENCE = 3  # the verdict's evidence before the fix (-v: all)
MAX_OTHER_EVIDENCE = 2  # findings after the primary: their first evidence (-v: all)
DEFAULT_WIDTH = 100
MIN_WIDTH = 40

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
        what, details = clean_verdict(report)
        return f"{path}: {st.ok(what)} ({_clean(details, VERDICT_WIDTH)})"
    when = _clean(struck_at(report, top), 200)  # the time's source may name a file of the run
    when = f" {when}" if when else ""
    label = st.sev(top.severity, f"{top.severity.name} {top.rule}")
    return f"{path}: {label}{when}: {_clean(top.message, VERDICT_WIDTH)}"


def _wrap(text: str, width: int, indent: str = "", hang: str | None = None) -> list[str]:
    """``text`` wrapped at ``width`` between words only (a word longer than a line stays whole)."""
    return textwrap.wrap(text, width=width, initial_indent=indent,
                         subsequent_indent=indent if hang is None else hang, break_long_words=False,
                         break_on_hyphens=False) or [indent.rstrip()]


def _command_lines(command: str, width: int, indent: str) -> list[str]:
    """A shell command wrapped between words with `` \\`` continuations, so it still pastes whole."""
    words = command.split(" ")
    lines: list[str] = []
    current = indent
    for w in words:
        if current.strip() and len(current) + 1 + len(w) + 2 > width:
            lines.append(current + " \\")
            current = indent + "  " + w
        else:
            current = (current + " " + w) if current.strip() else current + w
    lines.append(current)
    return lines


def _verdict_lines(report: Report, st: _Style, width: int) -> list[str]:
    """The verdict, whole, wrapped: where, what (primary rule and message), when."""
    top = verdict_finding(report)
    if top is None:
        return _wrap(strip_terminal(render_verdict(report), one_line=True), width, hang="  ")
    path = strip_terminal(report.run.path, one_line=True)
    when = _clean(struck_at(report, top), 200)
    label = f"{top.severity.name} {top.rule}"
    lines = _wrap(f"{path}: {label}{' ' + when if when else ''}: {_clean(top.message, VERDICT_WIDTH)}", width,
                  hang="  ")
    if st.color and label in lines[0]:
        lines[0] = lines[0].replace(label, st.sev(top.severity, label), 1)
    return lines


def _evidence_lines(ev: Evidence, st: _Style, width: int, shown: set[str] | None = None) -> list[str]:
    """Location, detail and excerpt; an excerpt already shown for this finding is not repeated."""
    loc = strip_terminal(ev.location(), one_line=True)
    if ev.rank is not None and "rank" not in loc:
        loc += f" [rank {ev.rank}]"
    out = _wrap(f"{loc}  {_clean(ev.detail, 600)}" if ev.detail else loc, width, "    ", "      ")
    if st.color:
        out[0] = out[0].replace(loc, st.dim(loc), 1)
    text = (ev.excerpt or "").strip()
    if shown is not None and text:
        if text in shown:
            return out
        shown.add(text)
    if ev.excerpt:
        lines = strip_terminal(ev.excerpt).strip("\n").splitlines()
        room = max(20, width - 8)
        for line in lines[:MAX_EXCERPT_LINES]:
            out.append(f"      | {truncate(line.replace(chr(9), '    ').rstrip(), room)}")
        if len(lines) > MAX_EXCERPT_LINES:
            out.append(f"      | … ({len(lines) - MAX_EXCERPT_LINES} more lines)")
    return out


def _facts_lines(f: Finding, st: _Style, width: int, verbose: bool) -> list[str]:
    if not f.facts:
        return []
    if verbose:
        return _wrap("facts: " + fmt_facts(f.facts, limit=len(f.facts)), width, "    ", "      ")
    text = fmt_facts(f.facts, limit=4)
    more = f", … (-v: all {len(f.facts)})"
    if len(f.facts) > 4:
        text = text.rsplit(", … (+", 1)[0] + more
    room = width - len("    facts: ")
    if len(text) > room:  # compact: as many whole facts as fit on one line
        parts, used = [], 0
        for part in text.split(", "):
            if used + len(part) + 2 > room - 16:
                break
            parts.append(part)
            used += len(part) + 2
        text = ", ".join(parts) + more
    return [f"    {st.dim('facts:')} {strip_terminal(text, one_line=True)}"]


def _finding_lines(report: Report, f: Finding, st: _Style, width: int, verbose: bool,
                   *, evidence_limit: int = MAX_EVIDENCE, message: bool = True) -> list[str]:
    tag = " [primary]" if f.primary else (f" ({link_phrase(f)})" if f.explained_by else "")
    when = _clean(struck_at(report, f), 200)
    when = f"  {when[3:]}" if when else ""  # drop the leading "at "
    head = _wrap(f"{f.severity.name:<8} {f.rule}{tag}{when}", width, "  ", "           ")
    if st.color:
        head[0] = head[0].replace(f"{f.severity.name:<8} {f.rule}",
                                  f"{st.sev(f.severity, f'{f.severity.name:<8}')} {st.bold(f.rule)}", 1)
    out = head + (_wrap(_clean(f.message, MESSAGE_WIDTH), width, "    ") if message else [])
    evidence = unique_evidence(f)
    limit = len(evidence) if verbose else evidence_limit
    shown: set[str] = set()
    for ev in evidence[:limit]:
        out += _evidence_lines(ev, st, width, shown)
    if len(evidence) > limit:
        out.append(f"    … {len(evidence) - limit} more (-v shows them)")
    return out + _facts_lines(f, st, width, verbose)


def _fix_lines(report: Report, width: int) -> list[str]:
    top = verdict_finding(report)
    fix = fix_for(report, top) if top is not None and top.severity >= Severity.WARNING else None
    if fix is None:
        return []
    steps = [fix_text_plain(s) for s in fix.steps]
    if fix.action:
        steps.append(("In general: " if steps else "") + strip_terminal(fix.action, one_line=True))
    if not steps:
        return []
    out = ["Fix"]
    for n, step in enumerate(steps, 1):
        out += _wrap(f"{n}. {step}", width, "  ", "     ")
    return out


def _recovery_lines(report: Report, width: int) -> list[str]:
    run = report.run
    top = verdict_finding(report)
    if top is None or (run.latest_valid_checkpoint is None and run.resume is None and run.last_step is None):
        return []  # nothing failed (or nothing known): no recovery to advise
    out = ["Recovery"]

    def say(text: str) -> None:
        out.extend(_wrap(strip_terminal(text, one_line=True), width, "  ", "    "))

    if run_finished(report):
        say(f"the run finished its planned steps ({fmt_step(report)}): no work was lost to a crash")
        if not resume_advised(top.rule):
            say(f"the trained model carries {top.rule}: fix it, then train again (resuming keeps it)")
            out += _restart_point(report, top, width)
        return out
    if run.latest_valid_checkpoint:
        step = f" (step {run.latest_valid_step:,})" if run.latest_valid_step is not None else ""
        say(f"latest valid checkpoint: {run.latest_valid_checkpoint}{step}")
    elif run.poisoned_checkpoints:
        say("latest valid checkpoint: none clean (all saved after the loss became non-finite)")
    else:
        say("latest valid checkpoint: none found (a restart begins from scratch)")
    if (poisoned := poisoned_words(report)) is not None:
        say(poisoned)
    say(f"last step: {fmt_step(report)}; lost since the checkpoint: {lost_work(report)}")
    if not resume_advised(top.rule):
        since = f" from a checkpoint saved before step {top.step:,} (or from scratch)" \
            if top.step is not None and not (run.poisoned_checkpoints and not run.latest_valid_checkpoint) else ""
        say(f"fix {top.rule} before restarting{since}: resuming as it is repeats the problem")
        out += _restart_point(report, top, width)
    elif run.resume is not None and run.resume.command:
        say(f"resume, run from {run.resume.cwd}:")
        out += _command_lines(strip_terminal(run.resume.command, one_line=True), width, "    ")
    elif run.resume is not None and run.resume.note:
        say(f"resume: {run.resume.note}")
    elif run.latest_valid_checkpoint:
        say(f"resume: {resume_words(report)}")
    return out


def _restart_point(report: Report, top: Finding, width: int) -> list[str]:
    """A checkpoint saved before the problem began is a sound restart point once it is fixed."""
    run = report.run
    if run.latest_valid_checkpoint is None or run.latest_valid_step is None or top.step is None:
        return []
    if run.latest_valid_step >= top.step:
        return []
    ckpt = strip_terminal(run.latest_valid_checkpoint, one_line=True)
    return _wrap(f"{ckpt} (step {run.latest_valid_step:,}) predates it (step {top.step:,}): once fixed, "
                 "restart from there rather than from scratch", width, "  ", "    ")


def _not_evaluated_lines(report: Report, width: int, verbose: bool) -> list[str]:
    """Short and last: the rule ids in one paragraph (each reason under -v)."""
    if not report.not_evaluated:
        return []
    n = len(report.not_evaluated)
    collapsed = missing_inputs(report)
    if collapsed is not None:
        return [f"Not evaluated ({n})", *_wrap(collapsed, width, "  ", "    ")]
    out = [f"Not evaluated ({n})"]
    ordered = sorted(report.not_evaluated, key=lambda o: o.rule)
    if verbose:
        for o in ordered:
            out += _wrap(f"{o.rule}: {_clean(o.reason or 'no reason given', 400)}", width, "  ", "    ")
        return out
    return out + _wrap(", ".join(o.rule for o in ordered) + " (-v: why)", width, "  ", "  ")


def render_terminal(report: Report, *, color: bool = False, width: int = DEFAULT_WIDTH, verbose: bool = False) -> str:
    """The full report for one run, ``width`` columns wide: the verdict (whole), the primary
    finding's evidence, the fix and the recovery first; other findings, files that could not
    be read and rules that could not be checked after them. ``verbose``: every fact, every
    piece of evidence and each rule's reason for not being checked."""
    st = _Style(color)
    width = max(MIN_WIDTH, width)
    out = [*_verdict_lines(report, st, width), ""]
    findings = ordered_findings(report)
    top = verdict_finding(report)
    if top is not None:
        out += [st.bold("Evidence"), *_finding_lines(report, top, st, width, verbose, message=False,
                                                     evidence_limit=MAX_PRIMARY_EVIDENCE), ""]
    for block in (_fix_lines(report, width), _recovery_lines(report, width)):
        if block:
            out += [st.bold(block[0]), *block[1:], ""]
    others = [f for f in findings if f is not top]
    if others:
        out.append(st.bold(f"Other findings ({len(others)})"))
        for f in others:
            out += _finding_lines(report, f, st, width, verbose, evidence_limit=MAX_OTHER_EVIDENCE)
        out.append("")
    if report.accepted:  # known failures, listed so a reviewer sees what the baseline hid
        out.append(st.bold(f"Accepted by the baseline ({len(report.accepted)})"))
        for f in sorted(report.accepted, key=finding_sort_key):
            out += _wrap(f"{f.fingerprint}: {_clean(f.message, 120)}", width, "  ", "    ")
        out.append("")
    if report.rule_errors:
        out.append(st.bold(f"Rule errors ({len(report.rule_errors)})"))
        for o in sorted(report.rule_errors, key=lambda o: o.rule):
            out += _wrap(f"{o.rule}: {_clean(o.reason or 'no reason given', 400)}", width, "  ", "    ")
        out.append("")
    notable = notable_artifacts(report)
    if notable or report.problems:
        out.append(st.bold(f"Unreadable, skipped or empty ({len(notable) + len(report.problems)})"))
        for a, state in notable:
            note = f": {_clean(a.note)}" if a.note else ""
            out += _wrap(f"{_clean(a.path)} ({state}){note}", width, "  ", "    ")
        for p in sorted(report.problems):
            out += _wrap(_clean(p, 400), width, "  ", "    ")
        out.append("")
    ne = _not_evaluated_lines(report, width, verbose)
    if ne:
        out += [st.bold(ne[0]), *ne[1:], ""]
    return "\n".join(out).rstrip("\n") + "\n"


def render_table(reports: Sequence[Report], *, color: bool = False) -> str:
    """Many runs: one row per run (verdict, last step, lost work)."""
    st = _Style(color)
    rows = []
    for r in reports:
        top = verdict_finding(r)
        verdict = ("nothing readable" if nothing_readable(r) is not None else "known only" if r.accepted
                   else "ok") if top is None else f"{top.severity} {top.rule}"
        n = len(r.findings)
        lost = lost_work(r) if top is not None and top.severity >= Severity.ERROR else "-"  # only a failure loses work
        rows.append([_clean(r.run.path, 60), verdict, fmt_step(r), lost, fmt_int(n)])
    lines = plain_table(["RUN", "VERDICT", "LAST STEP", "LOST", "FINDINGS"], rows)
    if color:
        lines[0] = st.bold(lines[0])
    return "\n".join(lines) + "\n"
