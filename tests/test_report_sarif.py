"""SARIF 2.1.0 and JUnit output, validated (SARIF against the official OASIS schema)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import report_samples as samples

from autopsy.report.junit import render_junit
from autopsy.report.sarif import render_sarif

SARIF_SCHEMA = Path(__file__).parent / "data" / "sarif-2.1.0.schema.json"
ALL = {**samples.SAMPLES, "hostile": samples.hostile, "clean": samples.clean}


@pytest.fixture(scope="module")
def sarif_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    assert schema["id"].endswith("/sarif-schema-2.1.0.json")  # the OASIS errata01 schema
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())


@pytest.mark.parametrize("name", sorted(ALL))
def test_sarif_is_valid(name: str, sarif_validator: jsonschema.protocols.Validator) -> None:
    doc = json.loads(render_sarif([ALL[name]()], samples.CATALOG))
    sarif_validator.validate(doc)


def test_sarif_many_runs_valid(sarif_validator: jsonschema.protocols.Validator) -> None:
    doc = json.loads(render_sarif([f() for f in ALL.values()], samples.CATALOG))
    sarif_validator.validate(doc)
    assert len(doc["runs"]) == len(ALL)


def test_sarif_content() -> None:
    doc = json.loads(render_sarif([samples.disk_full()], samples.CATALOG))
    run = doc["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == ["checkpoint.corrupt", "checkpoint.retention", "disk.full"]
    disk = rules[2]
    assert disk["fullDescription"]["text"].startswith("The filesystem ran out of space")
    assert "What to do" in disk["help"]["text"]
    first = run["results"][0]
    assert first["ruleId"] == "disk.full" and first["level"] == "error"
    assert rules[first["ruleIndex"]]["id"] == "disk.full"
    loc = first["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"] == {"uri": "train.log", "uriBaseId": "RUNROOT"}
    assert loc["region"]["startLine"] == 48213
    assert first["partialFingerprints"]["autopsyFingerprint/v1"].startswith("disk.full:")
    assert run["originalUriBaseIds"]["RUNROOT"]["uri"].startswith("file://")
    notes = run["invocations"][0]["toolExecutionNotifications"]
    assert notes[0]["message"]["text"].startswith("dist.straggler: ")


def test_sarif_hostile_snippet_has_no_escapes() -> None:
    text = render_sarif([samples.hostile()], samples.CATALOG)
    assert "\\u001b" not in text and "\x1b" not in text


def test_junit_one_case_per_rule() -> None:
    root = ET.fromstring(render_junit([samples.disk_full(), samples.nan_loss()]))
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["runs/exp42", "runs/nan-7b"]
    disk = {c.get("name"): c for c in suites[0].findall("testcase")}
    assert disk["disk.full"].find("failure") is not None
    assert "train.log:48213" in (disk["disk.full"].find("failure").text or "")  # type: ignore[union-attr]
    assert disk["oom.cuda"].find("failure") is None and disk["oom.cuda"].find("skipped") is None
    assert disk["dist.straggler"].find("skipped").get("message") == "single-process run: no per-rank step times"  # type: ignore[union-attr]
    nan = {c.get("name"): c for c in suites[1].findall("testcase")}
    assert nan["loss.plateau"].find("error") is not None
    assert suites[0].get("tests") == str(len(disk)) and suites[0].get("failures") == "3"
    assert root.get("failures") == str(3 + 2) and root.get("errors") == "1"


def test_junit_hostile_is_well_formed() -> None:
    text = render_junit([samples.hostile()])
    root = ET.fromstring(text)
    assert "\x1b" not in text
    failure = root.find("testsuite/testcase/failure")
    assert failure is not None and "<script>" in (failure.text or "")  # kept as text, escaped by XML
    assert "&lt;script&gt;" in text


def _regions_follow_lines(doc: dict, report) -> None:  # type: ignore[no-untyped-def,type-arg]
    """Every location with a known line has a line region starting there; file-level evidence
    in a listed file is the whole file as a byte region; nothing else invents a region."""
    sizes = {a.path: a.size for a in report.artifacts}
    by_fp = {f.fingerprint: f for f in (*report.findings, *report.accepted)}
    for res in doc["runs"][0]["results"]:
        f = by_fp[res["partialFingerprints"]["autopsyFingerprint/v1"]]
        evidence = [ev for ev in f.evidence if ev.path]
        for ev, loc in zip(evidence, res.get("locations", []), strict=False):
            region = loc["physicalLocation"].get("region")
            if ev.line is not None and ev.line >= 1:
                assert region is not None and region["startLine"] == ev.line, (f.rule, ev)
            elif ev.path in sizes:
                assert region == {"byteOffset": 0, "byteLength": sizes[ev.path]}, (f.rule, ev)
            else:
                assert region is None, (f.rule, ev)


@pytest.mark.parametrize("name", sorted(ALL))
def test_sarif_regions_wherever_a_line_is_known(name: str) -> None:
    report = ALL[name]()
    doc = json.loads(render_sarif([report], samples.CATALOG))
    _regions_follow_lines(doc, report)
    with_lines = [ev for f in report.findings for ev in f.evidence if ev.path and ev.line]
    if name == "disk_full":
        assert with_lines  # the check above had lines to check


def test_sarif_baseline_states(sarif_validator: jsonschema.protocols.Validator) -> None:
    from autopsy.baseline import Baseline, apply_baseline

    report = samples.disk_full()
    plain = json.loads(render_sarif([report], samples.CATALOG))
    assert not any("baselineState" in r for r in plain["runs"][0]["results"])  # no baseline: unknown

    disk = next(f for f in report.findings if f.rule == "disk.full")
    known = apply_baseline(report, Baseline({disk.fingerprint: {}}, source="ci/base.json"))
    doc = json.loads(render_sarif([known], samples.CATALOG))
    sarif_validator.validate(doc)
    _regions_follow_lines(doc, known)
    results = doc["runs"][0]["results"]
    assert len(results) == len(report.findings)  # the accepted one is still there ...
    states = {r["ruleId"]: r["baselineState"] for r in results}
    assert states.pop("disk.full") == "unchanged" and set(states.values()) == {"new"}
    accepted = next(r for r in results if r["ruleId"] == "disk.full")
    assert accepted["suppressions"][0]["status"] == "accepted"  # ... marked accepted, not an open alert
    assert "ci/base.json" in accepted["suppressions"][0]["justification"]
    rules = doc["runs"][0]["tool"]["driver"]["rules"]
    assert rules[accepted["ruleIndex"]]["id"] == "disk.full"

    nothing = apply_baseline(report, Baseline({}, source="ci/base.json"))
    doc = json.loads(render_sarif([nothing], samples.CATALOG))
    assert {r["baselineState"] for r in doc["runs"][0]["results"]} == {"new"}  # compared: all new


def test_junit_marks_accepted_findings_skipped_not_failed() -> None:
    from test_junit_schema import _check

    from autopsy.baseline import Baseline, apply_baseline

    report = samples.disk_full()
    disk = next(f for f in report.findings if f.rule == "disk.full")
    known = apply_baseline(report, Baseline({disk.fingerprint: {}}, source="ci/base.json"))
    root = ET.fromstring(render_junit([known]))
    _check(root)
    suite = root.find("testsuite")
    assert suite is not None
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    skipped = cases["disk.full"].find("skipped")
    assert skipped is not None and skipped.get("type") == "accepted" and cases["disk.full"].find("failure") is None
    assert "train.log:48213" in (skipped.text or "")  # the evidence is listed, as for a failure
    assert suite.get("failures") == str(int(render_failures(report)) - 1)


def render_failures(report) -> str:  # type: ignore[no-untyped-def]
    suite = ET.fromstring(render_junit([report])).find("testsuite")
    assert suite is not None
    return suite.get("failures") or "0"
