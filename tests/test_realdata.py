"""Real training records (fixtures/realdata/<name>/) against fixtures/realdata_expected.yaml.

Each entry is a run directory holding an HF ``trainer_state.json`` (and the configs its repository
keeps beside it) committed to a public repository: real fine-tunes, LoRA, DPO, classifiers, runs cut
short. The expectation names the rules that must fire and those that must not, judged from the
numbers themselves (see each entry's ``notes``). Test id = entry name: ``pytest -k whisper``.
An entry with ``todo:`` is a recorded known miss and runs as xfail (not strict).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent / "fixtures"
REALDATA = ROOT / "realdata"
EXPECTED = ROOT / "realdata_expected.yaml"
_KEYS = {"source", "fires", "not_fires", "notes", "todo"}


def _load() -> dict[str, dict[str, Any]]:
    with EXPECTED.open(encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    assert isinstance(data, dict), "realdata_expected.yaml must map entry names to expectations"
    return data


_EXPECTED = _load()


def _params() -> list[Any]:
    params = []
    for name, exp in sorted(_EXPECTED.items()):
        marks = [pytest.mark.xfail(reason=str(exp["todo"]), strict=False)] if exp.get("todo") else []
        params.append(pytest.param(name, exp, id=name, marks=marks))
    return params


def test_every_run_dir_has_an_expectation() -> None:
    dirs = {p.name for p in REALDATA.iterdir() if p.is_dir()}
    assert dirs == set(_EXPECTED), (
        f"without expectation: {sorted(dirs - set(_EXPECTED))}; without run dir: {sorted(set(_EXPECTED) - dirs)}")
    for name, exp in _EXPECTED.items():
        assert set(exp) <= _KEYS, f"{name}: unknown keys {sorted(set(exp) - _KEYS)}"
        assert "@" in str(exp.get("source", "")), f"{name}: source must be 'owner/repo path@commit' (or url@date)"
        assert exp.get("fires") or exp.get("not_fires"), f"{name}: an expectation must assert something"
        assert not set(exp.get("fires") or ()) & set(exp.get("not_fires") or ()), name


def test_every_trainer_state_parses_cleanly() -> None:
    """The trainer_state parser reads every real file as OK, with the step entries intact."""
    import json

    from autopsy.model import ParseStatus
    from autopsy.parsers.trainer_state import read_trainer_state

    for path in sorted(REALDATA.rglob("trainer_state.json")):
        parsed = read_trainer_state(path, path.name)
        assert parsed.status is ParseStatus.OK, f"{path}: {parsed.status} {parsed.note}"
        raw = json.loads(path.read_text(encoding="utf-8"))
        ts = parsed.value
        assert ts is not None and len(ts.log_history) == len(raw["log_history"]), path
        assert ts.global_step == raw["global_step"] and ts.max_steps == raw["max_steps"], path


@pytest.fixture(scope="module")
def catalog():  # type: ignore[no-untyped-def]
    from autopsy.engine.loader import load_catalog

    return load_catalog()


@pytest.mark.parametrize(("name", "exp"), _params())
def test_realdata(name: str, exp: dict[str, Any], catalog) -> None:  # type: ignore[no-untyped-def]
    from autopsy.api import analyze

    report = analyze(REALDATA / name, catalog=catalog)
    fired = sorted({f.rule for f in report.findings})
    errors = [f"{o.rule}: {o.reason}" for o in report.outcomes if o.kind.value == "rule_error"]
    problems = [f"rule error {e}" for e in errors]
    problems += [f"expected {rule} to fire" for rule in exp.get("fires") or () if rule not in fired]
    problems += [f"{rule} fired" for rule in exp.get("not_fires") or () if rule in fired]
    assert not problems, f"{name} ({exp.get('source')}): {'; '.join(problems)} (fired: {fired})"
