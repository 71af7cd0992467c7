"""The wheel ships every rule card: install it outside the checkout and analyse a run.

Builds the wheel with the current interpreter (no network: no build isolation), installs
it with ``--no-deps`` into a temporary target directory, and runs autopsy from a
directory outside the checkout so that only the installed copy can be imported.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, RULES, RUNS


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Build from a copy so the build leaves no build/ or egg-info in the checkout.
    src = tmp_path_factory.mktemp("src") / "autopsy-src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for name in ("autopsy", "rules"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        capture_output=True, text=True, cwd=src, timeout=300,
    )
    if proc.returncode != 0:
        pytest.fail(f"pip wheel failed:\n{proc.stdout}\n{proc.stderr}")
    (whl,) = out.glob("autopsy-*.whl")
    return whl


def test_wheel_contains_every_card(wheel: Path) -> None:
    cards = sorted(p.relative_to(RULES).as_posix() for p in RULES.rglob("*.yaml"))
    assert cards, "no rule cards in rules/"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    missing = [c for c in cards if f"autopsy/_rules/{c}" not in names]
    assert not missing, f"cards missing from the wheel: {missing}"


def test_wheel_contains_every_module(wheel: Path) -> None:
    modules = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "autopsy").rglob("*.py"))
    data = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "autopsy").rglob("*")
                  if p.suffix in (".json", ".j2", ".css", ".js"))
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    missing = [m for m in modules + data if m not in names]
    assert not missing, f"files missing from the wheel: {missing}"


def test_installed_wheel_runs_outside_checkout(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True, capture_output=True, timeout=300,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = (
        "import autopsy, sys; from autopsy.engine.loader import load_catalog;"
        "assert autopsy.__file__.startswith(sys.argv[1]), autopsy.__file__;"
        "c = load_catalog(); print(len(c.cards))"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(target)], env=env, cwd=elsewhere,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    n_cards = len(list(RULES.rglob("*.yaml")))
    assert int(proc.stdout.strip()) == n_cards
    version = subprocess.run([sys.executable, "-m", "autopsy", "--version"], env=env, cwd=elsewhere,
                             capture_output=True, text=True, timeout=120)
    assert version.returncode == 0, version.stderr
    assert "0.1.0" in version.stdout
    runs = sorted(p for p in RUNS.glob("*") if p.is_dir()) if RUNS.exists() else []
    if runs:
        proc = subprocess.run([sys.executable, "-m", "autopsy", "analyze", str(runs[0]), "--format", "json"],
                              env=env, cwd=elsewhere, capture_output=True, text=True, timeout=120)
        assert proc.returncode in (0, 1), proc.stderr
        assert '"schema_version"' in proc.stdout
