"""Real-world failure logs (fixtures/corpus/<name>/) against fixtures/corpus_expected.yaml.

Each entry is a run directory holding a log as a user posted it in a public issue thread; the
expectation names the report's primary rule (None = nothing worth a primary finding), the rules
that must fire and those that must not. Test id = entry name: ``pytest -k nanogpt``.
An entry with ``todo:`` is a recorded known miss and runs as xfail (not strict).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent / "fixtures"
CORPUS = ROOT / "corpus"
EXPECTED = ROOT / "corpus_expected.yaml"
_KEYS = {"primary", "fires", "not_fires", "source", "todo"}


def _load() -> dict[str, dict[str, Any]]:
    with EXPECTED.open(encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    assert isinstance(data, dict), "corpus_expected.yaml must map entry names to expectations"
    return data


_EXPECTED = _load()


def _params() -> list[Any]:
    params = []
    for name, exp in sorted(_EXPECTED.items()):
        marks = [pytest.mark.xfail(reason=str(exp["todo"]), strict=False)] if exp.get("todo") else []
        params.append(pytest.param(name, exp, id=name, marks=marks))
    return params


def test_every_run_dir_has_an_expectation() -> None:
    dirs = {p.name for p in CORPUS.iterdir() if p.is_dir()}
    assert dirs == set(_EXPECTED), (
        f"without expectation: {sorted(dirs - set(_EXPECTED))}; without run dir: {sorted(set(_EXPECTED) - dirs)}")
    for name, exp in _EXPECTED.items():
        assert set(exp) <= _KEYS, f"{name}: unknown keys {sorted(set(exp) - _KEYS)}"
        assert "primary" in exp and str(exp.get("source", "")).startswith("https://"), name


def test_corpus_files_are_small() -> None:
    for path in CORPUS.rglob("*"):
        if path.is_file():
            assert path.stat().st_size <= 32 * 1024, f"{path} is larger than 32 KiB"


@pytest.fixture(scope="module")
def catalog():  # type: ignore[no-untyped-def]
    from autopsy.engine.loader import load_catalog

    return load_catalog()


@pytest.mark.parametrize(("name", "exp"), _params())
def test_corpus(name: str, exp: dict[str, Any], catalog) -> None:  # type: ignore[no-untyped-def]
    from autopsy.api import analyze

    report = analyze(CORPUS / name, catalog=catalog)
    fired = sorted({f.rule for f in report.findings})
    primary = report.primary.rule if report.primary is not None else None
    problems = []
    if primary != exp.get("primary"):
        problems.append(f"primary: expected {exp.get('primary')}, got {primary}")
    problems += [f"expected {rule} to fire" for rule in exp.get("fires") or () if rule not in fired]
    problems += [f"{rule} fired" for rule in exp.get("not_fires") or () if rule in fired]
    assert not problems, f"{name} ({exp.get('source')}): {'; '.join(problems)} (fired: {fired})"
