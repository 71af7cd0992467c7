"""Pass rate of autopsy on a directory of labelled logs (a staging batch or fixtures/corpus).

    python scripts/corpus_rate.py /work/staging/crash/batch01            # its expected.yaml
    python scripts/corpus_rate.py fixtures/corpus fixtures/corpus_expected.yaml -v

It analyses with the autopsy code and cards of the checkout it sits in (its own root goes first on
``sys.path``; ``PYTHONPATH`` cannot point it elsewhere). To compare two revisions, run each one's own
copy of this script on the same labels, e.g. from ``git worktree add --detach /tmp/old REV``:
``cd /tmp/old && python scripts/corpus_rate.py /abs/fixtures/corpus /abs/fixtures/corpus_expected.yaml -v``.

An entry passes when the report's primary rule is the labelled one and every ``fires`` /
``not_fires`` holds: the same test as tests/test_corpus.py, so a batch's rate measured here is
the rate the test suite will see once the batch is adopted. ``todo`` labels are ignored (the
label, not the known miss, is what is measured). A *false alarm* is a benign entry (labelled
primary null) that got a primary finding, or a benign entry on which a ``not_fires`` rule fired.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autopsy.api import analyze
from autopsy.run import LoadOptions

POSTED_AFTER_S = 86400.0


def posted_now(entry: Path) -> float:
    """The analysis time of an entry: a day after its newest file was written. A log posted in a thread
    or committed to a repository is of a run that was over when it was posted; the files' mtimes are
    those of the checkout, so without this a run whose only clock is its files' mtimes would read as
    "may still be running" for the first half hour after every checkout (the same in tests/test_corpus.py)."""
    return max((p.stat().st_mtime for p in entry.rglob("*") if p.is_file()), default=0.0) + POSTED_AFTER_S


def judge(entry: Path, exp: dict[str, Any]) -> tuple[bool, str, list[str]]:
    report = analyze(entry, options=LoadOptions(now=posted_now(entry)))
    fired = sorted({f.rule for f in report.findings})
    primary = report.primary.rule if report.primary is not None else None
    problems = []
    if primary != exp.get("primary"):
        problems.append(f"primary {primary} (want {exp.get('primary')})")
    problems += [f"{r} did not fire" for r in exp.get("fires") or () if r not in fired]
    problems += [f"{r} fired" for r in exp.get("not_fires") or () if r in fired]
    return not problems, "; ".join(problems), fired


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="directory holding one run directory per entry")
    ap.add_argument("expected", type=Path, nargs="?", help="expectations file (default ROOT/expected.yaml)")
    ap.add_argument("-v", "--verbose", action="store_true", help="list passing entries too")
    args = ap.parse_args(argv)
    expected = yaml.safe_load((args.expected or args.root / "expected.yaml").read_text(encoding="utf-8")) or {}
    n = passed = benign = false_alarms = 0
    for name, exp in sorted(expected.items()):
        entry = args.root / name
        if not entry.is_dir():
            print(f"MISSING  {name}")
            continue
        ok, why, fired = judge(entry, exp)
        n += 1
        passed += ok
        if exp.get("primary") is None:
            benign += 1
            false_alarms += not ok
        if not ok or args.verbose:
            print(f"{'pass' if ok else 'FAIL'}     {name}: {why or 'ok'}  [fired: {', '.join(fired) or '-'}]")
    rate = 100.0 * passed / n if n else 0.0
    print(f"{passed}/{n} pass ({rate:.0f}%); false alarms on benign entries: {false_alarms}/{benign}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
