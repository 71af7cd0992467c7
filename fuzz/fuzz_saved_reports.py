"""Fuzz ``autopsy report``'s reader and renderers with hostile saved JSON reports."""

from __future__ import annotations

import json

import atheris

with atheris.instrument_imports():
    from _common import run

    from autopsy.report.json_report import ReportFormatError, report_to_json, reports_from_text
    from autopsy.report.markdown import render_markdown_many
    from autopsy.report.terminal import render_terminal

SEED = {"schema_version": 1, "run": {"path": "runs/x", "last_step": 5},
        "findings": [{"rule": "oom.cuda", "severity": "critical", "title": "t", "message": "m",
                      "evidence": [{"path": "train.log", "line": 3, "excerpt": "e"}], "facts": {"a": 1}}],
        "artifacts": [{"path": "train.log", "kind": "log", "size": 10, "mtime": 0, "status": "ok"}]}


def test_one(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    if fdp.ConsumeBool():
        text = fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes())
    else:  # the seed report with one field replaced by fuzzed JSON-ish text
        doc = json.dumps(SEED)
        cut = fdp.ConsumeIntInRange(0, len(doc))
        text = doc[:cut] + fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 256)) + doc[cut:]
    try:
        reports = reports_from_text(text)
    except ReportFormatError:
        return
    for r in reports:
        render_terminal(r, color=False)
        report_to_json(r)
    render_markdown_many(reports, None)


if __name__ == "__main__":
    run(test_one)
