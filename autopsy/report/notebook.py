"""A compact HTML view of a Report for Jupyter (``Report._repr_html_``).

Self-contained (inline styles, no scripts) and escaped: every string from the run goes
through ``html.escape`` after control sequences are stripped, so a log line cannot
inject markup into the notebook.
"""

from __future__ import annotations

import html

from autopsy.model import Report, Severity
from autopsy.report.common import fmt_facts, fmt_step, link_phrase, lost_work, notable_artifacts, ordered_findings
from autopsy.report.sanitize import strip_terminal, truncate
from autopsy.report.terminal import render_verdict

_COLOUR = {Severity.CRITICAL: "#b00020", Severity.ERROR: "#d84315", Severity.WARNING: "#b26a00",
           Severity.INFO: "#00668a"}


def _e(text: object, limit: int = 400) -> str:
    return html.escape(truncate(strip_terminal(str(text)), limit))


def report_repr_html(report: Report) -> str:
    rows = []
    for f in ordered_findings(report):
        ev = "<br>".join(
            f"<code>{_e(e.location())}</code>" + (f" <code>{_e(e.excerpt.strip(), 200)}</code>" if e.excerpt else "")
            + (f" {_e(e.detail, 200)}" if e.detail else "")
            for e in f.evidence[:3])
        more = f"<br>… {len(f.evidence) - 3} more" if len(f.evidence) > 3 else ""
        link = " (primary)" if f.primary else (f" ({_e(link_phrase(f))})" if f.explained_by else "")
        rows.append(
            f"<tr><td style='color:{_COLOUR[f.severity]};font-weight:bold'>{f.severity}</td>"
            f"<td><code>{_e(f.rule)}</code>{link}</td><td>{_e(f.message)}"
            f"<br><small>{_e(fmt_facts(f.facts))}</small></td><td>{ev}{more}</td></tr>")
    table = ("<table><thead><tr><th>severity</th><th>rule</th><th>finding</th><th>evidence</th></tr></thead>"
             f"<tbody>{''.join(rows)}</tbody></table>") if rows else "<p>No findings.</p>"
    run = report.run
    rec = ""
    if run.latest_valid_checkpoint or run.resume_hint:
        rec = (f"<p><b>Recovery:</b> latest valid checkpoint <code>{_e(run.latest_valid_checkpoint or 'none')}</code>;"
               f" lost {_e(lost_work(report))}"
               + (f"; resume, from <code>{_e(run.resume.cwd)}</code>, with <code>{_e(run.resume.command)}</code>"
                  if run.resume is not None and run.resume.command else
                  f"; resume: {_e(run.resume.note)}" if run.resume is not None and run.resume.note else "") + "</p>")
    notes = []
    if report.not_evaluated:
        notes.append(f"{len(report.not_evaluated)} rules not evaluated: "
                     + ", ".join(f"{_e(o.rule)} ({_e(o.reason or '?', 120)})" for o in report.not_evaluated[:10]))
    bad = notable_artifacts(report)
    if bad:
        notes.append("unreadable, skipped or empty: " + ", ".join(f"{_e(a.path)} ({state})" for a, state in bad[:10]))
    foot = "".join(f"<p><small>{n}</small></p>" for n in notes)
    return (f"<div class='autopsy-report'><p><b>{_e(render_verdict(report), 600)}</b></p>"
            f"<p>last step {_e(fmt_step(report))}</p>{table}{rec}{foot}</div>")
