"""The runner: every card ends fired / not_fired / not_evaluated / rule_error, never raises."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from engine_helpers import FakeRun, card_dict, make_card, scan_with

from autopsy.engine.runner import evaluate_card, missing_reason, run_cards, select_cards
from autopsy.model import OutcomeKind


def check_card(check: str, **over: Any):  # type: ignore[no-untyped-def]
    data = card_dict(match=None, samples=None, check=check, needs=over.pop("needs", ["scalars", "config"]),
                     params={"limit_steps": 7}, **over)
    return make_card(yaml.safe_dump(data))


def pattern_card(**over: Any):  # type: ignore[no-untyped-def]
    return make_card(yaml.safe_dump(card_dict(**over)))


def test_pattern_card_fired_and_not_fired() -> None:
    card = pattern_card()
    hit = FakeRun(logs=[scan_with("a.log", card, {3: "thing 12 failed"})])
    out = evaluate_card(hit, card)
    assert out.kind is OutcomeKind.FIRED and out.findings[0].facts["n"] == 12
    quiet = FakeRun(logs=[scan_with("a.log", card, {3: "all fine"})])
    assert evaluate_card(quiet, card).kind is OutcomeKind.NOT_FIRED


def test_pattern_card_without_logs_is_not_evaluated() -> None:
    out = evaluate_card(FakeRun(), pattern_card(needs=["log", "config"]))
    assert out.kind is OutcomeKind.NOT_EVALUATED and out.reason == "no text logs found"


def test_check_card_runs_when_some_input_exists() -> None:
    run = FakeRun(config_entries=["lr=1"])  # config present, scalars absent: the check decides
    out = evaluate_card(run, check_card("engine_helpers:fires_twice"))
    assert out.kind is OutcomeKind.FIRED
    assert [f.facts for f in out.findings] == [{"i": 1, "limit": 7}, {"i": 2, "limit": 7}]


def test_check_card_with_no_inputs_names_them_all() -> None:
    out = evaluate_card(FakeRun(), check_card("engine_helpers:fires_twice"))
    assert out.kind is OutcomeKind.NOT_EVALUATED
    assert out.reason is not None and out.reason.startswith("no scalar series found")
    assert "no config files" in out.reason


@pytest.mark.parametrize(
    ("check", "kind", "reason"),
    [
        ("engine_helpers:never_fires", OutcomeKind.NOT_FIRED, None),
        ("engine_helpers:not_evaluated", OutcomeKind.NOT_EVALUATED, "no loss series found"),
        ("engine_helpers:explodes", OutcomeKind.RULE_ERROR, "ZeroDivisionError: division by zero"),
        ("engine_helpers:wrong_rule", OutcomeKind.RULE_ERROR, "a card only reports its own id"),
        ("engine_helpers:no_such_function", OutcomeKind.RULE_ERROR, "has no function 'no_such_function'"),
        ("no_such_module_xyz:fn", OutcomeKind.RULE_ERROR, "ModuleNotFoundError"),
    ],
)
def test_check_outcomes(check: str, kind: OutcomeKind, reason: str | None) -> None:
    out = evaluate_card(FakeRun(config_entries=["x"]), check_card(check))
    assert out.kind is kind
    if reason is None:
        assert out.reason is None
    else:
        assert out.reason is not None and reason in out.reason


def test_rule_error_says_where() -> None:
    out = evaluate_card(FakeRun(config_entries=["x"]), check_card("engine_helpers:explodes"))
    assert out.reason is not None and "engine_helpers.py:" in out.reason and "in explodes" in out.reason


def test_one_broken_rule_never_hides_the_others() -> None:
    broken = check_card("engine_helpers:explodes", id="demo.broken")
    good = pattern_card(id="demo.good")
    run = FakeRun(logs=[scan_with("a.log", good, {1: "thing 1 failed"})], config_entries=["x"])
    outcomes = run_cards(run, [broken, good])
    assert [(o.rule, o.kind) for o in outcomes] == [("demo.broken", OutcomeKind.RULE_ERROR),
                                                    ("demo.good", OutcomeKind.FIRED)]


def test_broken_run_view_is_a_rule_error() -> None:
    class Exploding:
        @property
        def scalars(self) -> Any:
            raise OSError("parser bug")

    out = evaluate_card(Exploding(), check_card("engine_helpers:never_fires", needs=["scalars"]))
    assert out.kind is OutcomeKind.RULE_ERROR and "OSError: parser bug" in (out.reason or "")


def test_check_with_match_gets_hits() -> None:
    card = pattern_card(check="engine_helpers:from_hits")
    run = FakeRun(logs=[scan_with("a.log", card, {1: "thing 1 failed", 5: "thing 2 failed"}),
                        scan_with("b.log", card, {2: "thing 3 failed"})])
    out = evaluate_card(run, card)
    assert out.kind is OutcomeKind.FIRED and out.findings[0].facts == {"n": 3}


def test_missing_reason_none_when_inputs_present() -> None:
    assert missing_reason(FakeRun(config_entries=["x"]), check_card("engine_helpers:never_fires")) is None


CARDS = [pattern_card(id=i, aliases=[a] if a else None) for i, a in
         [("oom.cuda", None), ("oom.host", None), ("disk.full", "disk.enospc"), ("loss.plateau", None)]]


@pytest.mark.parametrize(
    ("select", "ignore", "expected"),
    [
        (None, None, ["disk.full", "loss.plateau", "oom.cuda", "oom.host"]),
        ("oom,disk", None, ["disk.full", "oom.cuda", "oom.host"]),
        (["oom", "loss.plateau"], "oom.host", ["loss.plateau", "oom.cuda"]),
        (None, "oom", ["disk.full", "loss.plateau"]),
        ("disk.enospc", None, ["disk.full"]),  # an alias selects its card
    ],
)
def test_select_ignore(select: Any, ignore: Any, expected: list[str]) -> None:
    assert [c.id for c in select_cards(CARDS, select, ignore)] == expected


def test_unknown_selector_is_an_error() -> None:
    with pytest.raises(ValueError, match="'oomm' matches no rule id or family"):
        select_cards(CARDS, "oomm")
