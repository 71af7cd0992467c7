"""Catalog meta-tests: the built-in cards in rules/ hold to the contract.

ids unique and equal to their path, every taxonomy id has a card (with the taxonomy's
default severity), docs sections filled, regexes compile with named groups only, every
``check:`` resolves, every card's samples pass, and cross-references name real rules.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import regex
from conftest import REPO, RULES

from autopsy.engine.loader import load_card_file, load_catalog
from autopsy.engine.runner import resolve_check
from autopsy.engine.types import DOC_SECTIONS

# The taxonomy is a public contract kept in ../shared; tests/data holds a copy so the
# checks also run where ../shared is absent (test_taxonomy_copy_is_current keeps it true).
_SHARED_TAXONOMY = REPO.parent / "shared" / "taxonomy.md"
TAXONOMY = _SHARED_TAXONOMY if _SHARED_TAXONOMY.is_file() else REPO / "tests" / "data" / "taxonomy.md"
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


# What a generic rule may still be primary over: a hazard that did not end the run. Issue 11: "checkpoint.retention
# is never primary over the termination that ended the run unless the disk filled" (and then disk.full explains it).
_GENERIC_MAY_SUPERSEDE = {"run.incomplete": {"checkpoint.retention"}}


def test_generic_rules_supersede_nothing_specific() -> None:
    """The generic rules lead only when nothing more specific fired; they must not outrank a cause."""
    cat = load_catalog()
    for rid in ("crash.exception", "run.incomplete"):
        card = cat.cards.get(rid)
        if card is not None:
            extra = set(card.supersedes) - _GENERIC_MAY_SUPERSEDE.get(rid, set())
            assert not extra, f"{rid} is generic and must not supersede {sorted(extra)}"


def _edges() -> dict[str, set[str]]:
    """rule id -> the ids it supersedes or explains (both say "nearer the cause than")."""
    cat = load_catalog()
    return {c.id: set(c.supersedes) | set(c.explains) for c in cat.cards.values()}


def test_precedence_names_only_loaded_cards() -> None:
    cat = load_catalog()
    known = set(cat.cards)
    bad = sorted((cid, ref) for cid, refs in _edges().items() for ref in refs if ref not in known or ref == cid)
    assert not bad, f"supersedes/explains name an unknown id (use the id, not an alias) or the card itself: {bad}"


def test_precedence_has_no_contradictions() -> None:
    """A over B and B over A (directly or through a chain) leaves the engine to guess the root cause."""
    edges = _edges()
    mutual = sorted((a, b) for a, targets in edges.items() for b in targets if a < b and a in edges.get(b, ()))
    assert not mutual, f"cards that each claim to be nearer the cause than the other: {mutual}"
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, path)
        path.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [])
    assert not cycles, "precedence cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def top_level_alternatives(pattern: str) -> list[int]:
    """Offsets of ``|`` outside every group and character class (escapes skipped).

    One card item is one alternative: wording variants of one program's message may
    alternate inside a group, but texts printed by different programs are separate items,
    each with its own comment naming the program.
    """
    out: list[int] = []
    depth = 0
    class_depth = 0  # the regex module's V1 syntax nests classes ([[a-z]--[aeiou]])
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if class_depth:
            if c == "[":
                class_depth += 1
            elif c == "]":
                class_depth -= 1
        elif c == "[":
            class_depth = 1
            j = i + 1
            if pattern[j:j + 1] == "^":
                j += 1
            if pattern[j:j + 1] == "]":  # a leading ] is a literal member
                j += 1
            i = j
            continue
        elif c == "(":
            depth += 1
        elif c == ")":
            depth = max(depth - 1, 0)
        elif c == "|" and depth == 0:
            out.append(i)
        i += 1
    return out


@pytest.mark.parametrize(("pattern", "expected"), [
    ("a|b", [1]), (r"(?:a|b)c", []), (r"[|]x", []), (r"\|x", []), (r"[]|]|x", [4]), (r"[^]|]x", []),
    (r"(?P<g>a|b)|c", [10]), (r"[\]|]x", []), (r"(?i:a|b)", []), ("[[a|]--[b]]x", []),
])
def test_top_level_alternatives_scanner(pattern: str, expected: list[int]) -> None:
    assert top_level_alternatives(pattern) == expected


@pytest.mark.parametrize("path", CARD_FILES, ids=_ids(CARD_FILES))
def test_one_alternative_per_pattern_item(path: Path) -> None:
    card = load_card_file(path, path.relative_to(REPO).as_posix())
    bad = {p.name: p.regex for p in card.patterns if top_level_alternatives(p.regex)}
    assert not bad, ("split top-level alternatives into separate items (one per program, each with its comment), "
                     f"or group wording variants of one message: {bad}")


@pytest.mark.parametrize("path", CARD_FILES, ids=_ids(CARD_FILES))
def test_check_that_picks_patterns_by_name_names_them_all(path: Path) -> None:
    """A check that selects its card's patterns by name must name every one: a pattern added to
    the card but not to the check's list would load, pass its samples, and never fire."""
    import importlib
    import inspect

    card = load_card_file(path, path.relative_to(REPO).as_posix())
    if card.check is None or card.match is None:
        return
    module_name, _, fn_name = card.check.partition(":")
    module = importlib.import_module(module_name)
    body = inspect.getsource(getattr(module, fn_name))
    if "ctx.hits.items()" in body or "hits_of(ctx)" in body or ("line_rule(" in body and "names=" not in body):
        return  # takes every pattern of its card
    source = inspect.getsource(module)
    named = [p.name for p in card.patterns if f'"{p.name}"' in source]
    missing = [p.name for p in card.patterns if p.name not in named]
    assert not missing, f"{card.check} picks patterns by name: {named}, but never names {missing}"


@functools.cache
def _gen_docs() -> ModuleType:
    """scripts/gen_docs.py, whose comment reader makes the params table of docs/rules.md."""
    if "gen_docs" in sys.modules:
        return sys.modules["gen_docs"]
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_docs"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", CARD_FILES, ids=_ids(CARD_FILES))
def test_every_param_has_a_comment(path: Path) -> None:
    """Thresholds are documented where they are set: a comment beside each param (or just above it)
    says what it means and in which unit; docs/rules.md is generated from those comments."""
    card = load_card_file(path, path.relative_to(REPO).as_posix())
    notes, _ = _gen_docs().yaml_notes(path.read_text(encoding="utf-8"))
    missing = [name for name in card.params if len(notes.get(name, "").split()) < 3]
    assert not missing, f"params without a comment saying what they mean and their unit: {missing}"


@pytest.mark.parametrize("path", CARD_FILES, ids=_ids(CARD_FILES))
def test_every_pattern_has_a_sample(path: Path) -> None:
    """Each pattern item is exercised by at least one samples.match line (the loader runs them), so a
    regex edit that breaks one program's wording fails at load time, not in the field."""
    card = load_card_file(path, path.relative_to(REPO).as_posix())
    unsampled = []
    for p in card.patterns:
        compiled = regex.compile(p.regex, regex.IGNORECASE if p.ignore_case else 0)
        if not any(compiled.search(s) for s in card.samples_match):
            unsampled.append(p.name)
    assert not unsampled, f"patterns no samples.match line exercises: {unsampled}"


def test_taxonomy_copy_is_current() -> None:
    copy = REPO / "tests" / "data" / "taxonomy.md"
    assert copy.is_file()
    if not _SHARED_TAXONOMY.is_file():
        pytest.skip(f"{_SHARED_TAXONOMY} absent: the copy in tests/data is used as is")
    assert copy.read_text(encoding="utf-8") == _SHARED_TAXONOMY.read_text(encoding="utf-8"), (
        "tests/data/taxonomy.md differs from ../shared/taxonomy.md: copy it again")
