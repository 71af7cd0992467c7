"""Catalog meta-tests: the built-in cards in rules/ hold to the contract.

ids unique and equal to their path, every taxonomy id has a card (with the taxonomy's
default severity), docs sections filled, regexes compile with named groups only, every
``check:`` resolves, every card's samples pass, and cross-references name real rules.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import regex
from conftest import REPO, RULES

from autopsy.engine.loader import load_card_file, load_catalog
from autopsy.engine.runner import resolve_check
from autopsy.engine.types import DOC_SECTIONS

TAXONOMY = REPO.parent / "shared" / "taxonomy.md"
CARD_FILES = sorted(p for p in RULES.rglob("*") if p.suffix in (".yaml", ".yml"))
_ROW = re.compile(r"^\|\s*`(?P<id>[a-z_]+\.[a-z_]+)`\s*\|\s*(?P<severity>[a-z]+)")


def taxonomy() -> dict[str, str]:
    """id -> default severity, from the tables of taxonomy.md."""
    if not TAXONOMY.is_file():
        pytest.skip(f"taxonomy not found at {TAXONOMY} (CI keeps ../shared beside the repo)")
    out = {}
    for line in TAXONOMY.read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line)
        if m:
            out[m["id"]] = m["severity"]
    assert len(out) >= 30, f"parsed only {len(out)} ids from {TAXONOMY}"
    return out


def _ids(paths: list[Path]) -> list[str]:
    return [p.relative_to(RULES).as_posix() for p in paths]


def test_catalog_loads_without_errors() -> None:
    cat = load_catalog()
    assert not cat.errors, "refused cards:\n" + "\n".join(str(e) for e in cat.errors)
    assert len(cat.cards) == len(CARD_FILES)


@pytest.mark.parametrize("path", CARD_FILES, ids=_ids(CARD_FILES))
def test_card(path: Path) -> None:
    card = load_card_file(path, path.relative_to(REPO).as_posix())  # validates, runs samples
    rel = path.relative_to(RULES).with_suffix("").as_posix()
    assert card.id == rel.replace("/", "."), f"id {card.id} must mirror its path {rel}"
    for section in DOC_SECTIONS:
        value = card.docs.get(section)
        assert value, f"docs.{section} is empty"
        if isinstance(value, str):
            assert len(value.split()) >= 3, f"docs.{section} is too short to help: {value!r}"
    for p in card.patterns:
        compiled = regex.compile(p.regex, regex.IGNORECASE if p.ignore_case else 0)
        assert compiled.groups == len(compiled.groupindex), f"{p.name}: unnamed group"
        assert len(p.comment.split()) >= 2, f"{p.name}: the comment should name the program that prints it"
    if card.match is not None:
        assert card.samples_no_match, "a pattern card needs samples.no_match (benign look-alikes)"
    if card.check is not None:
        fn = resolve_check(card.check)
        assert callable(fn)


def test_ids_unique_and_aliases_free() -> None:
    seen: dict[str, str] = {}
    for path in CARD_FILES:
        card = load_card_file(path)
        for name in (card.id, *card.aliases):
            assert name not in seen, f"{name} used by {seen.get(name)} and {path}"
            seen[name] = str(path)


def test_every_taxonomy_id_has_a_card_with_its_severity() -> None:
    tax = taxonomy()
    cat = load_catalog()
    missing = sorted(set(tax) - set(cat.cards))
    assert not missing, f"taxonomy ids without a card: {missing}"
    wrong = {i: (str(cat.cards[i].severity), s) for i, s in tax.items() if str(cat.cards[i].severity) != s}
    assert not wrong, f"card severity differs from the taxonomy default (card, taxonomy): {wrong}"


def test_references_name_real_rules() -> None:
    cat = load_catalog()
    known = set(cat.cards) | set(cat.aliases)
    if TAXONOMY.is_file():
        known |= set(taxonomy())
    bad = [(c.id, ref) for c in cat.cards.values() for ref in (*c.supersedes, *c.explains) if ref not in known]
    assert not bad, f"supersedes/explains name unknown rules: {bad}"


def test_generic_rules_supersede_nothing_specific() -> None:
    """The generic rules lead only when nothing more specific fired; they must not outrank others."""
    cat = load_catalog()
    for rid in ("crash.exception", "run.incomplete"):
        card = cat.cards.get(rid)
        if card is not None:
            assert not card.supersedes, f"{rid} is generic and must not supersede {card.supersedes}"
