"""The rule-card model and the context a check function receives.

A card (``rules/<family>/<name>.yaml``) is loaded into a frozen :class:`Card`. A check
function has the signature ``def check(ctx: CheckContext) -> Iterable[Finding]`` and
raises :class:`NotEvaluated` when its inputs are missing ("no loss series found").
Pattern cards without ``check:`` are turned into findings by the generic evaluator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autopsy.model import Confidence, Evidence, Finding, Severity

if TYPE_CHECKING:
    from autopsy.parsers.types import Hit
    from autopsy.run import Run

DOC_SECTIONS = ("summary", "why", "confirm", "action", "false_positives", "references")
NEEDS = ("log", "scalars", "trainer_state", "checkpoints", "config", "tfevents", "artifacts")


class NotEvaluated(Exception):
    """Raised by a check whose inputs are missing; the message is the reason shown to users."""


@dataclass(frozen=True)
class Pattern:
    """One regex of a card's ``match:`` block (one alternative per item)."""

    name: str  # unique within the card
    regex: str
    comment: str  # which program prints this text
    literals: tuple[str, ...] = ()  # prefilter substrings (derived or given)
    ignore_case: bool = False

    def key(self, rule_id: str) -> str:
        return f"{rule_id}/{self.name}"


@dataclass(frozen=True)
class Match:
    """``match:`` of a pattern card.

    ``any``: fires when one pattern matches. ``all``: every pattern must match within
    ``window_lines`` of each other in the same file. ``none``: suppresses the finding when
    one of these matches in the same file within ``window_lines`` of a hit (0 = anywhere).
    """

    any: tuple[Pattern, ...] = ()
    all: tuple[Pattern, ...] = ()
    none: tuple[Pattern, ...] = ()
    window_lines: int = 0


@dataclass(frozen=True)
class Card:
    id: str
    title: str
    severity: Severity
    confidence: Confidence
    status: str  # "experimental" | "stable"
    docs: Mapping[str, Any]  # DOC_SECTIONS; false_positives and references are lists
    needs: tuple[str, ...]
    match: Match | None = None
    check: str | None = None  # "autopsy.checks.loss:plateau"
    params: Mapping[str, Any] = field(default_factory=dict)
    supersedes: tuple[str, ...] = ()  # ids this rule is primary over when both fire
    explains: tuple[str, ...] = ()  # ids whose findings this one explains (they link to it)
    aliases: tuple[str, ...] = ()
    specificity: int = 0  # precedence tie-break: higher = more specific diagnosis (generic rules < 0)
    samples_match: tuple[str, ...] = ()
    samples_no_match: tuple[str, ...] = ()
    source: str = ""  # the YAML file it came from
    builtin: bool = False  # shipped with autopsy (its patterns are checked linear by the test suite)

    @property
    def family(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def patterns(self) -> tuple[Pattern, ...]:
        if self.match is None:
            return ()
        return self.match.any + self.match.all + self.match.none


@dataclass
class CheckContext:
    """What a check function gets: the run, its card, params, and the pattern hits.

    ``hits`` maps each pattern name of the card to its hits across all logs, in file then
    line order (empty when the card has no ``match:``).
    """

    run: Run
    card: Card
    params: Mapping[str, Any]
    hits: Mapping[str, list[Hit]] = field(default_factory=dict)

    def param(self, name: str) -> Any:
        try:
            return self.params[name]
        except KeyError:
            raise KeyError(f"{self.card.source}: check needs params.{name}") from None

    def finding(
        self,
        message: str,
        *,
        key: str,
        facts: Mapping[str, Any] | None = None,
        evidence: Iterable[Evidence] = (),
        severity: Severity | None = None,
        confidence: Confidence | None = None,
        step: int | None = None,
        wall_time: float | None = None,
        title: str | None = None,
    ) -> Finding:
        """A finding of this card's rule; severity/confidence default to the card's."""
        return Finding(
            rule=self.card.id,
            severity=severity if severity is not None else self.card.severity,
            confidence=confidence if confidence is not None else self.card.confidence,
            title=title or self.card.title,
            message=message,
            facts=dict(facts or {}),
            evidence=tuple(evidence),
            key=key,
            step=step,
            wall_time=wall_time,
        )
