"""The cached built-in cards (autopsy.engine.card_cache): the full load's result exactly, never stale."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from autopsy.engine import card_cache as cc
from autopsy.engine import catalog_index as ci
from autopsy.engine import loader
from autopsy.parsers.log_match import compile_patterns
from autopsy.parsers.logs import scan_log
from autopsy.parsers.types import HitList, PatternSpec

REPO = Path(__file__).resolve().parent.parent

CARD = """id: team.my_rule
title: My rule
severity: error
confidence: high
status: stable
needs: [log]
docs: {summary: s, why: w, confirm: c, action: a, references: [r1, r2]}
params: {window_steps: 50, ratio: 1.5e-3, flag: true, names: [a, b], nested: {k: 1.0}}
match:
  any:
    - name: boom
      comment: our trainer
      regex: 'BOOM (?P<code>\\d+)'
samples:
  match: ['BOOM 12']
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("AUTOPSY_CACHE_DIR", str(d))
    monkeypatch.delenv("AUTOPSY_NO_CACHE", raising=False)
    monkeypatch.setattr(ci, "RACY_SECONDS", 0)  # files written by the test are seconds old at most
    return d


def _view(loaded: cc.Loaded) -> str:
    cards, errors = loaded
    return repr((cards, [(e.source, e.field, e.message, e.rule, str(e)) for e in errors]))


def _no_load(base: str) -> cc.Loaded:
    raise AssertionError("the full load ran although the cache was valid")


def test_builtin_cards_read_back_exactly(cache: Path) -> None:
    base = str(loader.builtin_rules_dir())
    full = loader._read_builtin(base)
    first = cc.cached_builtin(base, loader._read_builtin)
    assert Path(cc.cache_path(base) or "").is_file()
    served = cc.cached_builtin(base, _no_load)
    assert _view(served) == _view(first) == _view(full)  # down to tuple/list, int/float/bool
    assert all(card.builtin for card in served[0].values()) and len(served[0]) > 20


def test_edited_card_is_never_served_stale(tmp_path: Path, cache: Path) -> None:
    base = tmp_path / "rules"
    (base / "team").mkdir(parents=True)
    card = base / "team" / "my_rule.yaml"
    card.write_text(CARD)
    good = cc.cached_builtin(str(base), loader._read_builtin)
    assert list(good[0]) == ["team.my_rule"] and not good[1]
    assert good[0]["team.my_rule"].params["names"] == ["a", "b"]
    assert _view(cc.cached_builtin(str(base), _no_load)) == _view(good)
    before = card.stat()
    time.sleep(0.05)  # past the file system's timestamp tick
    card.write_text(CARD.replace("BOOM 12']", "bang 12']"))  # same size: a broken sample
    os.utime(card, ns=(before.st_atime_ns, before.st_mtime_ns))  # same mtime too: only ctime moved
    refused = cc.cached_builtin(str(base), loader._read_builtin)
    assert not refused[0] and "samples.match[0]" in str(refused[1][0])
    assert _view(cc.cached_builtin(str(base), _no_load)) == _view(refused)  # refusals are cached as they were


def test_values_json_cannot_hold_are_not_cached(tmp_path: Path, cache: Path) -> None:
    base = tmp_path / "rules"
    base.mkdir()
    (base / "team.my_rule.yaml").write_text(CARD.replace("ratio: 1.5e-3", "since: 2024-01-02"))  # a YAML date
    loaded = cc.cached_builtin(str(base), loader._read_builtin)
    assert str(loaded[0]["team.my_rule"].params["since"]) == "2024-01-02"
    assert not Path(cc.cache_path(str(base)) or "").exists()


def test_no_cache_and_bad_files(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = str(loader.builtin_rules_dir())
    monkeypatch.setenv("AUTOPSY_NO_CACHE", "1")
    assert _view(cc.cached_builtin(base, loader._read_builtin)) == _view(loader._read_builtin(base))
    assert not Path(cc.cache_path(base) or "").exists()
    monkeypatch.delenv("AUTOPSY_NO_CACHE")
    path = Path(cc.cache_path(base) or "")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x00garbage")
    assert _view(cc.cached_builtin(base, loader._read_builtin)) == _view(loader._read_builtin(base))
    assert json.loads(path.read_text())["key"]  # the damaged entry was replaced


def test_key_covers_this_module_and_the_engine(cache: Path) -> None:
    base = str(loader.builtin_rules_dir())
    key = cc._key(base)
    assert key is not None and key[0] == cc.CACHE_FORMAT
    names = {part[0] for part in key[1:] if isinstance(part, tuple)}
    assert {"card_cache.py", "loader.py", "schema.py", "literals.py", "regex", "yaml"} <= names


def test_lazily_compiled_builtin_patterns_find_the_same_hits(tmp_path: Path) -> None:
    """Built-in patterns compile on first use in the scanner; a user card's compile up front."""
    specs = loader.load_catalog(()).patterns()
    assert specs and not any(s.guarded for s in specs)
    compiled = compile_patterns(specs)
    assert not any("rx" in vars(p) for p in compiled.patterns)  # nothing compiled yet
    log = tmp_path / "train.log"
    log.write_text("step 1\nOSError: [Errno 28] No space left on device\nKilled\n")
    lazy = scan_log(log, "train.log", compiled, max_bytes=1 << 30, rank=None)
    eager = scan_log(log, "train.log", compile_patterns([replace(s, guarded=True) for s in specs]),
                     max_bytes=1 << 30, rank=None)
    assert lazy.hits and _hits(lazy.hits) == _hits(eager.hits)
    assert 0 < sum("rx" in vars(p) for p in compiled.patterns) < len(specs) // 4
    bad = compile_patterns([PatternSpec(key="team/x", regex="(unclosed")])
    assert "team/x" in bad.errors and not bad.patterns


def _hits(hits: dict[str, HitList]) -> dict[str, list[tuple[int, str]]]:
    return {k: [(h.lineno, h.text) for h in v.all_kept()] for k, v in hits.items()}
