"""Precedence: one primary root cause, explained_by links from the cards, stable order."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import yaml
from engine_helpers import card_dict, make_card

from autopsy.engine.precedence import apply_precedence
from autopsy.model import Confidence, Finding, Severity


def card(rule: str, **over: Any):  # type: ignore[no-untyped-def]
    return make_card(yaml.safe_dump(card_dict(id=rule, **over)))


def finding(rule: str, severity: Severity = Severity.CRITICAL, *, key: str = "k", confidence: Confidence =
            Confidence.HIGH, wall_time: float | None = None, step: int | None = None) -> Finding:
    return Finding(rule=rule, severity=severity, confidence=confidence, title=rule, message=rule, key=key,
                   wall_time=wall_time, step=step)


def cards(*cs: Any) -> dict[str, Any]:
    return {c.id: c for c in cs}


def summary(out: tuple[Finding, ...]) -> list[tuple[str, bool, str | None]]:
    return [(f.rule, f.primary, f.explained_by) for f in out]


def test_oom_on_a_rank_is_primary_over_child_failed_and_timeouts() -> None:
    cat = cards(card("oom.cuda", supersedes=["crash.exception", "dist.rank_failure"], explains=["dist.timeout"]),
                card("dist.rank_failure", explains=["dist.timeout"]), card("dist.timeout"), card("crash.exception"))
    # The timeouts come first in time and are just as loud: the cards still decide.
    out = apply_precedence([finding("dist.timeout", wall_time=10), finding("dist.rank_failure", wall_time=30),
                            finding("crash.exception", wall_time=20), finding("oom.cuda", wall_time=25)], cat)
    assert summary(out) == [("oom.cuda", True, None), ("crash.exception", False, "oom.cuda"),
                            ("dist.rank_failure", False, "oom.cuda"), ("dist.timeout", False, "oom.cuda")]


def test_disk_full_chain_links_to_nearest_cause() -> None:
    cat = cards(card("disk.full", explains=["checkpoint.corrupt"]),
                card("checkpoint.corrupt", explains=["run.stalled"]), card("run.stalled"))
    out = apply_precedence([finding("run.stalled", Severity.ERROR), finding("checkpoint.corrupt", Severity.ERROR),
                            finding("disk.full")], cat)
    assert summary(out) == [("disk.full", True, None), ("checkpoint.corrupt", False, "disk.full"),
                            ("run.stalled", False, "checkpoint.corrupt")]


def test_generic_rule_is_primary_only_when_nothing_more_specific() -> None:
    cat = cards(card("crash.exception"), card("code.shape"))
    out = apply_precedence([finding("crash.exception", wall_time=1), finding("code.shape", wall_time=5)], cat)
    assert summary(out) == [("code.shape", True, None), ("crash.exception", False, "code.shape")]
    alone = apply_precedence([finding("crash.exception")], cat)
    assert summary(alone) == [("crash.exception", True, None)]


def test_generic_warning_not_linked_to_non_critical_primary() -> None:
    cat = cards(card("run.incomplete"), card("lr.floor"))
    out = apply_precedence([finding("run.incomplete", Severity.WARNING), finding("lr.floor", Severity.ERROR)], cat)
    assert summary(out) == [("lr.floor", True, None), ("run.incomplete", False, None)]


def test_severity_then_confidence_then_specificity_then_time() -> None:
    cat = cards(card("a.one"), card("b.two", specificity=5), card("c.three"))
    out = apply_precedence([finding("a.one", Severity.ERROR), finding("c.three", Severity.CRITICAL,
                                                                      confidence=Confidence.LOW)], cat)
    assert out[0].rule == "c.three"  # severity beats confidence
    out = apply_precedence([finding("a.one", confidence=Confidence.LOW), finding("c.three")], cat)
    assert out[0].rule == "c.three"
    out = apply_precedence([finding("a.one"), finding("b.two")], cat)
    assert out[0].rule == "b.two"  # card-declared specificity
    out = apply_precedence([finding("a.one", wall_time=50), finding("c.three", wall_time=10)], cat)
    assert out[0].rule == "c.three"  # the first failure in time, not the last
    out = apply_precedence([finding("a.one", step=90), finding("c.three", step=100)], cat)
    assert out[0].rule == "a.one"


def test_info_is_never_primary_and_empty_is_empty() -> None:
    assert apply_precedence([], {}) == ()
    out = apply_precedence([finding("x.note", Severity.INFO)], {})
    assert summary(out) == [("x.note", False, None)]


def test_cycle_in_cards_still_gives_one_primary_and_no_loop() -> None:
    cat = cards(card("a.one", supersedes=["b.two"]), card("b.two", supersedes=["a.one"]))
    out = apply_precedence([finding("b.two"), finding("a.one")], cat)
    assert [f.primary for f in out].count(True) == 1
    links = {f.rule: f.explained_by for f in out}
    assert not (links["a.one"] == "b.two" and links["b.two"] == "a.one")


def test_one_primary_among_findings_of_the_same_rule_and_stable_order() -> None:
    cat = cards(card("crash.exception"))
    fs = [finding("crash.exception", key="ValueError"), finding("crash.exception", key="KeyError"),
          finding("loss.spike", Severity.WARNING)]
    out = apply_precedence(fs, cat)
    assert [f.primary for f in out] == [True, False, False]
    assert out[1].rule == "crash.exception" and out[1].explained_by is None
    rest = [f.fingerprint for f in out[1:2]]
    assert apply_precedence(list(reversed(fs)), cat)[1].fingerprint == rest[0]  # input order does not matter
    assert out == apply_precedence(list(reversed(fs)), cat)


def test_explained_by_set_by_a_check_is_reset() -> None:
    f = Finding(rule="a.one", severity=Severity.ERROR, confidence=Confidence.HIGH, title="t", message="m",
                primary=True, explained_by="zzz.x")
    (out,) = apply_precedence([f], {})
    assert out.primary and out.explained_by is None


def test_peer_comm_error_on_another_rank_is_explained_by_the_ranks_own_crash() -> None:
    """child_failed: rank 1's shape error is the cause; rank 0's "Connection closed by peer" its echo."""
    cat = cards(card("code.shape", explains=["dist.rank_failure"]), card("dist.comm"), card("dist.rank_failure"))
    shape = replace(finding("code.shape", wall_time=10), facts={"ranks": [1], "rank": 1})
    comm = replace(finding("dist.comm", wall_time=11), facts={"ranks": [0]})
    out = {f.rule: f for f in apply_precedence([comm, shape], cat)}
    assert out["code.shape"].primary and out["dist.comm"].explained_by == "code.shape"
    # the same rank, or unknown ranks: not linked by rank (the cards decide)
    same = replace(comm, facts={"ranks": [1]})
    assert {f.rule: f for f in apply_precedence([same, shape], cat)}["dist.comm"].explained_by is None


def test_crash_on_one_rank_explains_timeouts_the_others_print() -> None:
    """dist.timeout supersedes crash.exception on the same rank; across ranks the crash is the cause."""
    cat = cards(card("dist.timeout", supersedes=["crash.exception", "crash.segfault"]), card("crash.exception"),
                card("crash.segfault"))
    crash = replace(finding("crash.exception", confidence=Confidence.MEDIUM, wall_time=30),
                    facts={"ranks": [3]})
    timeout = replace(finding("dist.timeout", wall_time=10), facts={"waiting_ranks": [0, 1, 2]})
    out = {f.rule: f for f in apply_precedence([timeout, crash], cat)}
    assert out["crash.exception"].primary and out["dist.timeout"].explained_by == "crash.exception"
    segv = replace(finding("crash.segfault", wall_time=30), facts={"ranks": [3], "rank": 3})
    out = {f.rule: f for f in apply_precedence([timeout, segv], cat)}
    assert out["crash.segfault"].primary and out["dist.timeout"].explained_by == "crash.segfault"
    # The same rank (the watchdog's own traceback / abort), or a rank unknown: the timeout is the cause.
    for facts in ({"ranks": [1]}, {}):
        out = {f.rule: f for f in apply_precedence([timeout, replace(crash, facts=facts)], cat)}
        assert out["dist.timeout"].primary and out["crash.exception"].explained_by == "dist.timeout"
    # A traceback cut off before its exception line (low confidence) may be the timeout itself.
    cut = replace(crash, confidence=Confidence.LOW)
    out = {f.rule: f for f in apply_precedence([timeout, cut], cat)}
    assert out["dist.timeout"].primary and out["crash.exception"].explained_by == "dist.timeout"


def test_crash_on_rank3_is_primary_over_the_watchdog_timeouts_end_to_end(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The real cards and checks: rank 3's ValueError, ranks 0 and 1 time out waiting for it."""
    import autopsy

    watchdog = ("[rank{r}]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective "
                "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, "
                "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.")
    (tmp_path / "train.log").write_text("\n".join([
        "[rank3]: Traceback (most recent call last):",
        '[rank3]:   File "/home/u/proj/train.py", line 61, in main',
        "[rank3]:     batch = collate(samples)",
        '[rank3]:   File "/home/u/proj/data.py", line 14, in collate',
        '[rank3]:     raise ValueError(f"bad record {i}")',
        "[rank3]: ValueError: bad record 1043",
        watchdog.format(r=0), watchdog.format(r=1), ""]), encoding="utf-8")
    out = {f.rule: f for f in autopsy.analyze(tmp_path).findings}
    assert out["crash.exception"].primary and out["dist.timeout"].explained_by == "crash.exception"


def test_a_recorded_stop_explains_the_checkpoint_it_cut_and_only_that_one() -> None:
    """A finding naming the checkpoint whose save it cut (interrupted_checkpoint) explains the report of it."""
    cat = cards(card("run.incomplete", supersedes=["checkpoint.retention"], explains=["checkpoint.gap"]),
                card("checkpoint.corrupt", explains=["run.stalled"]), card("checkpoint.retention"),
                card("run.stalled", supersedes=["run.incomplete"]), card("checkpoint.gap"))
    stop = replace(finding("run.incomplete", Severity.ERROR), facts={"interrupted_checkpoint": "out/checkpoint-100"})
    damage = replace(finding("checkpoint.corrupt", Severity.ERROR), facts={"checkpoint": "out/checkpoint-100"})
    seen = apply_precedence([damage, stop, finding("checkpoint.gap", Severity.WARNING)], cat)
    assert summary(seen) == [("run.incomplete", True, None), ("checkpoint.corrupt", False, "run.incomplete"),
                             ("checkpoint.gap", False, "run.incomplete")]
    # Another checkpoint's damage (an old broken one, a load failure) is not what this stop left.
    other = replace(damage, facts={"checkpoint": "out/checkpoint-50"})
    assert summary(apply_precedence([other, stop], cat))[0] == ("checkpoint.corrupt", True, None)
    # The log just stops (low confidence, nothing recorded the stop): the half-written checkpoint is what was
    # seen, and stays the root over the stall it explains.
    guess = apply_precedence([damage, finding("run.stalled", Severity.ERROR, confidence=Confidence.MEDIUM),
                              replace(finding("run.incomplete", Severity.WARNING, confidence=Confidence.LOW),
                                      facts={"interrupted_checkpoint": "out/checkpoint-100"})], cat)
    assert summary(guess) == [("checkpoint.corrupt", True, None), ("run.stalled", False, "checkpoint.corrupt"),
                              ("run.incomplete", False, "run.stalled")]


def test_retention_is_not_primary_over_the_stop_that_ended_the_run() -> None:
    cat = cards(card("run.incomplete", supersedes=["checkpoint.retention"]), card("checkpoint.retention"),
                card("disk.full", explains=["checkpoint.retention"]))
    stopped = apply_precedence([finding("checkpoint.retention", Severity.WARNING),
                                finding("run.incomplete", Severity.WARNING)], cat)
    assert summary(stopped) == [("run.incomplete", True, None), ("checkpoint.retention", False, "run.incomplete")]
    # A stop with no line, that only a clock says is over (low confidence), still ended the run: the
    # card's edge holds between findings of the same severity.
    unsure = apply_precedence([finding("checkpoint.retention", Severity.WARNING),
                               finding("run.incomplete", Severity.WARNING, confidence=Confidence.LOW)], cat)
    assert summary(unsure) == [("run.incomplete", True, None), ("checkpoint.retention", False, "run.incomplete")]
    # "Cannot tell whether it ended" (info) explains nothing that was seen.
    info = apply_precedence([finding("checkpoint.retention", Severity.WARNING),
                             finding("run.incomplete", Severity.INFO, confidence=Confidence.LOW)], cat)
    assert summary(info) == [("checkpoint.retention", True, None), ("run.incomplete", False, None)]
    full = apply_precedence([finding("checkpoint.retention", Severity.CRITICAL), finding("disk.full")], cat)
    assert summary(full) == [("disk.full", True, None), ("checkpoint.retention", False, "disk.full")]
