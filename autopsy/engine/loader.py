"""Load the rule catalog: the built-in cards, then a team's own (``--rules DIR``).

Built-in cards ship as package data ``autopsy._rules`` (the top-level ``rules/`` dir
mapped into the wheel); from a source checkout, where that package does not exist, we
read ``<repo>/rules`` instead. A user card with a built-in id replaces it.

Every card is validated (:mod:`autopsy.engine.schema`) and its samples are run here:
a card whose ``samples.match`` line does not match, or whose ``samples.no_match`` line
does, is refused, and so is one whose prefilter literals would hide a matching sample
from the scanner. Refused cards land in ``Catalog.errors``; the others still load, so
one broken card never hides the rest.

This module must stay light (``autopsy rules list`` imports it): no pandas, no parsers.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import regex
import yaml

from autopsy.engine.catalog_index import BUILTIN_PACKAGE
from autopsy.engine.catalog_index import builtin_rules_dir as _builtin_rules_dir
from autopsy.engine.literals import derive_literals
from autopsy.engine.schema import CardError, compile_regex, parse_card
from autopsy.engine.types import Card, Pattern
from autopsy.parsers.types import PatternSpec

# libyaml's safe loader when PyYAML was built with it: `autopsy rules list` parses every card.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Catalog:
    """The loaded cards (id -> Card, sorted by id) and the cards that were refused."""

    cards: dict[str, Card]
    errors: tuple[CardError, ...] = ()
    aliases: dict[str, str] = field(default_factory=dict)  # alias -> id
    overridden: tuple[str, ...] = ()  # ids replaced by a card from a later rules dir

    def get(self, id_or_alias: str) -> Card | None:
        """The card with this id, or the card that took over this (old) id as an alias."""
        card = self.cards.get(id_or_alias)
        if card is None and id_or_alias in self.aliases:
            card = self.cards.get(self.aliases[id_or_alias])
        return card

    def patterns(self, cards: Iterable[Card] | None = None) -> tuple[PatternSpec, ...]:
        """The log patterns of these cards (default: all), for the single log scan."""
        chosen = self.cards.values() if cards is None else cards
        return tuple(pattern_specs(chosen))

    def families(self) -> list[str]:
        return sorted({c.family for c in self.cards.values()})

    def __len__(self) -> int:
        return len(self.cards)


def pattern_specs(cards: Iterable[Card]) -> list[PatternSpec]:
    return [
        PatternSpec(key=p.key(card.id), regex=p.regex, literals=p.literals, ignore_case=p.ignore_case,
                    guarded=not card.builtin)
        for card in cards
        for p in card.patterns
    ]


def builtin_rules_dir() -> Path | None:
    """Where the built-in cards live: the installed package data, else ``<repo>/rules``."""
    found = _builtin_rules_dir()
    return Path(found) if found is not None else None


def load_catalog(rules_dirs: Sequence[str | os.PathLike[str]] = (), *, builtin: bool = True,
                 fresh: bool = False) -> Catalog:
    """Load the built-in cards, then each of ``rules_dirs`` in order (later ones override).

    Built-in cards are parsed once per process, and served from a cache file while no card,
    engine source or dependency changed (:mod:`autopsy.engine.card_cache`); ``fresh=True``
    reads and validates them again;
    user directories are read on every call so edits show up. Never raises on a bad card:
    see ``Catalog.errors``.
    """
    cards: dict[str, Card] = {}
    errors: list[CardError] = []
    overridden: list[str] = []
    if builtin:
        base = builtin_rules_dir()
        if base is not None:
            b_cards, b_errors = (_read_builtin if fresh else _load_builtin)(str(base))
            cards.update(b_cards)
            errors.extend(b_errors)
    for d in rules_dirs:
        user_cards, user_errors = load_dir(Path(d))
        for cid, card in user_cards.items():
            if cid in cards:
                overridden.append(cid)
            cards[cid] = card
        errors.extend(user_errors)
    aliases: dict[str, str] = {}
    for card in sorted(cards.values(), key=lambda c: c.id):
        for alias in card.aliases:
            if alias in cards:
                errors.append(CardError(card.source, "aliases", f"{alias!r} is the id of another card", card.id))
            elif alias in aliases:
                errors.append(CardError(card.source, "aliases", f"{alias!r} is already an alias of {aliases[alias]}",
                                        card.id))
            else:
                aliases[alias] = card.id
    ordered = {cid: cards[cid] for cid in sorted(cards)}
    return Catalog(cards=ordered, errors=tuple(errors), aliases=aliases, overridden=tuple(sorted(set(overridden))))


@functools.lru_cache(maxsize=4)
def _load_builtin(base: str) -> tuple[dict[str, Card], tuple[CardError, ...]]:
    """Once per process; across processes from the never-stale cache of :mod:`autopsy.engine.card_cache`."""
    from autopsy.engine.card_cache import cached_builtin

    return cached_builtin(base, _read_builtin)


def _read_builtin(base: str) -> tuple[dict[str, Card], tuple[CardError, ...]]:
    """The full load of the built-in cards: every file read, validated, its samples run."""
    cards, errors = load_dir(Path(base), display_root=Path(base).parent)
    return {cid: replace(card, builtin=True) for cid, card in cards.items()}, tuple(errors)


def load_dir(directory: Path, *, display_root: Path | None = None) -> tuple[dict[str, Card], list[CardError]]:
    """Every ``*.yaml``/``*.yml`` card under ``directory`` (sorted by path)."""
    cards: dict[str, Card] = {}
    errors: list[CardError] = []
    if not directory.is_dir():
        errors.append(CardError(str(directory), "", "rules directory not found"))
        return cards, errors
    files = sorted(p for p in directory.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
    for path in files:
        shown = _display(path, display_root)
        try:
            card = load_card_file(path, shown)
        except CardError as exc:
            errors.append(exc)
            continue
        if card.id in cards:
            errors.append(CardError(shown, "id", f"duplicate id {card.id!r} (also in {cards[card.id].source})",
                                    card.id))
            continue
        cards[card.id] = card
    return cards, errors


def _display(path: Path, root: Path | None) -> str:
    if root is not None:
        try:
            return path.relative_to(root).as_posix()
        except ValueError:
            pass
    return str(path)


def load_card_file(path: Path, shown: str | None = None) -> Card:
    """Read, validate, sample-check and finish (prefilter literals) one card file."""
    shown = shown or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CardError(shown, "", f"cannot read: {exc}") from None
    try:
        data = yaml.load(text, Loader=_YAML_LOADER)  # a safe loader (C-accelerated)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise CardError(shown, "", f"invalid YAML{line}: {getattr(exc, 'problem', None) or exc}") from None
    return finish_card(parse_card(data, shown))


def finish_card(card: Card) -> Card:
    """Check the samples and fill in derived literals. Raises :class:`CardError`."""
    if card.match is None:
        if card.samples_match or card.samples_no_match:
            raise CardError(card.source, "samples", "samples need a match: block to test", card.id)
        return card
    compiled = {p.name: compile_regex(p.regex, ignore_case=p.ignore_case) for p in card.patterns}
    positives = card.match.any + card.match.all
    match = card.match
    groups: dict[str, tuple[Pattern, ...]] = {}
    # Given literals must let every matching sample through the prefilter; derived ones
    # are checked the same way and dropped (no prefilter) should the derivation be wrong.
    for group in ("any", "all", "none"):
        fixed = []
        for i, pat in enumerate(getattr(match, group)):
            given = bool(pat.literals)
            literals = pat.literals if given else derive_literals(pat.regex, ignore_case=pat.ignore_case)
            blocked = _blocked_sample(pat, literals, compiled[pat.name], card)
            if blocked is not None:
                if given:
                    raise CardError(card.source, f"match.{group}[{i}].literals",
                                    f"none of {list(literals)} occurs in sample {blocked!r}, which the regex "
                                    "matches: the scanner's prefilter would hide it", card.id)
                literals = ()
            if pat.ignore_case:  # the scanner lower-cases the line before the prefilter test
                literals = tuple(dict.fromkeys(lit.lower() for lit in literals))
            fixed.append(replace(pat, literals=tuple(literals)))
        groups[group] = tuple(fixed)
    for i, sample in enumerate(card.samples_match):
        if not any(compiled[p.name].search(sample) for p in positives):
            raise CardError(card.source, f"samples.match[{i}]", f"no any:/all: pattern matches {sample!r}", card.id)
        if any(compiled[p.name].search(sample) for p in card.match.none):
            raise CardError(card.source, f"samples.match[{i}]", f"a none: pattern suppresses {sample!r}", card.id)
    for i, sample in enumerate(card.samples_no_match):
        hit = next((p.name for p in positives if compiled[p.name].search(sample)), None)
        if hit is not None and not any(compiled[p.name].search(sample) for p in card.match.none):
            raise CardError(card.source, f"samples.no_match[{i}]", f"pattern {hit!r} matches {sample!r}", card.id)
    return replace(card, match=replace(match, any=groups["any"], all=groups["all"], none=groups["none"]))


def _blocked_sample(pat: Pattern, literals: Sequence[str], compiled: regex.Pattern[str], card: Card) -> str | None:
    if not literals:
        return None
    lits = [lit.lower() for lit in literals] if pat.ignore_case else list(literals)
    for sample in (*card.samples_match, *card.samples_no_match):
        if compiled.search(sample):
            text = sample.lower() if pat.ignore_case else sample
            if not any(lit in text for lit in lits):
                return sample
    return None


def card_summary(card: Card) -> dict[str, Any]:
    """The one-line view ``autopsy rules list`` prints."""
    return {
        "id": card.id,
        "severity": str(card.severity),
        "status": card.status,
        "summary": card.docs.get("summary", ""),
        "kind": "pattern" if card.check is None else ("pattern+check" if card.match else "check"),
    }


__all__ = ["BUILTIN_PACKAGE", "Catalog", "builtin_rules_dir", "card_summary", "load_card_file", "load_catalog",
           "load_dir", "pattern_specs"]
