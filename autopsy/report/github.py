"""GitHub Actions: workflow-command annotations and the job's step summary.

Each finding with a file:line becomes ``::error file=...,line=...::message`` (``warning``
/ ``notice`` for lower severities); the markdown report is appended to the file named
by ``GITHUB_STEP_SUMMARY``. Everything read from the run is escaped per the Actions
toolkit rules, so a log line cannot inject its own workflow command.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence

from autopsy.model import Report, Severity
from autopsy.report.common import ordered_findings
from autopsy.report.sanitize import gh_escape_data, gh_escape_property, truncate

_COMMAND = {Severity.CRITICAL: "error", Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}
MAX_ANNOTATIONS_PER_RUN = 20  # GitHub shows at most 10 errors + 10 warnings per step anyway


def annotation_lines(reports: Sequence[Report]) -> list[str]:
    """Workflow commands, one per finding location with a line number."""
    out = []
    for report in reports:
        n = 0
        for f in ordered_findings(report):
            for ev in f.evidence:
                if not ev.path or ev.line is None or n >= MAX_ANNOTATIONS_PER_RUN:
                    continue
                path = posixpath.normpath(posixpath.join(report.run.path.replace("\\", "/"), ev.path))
                props = [f"file={gh_escape_property(path)}", f"line={ev.line}"]
                if ev.line_end is not None and ev.line_end > ev.line:
                    props.append(f"endLine={ev.line_end}")
                props.append(f"title={gh_escape_property(f'autopsy {f.rule}: {f.title}')}")
                message = f.message
                if ev.excerpt:
                    message += "\n" + truncate(ev.excerpt.strip(), 500)
                out.append(f"::{_COMMAND[f.severity]} {','.join(props)}::{gh_escape_data(message)}")
                n += 1
    return out


def step_summary_path() -> str | None:
    """The step-summary file Actions provides (unset outside Actions)."""
    return os.environ.get("GITHUB_STEP_SUMMARY") or None


def write_step_summary(path: str, markdown: str) -> None:
    """Append (Actions concatenates the summaries of all steps; we add ours)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(markdown if markdown.endswith("\n") else markdown + "\n")
