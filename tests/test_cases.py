"""The one parametrized runner over every ``fixtures/cases/<rule-id>.yaml``.

Test ids are ``<rule-id>::<case>``, so ``pytest -k disk.full`` runs one rule's cases.
A case with ``todo:`` is a recorded known miss and runs as xfail (not strict).
The format is described in ``tests/casefiles.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from casefiles import Case, CaseError, check_report, load_case_file, materialise
from conftest import CASES


def _collect() -> list[object]:
    params: list[object] = []
    for path in sorted(CASES.glob("*.yaml")) if CASES.is_dir() else []:
        try:
            cases = load_case_file(path)
        except CaseError as exc:
            # A broken case file is a failing test of its own, not a collection error.
            params.append(pytest.param(exc, id=f"{path.stem}::<case file>"))
            continue
        for case in cases:
            marks = [pytest.mark.xfail(reason=case.todo, strict=False)] if case.todo else []
            params.append(pytest.param(case, id=case.id, marks=marks))
    return params


_PARAMS = _collect()


@pytest.mark.skipif(not _PARAMS, reason="no case files in fixtures/cases/ yet")
@pytest.mark.parametrize("case", _PARAMS)
def test_case(case: Case | CaseError, tmp_path: Path, catalog) -> None:  # type: ignore[no-untyped-def]
    if isinstance(case, CaseError):
        pytest.fail(str(case))
    from autopsy.api import analyze
    from autopsy.run import LoadOptions

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    materialise(case, run_dir)
    report = analyze(run_dir, options=LoadOptions(now=case.now), catalog=catalog)
    problems = check_report(case, report)
    if problems:
        origin = f" [{case.origin}]" if case.origin else ""
        pytest.fail(f"{case.id}{origin} ({case.source_file}):\n  " + "\n  ".join(problems))
