"""Card regexes are linear-time by construction, and a hostile log cannot stall the scan.

* Every pattern of every built-in card passes :func:`autopsy.engine.regex_safety.regex_problems`
  (no nested quantifier, no ambiguous adjacent repeats, no unanchored leading repeat that the
  search's retries make quadratic). A card added with such a pattern fails here, naming it.
* The checker itself is tested on the textbook catastrophic shapes and on their safe rewrites,
  so it cannot pass by accepting everything.
* The scan's per-file regex budget: a log built so that a user card's pattern backtracks on
  every line is reported as partly searched instead of hanging (issue 14's first hang).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autopsy.engine.loader import load_catalog
from autopsy.engine.regex_safety import regex_problems
from autopsy.parsers.types import PatternSpec

_CATALOG = load_catalog(())
_SPECS = [(card.id, p.name, p.regex, p.ignore_case) for card in _CATALOG.cards.values() for p in card.patterns]


def test_the_catalog_has_patterns_to_check() -> None:
    assert len(_SPECS) > 100


@pytest.mark.parametrize(("rule", "name", "rx", "icase"), _SPECS, ids=[f"{r}/{n}" for r, n, _, _ in _SPECS])
def test_every_card_pattern_is_free_of_catastrophic_backtracking(rule: str, name: str, rx: str, icase: bool) -> None:
    problems = regex_problems(rx, ignore_case=icase)
    assert not problems, (f"{rule}/{name}: {rx!r} can backtrack catastrophically on a hostile line: "
                          + "; ".join(problems) + " (rewrite it: disjoint neighbours, a possessive "
                          "quantifier, an anchor or a lookbehind guard)")


@pytest.mark.parametrize("rx", [
    r"(a+)+$",  # the textbook exponential
    r"(?:\w+\s?)*:",  # words separated by optional spaces, then something that fails
    r"(?:x|x)*y",
    r"(?:[a-z]+\d*)+!",
    r"\d+\d*x",  # two adjacent repeats over the same digits
    r"error: .*:.*:.*X",  # each .* can give its colons to the next
    r"\s*Error",  # search() retries at every offset: quadratic on a line of spaces
    r"(?P<path>\S+) is not a local folder",
    r"NCCL error in: (?P<e>[^,\n]+?)(?:\s*$|\s*\()",  # lazy repeat then \s*: took 52 s on 20 KB
    r"\d+\d++x",  # a possessive repeat is re-run by every retry of the greedy one before it
])
def test_the_checker_refuses_catastrophic_shapes(rx: str) -> None:
    assert regex_problems(rx), rx


@pytest.mark.parametrize("rx", [
    r"CUDA out of memory\. Tried to allocate (?P<n>\d+(?:\.\d+)?) (?P<u>[KMGT]iB)",
    r"^\s*(?:[a-z_][a-z0-9_]*\.)+[A-Z]\w*Error: (?P<m>\S.*)$",  # every iteration ends at a dot
    r"^\s*File \"(?P<f>[^\"]+)\", line (?P<l>\d+)",  # anchored
    r"(?<!\S)(?P<path>\S+) is not a local folder",  # the guarded rewrite
    r"\b(?P<pid>\d+) Terminated\s+(?P<cmd>\S.*)$",  # \b before digits: no retry inside a number
    r"loss: (?P<v>[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)",
    r"Killed process (?P<pid>\d+) \((?P<name>[^)]+)\).*?anon-rss:(?P<rss>[\d,]+)kB",
    r"step (?P<s>\d+).*",  # a trailing .* never fails: nothing to backtrack for
])
def test_the_checker_accepts_linear_shapes(rx: str) -> None:
    assert regex_problems(rx) == [], rx


def test_a_pattern_re_cannot_parse_is_refused_as_uncheckable() -> None:
    assert "not checkable" in regex_problems(r"\p{L}+ error")[0]


def test_a_user_pattern_that_backtracks_on_every_line_spends_the_budget_not_the_night(tmp_path: Path) -> None:
    """Issue 14: tens of thousands of repeated characters then a near-miss, on many lines.

    A user card (unchecked) with a nested quantifier meets lines built to make it explode;
    the scan stops running regexes once the file's budget is spent and says the file was only
    partly searched; the scan itself returns (the test would hang otherwise).
    """
    from autopsy.parsers import log_match
    from autopsy.parsers.logs import compile_patterns, scan_log

    evil = "(?:a+)+b"
    compiled = compile_patterns([PatternSpec(key="user.evil/x", regex=evil, literals=("aaaa",), ignore_case=False)])
    log = tmp_path / "train.log"
    log.write_text(("a" * 5000 + "!\n") * 200 + "step 1 done\n")
    old = log_match.REGEX_BUDGET_S, log_match.REGEX_TIMEOUT_S
    log_match.REGEX_BUDGET_S, log_match.REGEX_TIMEOUT_S = 0.5, 0.05
    try:
        scan = scan_log(log, "train.log", compiled, max_bytes=1 << 30, rank=None)
    finally:
        log_match.REGEX_BUDGET_S, log_match.REGEX_TIMEOUT_S = old
    assert scan.note is not None and "regex budget" in scan.note, scan.note
    assert scan.status.value == "truncated"
    assert scan.bytes_read == log.stat().st_size  # the text was still read (series, tracebacks)


def test_only_user_card_patterns_are_timed_out(tmp_path: Path) -> None:
    """Built-in patterns (checked above) are searched without a timeout or budget, so a loaded
    machine cannot change their hits; a user card's pattern, even one overriding a built-in
    card, is unchecked and keeps both."""
    from autopsy.engine.loader import builtin_rules_dir

    assert all(not spec.guarded for spec in _CATALOG.patterns())
    base = builtin_rules_dir()
    assert base is not None
    (tmp_path / "crash").mkdir()
    (tmp_path / "crash" / "exception.yaml").write_text((base / "crash" / "exception.yaml").read_text())
    catalog = load_catalog((tmp_path,))
    assert catalog.overridden == ("crash.exception",)
    guarded = {spec.key.split("/")[0] for spec in catalog.patterns() if spec.guarded}
    assert guarded == {"crash.exception"}


def test_near_misses_of_every_built_in_literal_do_not_stall_the_scan(tmp_path: Path) -> None:
    """Issue 14's first hang as a reproduction, for every card rather than the one tried.

    The log holds the issue's line (``NCCL error in: x, y``, 20,000 spaces, then ``z``: 52 s
    per line with the card's old pattern, 17 minutes for the 20 lines here) twenty times, and,
    for each of the catalog's literals, the literal followed by 2,000 repeats of a space, a
    letter, a digit, a colon or ", " and a byte no pattern expects: each line passes the
    literal prefilter and sends the card's regexes into their longest repeat. This test found
    the metric reader's pair pattern quadratic on the issue's line (about 7 s a line, its
    separator ``\\s*(?:[:=]|\\s)\\s*``, now ``(?:\\s*[:=]\\s*|\\s+)``). The built-in
    patterns run without a timeout, so the scan runs in a child process whose ``timeout`` is
    only a hang guard (nothing here measures speed).
    """
    import json
    import os
    import subprocess
    import sys

    from conftest import REPO

    literals = sorted({lit for spec in _CATALOG.patterns() for lit in spec.literals})
    lines = ["NCCL error in: x, y" + " " * 20_000 + "z"] * 20
    lines += [lit + filler * 2000 + "\x01" for lit in literals for filler in (" ", "a", "0", ":", ", ")]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code = ("import json, sys\nfrom pathlib import Path\nfrom autopsy.engine.loader import load_catalog\n"
            "from autopsy.parsers.logs import compile_patterns, scan_log\n"
            "c = compile_patterns(load_catalog(()).patterns())\n"
            "s = scan_log(Path(sys.argv[1]), 'train.log', c, max_bytes=1 << 40, rank=None)\n"
            "print(json.dumps([s.status.value, s.bytes_read, s.n_lines, s.note]))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600)  # hang guard only
    assert proc.returncode == 0, proc.stderr[-2000:]
    status, read, n_lines, note = json.loads(proc.stdout)
    assert len(literals) > 200
    assert (status, read, n_lines) == ("ok", log.stat().st_size, len(lines)), note
