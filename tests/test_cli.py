"""The CLI: exit codes, formats, saved-report re-rendering, CI side outputs, light --help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import report_samples as samples
from click.testing import CliRunner
from conftest import REPO, RUNS

from autopsy.cli import main, parse_size
from autopsy.report.json_report import reports_to_jsonl

ENV = {"GITHUB_STEP_SUMMARY": None, "NO_COLOR": None, "AUTOPSY_DEBUG": None}


def invoke(*args: str, env: dict[str, str | None] | None = None) -> object:
    return CliRunner().invoke(main, list(args), env={**ENV, **(env or {})}, catch_exceptions=False)


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "disk.json"
    path.write_text(samples.disk_full().to_json())
    return path


@pytest.fixture
def many(tmp_path: Path) -> Path:
    path = tmp_path / "many.jsonl"
    path.write_text(reports_to_jsonl([samples.disk_full(), samples.nan_loss(), samples.clean()]))
    return path


def _fixture_runs() -> list[Path]:
    return sorted(p for p in RUNS.glob("*") if p.is_dir()) if RUNS.exists() else []


def test_version() -> None:
    r = invoke("--version")
    assert r.exit_code == 0 and "0.1.0" in r.output  # type: ignore[attr-defined]


def test_help_documents_exit_codes() -> None:
    for args in (["--help"], ["analyze", "--help"], ["report", "--help"]):
        r = invoke(*args)
        assert r.exit_code == 0  # type: ignore[attr-defined]
        assert "Exit codes:" in r.output and "--fail-on" in r.output  # type: ignore[attr-defined]


def test_help_imports_nothing_heavy() -> None:
    code = ("import sys; from autopsy.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('pandas', 'jinja2', 'tensorboard', 'numpy', 'autopsy.engine.loader') "
            "if m in sys.modules]\nprint('HEAVY', heavy)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "HEAVY []" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("args", [["analyze", "/no/such/dir"], ["analyze"], ["analyze", ".", "--format", "pdf"],
                                  ["analyze", ".", "--fail-on", "fatal"], ["report", "/no/such.json"],
                                  ["analyze", ".", "--max-bytes-per-file", "lots"],
                                  ["rules", "explain", "no.such_rule"]])
def test_usage_errors_exit_2(args: list[str]) -> None:
    r = invoke(*args)
    assert r.exit_code == 2, r.output  # type: ignore[attr-defined]


def test_file_instead_of_dir_exits_2(saved: Path) -> None:
    r = invoke("analyze", str(saved))
    assert r.exit_code == 2 and "not a directory" in r.output  # type: ignore[attr-defined]


def test_bad_saved_report_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    r = invoke("report", str(bad))
    assert r.exit_code == 2 and "not an autopsy JSON report" in r.output  # type: ignore[attr-defined]


def test_unknown_select_exits_2(tmp_path: Path) -> None:
    r = invoke("analyze", str(tmp_path), "--select", "no_such_family")
    assert r.exit_code == 2 and "no_such_family" in r.output  # type: ignore[attr-defined]


@pytest.mark.parametrize(("fail_on", "code"), [("none", 0), ("critical", 1), ("error", 1), ("info", 1)])
def test_fail_on(saved: Path, fail_on: str, code: int) -> None:
    assert invoke("report", str(saved), "--fail-on", fail_on).exit_code == code  # type: ignore[attr-defined]


def test_fail_on_clean_report_is_0(tmp_path: Path) -> None:
    path = tmp_path / "ok.json"
    path.write_text(samples.clean().to_json())
    assert invoke("report", str(path), "--fail-on", "info").exit_code == 0  # type: ignore[attr-defined]


def test_fail_on_threshold_above_worst(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_text(samples.empty_log().to_json())  # worst: error
    assert invoke("report", str(path), "--fail-on", "critical").exit_code == 0  # type: ignore[attr-defined]
    assert invoke("report", str(path), "--fail-on", "error").exit_code == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("fmt", ["text", "md", "json", "jsonl", "sarif", "junit"])
def test_report_rerenders_every_format(saved: Path, fmt: str) -> None:
    r = invoke("report", str(saved), "--format", fmt)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    out = r.output  # type: ignore[attr-defined]
    if fmt == "text":
        assert out.startswith("runs/exp42: CRITICAL disk.full at step 9,000")
    elif fmt == "md":
        assert out.startswith("## 2025-10-24 - Training crash: disk full at step 9000")
    elif fmt in ("json", "jsonl", "sarif"):
        json.loads(out)
    else:
        ET.fromstring(out)


def test_report_json_is_stable(saved: Path) -> None:
    r = invoke("report", str(saved), "--format", "json")
    assert r.output == saved.read_text() + "\n"  # type: ignore[attr-defined]


def test_quiet_is_the_verdict_only(saved: Path) -> None:
    r = invoke("report", str(saved), "--quiet")
    assert r.output.count("\n") == 1 and "disk.full" in r.output  # type: ignore[attr-defined]


def test_many_runs_table_and_jsonl(many: Path) -> None:
    r = invoke("report", str(many))
    lines = r.output.splitlines()  # type: ignore[attr-defined]
    assert lines[0].split() == ["RUN", "VERDICT", "LAST", "STEP", "LOST", "FINDINGS"]
    assert len(lines) == 4 and "critical disk.full" in lines[1] and " ok " in lines[3]
    out = invoke("report", str(many), "--format", "jsonl").output  # type: ignore[attr-defined]
    assert [json.loads(line)["run"]["path"] for line in out.splitlines()] == ["runs/exp42", "runs/nan-7b", "runs/ok"]
    arr = json.loads(invoke("report", str(many), "--format", "json").output)  # type: ignore[attr-defined]
    assert isinstance(arr, list) and len(arr) == 3


def test_output_file_and_no_color(saved: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.md"
    r = invoke("report", str(saved), "--format", "md", "-o", str(out))
    assert r.exit_code == 0 and r.output == ""  # type: ignore[attr-defined]
    assert out.read_text().startswith("## 2025-10-24")


def test_append_via_cli_is_idempotent(saved: Path, tmp_path: Path) -> None:
    log = tmp_path / "ISSUES.md"
    log.write_text("# ISSUES\n")
    invoke("report", str(saved), "--append", str(log))
    once = log.read_text()
    r = invoke("report", str(saved), "--append", str(log))
    assert "0 entries appended" in r.output and "1 already there" in r.output  # type: ignore[attr-defined]
    assert log.read_text() == once and once.startswith("# ISSUES\n\n---\n\n## 2025-10-24")


def test_github_summary_and_annotations(saved: Path, tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    r = invoke("report", str(saved), env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert "::error file=runs/exp42/train.log,line=48213," in r.output  # type: ignore[attr-defined]
    text = summary.read_text()
    assert text.startswith("## autopsy\n\n- runs/exp42: CRITICAL disk.full") and "**Root Cause:**" in text
    r = invoke("report", str(saved), "--github", "--format", "json")
    assert "::error" not in r.stdout and "::error" in r.stderr  # type: ignore[attr-defined]
    json.loads(r.stdout)  # type: ignore[attr-defined]


def test_html_refuses_many_runs(many: Path) -> None:
    r = invoke("report", str(many), "--format", "html")
    assert r.exit_code == 2  # type: ignore[attr-defined]


def test_parse_size() -> None:
    assert parse_size("1000") == 1000
    assert parse_size("512K") == 512 * 1024
    assert parse_size("2GiB") == parse_size("2G") == parse_size("2gb") == 2 * 1024**3
    assert parse_size("1.5M") == int(1.5 * 1024**2)


def test_rules_list_and_explain() -> None:
    r = invoke("rules", "list")
    assert r.exit_code == 0 and "oom.cuda" in r.output  # type: ignore[attr-defined]
    r = invoke("rules", "explain", "oom.cuda")
    assert r.exit_code == 0 and r.output.startswith("oom.cuda: ") and "What to do:" in r.output  # type: ignore[attr-defined]


def test_missing_run_among_many_exits_2_before_analysis(tmp_path: Path) -> None:
    r = invoke("analyze", str(tmp_path), str(tmp_path / "nope"))
    assert r.exit_code == 2 and "nope: no such directory" in r.output  # type: ignore[attr-defined]


def test_quoted_glob_is_expanded(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.log").write_text("step 1 | loss 2.0\n")
    r = invoke("analyze", str(tmp_path / "*"), "--format", "jsonl")
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    paths = [json.loads(line)["run"]["path"] for line in r.stdout.splitlines()]  # type: ignore[attr-defined]
    assert paths == [str(tmp_path / "a"), str(tmp_path / "b")]


@pytest.mark.parametrize("run_dir", _fixture_runs(), ids=lambda p: p.name)
def test_fixture_runs_end_to_end(run_dir: Path) -> None:
    r = invoke("analyze", str(run_dir), "--format", "json")
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    data = json.loads(r.stdout)  # type: ignore[attr-defined]
    expected_fail = 1 if any(f["severity"] in ("error", "critical") for f in data["findings"]) else 0
    assert invoke("analyze", str(run_dir), "--fail-on", "error", "-q").exit_code == expected_fail  # type: ignore[attr-defined]


def test_ci_example_uses_real_options() -> None:
    import re

    import yaml

    path = REPO / "examples" / "ci" / "github-actions.yml"
    workflow = yaml.safe_load(path.read_text())
    assert workflow["jobs"]["autopsy"]["if"] == "failure()"
    commands = [line.strip() for line in path.read_text().splitlines() if "autopsy analyze" in line
                or "autopsy report" in line]
    assert commands
    helps = {cmd: invoke(cmd, "--help").output for cmd in ("analyze", "report")}  # type: ignore[attr-defined]
    for line in commands:
        cmd = "analyze" if "autopsy analyze" in line else "report"
        for opt in re.findall(r"(?<=\s)--?[a-z][a-z-]*", line.split(f"autopsy {cmd}", 1)[1]):
            assert opt in helps[cmd], f"{opt} used in {path.name} but not an option of autopsy {cmd}"
