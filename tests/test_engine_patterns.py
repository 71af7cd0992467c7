"""The generic match evaluator: any/all/none/window over the scanner's hits."""

from __future__ import annotations

import yaml
from engine_helpers import card_dict, make_card, scan_with

from autopsy.engine.patterns import evaluate_match, normalise_key, typed
from autopsy.engine.types import CheckContext
from autopsy.model import Severity

BOOM = """
id: demo.boom
title: Boom
severity: critical
confidence: high
status: stable
needs: [log]
docs: {summary: x}
match:
  any:
    - name: boom
      comment: boom tool
      regex: 'BOOM at step (?P<step>\\d+): (?P<what>\\w+) (?P<gib>[\\d.]+) GiB'
  none:
    - name: drill
      comment: boom tool drill notice
      regex: 'this is a drill'
  window_lines: 2
samples:
  match: ['BOOM at step 3: core 2.5 GiB']
"""


def run_card(card, *scans):  # type: ignore[no-untyped-def]
    ctx = CheckContext(run=None, card=card, params=card.params)  # type: ignore[arg-type]
    return evaluate_match(ctx, list(scans))


def test_any_hit_gives_finding_with_typed_facts_and_evidence() -> None:
    card = make_card(BOOM)
    scan = scan_with("logs/train.log", card, {5: "noise", 7: "BOOM at step 40: core 2.5 GiB",
                                              9: "BOOM at step 41: core 3 GiB"})
    (f,) = run_card(card, scan)
    assert f.rule == "demo.boom" and f.severity is Severity.CRITICAL
    assert f.facts == {"step": 40, "what": "core", "gib": 2.5, "count": 2}
    assert [e.location() for e in f.evidence] == ["logs/train.log:7", "logs/train.log:9"]
    assert f.evidence[0].excerpt == "BOOM at step 40: core 2.5 GiB"
    assert f.step == 70 and f.wall_time == 1007.0  # from the first hit
    assert "logs/train.log:7" in f.message and "2 lines" in f.message


def test_count_comes_from_scanner_not_kept_hits() -> None:
    card = make_card(BOOM)
    scan = scan_with("a.log", card, {1: "BOOM at step 1: x 1 GiB"}, counts={"boom": 500})
    (f,) = run_card(card, scan)
    assert f.facts["count"] == 500


def test_none_suppresses_within_window_only() -> None:
    card = make_card(BOOM)
    near = scan_with("a.log", card, {10: "this is a drill", 11: "BOOM at step 1: x 1 GiB"})
    assert run_card(card, near) == []
    far = scan_with("b.log", card, {10: "this is a drill", 20: "BOOM at step 1: x 1 GiB"})
    (f,) = run_card(card, far)
    assert f.facts["count"] == 1


def test_no_hits_no_finding() -> None:
    card = make_card(BOOM)
    assert run_card(card, scan_with("a.log", card, {1: "all good"})) == []
    assert run_card(card) == []


def test_same_failure_on_many_ranks_is_one_finding() -> None:
    card = make_card(BOOM)
    scans = [scan_with(f"rank{r}.log", card, {3 + r: f"BOOM at step 9{r}: core 1.{r} GiB"}, rank=r) for r in range(4)]
    (f,) = run_card(card, *scans)
    assert f.facts["ranks"] == [0, 1, 2, 3]
    assert f.facts["files"] == ["rank0.log", "rank1.log", "rank2.log", "rank3.log"]
    assert f.facts["count"] == 4 and f.facts["rank"] == 0
    assert len(f.evidence) == 4


def test_different_failures_are_separate_findings() -> None:
    card = make_card(BOOM)
    a = scan_with("a.log", card, {1: "BOOM at step 1: core 1 GiB"})
    b = scan_with("b.log", card, {1: "BOOM at step 1: disk 1 GiB"})
    found = run_card(card, a, b)
    assert sorted(f.facts["what"] for f in found) == ["core", "disk"]
    assert len({f.fingerprint for f in found}) == 2


ALL = yaml.safe_dump(card_dict(
    id="demo.assert",
    match={"all": [{"name": "assert_line", "comment": "ATen IndexKernel",
                    "regex": r"Assertion `(?P<cond>[^`]+)` failed"},
                   {"name": "cuda_error", "comment": "torch", "regex": r"CUDA error: (?P<err>device-side assert)"}],
           "window_lines": 5},
    samples={"match": ["Assertion `idx < size` failed", "CUDA error: device-side assert triggered"]},
))


def test_all_requires_every_pattern_within_window() -> None:
    card = make_card(ALL)
    both = scan_with("a.log", card, {10: "Assertion `idx < size` failed.", 14: "CUDA error: device-side assert"})
    (f,) = run_card(card, both)
    assert f.facts["cond"] == "idx < size" and f.facts["err"] == "device-side assert"  # merged from both lines
    apart = scan_with("a.log", card, {10: "Assertion `idx < size` failed.", 40: "CUDA error: device-side assert"})
    assert run_card(card, apart) == []
    one = scan_with("a.log", card, {10: "Assertion `idx < size` failed."})
    assert run_card(card, one) == []


def test_all_is_per_file() -> None:
    card = make_card(ALL)
    a = scan_with("a.log", card, {10: "Assertion `idx < size` failed."})
    b = scan_with("b.log", card, {10: "CUDA error: device-side assert"})
    assert run_card(card, a, b) == []


def test_normalise_key_drops_numbers_paths_addresses() -> None:
    a = normalise_key("[rank3] RuntimeError at /data/run7/ckpt/model.safetensors 0x7fff1234 step 1200 12:00:01")
    b = normalise_key("[rank5] RuntimeError at /scratch/u/x/model.safetensors 0x7aaa step 99 09:30:00")
    assert a == b
    assert "model.safetensors" in a


def test_typed() -> None:
    assert typed("12") == 12 and typed("2.50") == 2.5 and typed("1e-4") == 1e-4
    assert typed("GiB") == "GiB" and typed("v1.2.3") == "v1.2.3"


def test_step_named_in_the_line_is_used_when_scanner_has_none() -> None:
    from dataclasses import replace

    card = make_card(BOOM)
    scan = scan_with("a.log", card, {3: "BOOM at step 250: core 1 GiB"})
    hl = scan.hits["demo.boom/boom"]
    hl.first = [replace(h, step=None) for h in hl.first]
    (f,) = run_card(card, scan)
    assert f.step == 250
