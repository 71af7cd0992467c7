"""Test doubles for the engine tests: a fake Run, hand-made hits, and check functions.

The engine only reads a Run through its documented views, so a plain object with those
attributes exercises it without the parsers. Check functions referenced by test cards
as ``engine_helpers:<name>`` live here (pytest puts tests/ on sys.path).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from autopsy.engine.loader import finish_card
from autopsy.engine.schema import parse_card
from autopsy.engine.types import Card, CheckContext, NotEvaluated
from autopsy.model import Finding
from autopsy.parsers.types import Hit, HitList, LogScan

BASE_CARD = """
id: demo.{name}
title: Demo {name}
severity: {severity}
confidence: high
status: experimental
needs: [log]
docs:
  summary: Demo card.
"""


def make_card(text: str, source: str = "test.yaml") -> Card:
    """Parse, validate and sample-check a card from YAML text."""
    return finish_card(parse_card(yaml.safe_load(text), source))


def card_dict(**over: Any) -> dict[str, Any]:
    """A valid pattern card as a dict; keyword arguments replace top-level keys."""
    base: dict[str, Any] = {
        "id": "demo.thing",
        "title": "A thing",
        "severity": "error",
        "confidence": "medium",
        "status": "stable",
        "needs": ["log"],
        "docs": {"summary": "A thing happened."},
        "match": {"any": [{"name": "thing", "comment": "demo tool", "regex": r"thing (?P<n>\d+) failed"}]},
        "samples": {"match": ["thing 3 failed"], "no_match": ["thing ok"]},
    }
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def scan_with(path: str, card: Card, lines: dict[int, str], *, rank: int | None = None,
              groups_for: dict[str, Any] | None = None, counts: dict[str, int] | None = None) -> LogScan:
    """A LogScan whose hits are the given lines run through the card's own regexes."""
    from autopsy.engine.schema import compile_regex

    scan = LogScan(path=path, size=1000, bytes_read=1000, n_lines=max(lines, default=0), rank=rank)
    for p in card.patterns:
        rx = compile_regex(p.regex, ignore_case=p.ignore_case)
        hl = HitList()
        for lineno, text in sorted(lines.items()):
            m = rx.search(text)
            if m:
                hl.first.append(Hit(key=p.key(card.id), path=path, lineno=lineno, offset=lineno * 80, text=text,
                                    groups=m.groupdict(), rank=rank, step=lineno * 10, wall_time=1000.0 + lineno))
                hl.count += 1
        if counts and p.name in counts:
            hl.count = counts[p.name]
        if hl.count:
            scan.hits[p.key(card.id)] = hl
    return scan


@dataclass
class FakeDiscovery:
    artifacts: tuple[Any, ...] = ()
    problems: tuple[str, ...] = ()
    truncated: bool = False


@dataclass
class FakeRun:
    """The views of :class:`autopsy.run.Run` the engine reads."""

    logs: list[LogScan] = field(default_factory=list)
    scalars: Any = None
    trainer_state: Any = None
    checkpoint_list: list[Any] = field(default_factory=list)
    config_entries: list[Any] = field(default_factory=list)
    tfevents: list[Any] = field(default_factory=list)
    discovery: FakeDiscovery = field(default_factory=FakeDiscovery)
    last_step: int | None = None
    max_steps: int | None = None
    latest_valid_checkpoint: Any = None
    root: Path = Path("/runs/fake")

    def __post_init__(self) -> None:
        if self.scalars is None:
            import pandas as pd

            self.scalars = pd.DataFrame({"step": pd.Series([], dtype="Int64"),
                                         "wall_time": pd.Series([], dtype="float64")})


# ------------------------------------------------------------------ check functions


def fires_twice(ctx: CheckContext) -> Iterable[Finding]:
    for i in (1, 2):
        yield ctx.finding(f"thing {i}", key=f"k{i}", facts={"i": i, "limit": ctx.param("limit_steps")}, step=i)


def never_fires(ctx: CheckContext) -> Iterable[Finding]:
    return []


def not_evaluated(ctx: CheckContext) -> Iterable[Finding]:
    raise NotEvaluated("no loss series found")


def explodes(ctx: CheckContext) -> Iterable[Finding]:
    return [1 / 0]  # type: ignore[list-item]


def wrong_rule(ctx: CheckContext) -> Iterable[Finding]:
    return [Finding(rule="other.rule", severity=ctx.card.severity, confidence=ctx.card.confidence, title="x",
                    message="x")]


def from_hits(ctx: CheckContext) -> Iterable[Finding]:
    hits = ctx.hits["thing"]
    if not hits:
        return []
    return [ctx.finding(f"{len(hits)} things", key="things", facts={"n": len(hits)})]
