"""Run directories under fixtures/ checked against an expectations file (test_corpus, test_realdata).

An expectations file maps an entry name (a run directory beside it) to what must hold of its
report: the rules that must fire (``fires``) and those that must not (``not_fires``). Test
id = entry name. An entry with ``todo:`` is a recorded known miss and runs as xfail (not strict).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml


def load_expectations(path: Path) -> dict[str, dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    assert isinstance(data, dict), f"{path.name} must map entry names to expectations"
    return data


def expectation_params(expected: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    """One pytest param per entry, by name; ``todo`` entries as non-strict xfail."""
    params = []
    for name, exp in sorted(expected.items()):
        marks = [pytest.mark.xfail(reason=str(exp["todo"]), strict=False)] if exp.get("todo") else []
        params.append(pytest.param(name, exp, id=name, marks=marks))
    return params


def assert_entries_match_dirs(root: Path, expected: Mapping[str, Mapping[str, Any]], keys: set[str]) -> None:
    """Every run directory has an expectation and the other way round; no unknown keys."""
    dirs = {p.name for p in root.iterdir() if p.is_dir()}
    assert dirs == set(expected), (
        f"without expectation: {sorted(dirs - set(expected))}; without run dir: {sorted(set(expected) - dirs)}")
    for name, exp in expected.items():
        assert set(exp) <= keys, f"{name}: unknown keys {sorted(set(exp) - keys)}"


def fire_problems(exp: Mapping[str, Any], fired: Sequence[str]) -> list[str]:
    """What ``fires`` / ``not_fires`` say that the fired rules do not hold to."""
    problems = [f"expected {rule} to fire" for rule in exp.get("fires") or () if rule not in fired]
    problems += [f"{rule} fired" for rule in exp.get("not_fires") or () if rule in fired]
    return problems
