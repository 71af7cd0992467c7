"""JSON report: schema validation, fixed order, round trip through report_from_dict."""

from __future__ import annotations

import json
import math
from importlib import resources

import jsonschema
import pytest
import report_samples as samples

from autopsy.model import Finding
from autopsy.report.common import ordered_findings
from autopsy.report.json_report import (
    ReportFormatError,
    report_from_dict,
    report_to_dict,
    report_to_json,
    reports_from_text,
    reports_to_jsonl,
)

ALL = {**samples.SAMPLES, "hostile": samples.hostile, "clean": samples.clean}


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads(resources.files("autopsy").joinpath("schema", "report.schema.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@pytest.mark.parametrize("name", sorted(ALL))
def test_sample_reports_match_the_schema(name: str, validator: jsonschema.protocols.Validator) -> None:
    data = json.loads(ALL[name]().to_json())
    validator.validate(data)


def test_schema_rejects_a_broken_report(validator: jsonschema.protocols.Validator) -> None:
    data = report_to_dict(samples.disk_full())
    data["findings"][0]["severity"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(data)
    del data["schema_version"]
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(data)


def test_primary_first_and_fixed_key_order() -> None:
    data = report_to_dict(samples.disk_full())
    assert list(data) == ["schema_version", "autopsy_version", "run", "verdict", "findings", "not_evaluated",
                          "rule_errors", "outcomes", "artifacts", "problems"]
    assert data["schema_version"] == 1
    assert data["findings"][0]["rule"] == "disk.full" and data["findings"][0]["primary"] is True
    assert data["findings"][0]["evidence"] == [{"path": "train.log", "line": 48213, "excerpt": (
        "safetensors_rust.SafetensorError: Error while serializing: I/O error: No space left on device (os error 28)")}]
    assert data["verdict"]["rule"] == "disk.full"
    assert data["run"]["latest_valid_checkpoint"] == "checkpoint-8000"


def test_nonfinite_facts_are_valid_json_and_come_back() -> None:
    report = samples.nan_loss()
    text = report_to_json(report)
    json.loads(text)  # strict JSON: no bare NaN
    assert '"value": "NaN"' in text
    back = report_from_dict(json.loads(text))
    assert math.isnan(back.primary.facts["value"])  # type: ignore[union-attr]


@pytest.mark.parametrize("name", sorted(ALL))
def test_round_trip(name: str) -> None:
    report = ALL[name]()
    back = report_from_dict(json.loads(report.to_json()))
    assert back.to_json() == report.to_json()
    assert [f.fingerprint for f in back.findings] == [f.fingerprint for f in ordered_findings(report)]
    assert {o.rule: o.kind for o in back.outcomes} == {o.rule: o.kind for o in report.outcomes}


def test_jsonl_and_arrays_are_read_back() -> None:
    reports = [samples.disk_full(), samples.empty_log()]
    jsonl = reports_to_jsonl(reports)
    assert len(jsonl.splitlines()) == 2
    assert [r.run.path for r in reports_from_text(jsonl)] == ["runs/exp42", "runs/silent"]
    array = json.dumps([report_to_dict(r) for r in reports])
    assert [r.run.path for r in reports_from_text(array)] == ["runs/exp42", "runs/silent"]


@pytest.mark.parametrize("text", ["", "{", '{"a": 1}', '{"schema_version": 99, "run": {"path": "x"}}',
                                  '{"schema_version": 1, "run": {}}', "[1, 2]"])
def test_bad_saved_reports_raise(text: str) -> None:
    with pytest.raises(ReportFormatError):
        reports_from_text(text)


def test_facts_of_odd_types_become_json() -> None:
    import numpy as np

    f = Finding(rule="x.y", severity=samples.Severity.INFO, confidence=samples.Confidence.LOW, title="t",
                message="m", facts={"n": np.int64(3), "t": (1, 2), "s": {"b", "a"}, "f": np.float32(0.5)}, key="k")
    report = samples.clean()
    from dataclasses import replace

    data = report_to_dict(replace(report, findings=(f,)))
    assert data["findings"][0]["facts"] == {"f": 0.5, "n": 3, "s": ["a", "b"], "t": [1, 2]}


def test_documented_example_is_valid(validator: jsonschema.protocols.Validator) -> None:
    import re

    from conftest import REPO

    doc = (REPO / "docs" / "json-schema.md").read_text(encoding="utf-8")
    example = json.loads(re.search(r"```json\n(.*?)```", doc, re.S).group(1))  # type: ignore[union-attr]
    validator.validate(example)
    for key in report_to_dict(samples.disk_full()):
        assert f"`{key}`" in doc, f"top-level key {key} is not documented in docs/json-schema.md"
