"""JUnit XML: one test suite per run, one test case per rule, failed when the rule fired.

CI systems show JUnit natively, so a post-mortem reads as "which checks failed". Rules
that could not be evaluated are skipped with the reason; a rule that crashed is an error; a
rule whose findings a ``--baseline`` file all accepted is skipped with ``type="accepted"``
(known, listed, not a failure of this build: the same line ``--fail-on`` draws).
Reports without outcomes (hand-built) get one test case per fired rule.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from autopsy.model import Finding, OutcomeKind, Report
from autopsy.report.common import finding_sort_key, fmt_facts, ordered_findings
from autopsy.report.sanitize import xml_text


def _failure_text(findings: list[Finding]) -> str:
    parts = []
    for f in findings:
        lines = [f"{f.severity} {f.rule}: {f.message}"]
        for ev in f.evidence[:10]:
            lines.append(f"  {ev.location()}" + (f": {ev.excerpt.strip()}" if ev.excerpt else "")
                         + (f" ({ev.detail})" if ev.detail else ""))
        if f.facts:
            lines.append(f"  facts: {fmt_facts(f.facts)}")
        parts.append("\n".join(lines))
    return xml_text("\n\n".join(parts))


def _suite(report: Report) -> ET.Element:
    by_rule: dict[str, list[Finding]] = {}
    for f in ordered_findings(report):
        by_rule.setdefault(f.rule, []).append(f)
    known: dict[str, list[Finding]] = {}
    for f in sorted(report.accepted, key=finding_sort_key):
        known.setdefault(f.rule, []).append(f)
    kinds: dict[str, tuple[OutcomeKind, str | None]] = {o.rule: (o.kind, o.reason) for o in report.outcomes}
    for rule in (*by_rule, *known):
        kinds[rule] = (OutcomeKind.FIRED, None)
    # time: autopsy does not time its rules one by one; 0 keeps the attribute schemas expect
    suite = ET.Element("testsuite", name=xml_text(report.run.path), time="0")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for rule in sorted(kinds):
        kind, reason = kinds[rule]
        case = ET.SubElement(suite, "testcase", name=rule, classname=f"autopsy.{rule.split('.', 1)[0]}", time="0")
        counts["tests"] += 1
        if kind is OutcomeKind.FIRED and rule in known and rule not in by_rule:
            # only known failures: accepted by the baseline, so not a failure of this build
            # (as --fail-on sees it), and not hidden either: a skipped case of type "accepted"
            el = ET.SubElement(case, "skipped", message=xml_text(f"accepted by the baseline: {known[rule][0].message}"),
                               type="accepted")
            el.text = _failure_text(known[rule])
            counts["skipped"] += 1
        elif kind is OutcomeKind.FIRED:
            found = by_rule.get(rule, [])
            worst = max((f.severity for f in found), default=None)
            msg = found[0].message if found else "fired"
            el = ET.SubElement(case, "failure", message=xml_text(msg), type=str(worst or "finding"))
            el.text = _failure_text(found)
            if rule in known:  # new failures of a rule that also has accepted ones: say so
                el.text += xml_text(f"\n\nAlso accepted by the baseline ({len(known[rule])}):\n\n") \
                    + _failure_text(known[rule])
            counts["failures"] += 1
        elif kind is OutcomeKind.NOT_EVALUATED:
            ET.SubElement(case, "skipped", message=xml_text(reason or "not evaluated"))
            counts["skipped"] += 1
        elif kind is OutcomeKind.RULE_ERROR:
            ET.SubElement(case, "error", message=xml_text(reason or "rule error"), type="rule_error")
            counts["errors"] += 1
    for k, v in counts.items():
        suite.set(k, str(v))
    return suite


def render_junit(reports: Sequence[Report]) -> str:
    root = ET.Element("testsuites", name="autopsy", time="0")
    # the common JUnit XSD (Jenkins junit-10.xsd) allows skipped= on a testsuite, not on testsuites
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for r in reports:
        suite = _suite(r)
        for k in totals:
            totals[k] += int(suite.get(k, "0"))
        root.append(suite)
    for k, v in totals.items():
        root.set(k, str(v))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
