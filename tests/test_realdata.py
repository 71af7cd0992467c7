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
from expectations import assert_entries_match_dirs, expectation_params, fire_problems, load_expectations

ROOT = Path(__file__).resolve().parent.parent / "fixtures"
REALDATA = ROOT / "realdata"
EXPECTED = ROOT / "realdata_expected.yaml"
_KEYS = {"source", "fires", "not_fires", "notes", "todo"}
_EXPECTED = load_expectations(EXPECTED)


def test_every_run_dir_has_an_expectation() -> None:
    assert_entries_match_dirs(REALDATA, _EXPECTED, _KEYS)
    for name, exp in _EXPECTED.items():
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


@pytest.mark.parametrize(("name", "exp"), expectation_params(_EXPECTED))
def test_realdata(name: str, exp: dict[str, Any], catalog) -> None:  # type: ignore[no-untyped-def]
    from autopsy.api import analyze

    report = analyze(REALDATA / name, catalog=catalog)
    fired = sorted({f.rule for f in report.findings})
    errors = [f"{o.rule}: {o.reason}" for o in report.outcomes if o.kind.value == "rule_error"]
    problems = [f"rule error {e}" for e in errors]
    problems += fire_problems(exp, fired)
    assert not problems, f"{name} ({exp.get('source')}): {'; '.join(problems)} (fired: {fired})"
