"""Terminal and markdown renderings of a :class:`~autopsy.compare.RunDiff`.

Every string that comes from a run (values, templates, paths) passes the report sanitizers:
``strip_terminal`` for the terminal, ``md_text`` / ``md_code`` for markdown. The markdown is a
section meant to sit under an ISSUES-log entry's Root Cause.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

from autopsy.compare.model import Difference, RunDiff
from autopsy.report.sanitize import md_code, md_text, strip_terminal, truncate

TOP = 5  # differences shown as the ranked explanation
WIDTH = 100  # terminal lines are wrapped here, between words (a longer word stays whole)
PER_KIND = 8  # rows per section
KIND_TITLES = {"config": "Configuration", "environment": "Environment", "template": "Log templates",
               "metric": "Metrics", "checkpoint": "Checkpoints", "file": "Input files",
               "finding": "Findings only in the bad run"}


def _t(text: object, limit: int = 120) -> str:
    return truncate(strip_terminal(str(text), one_line=True), limit)


def _value(v: str | None) -> str:
    return "(absent)" if v is None else _t(v, 60)


def _where(d: Difference) -> str:
    parts = []
    if d.good_where:
        parts.append("good " + ", ".join(_t(w, 80) for w in d.good_where[:2]))
    if d.bad_where:
        parts.append("bad " + ", ".join(_t(w, 80) for w in d.bad_where[:2]))
    return "; ".join(parts)


def _headline(d: Difference) -> str:
    if d.kind == "template":
        side = "new" if d.bad is not None else "gone"
        return f"log line {side}: {_t(d.key, 90)}"
    if d.kind == "metric":
        return f"{d.key} diverges at step {d.step}: {_value(d.bad)} outside {_value(d.good)}"
    if d.kind == "finding":
        return f"{d.key}: {_t(d.bad or '', 90)}"
    return f"{d.kind} {_t(d.key, 60)}: {_value(d.good)} -> {_value(d.bad)}"


def _verdict(rd: RunDiff) -> str:
    bad = rd.bad_primary
    what = f"{bad.rule}: {_t(bad.message, 600)}" if bad is not None else "no failure found"
    if rd.agree:
        return f"The runs agree within noise (bad run: {what})."
    top = rd.top
    head = f"Most likely explanation: {_headline(top)}" if top is not None else "No difference found"
    return f"Bad run: {what}\n{head}"


def render_terminal(rd: RunDiff, *, verbose: bool = False) -> str:
    goods = ", ".join(_t(g, 80) for g in rd.goods)
    out = [f"autopsy diff: {goods} (good) vs {_t(rd.bad, 80)} (bad)", "", _verdict(rd), ""]
    ranked = [d for d in rd.differences if d.score >= 0.3] or list(rd.differences[:1])
    if ranked and not rd.agree:
        out.append("Ranked differences (most likely cause first):")
        for i, d in enumerate(ranked[:TOP], 1):
            out.append(f"  {i}. [{d.score:.2f}] {_headline(d)}")
            out.append(f"     why: {_t(d.why, 400)}")
            where = _where(d)
            if where:
                out.append(f"     where: {where}")
        out.append("")
    for kind, title in KIND_TITLES.items():
        items = [d for d in rd.differences if d.kind == kind]
        if not items:
            continue
        shown = items if verbose else items[:PER_KIND]
        out.append(f"{title} ({len(items)}):")
        for d in shown:
            out.append(f"  [{d.score:.2f}] {_headline(d)}")
        if len(shown) < len(items):
            out.append(f"  ... {len(items) - len(shown)} more (-v shows all)")
        out.append("")
    metrics = rd.rows.get("metrics", [])
    calm = [r for r in metrics if not r["diverged"]]
    if calm:
        out.append(f"Metrics within the good runs' band ({len(calm)}):")
        out += [f"  {r['metric']}: {_t(r['note'], 200)}" for r in calm]
        out.append("")
    for note in rd.notes:
        out.append(f"note: {_t(note, 400)}")
    lines = "\n".join(out).split("\n")  # the verdict holds two lines
    return "\n".join(wrapped for line in lines for wrapped in _wrap(line)).rstrip() + "\n"


def _wrap(line: str) -> list[str]:
    """One output line wrapped at WIDTH between words, continuation lines indented under it."""
    if len(line) <= WIDTH:
        return [line]
    indent = line[:len(line) - len(line.lstrip(" "))]
    return textwrap.wrap(line, width=WIDTH, subsequent_indent=indent + "    ", break_long_words=False,
                         break_on_hyphens=False) or [line]


def _md_rows(items: Iterable[Difference]) -> list[str]:
    rows = ["| # | score | kind | what | good | bad | where |", "|---|---|---|---|---|---|---|"]
    for i, d in enumerate(items, 1):
        rows.append(f"| {i} | {d.score:.2f} | {d.kind} | {md_code(truncate(d.key, 100))} | "
                    f"{md_code(truncate(d.good, 60)) if d.good is not None else '—'} | "
                    f"{md_code(truncate(d.bad, 60)) if d.bad is not None else '—'} | "
                    f"{md_text(_where(d)) or '—'} |")
    return rows


def render_markdown(rd: RunDiff) -> str:
    goods = ", ".join(md_code(g) for g in rd.goods)
    lines = ["### What changed since the last good run", "",
             f"Compared {goods} (good) with {md_code(rd.bad)} (bad) using `autopsy diff`.", ""]
    lines.append(md_text(_verdict(rd).replace("\n", " — ")))
    lines.append("")
    ranked = [d for d in rd.differences if d.score >= 0.3]
    if ranked:
        lines += _md_rows(ranked[:10])
        lines.append("")
        for i, d in enumerate(ranked[:TOP], 1):
            lines.append(f"{i}. {md_text(d.why)}")
        lines.append("")
    for r in rd.rows.get("metrics", []):
        if not r["diverged"]:
            lines.append(f"- {md_code(r['metric'])}: {md_text(r['note'])}")
    for note in rd.notes:
        lines.append(f"- note: {md_text(note)}")
    return "\n".join(lines).rstrip() + "\n"
