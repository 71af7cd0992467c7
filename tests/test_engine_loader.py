"""The catalog loader: built-in + user cards, overrides, aliases, refused cards, literals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from autopsy.engine.literals import derive_literals
from autopsy.engine.loader import builtin_rules_dir, load_catalog, load_dir
from autopsy.model import Severity

DATA = Path(__file__).resolve().parent / "data" / "cards"
REPO = Path(__file__).resolve().parent.parent


def test_user_dir_loads_and_patterns_carry_keys() -> None:
    cat = load_catalog([DATA / "good"], builtin=False)
    assert list(cat.cards) == ["demo.boom"]
    assert not cat.errors
    keys = [p.key for p in cat.patterns()]
    assert keys == ["demo.boom/boom", "demo.boom/drill"]
    # Literals were derived for the prefilter since the card gives none.
    assert cat.patterns()[0].literals == ("BOOM at step ",)


def test_later_dir_overrides_same_id() -> None:
    cat = load_catalog([DATA / "good", DATA / "override"], builtin=False)
    card = cat.cards["demo.boom"]
    assert card.title == "Boom (team override)" and card.severity is Severity.WARNING
    assert card.source.endswith("override/demo/boom.yaml")
    assert cat.overridden == ("demo.boom",)


def test_alias_resolves() -> None:
    cat = load_catalog([DATA / "good"], builtin=False)
    assert cat.get("demo.kaboom") is cat.cards["demo.boom"]
    assert cat.get("demo.boom") is cat.cards["demo.boom"]
    assert cat.get("demo.nothing") is None


def test_broken_card_is_refused_and_others_load() -> None:
    cat = load_catalog([DATA / "good", DATA / "broken"], builtin=False)
    assert list(cat.cards) == ["demo.boom"]
    (err,) = cat.errors
    assert err.source.endswith("broken/demo/bad_regex.yaml")
    assert err.field == "match.any[0].regex" and err.rule == "demo.bad_regex"


def test_invalid_yaml_and_duplicates(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("id: [unclosed\n")
    good = (DATA / "good" / "demo" / "boom.yaml").read_text()
    (tmp_path / "b.yaml").write_text(good)
    (tmp_path / "c.yaml").write_text(good)
    cards, errors = load_dir(tmp_path)
    assert list(cards) == ["demo.boom"]
    messages = sorted(str(e) for e in errors)
    assert "a.yaml: invalid YAML (line 2): " in messages[0] and "expected" in messages[0]
    assert "duplicate id 'demo.boom'" in messages[1] and messages[1].startswith(str(tmp_path / "c.yaml"))


def test_missing_rules_dir_is_an_error_not_a_crash(tmp_path: Path) -> None:
    cat = load_catalog([tmp_path / "nope"], builtin=False)
    assert not cat.cards
    assert "rules directory not found" in str(cat.errors[0])


def test_alias_clash_is_reported(tmp_path: Path) -> None:
    text = (DATA / "good" / "demo" / "boom.yaml").read_text()
    (tmp_path / "x.yaml").write_text(text.replace("id: demo.boom", "id: demo.other"))
    cat = load_catalog([DATA / "good", tmp_path], builtin=False)
    assert any("already an alias" in str(e) for e in cat.errors)


def test_builtin_dir_found_from_checkout() -> None:
    found = builtin_rules_dir()
    assert found is not None and found.resolve() == (REPO / "rules").resolve()


def test_loader_import_stays_light() -> None:
    code = ("import sys, autopsy.engine.loader as l; l.load_catalog();"
            "bad = [m for m in ('pandas', 'tensorboard', 'click', 'torch') if m in sys.modules];"
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------- literal derivation


@pytest.mark.parametrize(
    ("pattern", "ignore_case", "expected"),
    [
        (r"CUDA out of memory\. Tried to allocate (?P<n>\d+)", False, ("CUDA out of memory. Tried to allocate ",)),
        (r"(?:No space left on device|Disk quota exceeded)", False, ("Disk quota exceeded", "No space left on device")),
        (r"NCCL (?:error|timeout)", True, ("nccl ",)),
        (r"(?i)killed process", False, ()),  # inline flag: a case-sensitive prefilter would be wrong
        (r"(?i)killed process", True, ("killed process",)),
        (r"(?i:Killed) process \d+", False, (" process ",)),
        (r"ab|cdef", False, ()),  # one alternative has no literal of 3+ characters
        (r"\d+ errors?", False, (" error",)),
        (r"x{e<=1}yzzy", False, ()),  # fuzzy matching (regex module): no prefilter
        (r"\p{Lu}+Error: boom", False, ()),  # regex-only syntax
        (r"[A-Z]\w+Error", False, ("Error",)),
    ],
)
def test_derive_literals(pattern: str, ignore_case: bool, expected: tuple[str, ...]) -> None:
    assert derive_literals(pattern, ignore_case=ignore_case) == expected


_PIECES = st.sampled_from(["abc", "Error", r"\d+", r"\s*", "(?:foo|barbaz)", "(?P<g>xyz)?", "[a-c]", ".",
                           "(?:qq|rrr)+", r"\.", "(?i:HeLLo)"])


@settings(max_examples=150, deadline=None)
@given(st.lists(_PIECES, min_size=1, max_size=5), st.text(alphabet="abcxyzqrEo 0129.-HeLlofbz", max_size=12),
       st.booleans())
def test_derived_literals_never_hide_a_match(pieces: list[str], noise: str, ignore_case: bool) -> None:
    """Conservative: any line the regex matches contains one of the derived literals."""
    pattern = "".join(pieces)
    flags = regex.IGNORECASE if ignore_case else 0
    rx = regex.compile(pattern, flags)
    lits = derive_literals(pattern, ignore_case=ignore_case)
    # Build lines that match: noise around a generated match of the pattern.
    for sample in _examples(pattern):
        line = noise + sample + noise
        if lits and rx.search(line):
            hay = line.lower() if ignore_case else line
            assert any(lit in hay for lit in lits), (pattern, line, lits)


def _examples(pattern: str) -> list[str]:
    # Cheap generator of matching strings for the small vocabulary above.
    subs = {"\\d+": "7", "\\s*": " ", "(?:foo|barbaz)": "barbaz", "(?P<g>xyz)?": "", "[a-c]": "b", ".": "#",
            "(?:qq|rrr)+": "rrrqq", "\\.": ".", "(?i:HeLLo)": "hello"}
    out = pattern
    for k, v in subs.items():
        out = out.replace(k, v)
    return [out, out.upper(), out.lower()]
