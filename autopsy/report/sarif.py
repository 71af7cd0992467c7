"""SARIF 2.1.0 output for code-scanning UIs: one SARIF run per analysed run directory.

Each finding is a result with its file:line locations (relative to the run directory via
the ``RUNROOT`` base id, whose absolute value is the run path; a region wherever the line is
known, the whole file as a byte region for file-level evidence), its fingerprint as a partial
fingerprint (so re-uploads de-duplicate), and the rule's card docs as the rule descriptor.
After ``--baseline``, findings the baseline accepted are results too, with ``baselineState:
unchanged`` and an external suppression (a code-scanning page shows them as dismissed, not
as open alerts); the others are ``new``. Validated against the official OASIS schema in the
tests.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from autopsy.model import Evidence, Finding, Report, Severity
from autopsy.report.common import finding_sort_key, ordered_findings
from autopsy.report.fix import _default_catalog, card_docs
from autopsy.report.json_report import _jsonable
from autopsy.report.sanitize import strip_terminal

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://pypi.org/project/autopsy/"
_LEVEL = {Severity.CRITICAL: "error", Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _uri(path: str) -> str:
    # undecodable bytes of a file name (surrogate escapes) are percent-encoded as the bytes they were
    return quote(posixpath.normpath(path.replace("\\", "/")), safe="/._-~", errors="surrogateescape")


def _root_uri(run_path: str) -> str:
    uri = Path(run_path).resolve().as_uri()
    return uri if uri.endswith("/") else uri + "/"


def _location(ev: Evidence, sizes: Mapping[str, int]) -> dict[str, Any] | None:
    """A SARIF location for evidence in a file: a line region when the line is known, else the
    whole file as a byte region when its size is known (a truncated checkpoint, an empty log);
    a directory or a file autopsy did not list gets no region (nothing true to say)."""
    if not ev.path:
        return None
    phys: dict[str, Any] = {"artifactLocation": {"uri": _uri(ev.path), "uriBaseId": "RUNROOT"}}
    if ev.line is not None and ev.line >= 1:
        region: dict[str, Any] = {"startLine": ev.line}
        if ev.line_end is not None and ev.line_end >= ev.line:
            region["endLine"] = ev.line_end
        if ev.excerpt:
            region["snippet"] = {"text": strip_terminal(ev.excerpt)}
        phys["region"] = region
    elif ev.path in sizes:
        phys["region"] = {"byteOffset": 0, "byteLength": sizes[ev.path]}
    loc: dict[str, Any] = {"physicalLocation": phys}
    label = ev.detail or (f"{ev.tag} {ev.location()}" if ev.tag else None)
    if label:
        loc["message"] = {"text": strip_terminal(label)}
    return loc


def _result(f: Finding, rule_index: int, sizes: Mapping[str, int], *, state: str | None = None,
            baseline: str | None = None) -> dict[str, Any]:
    """One result; ``state`` is its SARIF ``baselineState`` when a baseline was applied:
    ``new``, or ``unchanged`` for a finding the baseline accepted (then also suppressed,
    externally, with the baseline named as the justification)."""
    locations = [loc for loc in (_location(ev, sizes) for ev in f.evidence) if loc is not None]
    props: dict[str, Any] = {"severity": str(f.severity), "confidence": str(f.confidence), "primary": f.primary}
    if f.explained_by:
        props["explainedBy"] = f.explained_by
    if f.step is not None:
        props["step"] = f.step
    series = [ev.to_dict() for ev in f.evidence if not ev.path and ev.tag]
    if series:
        props["series"] = _jsonable(series)
    props["facts"] = _jsonable(f.facts)
    result: dict[str, Any] = {
        "ruleId": f.rule,
        "ruleIndex": rule_index,
        "level": _LEVEL[f.severity],
        "message": {"text": strip_terminal(f.message) or f.title},
        "partialFingerprints": {"autopsyFingerprint/v1": f.fingerprint},
        "properties": props,
    }
    if locations:
        result["locations"] = locations[:10]
        if len(locations) > 10:
            result["relatedLocations"] = [dict(loc, id=i) for i, loc in enumerate(locations[10:50], 10)]
    if state is not None:
        result["baselineState"] = state
    if state == "unchanged":
        props["accepted"] = True
        result["suppressions"] = [{"kind": "external", "status": "accepted",
                                   "justification": f"known failure, accepted by the baseline {baseline}"}]
    return result


def _rule(rule: str, title: str, docs: Mapping[str, Any], severity: Severity) -> dict[str, Any]:
    desc: dict[str, Any] = {"id": rule, "name": rule.replace(".", "_"),
                            "shortDescription": {"text": title or rule},
                            "defaultConfiguration": {"level": _LEVEL[severity]}}
    if docs.get("summary"):
        desc["fullDescription"] = {"text": str(docs["summary"]).strip()}
    sections = [(name, docs.get(key)) for name, key in
                (("Why it matters", "why"), ("How to confirm", "confirm"), ("What to do", "action"))]
    help_text = "\n\n".join(f"{name}: {str(text).strip()}" for name, text in sections if text)
    if help_text:
        desc["help"] = {"text": help_text, "markdown": "\n\n".join(
            f"**{name}**\n\n{str(text).strip()}" for name, text in sections if text)}
    refs = [str(r) for r in docs.get("references") or () if str(r).startswith(("http://", "https://"))]
    if refs:
        desc["helpUri"] = refs[0]
    desc["properties"] = {"tags": [rule.split(".", 1)[0]]}
    return desc


def report_to_sarif(reports: Sequence[Report], catalog: Any = None) -> dict[str, Any]:
    catalog = catalog if catalog is not None else _default_catalog()
    runs = []
    for report in reports:
        findings = ordered_findings(report)
        accepted = sorted(report.accepted, key=finding_sort_key)
        rule_ids: list[str] = []
        first: dict[str, Finding] = {}
        for f in (*findings, *accepted):
            if f.rule not in first:
                first[f.rule] = f
                rule_ids.append(f.rule)
        rule_ids.sort()
        rules = [_rule(r, first[r].title, card_docs(catalog, r), first[r].severity) for r in rule_ids]
        index = {r: i for i, r in enumerate(rule_ids)}
        sizes = {a.path: a.size for a in report.artifacts}
        # with a baseline every result says whether it is new; without one the state is unknown
        new = "new" if report.baseline is not None or report.accepted else None
        notifications = [
            {"level": "note" if o.kind.value == "not_evaluated" else "error",
             "message": {"text": f"{o.rule}: {o.reason or o.kind.value}"},
             "descriptor": {"id": o.rule}}
            for o in sorted((*report.not_evaluated, *report.rule_errors), key=lambda o: o.rule)
        ]
        run: dict[str, Any] = {
            "tool": {"driver": {"name": "autopsy", "version": report.autopsy_version or "0",
                                "informationUri": INFORMATION_URI, "rules": rules}},
            "originalUriBaseIds": {"RUNROOT": {"uri": _root_uri(report.run.path)}},
            "automationDetails": {"id": f"autopsy/{report.run.path.rstrip('/')}/"},
            "invocations": [{"executionSuccessful": not report.rule_errors,
                             "toolExecutionNotifications": notifications}],
            "results": [_result(f, index[f.rule], sizes, state=new) for f in findings]
            + [_result(f, index[f.rule], sizes, state="unchanged", baseline=report.baseline) for f in accepted],
        }
        runs.append(run)
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": runs}


def render_sarif(reports: Sequence[Report], catalog: Any = None) -> str:
    return json.dumps(report_to_sarif(reports, catalog), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
