"""Team defaults ([tool.autopsy] / .autopsy.toml) and baselines, in the library and end to end
through ``autopsy analyze`` (issue 12, item 7)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import REPO, RUNS

from autopsy.baseline import BaselineError, apply_baseline, load_baseline, updated_baseline
from autopsy.cli import main
from autopsy.report.json_report import report_from_dict
from autopsy.team_config import ConfigError, discover, find_config, load_config

ENV = {"GITHUB_STEP_SUMMARY": None, "NO_COLOR": None, "AUTOPSY_DEBUG": None}

TEAM_CARD = """id: team.boom
title: Our trainer's BOOM
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
  match: ['BOOM 12']
"""


def invoke(*args: str, cwd: Path | None = None, monkeypatch: pytest.MonkeyPatch | None = None) -> object:
    if cwd is not None and monkeypatch is not None:
        monkeypatch.chdir(cwd)
    return CliRunner().invoke(main, list(args), env=ENV, catch_exceptions=False)


@pytest.fixture
def team(tmp_path: Path) -> Path:
    """A team checkout: runs/disk_full and runs/oom_host (real fixture runs), no config yet."""
    root = tmp_path / "team"
    for name in ("disk_full", "oom_host"):
        shutil.copytree(RUNS / name, root / "runs" / name, symlinks=True)
    return root


def _schema_validator() -> Any:
    import jsonschema

    schema = json.loads((REPO / "autopsy" / "schema" / "report.schema.json").read_text(encoding="utf-8"))
    return jsonschema.validators.validator_for(schema)(schema)


def _pyproject(root: Path, body: str) -> Path:
    path = root / "pyproject.toml"
    path.write_text(f'[project]\nname = "ours"\n\n[tool.autopsy]\n{body}', encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- finding the config


def test_nearest_config_wins_and_autopsy_toml_beats_pyproject(tmp_path: Path) -> None:
    run = tmp_path / "a" / "b" / "run"
    run.mkdir(parents=True)
    assert find_config(run) is None
    _pyproject(tmp_path, 'fail-on = "error"\n')
    assert find_config(run) == tmp_path / "pyproject.toml"
    (tmp_path / "a" / "pyproject.toml").write_text('[project]\nname = "no table"\n')  # passed over
    assert find_config(run) == tmp_path / "pyproject.toml"
    (tmp_path / "a" / ".autopsy.toml").write_text('fail-on = "warning"\n')
    assert find_config(run) == tmp_path / "a" / ".autopsy.toml"
    _pyproject(tmp_path / "a", 'fail-on = "critical"\n')
    assert find_config(run) == tmp_path / "a" / ".autopsy.toml"  # same directory: .autopsy.toml first
    assert load_config(find_config(run) or "").fail_on == "warning"


def test_paths_resolve_against_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "ci" / "rules").mkdir(parents=True)
    cfg = load_config(_pyproject(tmp_path, 'rules = ["ci/rules"]\nbaseline = "ci/base.json"\n'
                                           'max_bytes_per_file = "2G"\nselect = "oom"\n'))
    assert cfg.rules == (tmp_path / "ci" / "rules",) and cfg.baseline == tmp_path / "ci" / "base.json"
    assert cfg.max_bytes_per_file == 2 * 1024**3 and cfg.select == ("oom",) and cfg.ignore is None


@pytest.mark.parametrize(("body", "message"), [
    ('fail_on = "eror"\n', "fail-on must be a string (one of none, info, warning, error, critical)"),
    ('ignor = ["loss"]\n', "unknown key ignor (known: select, ignore"),
    ('select = [1]\n', "select must be a list of strings"),
    ('rules = ["nowhere"]\n', "rules dir not found"),
    ('max-bytes-per-file = -3\n', "max-bytes-per-file: '-3': a size must be positive"),
    ('format = 3\n', "format must be a string"),
    ('fail-on = \n', "not valid TOML"),
])
def test_a_bad_config_is_an_error_naming_the_key(tmp_path: Path, body: str, message: str) -> None:
    path = _pyproject(tmp_path, body)
    with pytest.raises(ConfigError, match=None) as info:
        load_config(path)
    assert str(path) in str(info.value) and message in str(info.value)


def test_runs_under_different_configs_are_refused_and_cwd_is_the_fallback(tmp_path: Path) -> None:
    a, b, elsewhere = tmp_path / "a" / "run", tmp_path / "b" / "run", tmp_path / "c" / "run"
    for d in (a, b, elsewhere):
        d.mkdir(parents=True)
    _pyproject(tmp_path / "a", 'fail-on = "error"\n')
    (tmp_path / "b" / ".autopsy.toml").write_text('[tool.autopsy]\nfail-on = "warning"\n')
    with pytest.raises(ConfigError, match="different team configs"):
        discover([a, b])
    with pytest.raises(ConfigError, match="only some of the runs"):
        discover([a, elsewhere])
    assert discover([elsewhere], cwd=tmp_path / "c") is None
    cfg = discover([elsewhere], cwd=tmp_path / "b")
    assert cfg is not None and cfg.fail_on == "warning"


# ------------------------------------------------------------------------------------ end to end


def test_fail_on_from_the_team_config_and_the_command_line_wins(team: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = str(team / "runs" / "oom_host")
    assert invoke("analyze", run, "-q").exit_code == 0  # type: ignore[attr-defined]
    _pyproject(team, 'fail-on = "error"\n')
    r = invoke("analyze", run, "-q")
    assert r.exit_code == 1 and r.stderr == "", r.output  # type: ignore[attr-defined]
    r = invoke("analyze", run, "-f", "json")  # which config applied is said on stderr (not under -q)
    assert r.exit_code == 1 and json.loads(r.stdout)["findings"]  # type: ignore[attr-defined]
    assert r.stderr == f"autopsy: team config {team / 'pyproject.toml'}\n"  # type: ignore[attr-defined]
    assert invoke("analyze", run, "-q", "--fail-on", "none").exit_code == 0  # type: ignore[attr-defined]
    assert invoke("analyze", run, "-q", "--no-config").exit_code == 0  # type: ignore[attr-defined]


def test_select_ignore_format_and_rules_dirs_from_the_config(team: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (team / "ci" / "rules" / "team").mkdir(parents=True)
    (team / "ci" / "rules" / "team" / "boom.yaml").write_text(TEAM_CARD)
    run = team / "runs" / "disk_full"
    (run / "train.log").write_text((run / "train.log").read_text() + "BOOM 7\n")
    _pyproject(team, 'format = "json"\nignore = ["checkpoint"]\nrules = ["ci/rules"]\n')
    r = invoke("analyze", str(run))
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    rules = {f["rule"] for f in json.loads(r.stdout)["findings"]}  # type: ignore[attr-defined]
    assert "team.boom" in rules and "disk.full" in rules and not any(x.startswith("checkpoint.") for x in rules)
    r = invoke("analyze", str(run), "--ignore", "disk", "-f", "text", "-q")  # the command line replaces both
    assert r.stdout.startswith(f"{run}: ") and "disk.full" not in r.stdout  # type: ignore[attr-defined]


def test_config_found_from_the_working_directory(team: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "scratch" / "oom_host"
    shutil.copytree(team / "runs" / "oom_host", outside, symlinks=True)
    _pyproject(team, 'fail-on = "error"\n')
    assert invoke("analyze", str(outside), "-q", cwd=tmp_path, monkeypatch=monkeypatch).exit_code == 0  # type: ignore[attr-defined]
    assert invoke("analyze", str(outside), "-q", cwd=team, monkeypatch=monkeypatch).exit_code == 1  # type: ignore[attr-defined]
    r = invoke("analyze", str(outside), "-q", "--config", str(team / "pyproject.toml"), cwd=tmp_path,
               monkeypatch=monkeypatch)
    assert r.exit_code == 1  # type: ignore[attr-defined]


def test_a_bad_team_config_exits_2(team: Path) -> None:
    _pyproject(team, 'fail-on = "error"\nbaselines = "x.json"\n')
    r = invoke("analyze", str(team / "runs" / "oom_host"), "-q")
    assert r.exit_code == 2 and r.stdout == ""  # type: ignore[attr-defined]
    assert "unknown key baselines" in r.stderr  # type: ignore[attr-defined]


def test_baseline_accepts_known_failures_and_new_ones_still_fail(team: Path) -> None:
    _pyproject(team, 'fail-on = "error"\nbaseline = "ci/autopsy-baseline.json"\n')
    disk, oom = str(team / "runs" / "disk_full"), str(team / "runs" / "oom_host")
    r = invoke("analyze", disk, "-q")
    assert r.exit_code == 2 and "no such baseline file" in r.stderr  # type: ignore[attr-defined]
    before = sorted(p.relative_to(team).as_posix() for p in (team / "runs").rglob("*"))
    r = invoke("analyze", disk, "-q", "--update-baseline")
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    assert "baseline ci/autopsy-baseline.json" not in r.stderr  # -q: quiet  # type: ignore[attr-defined]
    base = json.loads((team / "ci" / "autopsy-baseline.json").read_text())
    assert {e["rule"] for e in base["findings"]} >= {"disk.full", "checkpoint.retention"}
    assert sorted(p.relative_to(team).as_posix() for p in (team / "runs").rglob("*")) == before  # nothing in a run

    r = invoke("analyze", disk, "-f", "json")
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    data = json.loads(r.stdout)  # type: ignore[attr-defined]
    assert data["findings"] == [] and data["verdict"] is None
    assert {f["fingerprint"] for f in data["accepted"]} == {e["fingerprint"] for e in base["findings"]}
    _schema_validator().validate(data)
    again = report_from_dict(data)  # a saved report keeps what was accepted (autopsy report re-renders it)
    assert {f.fingerprint for f in again.accepted} == {e["fingerprint"] for e in base["findings"]}
    text = invoke("analyze", disk).stdout  # type: ignore[attr-defined]
    assert "no new failure" in text.splitlines()[0] and "no failure found" not in text
    assert "Accepted by the baseline (" in text
    md = invoke("analyze", disk, "-f", "md").stdout  # type: ignore[attr-defined]
    assert "known findings accepted by the baseline: checkpoint.corrupt, checkpoint.retention, disk.full" in md

    r = invoke("analyze", disk, oom, "-q")  # oom_host's failure is new: the gate still fails on it
    assert r.exit_code == 1  # type: ignore[attr-defined]
    lines = r.stdout.splitlines()  # type: ignore[attr-defined]
    assert "no new failure" in lines[0] and "CRITICAL oom.host" in lines[1]
    table = invoke("analyze", disk, oom).stdout  # type: ignore[attr-defined]
    assert "known only" in table and "oom.host" in table
    _accepted_in_sarif_junit_html(disk, oom, {e["fingerprint"] for e in base["findings"]})
    r = invoke("analyze", oom, "-q", "--update-baseline")
    assert r.exit_code == 0 and invoke("analyze", disk, oom, "-q").exit_code == 0  # type: ignore[attr-defined]
    grown = json.loads((team / "ci" / "autopsy-baseline.json").read_text())["findings"]
    assert len(grown) > len(base["findings"])  # added, nothing dropped
    assert {e["fingerprint"] for e in base["findings"]} <= {e["fingerprint"] for e in grown}


def _accepted_in_sarif_junit_html(disk: str, oom: str, known: set[str]) -> None:
    """Accepted findings are marked accepted in SARIF, JUnit and HTML: never dropped, never failures."""
    import xml.etree.ElementTree as ET

    import jsonschema

    sarif = json.loads(invoke("analyze", disk, oom, "-f", "sarif").stdout)  # type: ignore[attr-defined]
    schema = json.loads((REPO / "tests" / "data" / "sarif-2.1.0.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft4Validator(schema).validate(sarif)
    disk_run, oom_run = sarif["runs"]
    assert {r["partialFingerprints"]["autopsyFingerprint/v1"] for r in disk_run["results"]} == known
    for res in disk_run["results"]:
        assert res["baselineState"] == "unchanged" and res["properties"]["accepted"] is True
        (sup,) = res["suppressions"]
        assert sup["kind"] == "external" and sup["status"] == "accepted"
        assert sup["justification"].startswith("known failure, accepted by the baseline ")
        assert sup["justification"].endswith("ci/autopsy-baseline.json")
    assert [r["ruleId"] for r in oom_run["results"]][:1] == ["oom.host"]
    assert {r["baselineState"] for r in oom_run["results"]} == {"new"} and not any(
        "suppressions" in r for r in oom_run["results"])

    junit = ET.fromstring(invoke("analyze", disk, oom, "-f", "junit").stdout)  # type: ignore[attr-defined]
    disk_suite, oom_suite = junit.findall("testsuite")
    assert disk_suite.get("failures") == "0" and oom_suite.get("failures") != "0"
    cases = {c.get("name"): c for c in disk_suite.findall("testcase")}
    skipped = cases["disk.full"].find("skipped")
    assert skipped is not None and skipped.get("type") == "accepted"
    assert (skipped.get("message") or "").startswith("accepted by the baseline: ")

    html = invoke("analyze", disk, "-f", "html").stdout  # type: ignore[attr-defined]
    accepted = html[html.index('<section id="accepted">'):html.index('<section id="plots">')]
    assert 'data-rule="disk.full"' in accepted and "ci/autopsy-baseline.json" in accepted
    assert 'class="finding ' not in html  # not among the findings: nothing new failed
    assert "No new failure" in html


def test_update_baseline_never_writes_into_a_run(team: Path) -> None:
    run = team / "runs" / "oom_host"
    target = run / "accepted.json"
    r = invoke("analyze", str(run), "-q", "--baseline", str(target), "--update-baseline", "--force")
    assert r.exit_code == 2 and "inside the run directory" in r.stderr  # type: ignore[attr-defined]
    assert not target.exists()
    r = invoke("analyze", str(run), "-q", "--update-baseline")
    assert r.exit_code == 2 and "--update-baseline needs a baseline file" in r.stderr  # type: ignore[attr-defined]


@pytest.mark.parametrize(("text", "message"), [
    ("[]", "not an autopsy baseline"),
    ('{"kind": "autopsy.baseline", "version": 9, "findings": []}', "baseline version 9"),
    ('{"kind": "autopsy.baseline", "version": 1, "findings": [{"rule": "x"}]}', "findings[0] has no fingerprint"),
    ("{", "not JSON"),
])
def test_a_bad_baseline_is_exit_2(team: Path, text: str, message: str) -> None:
    path = team / "base.json"
    path.write_text(text)
    with pytest.raises(BaselineError, match=None) as info:
        load_baseline(path)
    assert message in str(info.value)
    r = invoke("analyze", str(team / "runs" / "oom_host"), "-q", "--baseline", str(path))
    assert r.exit_code == 2 and message in r.stderr  # type: ignore[attr-defined]


def test_accepting_the_primary_promotes_the_first_new_finding() -> None:
    import report_samples as samples

    report = samples.disk_full()
    primary = report.primary
    assert primary is not None and len(report.findings) > 1
    text, added, kept = updated_baseline([report])
    assert (added, kept) == (len(report.findings), 0)
    only_primary = {"kind": "autopsy.baseline", "version": 1,
                    "findings": [e for e in json.loads(text)["findings"] if e["fingerprint"] == primary.fingerprint]}
    from autopsy.baseline import Baseline

    out = apply_baseline(report, Baseline({e["fingerprint"]: e for e in only_primary["findings"]}))
    assert [f.fingerprint for f in out.accepted] == [primary.fingerprint]
    assert out.primary is not None and out.primary.rule != primary.rule
    assert sum(f.primary for f in out.findings) == 1 and len(out.findings) == len(report.findings) - 1


def test_report_applies_a_baseline_to_a_saved_report(team: Path) -> None:
    oom = str(team / "runs" / "oom_host")
    saved, base = team / "oom.json", team / "ci" / "base.json"
    assert invoke("analyze", oom, "-f", "json", "-o", str(saved)).exit_code == 0  # type: ignore[attr-defined]
    assert invoke("report", str(saved), "--fail-on", "error", "-q").exit_code == 1  # type: ignore[attr-defined]
    assert invoke("analyze", oom, "-q", "--baseline", str(base), "--update-baseline").exit_code == 0  # type: ignore[attr-defined]
    r = invoke("report", str(saved), "--fail-on", "error", "--baseline", str(base), "-q")
    assert r.exit_code == 0 and "no new failure" in r.stdout  # type: ignore[attr-defined]
    r = invoke("report", str(saved), "--baseline", str(team / "missing.json"))
    assert r.exit_code == 2 and "no such baseline file" in r.stderr  # type: ignore[attr-defined]
