"""The self-contained HTML report: one file, no network requests, opens offline.

``render_html(report, run)`` draws the verdict, every finding with its evidence, plots over
steps with the findings' markers, the checkpoint timeline, per-rank step times and the
artifacts read. With ``run=None`` (re-rendering a saved JSON report) it shows everything
the :class:`~autopsy.model.Report` holds and says that plots need the run directory.

Templates are Jinja2 with autoescape on and ``StrictUndefined``: every string from a log or
config is escaped (``<script>`` and ``{{7*7}}`` in a log line render as text). CSS and JS
come from ``assets/`` and are inlined; charts are inline SVG (see ``chart_svg``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from autopsy.model import Evidence, Finding, OutcomeKind, ParseStatus, Report, Severity
from autopsy.report.charts import finding_anchor, fmt_bytes, fmt_num
from autopsy.report.common import clean_verdict, finding_sort_key, is_cause_link, nothing_readable
from autopsy.report.common import fmt_duration as duration_text
from autopsy.report.common import fmt_time as time_text
from autopsy.report.fix import fix_for, fix_text_html
from autopsy.report.sanitize import strip_terminal

if TYPE_CHECKING:
    import jinja2

    from autopsy.run import Run

MAX_ARTIFACT_ROWS = 300  # a run with 200k files still renders; damaged ones are always listed
MAX_EXCERPT_LINES = 40
MAX_FACT_CHARS = 300


def render_html(report: Report, run: Run | None = None) -> str:
    """The report as one self-contained HTML document (a str)."""
    ctx = build_context(report, run)
    return _env().get_template("report.html.j2").render(**ctx)


# ----------------------------------------------------------------------- environment


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("autopsy.report", "templates"),
        autoescape=True,  # every .j2 here is HTML; log text is escaped everywhere
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        # Run-supplied text (file names too) loses ESC/control bytes before escaping; our own
        # Markup (inlined assets, SVG) is left as it is.
        finalize=_no_controls,
    )
    env.filters["num"] = fmt_num
    env.filters["bytes"] = fmt_bytes
    return env


def _no_controls(value: Any) -> Any:
    if isinstance(value, str) and not isinstance(value, Markup):
        return strip_terminal(value)
    return value


@lru_cache(maxsize=4)
def _asset(name: str) -> Markup:
    text = resources.files("autopsy.report").joinpath("assets").joinpath(name).read_text(encoding="utf-8")
    # Our own files, inlined verbatim; they must not end their <style>/<script> block early.
    if "</style" in text or "</script" in text:
        raise RuntimeError(f"asset {name} would end its inline block early")
    return Markup(text)


# ----------------------------------------------------------------------- context


def build_context(report: Report, run: Run | None) -> dict[str, Any]:
    findings = list(report.findings)
    primary = report.primary or (findings[0] if findings else None)
    crash_step = _crash_step(report, primary)
    sections: dict[str, Any] = {"plots": None, "plots_note": None, "plots_moved": None, "checkpoints": None,
                                "ranks": None}
    errors: list[str] = []
    context_lines: dict[str, dict[int, str]] = {}
    # A report re-rendered from saved JSON draws its charts from the display series it carries.
    source: Any = run
    if run is None and report.series is not None:
        from autopsy.report.display_series import series_run

        source = series_run(report.series, report.run.disk_at_analysis)
    if source is None:
        sections["plots_note"] = ("Plots need the run directory: this report was re-rendered from saved JSON. "
                                  "Run `autopsy analyze RUN_DIR --format html` to draw them.")
    else:
        from autopsy.report import html_sections as hs

        for name, build in (
            ("plots", lambda: hs.plot_section(source, findings, crash_step)),
            ("checkpoints", lambda: hs.checkpoint_section(source, findings, crash_step)),
            ("ranks", lambda: hs.rank_section(source, findings)),
        ):
            try:
                sections[name] = build()
            except Exception as exc:  # one broken section must not hide the verdict
                errors.append(f"{name}: could not be drawn ({type(exc).__name__}: {exc})")
        if not sections["plots"] and "plots" not in " ".join(errors):
            sections["plots_note"] = "No numeric series (loss, LR, grad norm, throughput) were found in this run."
        if run is None:
            sections["plots_note"] = ((sections["plots_note"] + " ") if sections["plots_note"] else "") + (
                "Re-rendered from saved JSON: plots show the display series saved with the report "
                "(downsampled, min/max kept); log context around evidence needs the run directory.")
        else:
            try:
                context_lines = hs.read_context(Path(run.root), _evidence_spans(findings))
            except Exception as exc:
                errors.append(f"log context: could not be read ({type(exc).__name__}: {exc})")
    primary_chart = _pull_primary_chart(sections, primary)
    docs = _docs_for({f.rule for f in findings})
    artifacts = list(report.artifacts)
    if not artifacts and run is not None:
        try:
            artifacts = list(run.artifact_list)
        except Exception as exc:
            errors.append(f"artifacts: could not be listed ({type(exc).__name__}: {exc})")
    return {
        "title": _run_name(report.run.path),
        "run": report.run,
        "version": report.autopsy_version,
        "verdict": _verdict(report, primary),
        "findings": [_finding_view(i, f, findings, docs, context_lines) for i, f in enumerate(findings)],
        "accepted": [_accepted_view(f) for f in sorted(report.accepted, key=finding_sort_key)],
        "baseline": report.baseline,
        "not_evaluated": [(o.rule, o.reason or "") for o in report.outcomes if o.kind is OutcomeKind.NOT_EVALUATED],
        "rule_errors": [(o.rule, o.reason or "") for o in report.outcomes if o.kind is OutcomeKind.RULE_ERROR],
        "n_rules": len(report.outcomes),
        "problems": list(report.problems),
        "artifacts": _artifact_view(artifacts),
        "section_errors": errors,
        "primary_chart": primary_chart,
        "css": _asset("report.css"),
        "js": _asset("report.js"),
        **sections,
    }


def _pull_primary_chart(sections: dict[str, Any], primary: Finding | None) -> Any:
    """Take the primary finding's chart out of its section, to be drawn right under the verdict
    (its section says where it went). None without a primary finding or a chart."""
    for name in ("checkpoints", "ranks"):
        if sections[name]:
            sections[name] = {**sections[name], "moved": None}
    if primary is None:
        return None
    from autopsy.report.chart_markers import primary_chart_of

    charts = {c.id: c for c in sections["plots"] or ()}
    for name in ("checkpoints", "ranks"):
        if sections[name] and sections[name].get("chart") is not None:
            charts[sections[name]["chart"].id] = sections[name]["chart"]
    chosen = primary_chart_of(primary, list(charts))
    if chosen is None:
        return None
    chart = charts[chosen]
    if sections["plots"] and chart in sections["plots"]:
        sections["plots"] = [c for c in sections["plots"] if c is not chart]
        sections["plots_moved"] = chart
    else:
        for name in ("checkpoints", "ranks"):
            if sections[name] and sections[name].get("chart") is chart:
                sections[name] = {**sections[name], "chart": None, "moved": chart}
    return chart


def _run_name(path: str) -> str:
    name = Path(path.rstrip("/\\")).name if path else ""
    return name or path or "run"


def _crash_step(report: Report, primary: Finding | None) -> int | None:
    if primary is not None and primary.step is not None:
        return primary.step
    return report.run.last_step


def fmt_time(ts: float | None) -> str | None:
    """The shared time wording of the other reports, or None when unknown (nothing to show)."""
    if ts is None or not math.isfinite(ts) or ts <= 0:
        return None
    text = time_text(ts)
    return None if text == "?" else text


def fmt_duration(seconds: float | None) -> str | None:
    """The shared duration wording of the other reports, or None when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        return None
    return duration_text(seconds)


def _verdict(report: Report, primary: Finding | None) -> dict[str, Any]:
    rs = report.run
    when = []
    step = primary.step if primary is not None and primary.step is not None else None
    if step is not None:
        when.append(f"step {fmt_num(step)}" + (f" of {fmt_num(rs.max_steps)}" if rs.max_steps else ""))
    elif rs.last_step is not None:
        when.append(f"last step reached {fmt_num(rs.last_step)}" + (f" of {fmt_num(rs.max_steps)}" if rs.max_steps
                                                                     else ""))
    # the summary vetted the primary's own time (stale timestamps rejected): use its answer
    t = fmt_time(rs.failure_time)
    if t:
        source = rs.failure_time_source or ""
        # a file's mtime only bounds the failure from above: say where the time comes from
        when.append(t + (f" ({source})" if source.endswith("last written") else ""))
    recovery = []
    if rs.latest_valid_checkpoint:
        at = f" (step {fmt_num(rs.latest_valid_step)})" if rs.latest_valid_step is not None else ""
        recovery.append(("Resume from", f"{rs.latest_valid_checkpoint}{at}"))
    elif primary is not None and rs.poisoned_checkpoints:
        from autopsy.report.advice import poisoned_words

        recovery.append(("Resume from", poisoned_words(report) or "no clean checkpoint"))
    elif primary is not None:
        recovery.append(("Resume from", "no valid checkpoint found"))
    if rs.latest_valid_checkpoint and rs.poisoned_checkpoints:
        from autopsy.report.advice import poisoned_words

        recovery.append(("Skip", poisoned_words(report) or ""))
    lost = []
    if rs.steps_lost is not None:
        lost.append(f"{fmt_num(rs.steps_lost)} steps")
    if (d := fmt_duration(rs.seconds_lost)) is not None:
        lost.append(d)
    if lost:
        recovery.append(("Work lost", " · ".join(lost)))
    if rs.resume is not None and rs.resume.command:
        recovery.append(("Run from", rs.resume.cwd))
        recovery.append(("Command", rs.resume.command))
    elif rs.resume is not None and rs.resume.note:
        recovery.append(("Resume", rs.resume.note))

    empty = nothing_readable(report) if primary is None else None
    if empty is not None:
        kind = "warning"
        headline = "Nothing autopsy can read"
        message = f"Nothing autopsy can read in {report.run.path}: {empty}."
    elif primary is None:
        what, details = clean_verdict(report)
        kind = "ok" if what == "no failure found" else "warning"
        headline = what[:1].upper() + what[1:]
        message = details[:1].upper() + details[1:] + "." if report.outcomes else "No rule fired."
    else:
        kind = {Severity.CRITICAL: "critical", Severity.ERROR: "error", Severity.WARNING: "warning"}.get(
            primary.severity, "info")
        headline = primary.title
        message = primary.message
    fix = fix_for(report, primary) if primary is not None else None
    steps = [*fix.steps, *([f"In general: {fix.action}"] if fix.action else []),
             *([fix.resume] if fix.resume else [])] if fix is not None else []
    return {"kind": kind, "headline": headline, "message": message, "when": when, "recovery": recovery,
            "fix": [Markup(fix_text_html(s)) for s in steps],
            "rule": primary.rule if primary else None, "anchor": _anchor_of(primary, report.findings)}


def _accepted_view(f: Finding) -> dict[str, Any]:
    """A finding a baseline accepted: listed, never counted (the text report's "Accepted by the baseline")."""
    return {"rule": f.rule, "severity": str(f.severity), "title": strip_terminal(f.title, one_line=True),
            "message": strip_terminal(f.message, one_line=True), "fingerprint": f.fingerprint,
            "locations": [ev.location() for ev in dict.fromkeys(f.evidence)][:5]}


def _anchor_of(f: Finding | None, findings: Sequence[Finding]) -> str | None:
    if f is None:
        return None
    for i, g in enumerate(findings):
        if g is f:
            return finding_anchor(i)
    return None


def _evidence_spans(findings: Sequence[Finding]) -> dict[str, list[tuple[int, int]]]:
    spans: dict[str, list[tuple[int, int]]] = {}
    for f in findings:
        for ev in f.evidence:
            if ev.path and ev.line is not None and ev.line > 0:
                end = ev.line_end if ev.line_end is not None and ev.line_end >= ev.line else ev.line
                end = min(end, ev.line + MAX_EXCERPT_LINES)
                spans.setdefault(ev.path, []).append((ev.line, end))
    return spans


def _evidence_view(ev: Evidence, context: dict[str, dict[int, str]]) -> dict[str, Any]:
    """Numbered lines with the evidence span highlighted; file context when it was readable."""
    lines: list[tuple[int | None, str, bool]] = []
    if ev.path and ev.line is not None:
        end = ev.line_end if ev.line_end is not None and ev.line_end >= ev.line else ev.line
        end = min(end, ev.line + MAX_EXCERPT_LINES)
        file_lines = context.get(ev.path, {})
        if ev.line in file_lines:
            lo = max(1, ev.line - 3)
            for no in range(lo, end + 4):
                if no in file_lines:
                    lines.append((no, file_lines[no], ev.line <= no <= end))
        elif ev.excerpt:
            for k, text in enumerate(_excerpt_lines(ev.excerpt)):
                no = ev.line + k
                lines.append((no, text, ev.line <= no <= end))
    elif ev.excerpt:
        lines = [(None, text, False) for text in _excerpt_lines(ev.excerpt)]
    return {"location": ev.location(), "lines": lines, "detail": ev.detail, "rank": ev.rank,
            "anchor_path": ev.path}


def _excerpt_lines(text: str) -> list[str]:
    return strip_terminal(text).split("\n")[:MAX_EXCERPT_LINES]


def _fact_value(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v).lower()
    if isinstance(v, (int, float)):
        return fmt_num(v)
    if isinstance(v, (list, tuple)):
        # pairs such as (step, value) stay visibly paired: "(1, 13), (2, 3,380)"
        text = ", ".join(f"({_fact_value(x)})" if isinstance(x, (list, tuple)) else _fact_value(x) for x in v)
    elif isinstance(v, dict):
        text = ", ".join(f"{k}={_fact_value(x)}" for k, x in v.items())
    else:
        text = strip_terminal(str(v), one_line=True)
    return text if len(text) <= MAX_FACT_CHARS else text[: MAX_FACT_CHARS - 1] + "…"


def _finding_view(i: int, f: Finding, findings: Sequence[Finding], docs: dict[str, dict[str, Any]],
                  context: dict[str, dict[int, str]]) -> dict[str, Any]:
    explained: dict[str, str | None] | None = None
    if f.explained_by:
        for j, g in enumerate(findings):
            if g.rule == f.explained_by and g is not f:
                explained = {"rule": g.rule, "anchor": finding_anchor(j)}
                break
        else:
            explained = {"rule": f.explained_by, "anchor": None}
        # retention under disk.full is its cause, not its symptom: the template words the link
        explained["label"] = "Contributing cause of" if is_cause_link(f) else "Explained by"
    facts = [(k, _fact_value(v)) for k, v in f.facts.items()]
    if f.step is not None:
        facts.insert(0, ("step", fmt_num(f.step)))
    if (t := fmt_time(f.wall_time)) is not None:
        facts.insert(1 if f.step is not None else 0, ("time", t))
    doc = docs.get(f.rule, {})
    return {
        "anchor": finding_anchor(i),
        "index": i + 1,
        "rule": f.rule,
        "severity": str(f.severity),
        "confidence": str(f.confidence),
        "title": strip_terminal(f.title, one_line=True),
        "message": strip_terminal(f.message, one_line=True),
        "primary": f.primary,
        "explained_by": explained,
        "facts": facts,
        # the same location twice (one hit kept by several patterns) is shown once
        "evidence": [_evidence_view(ev, context) for ev in dict.fromkeys(f.evidence)],
        "action": doc.get("action"),
        "references": [r for r in doc.get("references", ()) if isinstance(r, str)],
        "fingerprint": f.fingerprint,
    }


def _docs_for(rules: set[str]) -> dict[str, dict[str, Any]]:
    """The cards' docs per rule id. The catalog is optional here: a report re-rendered where
    the rules cannot load (or a custom rule id) still renders, without "what to do"."""
    try:
        from autopsy.engine.loader import load_catalog

        catalog = load_catalog()
    except Exception:  # ImportError while the engine is absent, or a broken card set
        return {}
    out: dict[str, dict[str, Any]] = {}
    for rule in rules:
        try:
            card = catalog.get(rule)
            docs = dict(card.docs) if card is not None else {}
        except (KeyError, AttributeError, TypeError):
            continue
        action = docs.get("action")
        refs = docs.get("references") or []
        out[rule] = {"action": strip_terminal(str(action)).strip() if action else None,
                     "references": [str(r) for r in refs] if isinstance(refs, (list, tuple)) else []}
    return out


def _artifact_view(artifacts: Sequence[Any]) -> dict[str, Any]:
    bad = [a for a in artifacts if a.status not in (ParseStatus.OK, ParseStatus.SKIPPED)]
    rest = [a for a in artifacts if a.status in (ParseStatus.OK, ParseStatus.SKIPPED)]
    shown = bad + rest[: max(0, MAX_ARTIFACT_ROWS - len(bad))]
    rows = [{"path": a.path, "kind": str(a.kind), "size": fmt_bytes(a.size), "status": str(a.status),
             "note": a.note or "", "rank": a.rank} for a in shown]
    counts: dict[str, int] = {}
    for a in artifacts:
        counts[str(a.status)] = counts.get(str(a.status), 0) + 1
    return {"rows": rows, "hidden": len(artifacts) - len(shown), "total": len(artifacts),
            "counts": sorted(counts.items()), "n_bad": len(bad)}
