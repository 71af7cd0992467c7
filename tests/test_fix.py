"""The fix is data on the report: computed once, kept in JSON, shown the same by every renderer."""

from __future__ import annotations

import dataclasses
import json

import report_samples as samples
from markupsafe import escape

from autopsy.report.fix import build_fix, fix_text_html, fix_text_md, fix_text_plain, spans
from autopsy.report.html import render_html
from autopsy.report.json_report import report_from_dict
from autopsy.report.markdown import render_markdown
from autopsy.report.terminal import render_terminal


def _with_fix():
    report = samples.disk_full()
    return dataclasses.replace(report, fix=build_fix(report, catalog=samples.CATALOG))


def test_spans_follow_commonmark_code_spans() -> None:
    assert spans("Set `a: 1` in `b.yaml`.") == [("Set ", False), ("a: 1", True), (" in ", False),
                                               ("b.yaml", True), (".", False)]
    assert spans("``a`b`` and ` unmatched") == [("a`b", True), (" and ` unmatched", False)]
    assert spans("`` `x` ``") == [("`x`", True)]


def test_each_format_escapes_prose_and_keeps_code() -> None:
    step = "Move `save_total_limit: 3` under <b>x</b> *now*"
    assert fix_text_md(step) == "Move `save_total_limit: 3` under &lt;b&gt;x&lt;/b&gt; \\*now\\*"
    assert fix_text_plain(step) == "Move `save_total_limit: 3` under <b>x</b> *now*"
    assert fix_text_html(step) == "Move <code>save_total_limit: 3</code> under &lt;b&gt;x&lt;/b&gt; *now*"


def test_fix_survives_json_and_every_renderer_shows_it() -> None:
    report = _with_fix()
    fix = report.fix
    assert fix is not None and fix.rule == "disk.full" and fix.steps and fix.resume and fix.action
    data = json.loads(report.to_json())
    assert data["fix"] == {"rule": fix.rule, "steps": list(fix.steps), "resume": fix.resume, "action": fix.action}
    again = report_from_dict(data)
    assert again.fix == fix
    md = render_markdown(again, samples.CATALOG)
    text = render_terminal(again)
    page = render_html(again)
    for step in fix.steps:
        assert fix_text_md(step) in md
        assert " ".join(fix_text_plain(step).split()) in " ".join(text.split())
        assert fix_text_html(step) in page
    # the card's general advice and the resume command too
    assert " ".join(fix.action.split()[:6]) in " ".join(text.split())
    assert str(escape(report.run.resume.command)) in page


def test_stored_fix_wins_over_recomputing() -> None:
    report = _with_fix()
    assert report.fix is not None
    custom = dataclasses.replace(report, fix=dataclasses.replace(report.fix, steps=("Do `this` first.",)))
    assert "1. Do `this` first." in render_terminal(custom)
    assert "1. Do `this` first." in render_markdown(custom, samples.CATALOG)
