"""The light catalog index behind ``rules list``/``explain``: same content as the full load, never stale."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from autopsy.cli import main
from autopsy.engine import catalog_index as ci
from autopsy.engine.loader import card_summary, load_catalog

REPO = Path(__file__).resolve().parent.parent

GOOD_CARD = """id: team.my_rule
title: My rule
severity: error
confidence: high
status: stable
needs: [log]
docs: {summary: s, why: w, confirm: c, action: a}
params: {window_steps: 50, ratio: 1.5e-3, names: [a, b]}
match:
  any:
    - name: boom
      comment: our trainer
      regex: 'BOOM (?P<code>\\d+)'
samples:
  match: ['BOOM 12']
"""
BROKEN_SAMPLE = GOOD_CARD.replace("BOOM 12']", "bang 12']")  # same length: a size-preserving edit


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("AUTOPSY_CACHE_DIR", str(d))
    monkeypatch.delenv("AUTOPSY_NO_CACHE", raising=False)
    monkeypatch.setattr(ci, "RACY_SECONDS", 0)  # files written by the test are seconds old at most
    return d


def _team_index(base: Path, path: Path) -> ci.CatalogIndex:
    return ci.cached_index(str(base), lambda: ci.CatalogIndex.from_catalog(load_catalog([base], builtin=False)),
                           str(path))


def test_index_matches_the_full_load() -> None:
    full = load_catalog(())
    index = ci.builtin_index(use_cache=False)
    assert list(index.cards) == list(full.cards)
    for cid, card in full.cards.items():
        info = index.cards[cid]
        assert info.summary() == card_summary(card)
        assert (info.title, info.severity, info.confidence, info.needs, info.aliases) == (
            card.title, str(card.severity), str(card.confidence), card.needs, card.aliases)
        assert (dict(info.docs), dict(info.params), info.source) == (dict(card.docs), dict(card.params), card.source)
    assert index.errors == tuple(str(e) for e in full.errors)
    assert index.aliases == full.aliases
    for alias, target in full.aliases.items():
        assert index.get(alias) is index.cards[target]


def test_served_from_cache_without_loading(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = ci.builtin_index()
    assert Path(ci.cache_path() or "").is_file()

    def no_full_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("the full load ran although the cache was valid")

    monkeypatch.setattr("autopsy.engine.loader.load_catalog", no_full_load)
    again = ci.builtin_index()
    assert again.to_data() == first.to_data()


def test_edited_card_is_never_served_stale(tmp_path: Path, cache: Path) -> None:
    base = tmp_path / "rules"
    (base / "team").mkdir(parents=True)
    card = base / "team" / "my_rule.yaml"
    card.write_text(GOOD_CARD)
    path = cache / "team.json"
    good = _team_index(base, path)
    assert list(good.cards) == ["team.my_rule"] and not good.errors and path.is_file()
    assert good.cards["team.my_rule"].params == {"window_steps": 50, "ratio": 1.5e-3, "names": ["a", "b"]}
    before = card.stat()
    time.sleep(0.05)  # past the file system's timestamp tick
    card.write_text(BROKEN_SAMPLE)
    os.utime(card, ns=(before.st_atime_ns, before.st_mtime_ns))  # same size, same mtime: only ctime moved
    refused = _team_index(base, path)
    assert not refused.cards and "samples.match[0]" in refused.errors[0]
    (base / "team" / "other.yaml").write_text(GOOD_CARD.replace("my_rule", "other"))
    assert list(_team_index(base, path).cards) == ["team.other"]  # a new file is a new key too


def test_recently_changed_files_are_not_cached(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ci, "RACY_SECONDS", 60)
    base = tmp_path / "rules"
    base.mkdir()
    (base / "team.my_rule.yaml").write_text(GOOD_CARD)
    path = cache / "team.json"
    assert list(_team_index(base, path).cards) == ["team.my_rule"]
    assert not path.exists()


@pytest.mark.parametrize("damage", ["corrupt", "unwritable"])
def test_bad_cache_file_is_only_a_miss(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch,
                                       damage: str) -> None:
    if damage == "corrupt":
        cache.mkdir()
        Path(ci.cache_path() or "").write_bytes(b"\x00garbage")
    else:
        blocker = tmp_path / "a_file"
        blocker.write_text("not a directory")
        monkeypatch.setenv("AUTOPSY_CACHE_DIR", str(blocker / "cache"))
    assert ci.builtin_index().to_data() == ci.builtin_index(use_cache=False).to_data()


@pytest.mark.parametrize("args", [["rules", "list"], ["rules", "list", "--json"], ["rules", "explain", "oom.cuda"],
                                  ["rules", "explain", "disk.full"]])
def test_cli_output_same_cached_or_not(cache: Path, args: list[str]) -> None:
    runner = CliRunner()
    cold = runner.invoke(main, args, env={"AUTOPSY_NO_CACHE": "1"}, catch_exceptions=False)
    runner.invoke(main, args, catch_exceptions=False)  # fills the cache
    warm = runner.invoke(main, args, catch_exceptions=False)
    assert Path(ci.cache_path() or "").is_file()
    assert (warm.exit_code, warm.output) == (cold.exit_code, cold.output) and cold.exit_code == 0
    if "--json" in args:
        assert [json.loads(line)["id"] for line in warm.output.splitlines()] == sorted(load_catalog(()).cards)


def _imported(args: list[str], env: dict[str, str]) -> set[str]:
    code = ("import runpy, sys\nsys.argv = ['autopsy', *sys.argv[1:]]\ntry:\n"
            "    runpy.run_module('autopsy', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write(repr(sorted(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})
    return set(ast.literal_eval(proc.stderr.splitlines()[-1]))


HEAVY = ("regex", "yaml", "jinja2", "pandas", "numpy", "autopsy.model", "autopsy.engine.loader", "importlib.metadata",
         "click.testing", "click.shell_completion", "dataclasses", "hashlib", "pathlib")


def test_help_and_warm_rules_list_import_nothing_heavy(cache: Path) -> None:
    env = {"AUTOPSY_CACHE_DIR": str(cache)}
    assert not set(HEAVY) & _imported(["--help"], env)
    ci.builtin_index()  # warm the cache (this process's files are old enough: RACY_SECONDS is 0 here)
    assert not set(HEAVY) & _imported(["rules", "list"], env)
    assert not set(HEAVY) & _imported(["rules", "explain", "oom.cuda"], env)


# ------------------------------------------------------------------ cached top-level --help


def _help(env: dict[str, str], *, probe: bool = False) -> tuple[str, set[str]]:
    """``autopsy --help`` as a fresh process: its output, and (probe) the modules it imported."""
    code = ("import runpy, sys\nsys.argv = ['autopsy', '--help']\ntry:\n"
            "    runpy.run_module('autopsy', run_name='__main__')\nexcept SystemExit as e:\n"
            "    assert e.code in (0, None), e.code\n"
            + ("sys.stderr.write(repr(sorted(sys.modules)))" if probe else ""))
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, set(ast.literal_eval(proc.stderr.splitlines()[-1])) if probe else set()


def test_cached_help_is_clicks_own_text_and_skips_click(cache: Path) -> None:
    env = {"AUTOPSY_CACHE_DIR": str(cache), "COLUMNS": "100"}
    reference, _ = _help({**env, "AUTOPSY_NO_CACHE": "1"})
    assert reference.startswith("Usage: autopsy [OPTIONS] COMMAND [ARGS]...")
    first, _ = _help(env)
    if not list(cache.glob("help-*.txt")):  # the CLI sources changed in the last seconds: not stored yet
        time.sleep(ci.RACY_SECONDS + 0.1)
        first, _ = _help(env)
    assert first == reference and len(list(cache.glob("help-*.txt"))) == 1
    served, modules = _help(env, probe=True)
    assert served == reference and "click" not in modules
    narrow, modules = _help({**env, "COLUMNS": "60"}, probe=True)  # another width: another key, click renders
    assert "click" in modules and narrow != reference
    assert narrow == _help({**env, "COLUMNS": "60", "AUTOPSY_NO_CACHE": "1"})[0]


def test_help_key_follows_the_cli_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import autopsy.__main__ as entry

    for name in entry._SOURCES:
        (tmp_path / name).write_text("# a copy\n")
    monkeypatch.setattr(entry, "_HERE", str(tmp_path))
    key = entry.help_key(["--help"])
    assert key is not None and entry.help_key(["--help"]) == key
    assert entry.help_key(["-h"]) != key
    time.sleep(0.05)
    (tmp_path / "cli.py").write_text("# edited\n")  # same size
    assert entry.help_key(["--help"]) != key
    (tmp_path / "cli.py").unlink()
    assert entry.help_key(["--help"]) is None  # a source that cannot be stat'ed: no cache at all
