"""GitHub annotations: one per location, primary and unexplained findings only, repo-relative paths."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import report_samples as samples
from conftest import REPO, RUNS

from autopsy.model import Confidence, Evidence, Finding, Severity
from autopsy.report.github import annotation_lines

_LOC = re.compile(r"^::(error|warning|notice) file=([^,]+),line=(\d+)")


def _locations(lines: list[str]) -> list[tuple[str, str, str]]:
    out = []
    for line in lines:
        m = _LOC.match(line)
        assert m, line
        out.append((m.group(1), m.group(2), m.group(3)))
    return out


@pytest.fixture(scope="module")
def disk_full_report() -> object:
    if not (RUNS / "disk_full").is_dir():
        pytest.skip("fixtures/runs/disk_full is absent")
    from autopsy.api import analyze

    return analyze(RUNS / "disk_full")


def test_fixture_disk_full_has_no_duplicate_locations(disk_full_report: object) -> None:
    lines = annotation_lines([disk_full_report], workspace=None)  # type: ignore[list-item]
    locs = [(path, line) for _, path, line in _locations(lines)]
    assert locs and len(locs) == len(set(locs)), lines
    assert sum(1 for p, line in locs if p.endswith("train.log") and line == "57") == 1
    # explained findings fold into the primary's message instead of their own annotations
    assert not any("title=autopsy checkpoint.retention" in line for line in lines), lines
    assert "checkpoint.retention" in lines[0] and "disk.full" in lines[0]


def test_explained_findings_fold_into_the_primary() -> None:
    lines = annotation_lines([samples.disk_full()], workspace=None)
    # the primary's log line, and no annotation of its own for checkpoint.retention's config lines
    assert [(k, p, n) for k, p, n in _locations(lines)] == [("error", "runs/exp42/train.log", "48213")]
    assert "Also explains checkpoint.retention" in lines[0] and "checkpoint.corrupt" in lines[0]


def test_unexplained_findings_keep_their_severity() -> None:
    report = samples.disk_full()
    extra = Finding(rule="loss.spike", severity=Severity.WARNING, confidence=Confidence.MEDIUM, title="Loss spike",
                    message="loss jumped", evidence=(Evidence(path="train.log", line=100),), key="k")
    info = replace(extra, rule="perf.slow", severity=Severity.INFO, evidence=(Evidence(path="train.log", line=5),))
    same_line = replace(extra, rule="lr.floor", evidence=(Evidence(path="train.log", line=48213),))
    report = replace(report, findings=(*report.findings, extra, info, same_line))
    kinds = _locations(annotation_lines([report], workspace=None))
    assert kinds == [("error", "runs/exp42/train.log", "48213"), ("warning", "runs/exp42/train.log", "100"),
                     ("notice", "runs/exp42/train.log", "5")]


def test_explained_finding_without_annotated_explainer_is_a_notice() -> None:
    report = samples.disk_full()
    primary, retention, corrupt = report.findings
    report = replace(report, findings=(replace(primary, evidence=()), retention, corrupt))
    kinds = _locations(annotation_lines([report], workspace=None))
    config = "runs/exp42/configs/train.yaml"
    assert kinds == [("notice", config, "12"), ("notice", config, "11")]


def test_overlapping_range_is_folded() -> None:
    report = samples.disk_full()
    primary = report.findings[0]
    primary = replace(primary, evidence=(*primary.evidence, Evidence(path="train.log", line=48190, line_end=48213)))
    lines = annotation_lines([replace(report, findings=(primary, *report.findings[1:]))], workspace=None)
    assert len(lines) == 1


def test_paths_are_relative_to_the_workspace(tmp_path: Path) -> None:
    run = tmp_path / "ws" / "runs" / "exp42"
    report = samples.disk_full()
    report = replace(report, run=replace(report.run, path=str(run)))
    lines = annotation_lines([report], workspace=str(tmp_path / "ws"))
    assert lines[0].startswith("::error file=runs/exp42/train.log,line=48213,")
    outside = annotation_lines([report], workspace=str(tmp_path / "elsewhere"))
    assert outside[0].startswith(f"::error file={run.as_posix()}/train.log,")


def test_relative_run_path_is_resolved_from_cwd_into_the_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO / "fixtures")
    lines = annotation_lines([samples.disk_full()], workspace=str(REPO))
    assert lines[0].startswith("::error file=fixtures/runs/exp42/train.log,")


def test_workspace_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    report = samples.disk_full()
    report = replace(report, run=replace(report.run, path=str(tmp_path / "exp")))
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    assert annotation_lines([report])[0].startswith("::error file=exp/train.log,")
