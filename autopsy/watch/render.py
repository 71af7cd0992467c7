"""How ``autopsy watch`` shows what it sees: a one-line status, one line per warning, JSON events.

Everything that comes from the run (messages quoting log lines, paths) is escaped here:
control characters and escape sequences are removed from terminal lines, and JSON is
written with every non-ASCII character escaped.
"""

from __future__ import annotations

import json
from typing import Any

from autopsy.model import Finding
from autopsy.report.sanitize import strip_terminal, term_name, truncate, valid_utf8
from autopsy.units import fmt_duration
from autopsy.watch.watcher import WatchEvent, WatchStatus

STATUS_WIDTH = 160


def status_line(st: WatchStatus, run_name: str) -> str:
    """``exp42 · step 1,234/5,000 · 3.2 steps/s · disk fills at step ~9,000 in ~2h 10m · 2 warnings (worst: error)``."""
    parts = [term_name(run_name)]
    if st.step is None:
        parts.append("no step yet")
    else:
        parts.append(f"step {st.step:,}" + (f"/{st.max_steps:,}" if st.max_steps else ""))
    if st.steps_per_second:
        parts.append(f"{st.steps_per_second:.3g} steps/s")
    if st.idle_seconds is not None and st.idle_seconds >= 60:
        parts.append(f"no new step for {fmt_duration(st.idle_seconds)}")
    if st.forecast is not None:
        eta = f" in ~{fmt_duration(st.fill_seconds)}" if st.fill_seconds is not None else ""
        parts.append(f"disk fills at step ~{st.forecast.fill_step:,}{eta}")
    if st.warnings:
        parts.append(f"{st.warnings} warning{'s' if st.warnings != 1 else ''} (worst: {st.worst})")
    else:
        parts.append("no warnings")
    return truncate(" · ".join(parts), STATUS_WIDTH)


def finding_line(kind: str, f: Finding) -> str:
    """``[error] loss.nonfinite: loss became nan at step 6 ... (train.log:9)``, one line, escaped."""
    where = f" ({f.evidence[0].location()})" if f.evidence else ""
    label = "updated" if kind == "update" else str(f.severity)
    why = f" [explained by {f.explained_by}]" if f.explained_by else ""
    return strip_terminal(f"[{label}] {f.rule}: {f.message}{where}{why}", one_line=True)


def event_line(e: WatchEvent) -> str:
    if e.finding is not None:
        return finding_line(e.kind, e.finding)
    return strip_terminal(f"[{e.kind}] {e.text or ''}", one_line=True)


def json_line(obj: dict[str, Any]) -> str:
    """One JSON document on one line; strings from the run are escaped (ASCII only)."""
    return valid_utf8(json.dumps(obj, ensure_ascii=True, sort_keys=False, default=str), json_doc=True)


def status_dict(st: WatchStatus) -> dict[str, Any]:
    fc = st.forecast
    return {
        "step": st.step, "max_steps": st.max_steps,
        "steps_per_second": None if st.steps_per_second is None else round(st.steps_per_second, 4),
        "idle_seconds": None if st.idle_seconds is None else round(st.idle_seconds, 1),
        "forecast_fill_step": fc.fill_step if fc else None,
        "forecast_seconds": None if st.fill_seconds is None else round(st.fill_seconds, 1),
        "warnings": st.warnings, "worst": None if st.worst is None else str(st.worst),
        "logs": st.logs, "bytes_read": st.bytes_read, "polls": st.polls, "evaluations": st.evaluations,
    }
