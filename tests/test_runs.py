"""End to end over the real fixture runs: ``fixtures/runs/<name>/`` + ``fixtures/expected/<name>.yaml``.

Expected file keys (unknown keys are an error, so a typo cannot pass):

* ``run``: the run's directory name (checked);
* ``primary``: the rule id of the primary finding, or ``none`` / null for none;
* ``fires``: rule ids that must fire;
* ``not_fires``: rule ids that must not fire (the benign look-alikes of that run);
* ``facts``: ``{rule id: {fact: value}}``, a subset one finding of that rule must carry;
* ``explained_by``: ``{rule id: rule id}``, the precedence links that must hold (every finding of the rule);
* ``md_entries``: how many ISSUES-log entries ``--format md`` writes (one per root cause);
* ``only``: when true, no finding of warning or worse may fire outside ``fires``;
* ``not_evaluated``: rule ids that must end not evaluated;
* ``notes``: free text (what the run is, how it was made);
* ``truth``: the generator's ground truth (informational; map it onto ``facts`` to test it).

Each run is analysed on a copy whose mtimes are restored from ``fixtures/mtimes.json``,
at a pinned analysis time (``tests/fixture_runs.py``).

A run without an expected file is still analysed: it must not raise and no rule may
end in a rule error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from casefiles import facts_match
from conftest import FIXTURES, RUNS
from fixture_runs import missing_mtimes, pinned_copy, pinned_now, recorded_mtimes

EXPECTED = FIXTURES / "expected"
_KEYS = frozenset({"run", "primary", "fires", "not_fires", "facts", "explained_by", "md_entries", "only",
                   "not_evaluated", "notes", "truth"})
RUN_DIRS = sorted(p for p in RUNS.iterdir() if p.is_dir()) if RUNS.is_dir() else []


def _expected(name: str) -> dict[str, Any] | None:
    path = EXPECTED / f"{name}.yaml"
    if not path.is_file():
        return None
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    unknown = sorted(set(data) - _KEYS)
    assert not unknown, f"{path}: unknown keys {unknown} (allowed: {sorted(_KEYS)})"
    assert data.get("run", name) == name, f"{path}: run: {data['run']!r} is not {name!r}"
    return data


@pytest.mark.skipif(not RUN_DIRS, reason="no fixture runs in fixtures/runs/ yet (see fixtures/generate.py)")
@pytest.mark.parametrize("run_dir", RUN_DIRS, ids=[p.name for p in RUN_DIRS])
def test_run(run_dir: Path, catalog, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from autopsy.api import analyze
    from autopsy.model import OutcomeKind, Severity
    from autopsy.run import LoadOptions

    # A copy with the mtimes of the day it was generated, analysed an hour after its last
    # write: the same result on every clone (git sets every mtime to checkout time).
    copy = pinned_copy(run_dir.name, tmp_path)
    report = analyze(copy, catalog=catalog, options=LoadOptions(now=pinned_now(run_dir.name)))
    errors = [f"{o.rule}: {o.reason}" for o in report.rule_errors]
    assert not errors, "rule errors:\n" + "\n".join(errors)
    exp = _expected(run_dir.name)
    if exp is None:
        pytest.skip(f"no fixtures/expected/{run_dir.name}.yaml yet; analysed without errors")
    fired = {f.rule for f in report.findings}
    listing = "\n".join(f"  {'*' if f.primary else ' '} {f.rule} [{f.severity}] {f.message}" for f in report.findings)
    problems = []
    if "primary" in exp:
        got = report.primary.rule if report.primary else "none"
        want = "none" if exp["primary"] is None else str(exp["primary"])
        if got != want:
            problems.append(f"primary: expected {want}, got {got}")
    for rule in exp.get("fires") or ():
        if rule not in fired:
            outcome = next((o for o in report.outcomes if o.rule == rule), None)
            why = f"{outcome.kind}: {outcome.reason}" if outcome else "no such rule"
            problems.append(f"fires: {rule} did not fire ({why})")
    for rule in exp.get("not_fires") or ():
        if rule in fired:
            problems.append(f"not_fires: {rule} fired")
    for rule, facts in (exp.get("facts") or {}).items():
        candidates = [f.facts for f in report.findings if f.rule == rule]
        if not any(facts_match(facts, c) for c in candidates):
            problems.append(f"facts: no {rule} finding has {facts!r}; got {candidates!r}")
    for rule, cause in (exp.get("explained_by") or {}).items():
        links = sorted({str(f.explained_by) for f in report.findings if f.rule == rule})
        if links != [cause]:
            problems.append(f"explained_by: {rule} should link to {cause}, got {links or 'no finding'}")
    if "md_entries" in exp:
        from autopsy.report.markdown import root_causes

        n = len(root_causes(report))
        if n != exp["md_entries"]:
            problems.append(f"md_entries: expected {exp['md_entries']} ISSUES-log entries, got {n}")
    if exp.get("only"):
        allowed = set(exp.get("fires") or ())
        extra = sorted({f.rule for f in report.findings if f.severity >= Severity.WARNING} - allowed)
        if extra:
            problems.append(f"only: unexpected findings {extra}")
    outcomes = {o.rule: o for o in report.outcomes}
    for rule in exp.get("not_evaluated") or ():
        o = outcomes.get(rule)
        if o is None or o.kind is not OutcomeKind.NOT_EVALUATED:
            problems.append(f"not_evaluated: {rule} ended {o.kind if o else 'without outcome'}")
    assert not problems, f"{run_dir.name}:\n" + "\n".join(problems) + "\nfindings:\n" + listing


@pytest.mark.skipif(not RUN_DIRS, reason="no fixture runs in fixtures/runs/ yet (see fixtures/generate.py)")
def test_every_fixture_file_has_a_recorded_mtime() -> None:
    """fixtures/generate.py records mtimes; a run regenerated without them would test clone times."""
    problems = {p.name: missing_mtimes(p.name)[:5] for p in RUN_DIRS if missing_mtimes(p.name)}
    assert not problems, f"paths missing from fixtures/mtimes.json: {problems}"
    stale = sorted(set(recorded_mtimes()) - {p.name for p in RUN_DIRS})
    assert not stale, f"fixtures/mtimes.json records runs that do not exist: {stale}"
