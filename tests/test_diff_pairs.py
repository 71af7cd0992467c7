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
