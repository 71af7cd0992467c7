"""The public API: analyze() wires cards -> one log scan -> runner -> precedence -> summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from engine_helpers import scan_with

import autopsy
from autopsy.api import analyze, analyze_many
from autopsy.engine.loader import load_catalog
from autopsy.model import OutcomeKind
from autopsy.run import LoadOptions, Run, RunError

DATA = Path(__file__).resolve().parent / "data" / "cards"


@pytest.fixture
def demo_catalog():  # type: ignore[no-untyped-def]
    return load_catalog([DATA / "good", DATA / "broken"], builtin=False)


@pytest.fixture
def fake_views(monkeypatch: pytest.MonkeyPatch, demo_catalog: Any) -> list[Any]:
    """Replace the parsed views of Run so these tests do not depend on the parsers."""
    seen_patterns: list[Any] = []
    card = demo_catalog.cards["demo.boom"]

    def logs(self: Run) -> list[Any]:
        seen_patterns.append(self.options.patterns)
        return [scan_with("train.log", card, {4: "BOOM at step 40: core", 9: "BOOM at step 41: core"})]

    for name, value in [("logs", property(logs)), ("tfevents", property(lambda self: [])),
                        ("trainer_states", property(lambda self: [])), ("trainer_state", property(lambda self: None)),
                        ("config_entries", property(lambda self: [])), ("checkpoint_list", property(lambda self: []))]:
        monkeypatch.setattr(Run, name, value)
    return seen_patterns


def test_analyze_with_fake_views(tmp_path: Path, demo_catalog: Any, fake_views: list[Any]) -> None:
    (tmp_path / "train.log").write_text("x\n")
    report = analyze(tmp_path, catalog=demo_catalog, options=LoadOptions(now=2000.0))
    # The selected cards' patterns reached the log scan.
    assert [p.key for p in fake_views[0]] == ["demo.boom/boom", "demo.boom/drill"]
    (f,) = report.findings
    assert f.rule == "demo.boom" and f.primary and f.facts["what"] == "core" and f.facts["count"] == 2
    outcomes = {o.rule: o for o in report.outcomes}
    assert outcomes["demo.boom"].kind is OutcomeKind.FIRED
    # The refused card is reported as that rule's error, not silently dropped.
    assert outcomes["demo.bad_regex"].kind is OutcomeKind.RULE_ERROR
    assert "unnamed capturing group" in (outcomes["demo.bad_regex"].reason or "")
    assert report.run.path == str(tmp_path) and report.run.failure_time == 1004.0  # the primary's first hit
    assert report.autopsy_version == autopsy.__version__


def test_select_and_ignore(tmp_path: Path, demo_catalog: Any, fake_views: list[Any]) -> None:
    report = analyze(tmp_path, catalog=demo_catalog, ignore="demo.boom")
    assert report.findings == ()
    assert [o.rule for o in report.outcomes] == ["demo.bad_regex"]
    report = analyze(tmp_path, catalog=demo_catalog, select="demo.kaboom")  # an alias
    assert [o.rule for o in report.outcomes] == ["demo.boom"]
    with pytest.raises(ValueError, match="matches no rule"):
        analyze(tmp_path, catalog=demo_catalog, select="nope")


def test_missing_run_dir_raises(tmp_path: Path) -> None:
    with pytest.raises(RunError):
        analyze(tmp_path / "absent", catalog=load_catalog(builtin=False))


def test_analyze_many(tmp_path: Path, demo_catalog: Any, fake_views: list[Any]) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    df = analyze_many([tmp_path / "a", tmp_path / "b", tmp_path / "gone"], catalog=demo_catalog)
    assert list(df["run"]) == [str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "gone")]
    assert list(df["rule"].iloc[:2]) == ["demo.boom", "demo.boom"]
    assert df["error"].iloc[2] and "no such directory" in df["error"].iloc[2]
    assert str(df["step"].dtype) == "Int64" and df["primary"].iloc[0]


def test_public_lazy_api() -> None:
    assert autopsy.analyze is analyze and autopsy.analyze_many is analyze_many


def test_real_scan_end_to_end(tmp_path: Path) -> None:
    """Through the real log scanner (once it exists): rank prefixes, line numbers, suppressors."""
    (tmp_path / "train.log").write_text(
        "starting\n"
        "[rank2]: BOOM at step 40: core\n"
        "drill time: this is a drill\n"
        "BOOM at step 41: core\n"
        + "".join(f"step {i}\n" for i in range(10))
        + "BOOM at step 99: pump\n"
    )
    report = analyze(tmp_path, catalog=load_catalog([DATA / "good"], builtin=False), options=LoadOptions(now=0))
    found = {f.facts["what"]: f for f in report.findings}
    assert set(found) == {"pump"}  # lines 2 and 4 are within 2 lines of the drill notice
    assert found["pump"].evidence[0].location() == "train.log:15"
