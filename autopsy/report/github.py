"""GitHub Actions: workflow-command annotations and the job's step summary.

One annotation per location (file, line): ``::error file=...,line=...::message``
(``warning``/``notice`` for lower severities). Only the primary finding and findings
nothing explains get annotations; an explained finding is named in its explainer's
message instead (it is a consequence, and its lines are usually the explainer's too). A
location already annotated, or a line range that overlaps one, is not annotated again.
Paths are made relative to the repository (``GITHUB_WORKSPACE``) when the run lies in it,
since Actions only attaches annotations to repository paths. Everything read from the
run is escaped per the Actions toolkit rules, so a log line cannot inject its own
workflow command. The markdown report is appended to the file named by
``GITHUB_STEP_SUMMARY``.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence

from autopsy.model import Evidence, Finding, Report, Severity
from autopsy.report.common import ordered_findings
from autopsy.report.sanitize import gh_escape_data, gh_escape_property, truncate

_COMMAND = {Severity.CRITICAL: "error", Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}
MAX_ANNOTATIONS_PER_RUN = 20  # GitHub shows at most 10 errors + 10 warnings per step anyway
_FROM_ENV = object()


def annotation_lines(reports: Sequence[Report], *, workspace: str | object | None = _FROM_ENV) -> list[str]:
    """Workflow commands, one per distinct finding location with a line number.

    ``workspace``: the repository root paths are made relative to (default: the
    ``GITHUB_WORKSPACE`` environment variable; ``None``: keep the paths as the run's).
    """
    ws = (os.environ.get("GITHUB_WORKSPACE") or None) if workspace is _FROM_ENV else workspace
    out: list[str] = []
    for report in reports:
        out.extend(_report_lines(report, ws if isinstance(ws, str) else None))
    return out


def _report_lines(report: Report, workspace: str | None) -> list[str]:
    findings = ordered_findings(report)
    by_rule = {f.rule: f for f in findings}
    explained: dict[str, list[Finding]] = {}
    for f in findings:
        if f.explained_by and f.explained_by in by_rule and f.explained_by != f.rule:
            explained.setdefault(f.explained_by, []).append(f)
    taken: dict[str, list[tuple[int, int]]] = {}  # path -> annotated line spans
    out: list[str] = []
    orphans: list[Finding] = []  # explained, but their explainer has no located evidence

    def emit(f: Finding, command: str, extra: str = "") -> bool:
        first: str | None = None
        for ev in f.evidence:
            if len(out) >= MAX_ANNOTATIONS_PER_RUN:
                break
            if not ev.path or ev.line is None:
                continue
            path = repo_path(report.run.path, ev.path, workspace)
            span = (ev.line, ev.line_end if ev.line_end is not None and ev.line_end > ev.line else ev.line)
            spans = taken.setdefault(path, [])
            if any(a <= span[1] and span[0] <= b for a, b in spans):
                continue
            spans.append(span)
            if first is None:
                first = f"{ev.path}:{ev.line}"
                message = f.message + extra
            else:  # a further line of the same finding: point back instead of repeating the message
                message = f"Evidence for {f.rule} (see {first})."
            out.append(_command(command, path, ev, f, message))
        return first is not None

    for f in findings:
        if f.rule in {e.rule for es in explained.values() for e in es}:
            continue
        consequences = explained.get(f.rule, [])
        extra = ""
        if consequences:
            extra = "\nAlso explains " + "; ".join(f"{e.rule} ({e.title})" for e in consequences) + "."
        if not emit(f, _COMMAND[f.severity], extra):
            orphans.extend(consequences)
    for f in orphans:
        emit(f, "notice")
    return out


def _command(command: str, path: str, ev: Evidence, f: Finding, message: str) -> str:
    props = [f"file={gh_escape_property(path)}", f"line={ev.line}"]
    if ev.line_end is not None and ev.line is not None and ev.line_end > ev.line:
        props.append(f"endLine={ev.line_end}")
    props.append(f"title={gh_escape_property(f'autopsy {f.rule}: {f.title}')}")
    if ev.excerpt:
        message += "\n" + truncate(ev.excerpt.strip(), 500)
    return f"::{command} {','.join(props)}::{gh_escape_data(message)}"


def repo_path(run_path: str, rel_path: str, workspace: str | None) -> str:
    """The evidence file's path as GitHub wants it: relative to the workspace when inside it."""
    path = posixpath.normpath(posixpath.join(run_path.replace("\\", "/"), rel_path))
    if not workspace:
        return path
    absolute = os.path.abspath(path)
    for base, target in ((os.path.abspath(workspace), absolute),
                         (os.path.realpath(workspace), os.path.realpath(absolute))):
        try:
            rel = os.path.relpath(target, base)
        except ValueError:  # another drive (Windows)
            continue
        if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
            return rel.replace(os.sep, "/")
    return path


def step_summary_path() -> str | None:
    """The step-summary file Actions provides (unset outside Actions)."""
    return os.environ.get("GITHUB_STEP_SUMMARY") or None


def write_step_summary(path: str, markdown: str) -> None:
    """Append (Actions concatenates the summaries of all steps; we add ours)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(markdown if markdown.endswith("\n") else markdown + "\n")
