"""The generic evaluator of ``match:`` cards: log hits in, findings out.

The log scanner already ran every card's patterns in one pass over each log
(``run.logs[i].hits[<rule id>/<pattern name>]``); this module only reads those hits.

Per file, a card's candidate hits are the lines that satisfy ``any``/``all`` (within
``window_lines``) and are not suppressed by a ``none`` pattern. A file with candidates
yields one finding; files whose findings have the same key (the same normalised first
line, e.g. the same NCCL timeout on eight ranks) are merged into one finding that lists
every file and rank, so one failure is one finding with one fingerprint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import regex

from autopsy.engine.types import Card, CheckContext, Pattern
from autopsy.model import Evidence, Finding
from autopsy.parsers.types import Hit, LogScan

MAX_EVIDENCE = 5  # hits quoted per finding; the count says how many there were
MAX_KEY_CHARS = 200

_NUMBER = regex.compile(r"(?<![A-Za-z_])[-+]?\d+(?:[.,:]\d+)*(?:[eE][-+]?\d+)?")
_HEX = regex.compile(r"\b0x[0-9a-fA-F]+")
_RANK = regex.compile(r"(?i)\b(rank|local_rank|node|host|worker|pid)([\s=:_#-]*)\d+")
_PATH = regex.compile(r"(?:[A-Za-z]:)?(?:[\w.\-~]*/)+([\w.\-]+)")
_SPACES = regex.compile(r"\s+")
_INT = regex.compile(r"^[-+]?\d+$")
_FLOAT = regex.compile(r"^[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?$")


def collect_hits(card: Card, logs: Sequence[LogScan]) -> dict[str, list[Hit]]:
    """``ctx.hits`` for a card: pattern name -> kept hits across all logs, file then line order."""
    # The keys once per card, and only the logs with a hit looked into: a run of thousands of small
    # logs (most with no hit at all) paid a string format per card, log and pattern (~1.3M a run).
    keys = [(p.name, p.key(card.id)) for p in card.patterns]
    out: dict[str, list[Hit]] = {name: [] for name, _ in keys}
    for scan in logs:
        if not scan.hits:
            continue
        for name, key in keys:
            hl = scan.hits.get(key)
            if hl is not None:
                out[name].extend(sorted(hl.all_kept(), key=lambda h: h.lineno))
    return out


def hit_counts(card: Card, scan: LogScan) -> dict[str, int]:
    """How many lines each pattern hit in one file (all counted, not only the kept ones)."""
    return {p.name: (scan.hits[p.key(card.id)].count if p.key(card.id) in scan.hits else 0) for p in card.patterns}


@dataclass
class _FileResult:
    scan: LogScan
    hits: list[Hit]  # candidates after all/none, line order
    count: int  # total candidate lines (from the scanner's counts when nothing was dropped)


def evaluate_match(ctx: CheckContext, logs: Sequence[LogScan]) -> list[Finding]:
    """Findings of a pattern card without ``check:``: one per distinct failure."""
    card = ctx.card
    assert card.match is not None
    # a log without a hit of this card yields nothing (_evaluate_file needs a hit to keep)
    keys = {p.key(card.id) for p in card.patterns}
    results = [r for scan in logs if scan.hits and not keys.isdisjoint(scan.hits)
               and (r := _evaluate_file(card, scan)) is not None]
    merged: dict[str, list[_FileResult]] = {}
    for r in results:
        merged.setdefault(normalise_key(r.hits[0].text), []).append(r)
    return [_finding(ctx, key, group) for key, group in merged.items()]


def _evaluate_file(card: Card, scan: LogScan) -> _FileResult | None:
    match = card.match
    assert match is not None

    def kept(p: Pattern) -> list[Hit]:
        hl = scan.hits.get(p.key(card.id))
        return hl.all_kept() if hl is not None else []

    window = match.window_lines
    any_hits = sorted((h for p in match.any for h in kept(p)), key=lambda h: h.lineno)
    members: list[list[Hit]] = [kept(p) for p in match.all]
    if match.all and match.any:
        members.append(any_hits)
    if match.all:
        if not all(members):
            return None
        # A hit is a candidate when every other member has a hit within the window of it.
        pool = sorted({h.lineno: h for group in members for h in group}.values(), key=lambda h: h.lineno)
        cands = [h for h in pool if all(_near(h, group, window) for group in members)]
        if not cands:
            return None
        exact = False
    else:
        cands = any_hits
        exact = True
    if match.none:
        blockers = [h for p in match.none for h in kept(p)]
        if blockers:
            before = len(cands)
            cands = [h for h in cands if not _near(h, blockers, window)]
            exact = exact and len(cands) == before
    if not cands:
        return None
    if exact:
        count = sum(hit_counts(card, scan)[p.name] for p in match.any)
        count = max(count, len(cands))
    else:
        count = len(cands)
    return _FileResult(scan, cands, count)


def _near(hit: Hit, group: list[Hit], window: int) -> bool:
    if window <= 0:
        return bool(group)
    return any(abs(h.lineno - hit.lineno) <= window for h in group)


def _finding(ctx: CheckContext, key: str, group: list[_FileResult]) -> Finding:
    first = group[0].hits[0]
    facts: dict[str, object] = {}
    # Named groups of the first hit, then any group it lacks from the later hits of the
    # same file (an all: card's second line often carries the other half of the story).
    for h in group[0].hits:
        for name, value in h.groups.items():
            if value is not None and name not in facts:
                facts[name] = typed(value)
    total = sum(r.count for r in group)
    facts["count"] = total
    files = [r.scan.path for r in group]
    ranks = sorted({r for res in group for r in ([h.rank for h in res.hits] + [res.scan.rank]) if r is not None})
    if ranks:
        facts["ranks"] = ranks
        facts.setdefault("rank", first.rank if first.rank is not None else ranks[0])
    if len(files) > 1:
        facts["files"] = files
    evidence: list[Evidence] = []
    per_file = max(1, MAX_EVIDENCE // len(group))
    for res in group:
        for h in res.hits[:per_file]:
            if len(evidence) < MAX_EVIDENCE:
                evidence.append(hit_evidence(h))
    where = f"{first.path}:{first.lineno}"
    more = f", {total} lines" if total > 1 else ""
    spread = f" in {len(files)} files" if len(files) > 1 else ""
    excerpt = first.text.strip()
    if len(excerpt) > 160:
        excerpt = excerpt[:157] + "..."
    message = f'{ctx.card.title}: "{excerpt}" ({where}{more}{spread}).'
    step = first.step
    named_step = facts.get("step")
    if step is None and isinstance(named_step, int):
        step = named_step  # the line names its own step ("step 250: loss is nan")
    return ctx.finding(message, key=key, facts=facts, evidence=evidence, step=step, wall_time=first.wall_time)


def hit_evidence(hit: Hit) -> Evidence:
    """Evidence for one log line."""
    return Evidence(path=hit.path, line=hit.lineno, excerpt=hit.text.rstrip("\n"), step=hit.step, rank=hit.rank)


def normalise_key(text: str) -> str:
    """A fingerprint key from a log line: numbers, addresses and directories removed.

    ``Rank 3 ... /data/run7/ckpt/model.safetensors at 12:01:02`` and the same line from
    another rank, run or day give the same key. Digits glued to letters stay (``sm_80``,
    ``bf16``, ``cuda12``): they name things, except after rank/node/pid words.
    """
    text = _HEX.sub("ADDR", text)
    text = _RANK.sub(r"\1\2N", text)
    text = _PATH.sub(r"\1", text)
    text = _NUMBER.sub("N", text)
    text = _SPACES.sub(" ", text).strip()
    return text[:MAX_KEY_CHARS]


def typed(value: str) -> object:
    """A named group as a fact: integers and decimals become numbers, the rest stays text."""
    v = value.strip()
    if _INT.match(v):
        try:
            return int(v)
        except ValueError:
            return v
    if _FLOAT.match(v):
        try:
            return float(v)
        except ValueError:
            return v
    return value
