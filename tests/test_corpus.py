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
from expectations import assert_entries_match_dirs, expectation_params, fire_problems, load_expectations

ROOT = Path(__file__).resolve().parent.parent / "fixtures"
CORPUS = ROOT / "corpus"
EXPECTED = ROOT / "corpus_expected.yaml"
_KEYS = {"primary", "fires", "not_fires", "source", "todo", "note"}
_EXPECTED = load_expectations(EXPECTED)
POSTED_AFTER_S = 86400.0


def posted_now(entry: Path) -> float:
    """Analysis time a day after the entry's newest file: a posted log is of a run that was over when it
    was posted, while its files' mtimes are the checkout's (see scripts/corpus_rate.py)."""
    return max((p.stat().st_mtime for p in entry.rglob("*") if p.is_file()), default=0.0) + POSTED_AFTER_S


def test_every_run_dir_has_an_expectation() -> None:
    assert_entries_match_dirs(CORPUS, _EXPECTED, _KEYS)
    for name, exp in _EXPECTED.items():
        assert "primary" in exp and str(exp.get("source", "")).startswith("https://"), name


def test_corpus_files_are_small() -> None:
    for path in CORPUS.rglob("*"):
        if path.is_file():
            assert path.stat().st_size <= 32 * 1024, f"{path} is larger than 32 KiB"


@pytest.mark.parametrize(("name", "exp"), expectation_params(_EXPECTED))
def test_corpus(name: str, exp: dict[str, Any], catalog) -> None:  # type: ignore[no-untyped-def]
    from autopsy.api import analyze
    from autopsy.run import LoadOptions

    report = analyze(CORPUS / name, catalog=catalog, options=LoadOptions(now=posted_now(CORPUS / name)))
    fired = sorted({f.rule for f in report.findings})
    primary = report.primary.rule if report.primary is not None else None
    problems = []
    if primary != exp.get("primary"):
        problems.append(f"primary: expected {exp.get('primary')}, got {primary}")
    problems += fire_problems(exp, fired)
    assert not problems, f"{name} ({exp.get('source')}): {'; '.join(problems)} (fired: {fired})"
