"""DataFrames for notebooks: one row per finding (``report_to_frame``), many runs at once.

pandas is imported inside the functions so that ``import autopsy`` stays light.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from autopsy.model import Finding, Report
from autopsy.report.common import ordered_findings

if TYPE_CHECKING:
    import pandas as pd

FRAME_COLUMNS = ("run", "rule", "severity", "confidence", "primary", "title", "message", "explained_by",
                 "step", "wall_time", "location", "excerpt", "n_evidence", "facts", "fingerprint")


def _row(report: Report, f: Finding | None) -> dict[str, Any]:
    if f is None:
        return {c: None for c in FRAME_COLUMNS} | {"run": report.run.path, "primary": False, "n_evidence": 0,
                                                     "facts": {}}
    ev = f.evidence[0] if f.evidence else None
    return {
        "run": report.run.path, "rule": f.rule, "severity": str(f.severity), "confidence": str(f.confidence),
        "primary": f.primary, "title": f.title, "message": f.message, "explained_by": f.explained_by,
        "step": f.step, "wall_time": f.wall_time, "location": ev.location() if ev else None,
        "excerpt": ev.excerpt if ev else None, "n_evidence": len(f.evidence), "facts": dict(f.facts),
        "fingerprint": f.fingerprint,
    }


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    df = pd.DataFrame(rows, columns=list(FRAME_COLUMNS))
    df["step"] = df["step"].astype("Int64")
    df["n_evidence"] = df["n_evidence"].astype("int64")
    df["wall_time"] = df["wall_time"].astype("float64")
    df["primary"] = df["primary"].astype(bool)
    return df


def report_to_frame(report: Report) -> pd.DataFrame:
    """One row per finding, primary first; ``facts`` holds the typed facts as a dict."""
    return _frame([_row(report, f) for f in ordered_findings(report)])


def reports_to_frame(reports: Iterable[Report]) -> pd.DataFrame:
    """Many runs: one row per run and finding; a run with no finding keeps one row (rule = None)."""
    rows = []
    for r in reports:
        found = ordered_findings(r)
        rows += [_row(r, f) for f in found] if found else [_row(r, None)]
    return _frame(rows)
