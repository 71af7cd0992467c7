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
    assert f"nothing new to append to {log} (this run's failure is already in the log)" in r.stderr  # type: ignore[attr-defined]
    assert log.read_text() == once and once.startswith("# ISSUES\n\n---\n\n## 2025-10-24")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ISSUES.md", "disk.json"]  # no lock file left


def test_md_append_does_not_print_the_entries_again(saved: Path, tmp_path: Path) -> None:
    log = tmp_path / "ISSUES.md"
    r = invoke("report", str(saved), "--format", "md", "--append", str(log))
    assert r.exit_code == 0 and r.stdout == ""  # type: ignore[attr-defined]
    assert "1 entry appended" in r.stderr  # type: ignore[attr-defined]
    assert "## 2025-10-24" in log.read_text()
    r = invoke("report", str(saved), "--format", "md", "--append", str(log), "-o", str(tmp_path / "copy.md"))
    assert (tmp_path / "copy.md").read_text().startswith("## 2025-10-24")


def test_append_messages_count_entries(saved: Path, many: Path, tmp_path: Path) -> None:
    log = tmp_path / "ISSUES.md"
    r = invoke("report", str(saved), "--append", str(log))
    assert f"autopsy: 1 entry appended to {log}\n" in r.stderr  # type: ignore[attr-defined]
    r = invoke("report", str(many), "--append", str(log))
    assert f"1 entry appended to {log}; 1 already present" in r.stderr  # type: ignore[attr-defined]
    log2 = tmp_path / "TWO.md"
    r = invoke("report", str(many), "--append", str(log2))
    assert f"2 entries appended to {log2}" in r.stderr  # type: ignore[attr-defined]


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


def _tiny_run(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "train.log").write_text("step 1 | loss 2.0\n")
    return path


def test_missing_run_among_many_is_skipped_and_exits_2_at_the_end(tmp_path: Path) -> None:
    good = _tiny_run(tmp_path / "good")
    r = invoke("analyze", str(good), str(tmp_path / "nope"), "--quiet")
    assert r.exit_code == 2  # type: ignore[attr-defined]
    assert r.stdout.startswith(f"{good}: ")  # type: ignore[attr-defined]  # the good run is still reported
    assert r.stderr.count("\n") == 1 and "nope: no such directory" in r.stderr  # type: ignore[attr-defined]


def test_file_among_runs_is_skipped_with_a_hint(tmp_path: Path) -> None:
    good = _tiny_run(tmp_path / "good")
    readme = tmp_path / "README.md"
    readme.write_text("# runs\n")
    r = invoke("analyze", str(good), str(readme), "--format", "jsonl")
    assert r.exit_code == 2  # type: ignore[attr-defined]
    assert [json.loads(line)["run"]["path"] for line in r.stdout.splitlines()] == [str(good)]  # type: ignore[attr-defined]
    assert "README.md: not a directory" in r.stderr and "*/" in r.stderr  # type: ignore[attr-defined]


def test_input_error_wins_over_fail_on(tmp_path: Path) -> None:
    run = tmp_path / "empty"
    run.mkdir()
    (run / "train.log").write_text("")  # an empty log: an error-level finding
    assert invoke("analyze", str(run), "--fail-on", "info", "-q").exit_code == 1  # type: ignore[attr-defined]
    r = invoke("analyze", str(run), str(tmp_path / "nope"), "--fail-on", "info", "-q")
    assert r.exit_code == 2  # type: ignore[attr-defined]


def test_only_bad_paths_exit_2_without_output(tmp_path: Path) -> None:
    r = invoke("analyze", str(tmp_path / "a"), str(tmp_path / "b"))
    assert r.exit_code == 2 and r.stdout == ""  # type: ignore[attr-defined]
    assert r.stderr.count("no such directory") == 2  # type: ignore[attr-defined]


def test_epilog_says_which_exit_code_wins() -> None:
    out = invoke("analyze", "--help").output  # type: ignore[attr-defined]
    assert "the highest code wins" in " ".join(out.split())


BAD_CARD = """id: team.my_rule
title: My rule
severity: error
confidence: high
status: stable
needs: [log]
docs: {summary: s, why: w, confirm: c, action: a}
match:
  any:
    - name: boom
      comment: our trainer
      regex: 'BOOM (?P<code>\\d+)'
samples:
  match: ['bang 12']
"""


@pytest.mark.parametrize("command", [["analyze", "{run}"], ["rules", "list"], ["rules", "explain", "oom.cuda"]])
def test_refused_team_card_exits_2(tmp_path: Path, command: list[str]) -> None:
    rules = tmp_path / "team"
    (rules / "team").mkdir(parents=True)
    (rules / "team" / "my_rule.yaml").write_text(BAD_CARD)
    run = _tiny_run(tmp_path / "run")
    r = invoke(*[c.format(run=run) for c in command], "--rules", str(rules))
    assert r.exit_code == 2, r.output  # type: ignore[attr-defined]
    assert "my_rule.yaml: samples.match[0]" in r.stderr and r.stdout == ""  # type: ignore[attr-defined]


@pytest.mark.parametrize(("rel", "ok"), [("team/my_rule.yaml", True), ("team.my_rule.yaml", True),
                                         ("sub/team.my_rule.yaml", True), ("my_rule.yaml", False),
                                         ("other/my_rule.yaml", False), ("team/other.yaml", False)])
def test_team_card_path_must_mirror_its_id(tmp_path: Path, rel: str, ok: bool) -> None:
    rules = tmp_path / "team_rules"
    (rules / rel).parent.mkdir(parents=True, exist_ok=True)
    (rules / rel).write_text(BAD_CARD.replace("bang 12", "BOOM 12"))
    r = invoke("rules", "explain", "team.my_rule", "--rules", str(rules))
    if ok:
        assert r.exit_code == 0 and r.stdout.startswith("team.my_rule: My rule"), r.output  # type: ignore[attr-defined]
    else:
        assert r.exit_code == 2, r.output  # type: ignore[attr-defined]
        assert f"{rel}: id: 'team.my_rule' does not match the file's path" in r.stderr  # type: ignore[attr-defined]
        assert "team/my_rule.yaml or team.my_rule.yaml" in r.stderr  # type: ignore[attr-defined]


def test_good_team_card_is_used_by_analyze(tmp_path: Path) -> None:
    rules = tmp_path / "rules" / "team"
    rules.mkdir(parents=True)
    (rules / "my_rule.yaml").write_text(BAD_CARD.replace("bang 12", "BOOM 12"))
    run = _tiny_run(tmp_path / "run")
    (run / "train.log").write_text("step 1 | loss 2.0\nBOOM 42\n")
    r = invoke("analyze", str(run), "--rules", str(tmp_path / "rules"), "--format", "json")
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    assert "team.my_rule" in [f["rule"] for f in json.loads(r.stdout)["findings"]]  # type: ignore[attr-defined]


def test_parent_of_runs_gets_a_hint(tmp_path: Path) -> None:
    parent = tmp_path / "runs"
    for name in ("exp1", "exp2", "exp3"):
        _tiny_run(parent / name)
    (parent / "README.md").write_text("# our runs\n")
    r = invoke("analyze", str(parent), "-q")
    assert r.exit_code == 0  # type: ignore[attr-defined]
    assert r.stdout.startswith(f"{parent}: ")  # type: ignore[attr-defined]  # still analysed as asked
    assert f"{parent} holds 3 run directories; analyse them with `autopsy analyze {parent}/*/`" in r.stderr  # type: ignore[attr-defined]


@pytest.mark.parametrize("layout", [
    ["logs/train.log", "tb/events.out.tfevents.1.h"],                           # one run split in component dirs
    ["checkpoint-10/trainer_state.json", "checkpoint-20/trainer_state.json"],   # HF output_dir
    ["rank0/train.log", "rank1/train.log"],                                     # per-rank logs
    ["train.log", "a/train.log", "b/train.log"],                                # a run with its own log on top
])
def test_single_run_layouts_get_no_hint(tmp_path: Path, layout: list[str]) -> None:
    for rel in layout:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("step 1 | loss 2.0\n")
    r = invoke("analyze", str(tmp_path), "-q")
    assert "hint" not in r.stderr, r.stderr  # type: ignore[attr-defined]


def test_progress_mode() -> None:
    from autopsy.cli_support import progress_mode

    assert progress_mode("text", quiet=False, tty=True, n_runs=5, large=True) == "bar"
    assert progress_mode("text", quiet=False, tty=True, n_runs=1, large=True) == "ticker"
    assert progress_mode("md", quiet=False, tty=True, n_runs=1, large=True) == "ticker"
    assert progress_mode("text", quiet=False, tty=True, n_runs=1, large=False) is None
    assert progress_mode("text", quiet=False, tty=False, n_runs=5, large=True) is None
    assert progress_mode("text", quiet=True, tty=True, n_runs=5, large=True) is None
    for fmt in ("json", "jsonl", "sarif", "junit", "html"):
        assert progress_mode(fmt, quiet=False, tty=True, n_runs=5, large=True) is None


def test_ticker_shows_elapsed_time_and_clears_its_line() -> None:
    import io
    import time

    from autopsy.cli_support import Ticker

    stream = io.StringIO()
    with Ticker("runs/big", stream=stream, interval=0.01):
        time.sleep(0.08)
    text = stream.getvalue()
    assert text.count("analysing runs/big ... 0s") >= 2  # redrawn while the work goes on
    assert text.endswith("\r\x1b[K")  # the indicator leaves nothing behind on the terminal


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


def test_ci_example_installs_this_project_and_keeps_checkpoints() -> None:
    import yaml

    path = REPO / "examples" / "ci" / "github-actions.yml"
    text = path.read_text()
    workflow = yaml.safe_load(text)
    runs = [step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"]]
    installs = [line for r in runs for line in r.splitlines() if "pip install" in line]
    assert installs and all("git+${{ github.server_url }}/" in line or "pip install ." in line for line in installs)
    uploads = [step["with"]["path"] for step in workflow["jobs"]["train"]["steps"]
               if str(step.get("uses", "")).startswith("actions/upload-artifact")]
    assert uploads and not any("!" in p and ("safetensors" in p or ".pt" in p) for p in uploads)
    assert any("autopsy analyze" in r and "--format html" in r for r in runs)
    assert not any("autopsy report" in r and "--format html" in r for r in runs)
