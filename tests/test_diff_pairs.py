"""`autopsy diff` on real run pairs that differ by one cause (fixtures/pairs/, fixtures/pairs/expected.yaml).

Each pair ranks its cause first; the seed pair agrees within noise; every output format renders
end to end through the CLI. Test ids are pair names: ``pytest -k lr_10x``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
PAIRS = REPO / "fixtures" / "pairs"
EXPECTED: dict[str, dict[str, Any]] = yaml.safe_load((PAIRS / "expected.yaml").read_text(encoding="utf-8"))
_CACHE: dict[str, Any] = {}


def _diff(name: str) -> Any:
    from autopsy.compare import diff

    if name not in _CACHE:
        _CACHE[name] = diff(PAIRS / name / "good", PAIRS / name / "bad")
    return _CACHE[name]


def test_every_pair_dir_has_an_expectation() -> None:
    dirs = {p.name for p in PAIRS.iterdir() if p.is_dir()}
    assert dirs == set(EXPECTED)
    for name in dirs:
        assert (PAIRS / name / "good").is_dir() and (PAIRS / name / "bad").is_dir(), name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_pair_ranks_its_cause_first(name: str) -> None:
    exp = EXPECTED[name]
    rd = _diff(name)
    assert rd.agree is exp["agree"], [d.to_dict() for d in rd.differences[:5]]
    assert (rd.bad_primary.rule if rd.bad_primary else None) == exp.get("primary"), rd.bad_primary
    diverged = {r["metric"] for r in rd.rows["metrics"] if r["diverged"]}
    assert set(exp.get("diverges", [])) <= diverged, rd.rows["metrics"]
    assert not set(exp.get("calm", [])) & diverged, rd.rows["metrics"]
    top = exp.get("top")
    if top is None:
        return
    first = rd.top
    assert first is not None
    assert first.kind == top["kind"], [d.to_dict() for d in rd.differences[:5]]
    if "key" in top:
        assert first.key == top["key"], [d.to_dict() for d in rd.differences[:5]]
    if "contains" in top:
        assert top["contains"] in first.key, [d.to_dict() for d in rd.differences[:5]]


def test_diff_frames_have_their_columns() -> None:
    rd = _diff("lr_10x")
    assert list(rd.config.columns)[:4] == ["raw_key", "key", "change", "good"]
    assert "optim.lr" in set(rd.config["raw_key"])
    assert {"metric", "diverged", "step"} <= set(rd.metrics.columns)
    assert rd.to_frame()["kind"].iloc[0] == "config"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "autopsy", "diff", *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)


@pytest.mark.parametrize("fmt", ["terminal", "md", "json", "html"])
def test_every_format_renders_through_the_cli(fmt: str, tmp_path: Path) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    shutil.copytree(PAIRS / "lr_10x" / "good", good)
    shutil.copytree(PAIRS / "lr_10x" / "bad", bad)
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    out = tmp_path / f"out.{fmt}"
    proc = _cli(str(good), str(bad), "--format", fmt, "-o", str(out), cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text(encoding="utf-8")
    assert "optim.lr" in text
    if fmt == "json":
        data = json.loads(text)
        assert data["kind"] == "autopsy.compare" and data["differences"][0]["key"] == "optim.lr"
    if fmt == "html":
        assert text.startswith("<!DOCTYPE html>") and "<svg" in text and "diverges at step" in text
    after = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    assert after == sorted([*before, f"out.{fmt}"])  # nothing written into either run


def test_against_takes_several_good_runs(tmp_path: Path) -> None:
    pair = PAIRS / "seeds"
    proc = _cli(str(pair / "good"), str(pair / "bad"), "--against", str(PAIRS / "lr_10x" / "bad"),
                "--fail-if-different", cwd=REPO)
    assert proc.returncode == 1, proc.stderr
    assert "optim.lr" in proc.stdout and "(good)" in proc.stdout


def test_missing_run_is_exit_2(tmp_path: Path) -> None:
    proc = _cli(str(tmp_path / "nope"), str(PAIRS / "seeds" / "bad"), cwd=REPO)
    assert proc.returncode == 2 and "not a directory" in proc.stderr
    proc = _cli(str(PAIRS / "seeds" / "bad"), cwd=REPO)
    assert proc.returncode == 2


def _top_matches(exp: dict[str, Any], first: dict[str, Any]) -> bool:
    top = exp["top"]
    return first["kind"] == top["kind"] and (first["key"] == top["key"] if "key" in top
                                             else top["contains"] in first["key"])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_json_rendering_ranks_the_cause_first(name: str) -> None:
    from autopsy.report.diff_json import render_json

    exp = EXPECTED[name]
    data = json.loads(render_json(_diff(name)))
    assert data["agree"] is exp["agree"]
    assert (data["bad_primary"] or {}).get("rule") == exp.get("primary")
    if "top" in exp:
        assert _top_matches(exp, data["differences"][0]), data["differences"][:3]
    diverged = {r["metric"] for r in data["parts"]["metrics"] if r["diverged"]}
    assert set(exp.get("diverges", [])) <= diverged and not set(exp.get("calm", [])) & diverged


def _check_terminal(name: str, text: str) -> None:
    exp = EXPECTED[name]
    lines = text.splitlines()
    assert lines[0].startswith("autopsy diff: ")
    for line in lines:  # wrapped between words: only a single word longer than a line may overflow
        assert len(line) <= 100 or " " not in line.strip(), line
    head = text.split("\n\n")[1]  # the verdict: after the title, before the first section
    if exp["agree"]:
        assert "The runs agree within noise" in head and "Ranked differences" not in text
        assert "diverges at step" not in text
    else:
        assert "Most likely explanation: " in head, head
        key = exp["top"].get("key", exp["top"].get("contains", ""))
        explanation = " ".join(head.split("Most likely explanation: ", 1)[1].split())
        assert key.split(" -> ")[-1] in explanation, head
    if exp.get("primary"):
        assert f"Bad run: {exp['primary']}: " in head


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_terminal_rendering_states_the_cause_within_100_columns(name: str) -> None:
    from autopsy.report.diff_text import render_terminal

    _check_terminal(name, render_terminal(_diff(name)))


@pytest.mark.parametrize("name", ["batch_oom", "seeds"])
def test_terminal_through_the_cli_to_stdout(name: str) -> None:
    proc = _cli(str(PAIRS / name / "good"), str(PAIRS / name / "bad"), cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    _check_terminal(name, proc.stdout)


def test_markdown_to_stdout_is_a_section_for_the_issues_entry() -> None:
    proc = _cli(str(PAIRS / "batch_oom" / "good"), str(PAIRS / "batch_oom" / "bad"), "--format", "md", cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "### What changed since the last good run"
    table = [ln for ln in lines if ln.startswith("| ")]
    assert table[0].startswith("| # | score | kind |") and "`data.batch_size`" in table[1]
    assert "| `32` | `8192` |" in table[1] and "configs/train.yaml:13" in table[1]
    assert "oom.host" in proc.stdout


def test_html_draws_both_runs_and_marks_the_divergence(tmp_path: Path) -> None:
    out = tmp_path / "lr.html"
    proc = _cli(str(PAIRS / "lr_10x" / "good"), str(PAIRS / "lr_10x" / "bad"), "-f", "html", "-o", str(out),
                cwd=REPO)
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    html = out.read_text(encoding="utf-8")
    steps = {r["metric"]: r["step"] for r in _diff("lr_10x").rows["metrics"] if r["diverged"]}
    figures = html.split('<figure class="chart" id="chart-')[1:]
    drawn = {f.split('"', 1)[0]: f.split("</figure>", 1)[0] for f in figures}
    assert {"loss", "lr", "grad_norm"} <= set(drawn)
    for metric, fig in drawn.items():
        assert '<path class="series c0"' in fig and '<path class="series c1 dashed"' in fig, metric  # bad, good
        marked = 'class="marker vline sev-error" data-rule="diff"' in fig
        assert marked is (metric in steps), metric
        if marked:
            assert f"diverges at step {steps[metric]}" in fig


def test_html_of_the_seed_pair_marks_no_divergence(tmp_path: Path) -> None:
    out = tmp_path / "seeds.html"
    proc = _cli(str(PAIRS / "seeds" / "good"), str(PAIRS / "seeds" / "bad"), "-f", "html", "-o", str(out),
                cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    html = out.read_text(encoding="utf-8")
    assert html.count('<figure class="chart"') >= 3 and "agree within noise" in html
    assert 'data-rule="diff"' not in html and "diverges at step" not in html


@pytest.mark.parametrize(("name", "code"), [("seeds", 0), ("batch_oom", 1)])
def test_fail_if_different_exit_code(name: str, code: int) -> None:
    # Without the flag a difference is exit 0 (the md and html tests above diff differing runs).
    proc = _cli(str(PAIRS / name / "good"), str(PAIRS / name / "bad"), "-f", "json", "--fail-if-different",
                cwd=REPO)
    assert proc.returncode == code, proc.stderr
    assert json.loads(proc.stdout)["agree"] is (code == 0)


def test_against_with_two_good_runs_of_different_seeds() -> None:
    # The good band spans seeds 1 and 2; the bad run (seed 1, lr 10x) differs from it only by lr.
    goods = [str(PAIRS / "lr_10x" / "good"), str(PAIRS / "seeds" / "bad")]
    proc = _cli(*goods, "--against", str(PAIRS / "lr_10x" / "bad"), "-f", "json", cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["goods"] == goods and data["bad"] == str(PAIRS / "lr_10x" / "bad")
    assert data["differences"][0]["key"] == "optim.lr"
    assert "seed" not in {d["key"] for d in data["differences"] if d["kind"] == "config"}
    assert {r["metric"] for r in data["parts"]["metrics"] if r["diverged"]} >= {"loss"}
