"""Card validation: a bad card is refused with an error naming the file and the field."""

from __future__ import annotations

from typing import Any

import pytest
from engine_helpers import card_dict

from autopsy.engine.loader import finish_card
from autopsy.engine.schema import CardError, parse_card
from autopsy.model import Confidence, Severity


def load(data: Any) -> Any:
    return finish_card(parse_card(data, "rules/demo/thing.yaml"))


def test_valid_card_is_typed() -> None:
    card = load(card_dict(params={"window_steps": 5}, supersedes=["crash.exception"], specificity=3))
    assert card.id == "demo.thing"
    assert card.severity is Severity.ERROR and card.confidence is Confidence.MEDIUM
    assert card.needs == ("log",)
    assert card.params == {"window_steps": 5}
    assert card.supersedes == ("crash.exception",)
    assert card.specificity == 3
    assert card.docs["false_positives"] == () and card.docs["summary"] == "A thing happened."
    assert card.source == "rules/demo/thing.yaml"


def test_pattern_card_needs_log_even_if_not_listed() -> None:
    card = load(card_dict(needs=["config"]))
    assert card.needs == ("log", "config")


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"severity": "fatal"}, "severity", "unknown severity"),
        ({"confidence": "sure"}, "confidence", "expected low"),
        ({"status": "beta"}, "status", "not one of"),
        ({"id": "OOM"}, "id", "not a rule id"),
        ({"title": None}, "title", "missing"),
        ({"needs": ["logs"]}, "needs[0]", "not one of"),
        ({"needs": "log"}, "needs", "must be a list"),
        ({"docs": {"summary": "x", "whyy": "typo"}}, "docs.whyy", "unknown section"),
        ({"docs": {"why": "no summary"}}, "docs.summary", "missing"),
        ({"sevrity": "error"}, "sevrity", "unknown key"),
        ({"check": "autopsy.checks.loss.plateau"}, "check", "package.module:function"),
        ({"match": None, "samples": None}, "match", "needs match:"),
        ({"match": {"any": [{"name": "x", "comment": "c", "regex": "a(b"}]}}, "match.any[0].regex", "compile"),
        ({"match": {"any": [{"name": "x", "comment": "c", "regex": r"thing (\d+)"}]}}, "match.any[0].regex",
         "unnamed capturing group"),
        ({"match": {"any": [{"name": "x", "comment": "c", "regex": "a*"}]}}, "match.any[0].regex", "empty string"),
        ({"match": {"any": [{"name": "x", "regex": "thing"}]}}, "match.any[0].comment", "missing"),
        ({"match": {"any": [{"name": "x", "comment": "c", "regex": "thing", "flags": "i"}]}}, "match.any[0].flags",
         "unknown key"),
        ({"match": {"any": [{"name": "x", "comment": "c", "regex": "thing"},
                            {"name": "x", "comment": "c", "regex": "other"}]}}, "match.any[1].name", "duplicate"),
        ({"match": {"none": [{"name": "x", "comment": "c", "regex": "thing"}]}}, "match", "any: or all:"),
        ({"match": {"any": [{"name": "x", "comment": "c", "regex": "thing"}], "window_lines": -1}},
         "match.window_lines", ">= 0"),
        ({"samples": {"match": []}}, "samples.match", "at least one"),
        ({"supersedes": ["demo.thing"]}, "supersedes[0]", "itself"),
        ({"explains": ["Crash"]}, "explains[0]", "not a rule id"),
        ({"specificity": "high"}, "specificity", "integer"),
        # Sample checks (the loader runs every card's samples).
        ({"samples": {"match": ["nothing here"]}}, "samples.match[0]", "no any:/all: pattern matches"),
        ({"samples": {"match": ["thing 3 failed"], "no_match": ["thing 4 failed"]}}, "samples.no_match[0]",
         "matches"),
        ({"match": {"any": [{"name": "t", "comment": "c", "regex": r"thing (?P<n>\d+) failed",
                             "literals": ["THING"]}]}}, "match.any[0].literals", "prefilter would hide"),
    ],
)
def test_bad_card_names_file_and_field(change: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(CardError) as info:
        load(card_dict(**change))
    err = info.value
    assert err.source == "rules/demo/thing.yaml"
    assert err.field == field, str(err)
    assert words in err.message, str(err)
    assert str(err).startswith(f"rules/demo/thing.yaml: {field}: ")


def test_card_error_carries_the_rule_id_when_known() -> None:
    with pytest.raises(CardError) as info:
        load(card_dict(severity="huge"))
    assert info.value.rule == "demo.thing"


def test_not_a_mapping() -> None:
    with pytest.raises(CardError, match="must be a YAML mapping"):
        load(["id", "x"])


def test_none_pattern_may_excuse_a_no_match_sample() -> None:
    card = load(card_dict(
        match={"any": [{"name": "t", "comment": "c", "regex": r"thing (?P<n>\d+) failed"}],
               "none": [{"name": "drill", "comment": "c", "regex": "drill"}]},
        samples={"match": ["thing 3 failed"], "no_match": ["thing 3 failed (drill)"]},
    ))
    assert [p.name for p in card.match.none] == ["drill"]


def test_match_sample_suppressed_by_none_is_refused() -> None:
    with pytest.raises(CardError, match=r"samples.match\[0\]: a none: pattern suppresses"):
        load(card_dict(
            match={"any": [{"name": "t", "comment": "c", "regex": r"thing (?P<n>\d+) failed"}],
                   "none": [{"name": "drill", "comment": "c", "regex": "drill"}]},
            samples={"match": ["thing 3 failed (drill)"]},
        ))


def test_check_only_card_needs_no_samples() -> None:
    card = load(card_dict(match=None, samples=None, check="autopsy.checks.loss:plateau",
                          needs=["scalars"], params={"window_steps": 200}))
    assert card.match is None and card.check == "autopsy.checks.loss:plateau"
    assert card.patterns == ()
