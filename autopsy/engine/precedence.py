"""Root-cause precedence: one primary finding, the others linked to what explains them.

The links come from the cards, not from ad-hoc code: ``supersedes: [B]`` on card A makes
A primary over B when both fire, and ``explains: [B]`` makes B link to A. Both say "A
is nearer the cause than B", so both are edges A -> B here; a finding with an incoming
edge from another fired rule is not a root cause and gets ``explained_by``.

Among the roots the primary is the one ranked first by: severity, then not generic
(``crash.exception``, ``dist.rank_failure`` and ``run.incomplete`` only lead when
nothing more specific fired, per the taxonomy), confidence, the card's
``specificity``, and then the earliest in time (in noisy logs the first error is the
cause more often than the last or loudest one). Info findings are never primary.
An edge from a finding that is only a guess (low confidence or info) does not hold over a
more severe finding that was seen: a run.incomplete that cannot say how the run ended does not
explain a half-written checkpoint. When the primary is critical (it stopped the run) a generic finding that nothing else
explains links to it: the traceback or the "rank exited" line is the same death; so do
collective timeouts and communication errors on *other* ranks than the primary's (the
survivors' view of a peer that died).

One link comes from the findings' facts rather than a card: a finding naming the checkpoint
whose save it cut (``interrupted_checkpoint``: a recorded time limit or kill) explains the
findings reporting that checkpoint (``checkpoint``), so the stop is primary over the damage it
left, and only when it is the same checkpoint.

The cards' edges from those peer consequences (``dist.timeout`` supersedes ``crash.exception``)
hold on the same rank or when ranks are unknown: the timeout's own traceback or abort follows
it. When both sides name their ranks and they are disjoint, the edge turns round: a critical
crash of known type on rank 3 explains the timeouts ranks 0-2 print while waiting for it (a
card cannot say "on other ranks", so this is the one rank-aware rule here).

The output order is deterministic: primary, severity desc, rule id, fingerprint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from autopsy.engine.types import Card
from autopsy.model import Confidence, Finding, Severity

GENERIC_RULES = frozenset({"crash.exception", "dist.rank_failure", "run.incomplete"})
# What the surviving ranks print when a peer dies: a collective that times out, a connection
# closed by the peer. On other ranks than the primary's own cause, they are its echo.
PEER_CONSEQUENCES = frozenset({"dist.comm", "dist.timeout"})


def explains_graph(cards: Mapping[str, Card]) -> dict[str, set[str]]:
    """rule id -> the rule ids it is nearer the cause than (supersedes + explains)."""
    graph: dict[str, set[str]] = {}
    for card in cards.values():
        targets = set(card.supersedes) | set(card.explains)
        targets.discard(card.id)
        if targets:
            graph.setdefault(card.id, set()).update(targets)
    return graph


def _rank_key(f: Finding, cards: Mapping[str, Card]) -> tuple:
    card = cards.get(f.rule)
    specificity = card.specificity if card is not None else 0
    time = f.wall_time if f.wall_time is not None and math.isfinite(f.wall_time) else math.inf
    step = f.step if f.step is not None else math.inf
    # Sorted ascending: negate what should come first when larger.
    return (-int(f.severity), f.rule in GENERIC_RULES, -int(f.confidence), -specificity, time, step, f.rule,
            f.fingerprint)


def apply_precedence(findings: Sequence[Finding], cards: Mapping[str, Card]) -> tuple[Finding, ...]:
    """Mark the primary finding, set ``explained_by`` links, and sort deterministically."""
    if not findings:
        return ()
    graph = explains_graph(cards)
    fired = {f.rule for f in findings}
    rule_ranks = _rule_ranks(findings)
    explainers: dict[str, list[str]] = {}
    for src, t in _cut_save_links(findings):
        explainers.setdefault(t, []).append(src)
    for src, targets in graph.items():
        if src not in fired:
            continue
        for t in targets:
            if t not in fired:
                continue
            if _guess_over_seen(src, t, findings):
                continue
            if _peer_echo(src, t, findings, rule_ranks):
                explainers.setdefault(src, []).append(t)  # turned round: t's crash on another rank
            else:
                explainers.setdefault(t, []).append(src)

    ranked = sorted(findings, key=lambda f: _rank_key(f, cards))
    position = {f.rule: i for i, f in reversed(list(enumerate(ranked)))}  # best-ranked finding of a rule
    eligible = [f for f in ranked if f.severity > Severity.INFO]
    roots = [f for f in eligible if f.rule not in explainers]
    # A cycle in the cards (A supersedes B, B supersedes A) leaves no root: fall back to rank.
    primary = roots[0] if roots else (eligible[0] if eligible else None)

    links: dict[str, str] = {}
    for rule, srcs in explainers.items():
        if primary is not None and rule == primary.rule:
            continue
        if primary is not None and primary.rule in srcs:
            links[rule] = primary.rule
        else:
            links[rule] = min(srcs, key=lambda r: position[r])
    if primary is not None and primary.severity >= Severity.CRITICAL:
        for f in findings:
            if f.rule in GENERIC_RULES and f.rule != primary.rule and f.rule not in links:
                links[f.rule] = primary.rule
        own = _ranks(primary)
        if own and primary.rule not in PEER_CONSEQUENCES:
            for f in findings:
                theirs = _ranks(f)
                if f.rule in PEER_CONSEQUENCES and f.rule not in links and theirs and not theirs & own:
                    links[f.rule] = primary.rule
    _break_cycles(links)

    out = []
    for f in findings:
        is_primary = primary is not None and f is primary
        link = None if is_primary else links.get(f.rule)
        out.append(replace(f, primary=is_primary, explained_by=link))
    out.sort(key=lambda f: (not f.primary, -int(f.severity), f.rule, f.fingerprint))
    return tuple(out)


def _cut_save_links(findings: Sequence[Finding]) -> list[tuple[str, str]]:
    """(explaining rule, explained rule): a stop that cut a checkpoint's save explains the reports of that checkpoint.

    A finding whose fact ``interrupted_checkpoint`` names the checkpoint it left half-written (a
    recorded time limit or kill, run.incomplete) explains every other finding whose ``checkpoint``
    fact is that path (checkpoint.corrupt's report of the damage). Decided from the findings' own
    facts, not a card edge: the same two rules are unrelated when the stop and the damage are apart.
    """
    out: list[tuple[str, str]] = []
    for f in findings:
        cut = f.facts.get("interrupted_checkpoint")
        if not isinstance(cut, str) or f.confidence <= Confidence.LOW or f.severity <= Severity.INFO:
            continue
        out.extend((f.rule, g.rule) for g in findings if g.rule != f.rule and g.facts.get("checkpoint") == cut)
    return out


def _guess_over_seen(src: str, target: str, findings: Sequence[Finding]) -> bool:
    """True when every finding of ``src`` is a guess (low confidence, or info) and ``target`` was seen worse.

    A card edge says "A is nearer the cause than B"; it holds when A was observed. A "cannot
    tell" version of A (run.incomplete with no termination line: the log just stops) must not
    explain away a more severe B that was seen (a half-written checkpoint, an error): B stays a
    root. Of equal severity the card's edge still holds (a run that stopped short, with a clock
    to say so, is what the lost steps since its checkpoint come from).
    """
    def guess(f: Finding) -> bool:
        return f.confidence <= Confidence.LOW or f.severity <= Severity.INFO

    srcs = [f for f in findings if f.rule == src]
    if not srcs or not all(guess(f) for f in srcs):
        return False
    worst = max(f.severity for f in srcs)
    return any(not guess(f) and f.severity > worst for f in findings if f.rule == target)


def _rule_ranks(findings: Sequence[Finding]) -> dict[str, set[int] | None]:
    """rule id -> the ranks all its findings happened on; None when one of them has no rank facts."""
    out: dict[str, set[int] | None] = {}
    for f in findings:
        ranks = _ranks(f)
        if not ranks:
            out[f.rule] = None
        elif f.rule not in out:
            out[f.rule] = set(ranks)
        elif (known := out[f.rule]) is not None:
            known |= ranks
    return out


def _peer_echo(src: str, target: str, findings: Sequence[Finding], rule_ranks: Mapping[str, set[int] | None]) -> bool:
    """True when ``src`` (a timeout / comm error) happened only on other ranks than ``target``'s crash.

    The crash must be critical and of known type (confidence above low: a traceback cut off
    before its exception line may be the comm error itself) on every finding of its rule.
    """
    if src not in PEER_CONSEQUENCES or target in PEER_CONSEQUENCES:
        return False
    theirs, own = rule_ranks.get(src), rule_ranks.get(target)
    if not theirs or not own or theirs & own:
        return False
    crashes = [f for f in findings if f.rule == target]
    return all(f.severity >= Severity.CRITICAL and f.confidence > Confidence.LOW for f in crashes)


def _ranks(f: Finding) -> set[int]:
    """The ranks a finding happened on, from its ``ranks`` / ``rank`` / ``waiting_ranks`` facts.

    ``waiting_ranks`` are the ranks that printed a collective timeout. Empty when unknown.
    """
    out: set[int] = set()
    for name in ("ranks", "waiting_ranks"):
        ranks = f.facts.get(name)
        if isinstance(ranks, (list, tuple)):
            out.update(r for r in ranks if isinstance(r, int) and not isinstance(r, bool))
    rank = f.facts.get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool):
        out.add(rank)
    return out


def _break_cycles(links: dict[str, str]) -> None:
    """Drop links that would make ``explained_by`` chains loop (cards with mutual edges)."""
    for start in sorted(links):
        seen = {start}
        node = links.get(start)
        while node is not None:
            if node in seen:
                links.pop(start, None)
                break
            seen.add(node)
            node = links.get(node)
