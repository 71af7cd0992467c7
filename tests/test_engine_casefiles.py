"""The case-file harness itself: strict loading, materialising, and failing when it should."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from casefiles import DEFAULT_AGE_S, Case, CaseError, check_report, facts_match, load_case_file, materialise

from autopsy.model import Confidence, Finding, Outcome, OutcomeKind, Report, RunSummary, Severity


def write_case(tmp_path: Path, text: str, name: str = "demo.boom") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


GOOD = """
rule: demo.boom
cases:
  - name: hit
    source: "made up"
    files:
      train.log: "BOOM\\n"
    expect: {fired: true, facts: {what: core}}
  - name: miss
    todo: "known miss"
    expect: {fired: false}
"""


def test_load_good_case_file(tmp_path: Path) -> None:
    hit, miss = load_case_file(write_case(tmp_path, GOOD))
    assert hit.id == "demo.boom::hit" and hit.origin == "made up" and hit.todo is None
    assert miss.todo == "known miss" and miss.files == {}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("rule: demo.other\ncases: [{name: a, expect: {fired: true}}]", "must equal the file name"),
        ("rule: demo.boom\ncases: []", "non-empty list"),
        ("rule: demo.boom\ncases: [{name: a, expect: {fird: true}}]", "must be a mapping with fired"),
        ("rule: demo.boom\ncases: [{name: a, expect: {fired: true, fact: {}}}]", "unknown key 'fact'"),
        ("rule: demo.boom\ncases: [{name: a, expect: {fired: yes please}}]", "true, false or not_evaluated"),
        ("rule: demo.boom\ncases: [{name: a, expect: {fired: true}}, {name: a, expect: {fired: true}}]", "unique"),
        ("rule: demo.boom\ncases: [{name: a, fles: {}, expect: {fired: true}}]", "unknown key 'fles'"),
    ],
)
def test_bad_case_files(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(CaseError, match=words):
        load_case_file(write_case(tmp_path, text))


def case(files: dict, now: float = 1_000_000_000.0, **expect: object) -> Case:  # type: ignore[type-arg]
    return Case(rule="demo.boom", name="c", source_file="x.yaml", files=files, expect=expect or {"fired": True},
                todo=None, now=now, origin=None)


def test_materialise_kinds_and_mtimes(tmp_path: Path) -> None:
    c = case({
        "train.log": "hello\n",
        "empty.log": None,
        "exit_code": 137,
        "trainer_state.json": {"json": {"global_step": 3}},
        "configs/a.yaml": {"yaml": {"lr": 0.1}, "mtime": -7200},
        "big.bin": {"bytes": 5000, "mtime": 1_234_567_890},
        "logs/": None,
        "ckpt/model.safetensors": {"safetensors": {"tensors": {"w": ["F32", [4, 4]]}, "truncate_to": 20}},
    })
    materialise(c, tmp_path)
    assert (tmp_path / "train.log").read_text() == "hello\n"
    assert (tmp_path / "empty.log").stat().st_size == 0
    assert (tmp_path / "exit_code").read_text() == "137"
    assert json.loads((tmp_path / "trainer_state.json").read_text()) == {"global_step": 3}
    assert "lr: 0.1" in (tmp_path / "configs/a.yaml").read_text()
    assert (tmp_path / "big.bin").stat().st_size == 5000
    assert (tmp_path / "logs").is_dir()
    assert (tmp_path / "ckpt/model.safetensors").stat().st_size == 20
    assert os.stat(tmp_path / "train.log").st_mtime == c.now - DEFAULT_AGE_S
    assert os.stat(tmp_path / "configs/a.yaml").st_mtime == c.now - 7200
    assert os.stat(tmp_path / "big.bin").st_mtime == 1_234_567_890


@pytest.mark.parametrize("bad", ["../escape.log", "/etc/passwd"])
def test_materialise_refuses_paths_outside(tmp_path: Path, bad: str) -> None:
    with pytest.raises(CaseError, match="inside the run"):
        materialise(case({bad: "x"}), tmp_path)


def test_materialise_refuses_ambiguous_spec(tmp_path: Path) -> None:
    with pytest.raises(CaseError, match="exactly one of"):
        materialise(case({"a.json": {"json": {}, "text": "x"}}), tmp_path)


def test_facts_match() -> None:
    assert facts_match({"gib": 2.0, "rank": 3}, {"gib": 2.0000000001, "rank": 3, "other": 1})
    assert not facts_match({"gib": 2.0}, {"gib": 2.1})
    assert not facts_match({"missing": 1}, {})
    assert facts_match({"ranks": [0, 3]}, {"ranks": (0, 3)})
    assert not facts_match({"ranks": [0, 3]}, {"ranks": [0, 3, 4]})
    assert not facts_match({"ok": True}, {"ok": 1})
    assert facts_match({"x": {"a": 1}}, {"x": {"a": 1, "b": 2}})


def report(*findings: Finding, kind: OutcomeKind = OutcomeKind.FIRED, reason: str | None = None) -> Report:
    return Report(run=RunSummary(path="r"), findings=findings,
                  outcomes=(Outcome("demo.boom", kind, findings=findings, reason=reason),))


def boom(primary: bool = True, **facts: object) -> Finding:
    return Finding(rule="demo.boom", severity=Severity.CRITICAL, confidence=Confidence.HIGH, title="t",
                   message="boom", facts=dict(facts), primary=primary)


def test_check_report_passes_and_fails() -> None:
    good = report(boom(what="core"))
    assert check_report(case({}, fired=True, facts={"what": "core"}, severity="critical", primary="demo.boom"),
                        good) == []
    probs = check_report(case({}, fired=True, facts={"what": "disk"}, severity="warning", primary="none",
                              not_fired=["demo.boom"]), good)
    assert [p.split(":")[0] for p in probs] == ["facts", "severity", "primary", "not_fired"]
    assert check_report(case({}, fired=False), good)[0].startswith("fired: expected False, got True")
    ne = report(kind=OutcomeKind.NOT_EVALUATED, reason="no text logs found")
    assert check_report(case({}, fired="not_evaluated", reason="no text logs"), ne) == []
    assert "reason" in check_report(case({}, fired="not_evaluated", reason="no loss"), ne)[0]
    err = report(kind=OutcomeKind.RULE_ERROR, reason="KeyError: x")
    assert check_report(case({}, fired=False), err) == ["demo.boom raised: KeyError: x"]
    missing = Report(run=RunSummary(path="r"), findings=())
    assert "is there a card" in check_report(case({}, fired=True), missing)[0]


def test_demo_case_file_end_to_end(tmp_path: Path) -> None:
    """The whole harness on a real scan: materialise, analyze, check (todo cases must fail)."""
    from autopsy.api import analyze
    from autopsy.engine.loader import load_catalog
    from autopsy.run import LoadOptions

    here = Path(__file__).resolve().parent / "data"
    catalog = load_catalog([here / "cards" / "good"], builtin=False)
    results = {}
    for c in load_case_file(here / "cases" / "demo.boom.yaml"):
        root = tmp_path / c.name
        root.mkdir()
        materialise(c, root)
        results[c.name] = check_report(c, analyze(root, options=LoadOptions(now=c.now), catalog=catalog))
    assert results.pop("known_miss"), "the todo case should fail (it documents a known miss)"
    assert results == {"rank_prefixed": [], "drill_is_benign": [], "no_logs": []}
