"""The fix for a root cause, as data (:class:`autopsy.model.Fix`), and its text in each format.

:func:`build_fix` runs once per analysis (``autopsy.analyze`` stores it on the report, the
JSON report keeps it), so the terminal, Markdown, HTML and JSON show the same steps. Step
text is prose with code in CommonMark code spans, as :func:`autopsy.report.sanitize.md_code`
writes them; :func:`spans` splits it again so that each renderer escapes prose its own way
and shows code as code.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Mapping
from typing import Any

from autopsy.model import Finding, Fix, Report, Severity
from autopsy.report.advice import advice_for, resume_advised, resume_step
from autopsy.report.common import ordered_findings, run_finished, verdict_finding
from autopsy.report.sanitize import md_text, strip_terminal

FINISHED_STEP = ("The run finished with this problem in it: after the fix, train again rather than "
                 "resuming from its checkpoints.")
_TICKS = re.compile(r"`+")


def build_fix(report: Report, cause: Finding | None = None, catalog: Any = None) -> Fix | None:
    """The fix for ``cause`` (default: the verdict's finding); None when nothing failed."""
    cause = cause if cause is not None else verdict_finding(report)
    if cause is None:
        return None
    related = explained(report, cause)
    adv = advice_for(cause.rule)
    steps = adv.steps(cause, report, [cause, *related]) if adv else []
    docs = card_docs(catalog if catalog is not None else _default_catalog(), cause.rule)
    action = strip_terminal(str(docs["action"])).strip() if docs.get("action") else None
    resume = None
    if resume_advised(cause.rule) and cause.severity >= Severity.ERROR and not run_finished(report):
        resume = resume_step(report)
    elif run_finished(report) and cause.severity >= Severity.ERROR:
        resume = FINISHED_STEP
    return Fix(rule=cause.rule, steps=tuple(steps), resume=resume, action=action or None)


def fix_for(report: Report, cause: Finding | None = None, catalog: Any = None) -> Fix | None:
    """The report's stored fix when it is for ``cause``, else one computed now (a hand-built report)."""
    cause = cause if cause is not None else verdict_finding(report)
    if cause is None:
        return None
    if report.fix is not None and report.fix.rule == cause.rule:
        return report.fix
    return build_fix(report, cause, catalog)


def explained(report: Report, cause: Finding) -> list[Finding]:
    """The findings linked to this root cause (symptoms and contributing causes), or other
    findings of its own rule."""
    return [f for f in ordered_findings(report) if f is not cause and (
        f.explained_by == cause.rule or (f.rule == cause.rule and f.explained_by is None))]


@functools.lru_cache(maxsize=1)
def _default_catalog() -> Any:
    try:
        from autopsy.engine.loader import load_catalog
    except ImportError:  # the engine is optional for rendering a saved report
        return None
    try:
        return load_catalog()
    except Exception:  # a broken user card must not stop a report from rendering
        return None


def card_docs(catalog: Any, rule: str) -> Mapping[str, Any]:
    """The ``docs`` of a rule's card, or {} when there is no catalog or no such card."""
    if catalog is None:
        return {}
    card = None
    try:
        card = catalog.get(rule)
    except (KeyError, AttributeError):
        cards = getattr(catalog, "cards", None)
        card = cards.get(rule) if isinstance(cards, Mapping) else None
    docs = getattr(card, "docs", None)
    return docs if isinstance(docs, Mapping) else {}


# ------------------------------------------------------------------------- text


def spans(text: str) -> list[tuple[str, bool]]:
    """``text`` as (piece, is_code) following CommonMark code spans (a run of N backticks up to
    the next run of exactly N); an unmatched run is prose."""
    out: list[tuple[str, bool]] = []
    pos = 0
    prose_start = 0
    while True:
        m = _TICKS.search(text, pos)
        if m is None:
            break
        close = next((c for c in _TICKS.finditer(text, m.end()) if len(c.group()) == len(m.group())), None)
        if close is None:
            pos = m.end()
            continue
        if m.start() > prose_start:
            out.append((text[prose_start:m.start()], False))
        body = text[m.end():close.start()]
        if len(body) >= 2 and body.startswith(" ") and body.endswith(" ") and body.strip():
            body = body[1:-1]
        out.append((body, True))
        pos = prose_start = close.end()
    if prose_start < len(text):
        out.append((text[prose_start:], False))
    return out


def fix_text_md(text: str) -> str:
    """A fix step for Markdown: prose escaped, code spans kept."""
    from autopsy.report.sanitize import md_code

    return "".join(md_code(p) if code else md_text(p) for p, code in spans(text))


def fix_text_plain(text: str) -> str:
    """A fix step for the terminal: one line, code in single backticks where that is unambiguous."""
    out = []
    for p, code in spans(text):
        p = strip_terminal(p, one_line=True)
        out.append(f"`{p}`" if code and "`" not in p else p)
    return "".join(out)


def fix_text_html(text: str) -> str:
    """A fix step as HTML: prose escaped, code in ``<code>``."""
    return "".join(f"<code>{html.escape(strip_terminal(p, one_line=True))}</code>" if code
                   else html.escape(strip_terminal(p, one_line=True)) for p, code in spans(text))
