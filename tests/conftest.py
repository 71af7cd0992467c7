"""Shared test paths. Area-specific fixtures live in the test modules themselves."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
RUNS = FIXTURES / "runs"
CASES = FIXTURES / "cases"
RULES = REPO / "rules"


@pytest.fixture
def repo() -> Path:
    return REPO
