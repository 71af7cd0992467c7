"""The parsers' own regexes are linear-time on a hostile line, not only the cards' (issue 14).

* Every module-level compiled pattern of ``autopsy/parsers`` passes the static check
  (:func:`autopsy.engine.regex_safety.regex_problems`) or is on ``ALLOWED`` with the reason it is
  safe all the same, of one of three kinds, each checked here as far as a test can:
  - ``anchored``: the parsers only ever ``match``/``fullmatch`` it (checked in the sources), and
    the static check passes it when the search's retry at every offset is left out;
  - ``bounded``: its callers apply it to a window of at most a few dozen bytes (stated);
  - ``measured``: the checker cannot prove it, and ``fuzz/parser_regex_timing.py`` measured it
    linear on its adversarial lines (the figures are in ``fuzz/README.md``).
  An entry whose pattern the check passes, or that no longer exists, fails as stale.
* A run whose log and launch script hold one crafted line for each pattern that was superlinear
  (each made an old form run for minutes or hours) is analysed through the real entry point,
  fully read. The analysis runs in a child process: its timeout is a hang guard only (the old
  forms ran past it), nothing here measures speed.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import autopsy.parsers
from autopsy.engine.regex_safety import regex_problems

_SOURCES = {m.name: Path(autopsy.parsers.__path__[0], f"{m.name}.py").read_text(encoding="utf-8")
            for m in pkgutil.iter_modules(autopsy.parsers.__path__)}


def _parser_patterns() -> dict[str, re.Pattern[str] | re.Pattern[bytes]]:
    """``module.NAME`` -> pattern, for every pattern a parser module assigns at module level."""
    out: dict[str, re.Pattern[str] | re.Pattern[bytes]] = {}
    for mod_name, src in sorted(_SOURCES.items()):
        mod = importlib.import_module(f"autopsy.parsers.{mod_name}")
        for name, obj in vars(mod).items():
            if isinstance(obj, re.Pattern) and re.search(rf"^{re.escape(name)}\s*(?::[^=\n]*)?=", src, re.M):
                out[f"{mod_name}.{name}"] = obj
    return out


_PATTERNS = _parser_patterns()
_MEASURED = "linear in fuzz/parser_regex_timing.py (fuzz/README.md)"
ALLOWED: dict[str, tuple[str, str]] = {
    "log_child_failures._SECTION": ("anchored", "leading \\s* then literals"),
    "log_child_failures._ROW": ("anchored", "leading \\s* then \\["),
    "log_child_failures._FIELD": ("anchored", "leading \\s* then field names"),
    "log_context._BAR_NODESC": ("anchored", "leading blanks then a percentage"),
    "log_text.KERAS_BAR": ("anchored", "leading \\s* then N/M"),
    "log_tracebacks._FRAME": ("anchored", "leading \\s*(?:>\\s*)? then File"),
    "log_tracebacks._NEW_RECORD": ("anchored", "one alternative starts with \\s*"),
    "ts_columns._OPENS": ("anchored", "\\s*\\{ at the array's start"),
    "ts_columns._CLOSES": ("anchored", "on the last 65 bytes of the array only (scan_history)"),
    "metric_values._RATE_UNIT": ("anchored", "fullmatch on one whitespace-free word of a key (clean_key)"),
    "log_series._EPOCHS_ONLY": ("anchored", "match on a bar's description; leading \\W* then literals"),
    "log_context._BAR_FAST": ("bounded", "searched in buf[max(s, q - 80):q + 5]: at most 85 bytes"),
    "log_fast._BAR_AT": ("bounded", "matched in buf[sb:q + 5] with q - sb <= _BAR_LOOKBACK (80): 85 bytes"),
    "log_text._KERAS_REDRAW": ("measured", "ANSI groups start with ESC, digits after: " + _MEASURED),
    "log_tracebacks._IPY_ARROW": ("measured", "' ?\\s*' splits a blank run two ways at most: " + _MEASURED),
    "log_tracebacks._FLAT_EXC": ("measured", "dotted-name iterations end at '.', one start per word: " + _MEASURED),
    "metric_reader._NUMBERS": ("measured", "a number's digits end it; one retry per digit run: " + _MEASURED),
    "metric_values._FILES": ("measured", "path segments end at '/', one start per run: " + _MEASURED),
    "metric_values._MASKS": ("measured", "its file alternative is _FILES: " + _MEASURED),
    "metric_values._CELL": ("measured", "key words are separated by blanks they cannot hold: " + _MEASURED),
}


def test_the_parsers_have_patterns_to_check() -> None:
    assert len(_PATTERNS) > 80


@pytest.mark.parametrize("key", sorted(_PATTERNS))
def test_every_parser_pattern_is_linear_by_construction_or_allowed(key: str) -> None:
    rx = _PATTERNS[key]
    icase = bool(rx.flags & re.IGNORECASE)
    problems = regex_problems(rx.pattern, ignore_case=icase)
    if not problems:
        assert key not in ALLOWED, f"{key}: the static check passes it now; drop it from ALLOWED"
        return
    assert key in ALLOWED, (f"{key}: {rx.pattern!r} can backtrack catastrophically on a hostile line: "
                            + "; ".join(problems) + " (rewrite it: possessive repeats, disjoint neighbours, a "
                            "guard against retries inside a run; or measure it and add it to ALLOWED with the reason)")
    kind, reason = ALLOWED[key]
    assert kind in ("anchored", "bounded", "measured") and reason
    if kind == "anchored":
        module, name = key.split(".")
        calls = set(re.findall(rf"\b{re.escape(name)}\.(\w+)\b", _SOURCES[module]))
        assert calls and calls <= {"match", "fullmatch"}, f"{key} is not only matched: {calls}"
        assert regex_problems(rx.pattern, ignore_case=icase, anchored=True) == [], key


def test_the_allowlist_names_existing_patterns() -> None:
    assert set(ALLOWED) <= set(_PATTERNS), set(ALLOWED) - set(_PATTERNS)


@pytest.mark.parametrize("rx", [
    r"ValueError: (?P<m>.*?)\s*$",  # a failing end anchor sends the engine back into the lazy repeat
    r"^\d+\.?\d*$",  # an optional separator between two digit repeats separates nothing
    r"step\s*[:=#]?\s*(\d+)",
])
def test_the_checker_sees_what_the_parsers_had(rx: str) -> None:
    assert regex_problems(rx), rx


@pytest.mark.parametrize("rx", [
    r"ValueError: (?P<m>(?:.*\S)?)\s*$",
    r"^\d+(?:\.\d*)?$",
    r"step\s*+(?:[:=#]\s*+)?(\d+)",
    r"(['\"])[^'\"]+\1\s*$",  # a backreference consumes what its group did, not anything
])
def test_the_checker_accepts_the_rewrites(rx: str) -> None:
    assert regex_problems(rx) == [], rx


N = 30_000  # each line below ran for minutes (most: hours) with the parser's old pattern


def _hostile_run(root: Path) -> Path:
    run = root / "run"
    run.mkdir()
    lines = [f"step {i} loss: {2.0 - i / 100:.3f} lr: 0.001" for i in range(1, 40)]
    lines += [
        " " * N + "x 5it/s",  # log_series._BAR: cubic on blanks
        "step 40 loss:" + " " * N + ":",  # _STEP_HEAD, _STEP_KV: blanks around a separator
        "loss 0.5 " + "a." * N + "!",  # metric_values._MASKS: a file name from every \b
        "lr 0.5 " + "0." * N + "!",  # metric_reader._CONFIG_LIKE: a key from every offset; _CELL, _PAIR digits
        "a: 0.5 | b: " + "0" * N + "x | c 1",  # _CELL: \d+\.?\d* split every way
        "*" * N + " loss 0.5",  # metric_values._SPLIT_CONTEXT: a star run from every star
        "loss: " + "a-" * N + "!",  # metric_values._PAIR: a key from every "-"
        "5/10 [00:01<00:01, 5.00it/s, a=" + "1a" * N + "]",  # log_series._POSTFIX_KV: a key from every letter
        "epoch" + " " * N + "x loss 0.5",  # metric_values._POSITION: three blank repeats
        "config" + " " * N + "x",  # metric_values._CONFIG_HEAD
        "Overriding: lr = x" + " " * N + "y",  # log_config._OVERRIDE: lazy value, blanks
        "Overriding config with cfg.py:",
        "lr = x" + " " * N + "y",  # log_config._ASSIGN
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in f' + " " * N + "x",  # log_tracebacks._FRAME: lazy function, blanks
        " " * N + "]",  # _FRAME: \s*>?\s* on blanks
        "ValueError: a" + " " * N + "b",
        'Traceback (most recent call last):  File "a.py", line 1, in f  ValueError: a' + " " * N + "b",  # _FLAT_EXC
        "FileNotFoundError: x" + " " * N + "y",  # the io.not_found card's file_not_found
    ]
    lines += [f"step {i} loss: {1.5 - i / 1000:.3f} lr: 0.001" for i in range(41, 60)]
    (run / "train.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    # launch_script._SBATCH: a lazy value then blanks (lines up to the 4,096-character cap)
    (run / "run.sh").write_text("#!/bin/bash\n" + ("#SBATCH --x a" + " " * 4000 + ":\n") * 16
                                + "python train.py --lr 0.1\n", encoding="utf-8")
    return run


def test_a_run_of_lines_built_against_the_parsers_patterns_is_analysed(tmp_path: Path) -> None:
    from conftest import REPO

    run = _hostile_run(tmp_path)
    code = ("import json, sys\nfrom autopsy.api import analyze_run\n"
            "report, r = analyze_run(sys.argv[1])\n"
            "log = next(s for s in r.logs if s.path == 'train.log')\n"
            "print(json.dumps([log.status.value, log.bytes_read, log.n_lines]))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600)  # hang guard only
    assert proc.returncode == 0, proc.stderr[-2000:]
    status, read, n_lines = json.loads(proc.stdout.strip().splitlines()[-1])
    text = (run / "train.log").read_text(encoding="utf-8")
    assert (status, read, n_lines) == ("ok", len(text.encode()), text.count("\n"))
