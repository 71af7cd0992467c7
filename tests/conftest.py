"""Shared test paths and the built-in rule catalog. Area-specific fixtures live in the test modules."""

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


@pytest.fixture(scope="module")
def catalog():  # type: ignore[no-untyped-def]
    """The built-in rule catalog (load_catalog caches it per process)."""
    from autopsy.engine.loader import load_catalog

    return load_catalog()
