"""Accepted findings: a baseline file, like a linter's, so that CI fails only on new failures.

A baseline lists findings by fingerprint (``Finding.fingerprint``: the rule and the failure's
normalised identity, never a line number, a time or the run's name), so a known failure is
recognised again in tomorrow's run directory. :func:`apply_baseline` moves the report's
findings whose fingerprint is listed into ``Report.accepted`` and records the file in
``Report.baseline``: accepted findings no longer count for ``--fail-on``, the verdict and the
ISSUES log; every renderer lists them as accepted (SARIF: ``baselineState: unchanged`` with an
external suppression, the others ``new``; JUnit: a skipped case of type ``accepted``).

The file is JSON, written sorted so that it diffs well in review::

    {"kind": "autopsy.baseline", "version": 1,
     "findings": [{"fingerprint": "oom.host:1a2b3c4d5e6f", "rule": "oom.host",
                   "severity": "critical", "message": "...", "run": "exp42"}]}

Only ``fingerprint`` decides; the other fields say what was accepted, for the reviewer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autopsy.fileio import read_capped
from autopsy.model import Finding, Report

BASELINE_KIND = "autopsy.baseline"
BASELINE_VERSION = 1
MAX_BASELINE_BYTES = 16 << 20


class BaselineError(Exception):
    """A baseline file that cannot be used; the message names the file."""


@dataclass(frozen=True)
class Baseline:
    """The accepted findings of a baseline file, by fingerprint (entry as read)."""

    entries: dict[str, dict[str, Any]]
    source: str = ""  # the file it was read from, as given

    @property
    def fingerprints(self) -> frozenset[str]:
        return frozenset(self.entries)


def load_baseline(path: str | os.PathLike[str]) -> Baseline:
    """Read a baseline file; :class:`BaselineError` when it is missing, too large or not one."""
    p = Path(path)
    try:
        raw, over = read_capped(p, MAX_BASELINE_BYTES)
    except FileNotFoundError:
        raise BaselineError(f"{p}: no such baseline file (write one with --update-baseline)") from None
    except OSError as exc:
        raise BaselineError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if over:
        raise BaselineError(f"{p}: larger than {MAX_BASELINE_BYTES} bytes; not a baseline")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BaselineError(f"{p}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("kind") != BASELINE_KIND:
        raise BaselineError(f"{p}: not an autopsy baseline (no \"kind\": \"{BASELINE_KIND}\")")
    if data.get("version") != BASELINE_VERSION:
        raise BaselineError(f"{p}: baseline version {data.get('version')!r}; this autopsy reads {BASELINE_VERSION}")
    items = data.get("findings")
    if not isinstance(items, list):
        raise BaselineError(f"{p}: \"findings\" must be a list")
    entries: dict[str, dict[str, Any]] = {}
    for i, item in enumerate(items):
        fp = item.get("fingerprint") if isinstance(item, dict) else None
        if not isinstance(fp, str) or ":" not in fp:
            raise BaselineError(f"{p}: findings[{i}] has no fingerprint (rule:hash)")
        entries[fp] = item
    return Baseline(entries, source=str(path))


def apply_baseline(report: Report, baseline: Baseline) -> Report:
    """The report with the findings the baseline accepts moved to ``accepted``.

    When the primary finding is accepted, the next finding that is not explained by an
    accepted one becomes primary (it is the first new failure); findings it explains keep
    their link.
    """
    known = baseline.fingerprints
    accepted = tuple(f for f in report.findings if f.fingerprint in known)
    compared = baseline.source or "baseline"
    if not accepted:
        return replace(report, baseline=compared)
    kept = [f for f in report.findings if f.fingerprint not in known]
    if kept and not any(f.primary for f in kept):
        from autopsy.report.common import finding_sort_key

        gone = {f.rule for f in accepted}
        lead = min(kept, key=lambda f: (f.explained_by in gone, finding_sort_key(f)))
        kept = [replace(f, primary=True) if f is lead else f for f in kept]
    fix = report.fix
    if fix is not None and fix.rule in {f.rule for f in accepted}:
        fix = None  # it was the fix for an accepted failure; renderers compute the new primary's
    return replace(report, findings=tuple(kept), accepted=report.accepted + accepted, fix=fix, baseline=compared)


def entry(f: Finding, run: str) -> dict[str, Any]:
    return {"fingerprint": f.fingerprint, "rule": f.rule, "severity": str(f.severity), "message": f.message,
            "run": run}


def updated_baseline(reports: Iterable[Report], existing: Baseline | None = None) -> tuple[str, int, int]:
    """(the baseline text holding ``existing``'s entries and every finding of ``reports``,
    entries added, entries kept). Nothing is dropped: a failure fixed in one run may still be
    accepted for another; remove an entry by deleting its lines."""
    entries = dict(existing.entries) if existing is not None else {}
    kept = len(entries)
    added = 0
    for r in reports:
        run = os.path.basename(os.path.normpath(r.run.path)) or r.run.path
        for f in (*r.findings, *r.accepted):
            if f.fingerprint not in entries:
                entries[f.fingerprint] = entry(f, run)
                added += 1
    data = {"kind": BASELINE_KIND, "version": BASELINE_VERSION,
            "findings": [entries[k] for k in sorted(entries)]}
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n", added, kept
