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
