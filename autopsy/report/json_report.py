"""The JSON report (schema ``autopsy/schema/report.schema.json``, documented in docs/json-schema.md).

``report_to_dict`` gives a plain dict with a fixed key order (so CI diffs stay quiet),
findings primary first. ``report_from_dict`` rebuilds a :class:`~autopsy.model.Report`
from it so that ``autopsy report saved.json --format md`` can re-render without the run.

JSON has no NaN or infinity: non-finite floats in facts are written as the strings
``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` and read back as floats.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from autopsy.model import (
    Artifact,
    ArtifactKind,
    Confidence,
    Evidence,
    Finding,
    Fix,
    Outcome,
    OutcomeKind,
    ParseStatus,
    Report,
    ResumePlan,
    RunSummary,
    Severity,
)
from autopsy.report.common import finding_sort_key, ordered_findings, verdict_finding

SCHEMA_VERSION = 1
_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_RUN_FIELDS = ("path", "last_step", "max_steps", "started", "ended", "latest_valid_checkpoint",
               "latest_valid_step", "steps_lost", "seconds_lost", "resume_hint", "failure_time",
               "failure_time_source", "disk_at_analysis")
_RESUME_FIELDS = ("cwd", "checkpoint", "command", "script", "option", "verified", "source", "note")
_EVIDENCE_FIELDS = ("path", "line", "line_end", "excerpt", "tag", "step", "step_end", "detail", "rank")


class ReportFormatError(ValueError):
    """A saved report that is not an autopsy JSON report (or of a newer schema)."""


def _jsonable(v: Any) -> Any:
    """Facts keep their types; only what JSON cannot hold is converted."""
    if v is None or isinstance(v, (bool, str, int)):
        return v
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return v
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, (list, tuple, set, frozenset)):
        items = sorted(v, key=str) if isinstance(v, (set, frozenset)) else v
        return [_jsonable(x) for x in items]
    item = getattr(v, "item", None)  # numpy / pandas scalars
    if callable(item):
        try:
            return _jsonable(item())
        except (TypeError, ValueError):
            pass
    return str(v)


def _from_json_value(v: Any) -> Any:
    if isinstance(v, str) and v in _NONFINITE:
        return _NONFINITE[v]
    if isinstance(v, dict):
        return {k: _from_json_value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_from_json_value(x) for x in v]
    return v


def _num(v: float | None) -> float | None:
    return v if v is None or math.isfinite(v) else None


def _run_value(v: Any) -> Any:
    return _num(v) if isinstance(v, float) else _jsonable(v)


def finding_to_dict(f: Finding) -> dict[str, Any]:
    return {
        "rule": f.rule,
        "severity": str(f.severity),
        "confidence": str(f.confidence),
        "primary": f.primary,
        "title": f.title,
        "message": f.message,
        "explained_by": f.explained_by,
        "step": f.step,
        "wall_time": _num(f.wall_time),
        "evidence": [{k: _jsonable(v) for k, v in e.to_dict().items()} for e in f.evidence],
        "facts": _jsonable(f.facts),
        "key": f.key,
        "fingerprint": f.fingerprint,
    }


def report_to_dict(report: Report) -> dict[str, Any]:
    """The report as plain data in the documented schema, primary finding first."""
    run = report.run
    top = verdict_finding(report)
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "autopsy_version": report.autopsy_version,
        "run": {name: _run_value(getattr(run, name)) for name in _RUN_FIELDS}
        # optional, absent when empty: older reports and readers keep their shape
        | ({"poisoned_checkpoints": list(run.poisoned_checkpoints)} if run.poisoned_checkpoints else {})
        | ({"resume": {k: getattr(run.resume, k) for k in _RESUME_FIELDS}} if run.resume is not None else {}),
        "verdict": None if top is None else {
            "rule": top.rule, "severity": str(top.severity), "message": top.message,
            "step": top.step,
            "wall_time": _num(top.wall_time if top.wall_time is not None or not top.primary else run.failure_time),
        },
        "findings": [finding_to_dict(f) for f in ordered_findings(report)],
        "not_evaluated": [{"rule": o.rule, "reason": o.reason or ""}
                          for o in sorted(report.not_evaluated, key=lambda o: o.rule)],
        "rule_errors": [{"rule": o.rule, "reason": o.reason or ""}
                        for o in sorted(report.rule_errors, key=lambda o: o.rule)],
        "outcomes": [{"rule": o.rule, "outcome": str(o.kind)}
                     for o in sorted(report.outcomes, key=lambda o: (o.rule, str(o.kind)))],
        "artifacts": [
            {"path": a.path, "kind": str(a.kind), "size": a.size, "mtime": _num(a.mtime),
             "status": str(a.status), "note": a.note, "rank": a.rank, "detail": a.detail}
            for a in sorted(report.artifacts, key=lambda a: a.path)
        ],
        "problems": sorted(report.problems),
    }
    if report.fix is not None:  # optional: the fix for the verdict's root cause (docs/json-schema.md)
        out["fix"] = {"rule": report.fix.rule, "steps": list(report.fix.steps), "resume": report.fix.resume,
                      "action": report.fix.action}
    if report.accepted:  # optional: findings a baseline accepted (docs/json-schema.md)
        out["accepted"] = [finding_to_dict(f) for f in sorted(report.accepted, key=finding_sort_key)]
    if report.baseline is not None:  # optional: the baseline file the findings were compared with
        out["baseline"] = report.baseline
    if report.series is not None:  # optional: display data for re-rendering charts (docs/json-schema.md)
        out["series"] = _jsonable(report.series)
    return out


def report_to_json(report: Report, indent: int | None = 2) -> str:
    """JSON text with a fixed key order; ``indent=None`` gives one line (for JSON Lines)."""
    separators = (",", ":") if indent is None else (",", ": ")
    return json.dumps(report_to_dict(report), indent=indent, ensure_ascii=False,
                      allow_nan=False, separators=separators)


def reports_to_jsonl(reports: Iterable[Report]) -> str:
    return "".join(report_to_json(r, indent=None) + "\n" for r in reports)


# ------------------------------------------------------------------------- reading


def _enum(cls: Any, value: Any, what: str) -> Any:
    try:
        return cls.parse(value) if hasattr(cls, "parse") else cls(value)
    except (ValueError, KeyError, AttributeError):
        raise ReportFormatError(f"bad {what}: {value!r}") from None


def _finding_from_dict(d: Mapping[str, Any]) -> Finding:
    evidence = tuple(
        Evidence(**{k: e[k] for k in _EVIDENCE_FIELDS if k in e}) for e in d.get("evidence") or ()
    )
    return Finding(
        rule=str(d["rule"]),
        severity=_enum(Severity, d["severity"], "severity"),
        confidence=_enum(Confidence, d.get("confidence", "medium"), "confidence"),
        title=str(d.get("title") or d["rule"]),
        message=str(d.get("message") or ""),
        facts=_from_json_value(dict(d.get("facts") or {})),
        evidence=evidence,
        key=str(d.get("key") or ""),
        primary=bool(d.get("primary", False)),
        explained_by=d.get("explained_by"),
        step=d.get("step"),
        wall_time=d.get("wall_time"),
    )


def report_from_dict(data: Mapping[str, Any]) -> Report:
    """Rebuild a Report from ``report_to_dict`` output (a saved ``--format json`` report).

    Raises :class:`ReportFormatError` for anything that is not such a report, including a
    report written by a newer autopsy with a higher ``schema_version``.
    """
    if not isinstance(data, Mapping) or "schema_version" not in data or "run" not in data:
        raise ReportFormatError("not an autopsy JSON report (no schema_version/run)")
    version = data["schema_version"]
    if not isinstance(version, int) or version > SCHEMA_VERSION or version < 1:
        raise ReportFormatError(f"unsupported schema_version {version!r} (this autopsy reads 1..{SCHEMA_VERSION})")
    try:
        run_d = data["run"]
        resume = run_d.get("resume")
        run = RunSummary(**{k: run_d.get(k) for k in _RUN_FIELDS if k != "path"}, path=str(run_d["path"]),
                         poisoned_checkpoints=tuple(str(p) for p in run_d.get("poisoned_checkpoints") or ()),
                         resume=_resume_from_dict(resume))
        findings = tuple(_finding_from_dict(f) for f in data.get("findings") or ())
        by_rule: dict[str, list[Finding]] = {}
        for f in findings:
            by_rule.setdefault(f.rule, []).append(f)
        reasons = {o["rule"]: o.get("reason") for o in (data.get("not_evaluated") or [])}
        reasons.update({o["rule"]: o.get("reason") for o in (data.get("rule_errors") or [])})
        outcomes = []
        for o in data.get("outcomes") or ():
            kind = _enum(OutcomeKind, o["outcome"], "outcome")
            outcomes.append(Outcome(
                rule=o["rule"], kind=kind,
                findings=tuple(by_rule.get(o["rule"], ())) if kind is OutcomeKind.FIRED else (),
                reason=reasons.get(o["rule"]) if kind in (OutcomeKind.NOT_EVALUATED, OutcomeKind.RULE_ERROR) else None,
            ))
        if not outcomes:  # an older or hand-written report: keep what it says
            outcomes = [Outcome(r, OutcomeKind.NOT_EVALUATED, reason=t) for r, t in
                        ((o["rule"], o.get("reason")) for o in data.get("not_evaluated") or ())]
            outcomes += [Outcome(r, OutcomeKind.RULE_ERROR, reason=t) for r, t in
                         ((o["rule"], o.get("reason")) for o in data.get("rule_errors") or ())]
        artifacts = tuple(
            Artifact(path=a["path"], kind=_enum(ArtifactKind, a.get("kind", "other"), "artifact kind"),
                     size=int(a.get("size") or 0), mtime=float(a.get("mtime") or 0.0),
                     status=_enum(ParseStatus, a.get("status", "ok"), "artifact status"),
                     note=a.get("note"), rank=a.get("rank"), detail=a.get("detail"))
            for a in data.get("artifacts") or ()
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ReportFormatError(f"malformed report: {exc!r}") from None
    series = data.get("series")
    fix_d = data.get("fix")
    fix = Fix(rule=str(fix_d["rule"]), steps=tuple(str(x) for x in fix_d.get("steps") or ()),
              resume=fix_d.get("resume") if isinstance(fix_d.get("resume"), str) else None,
              action=fix_d.get("action") if isinstance(fix_d.get("action"), str) else None) \
        if isinstance(fix_d, Mapping) and isinstance(fix_d.get("rule"), str) else None
    try:
        accepted = tuple(_finding_from_dict(f) for f in data.get("accepted") or ())
    except (KeyError, TypeError, AttributeError) as exc:
        raise ReportFormatError(f"malformed report: {exc!r}") from None
    baseline = data.get("baseline")
    return Report(run=run, findings=findings, outcomes=tuple(outcomes), artifacts=artifacts, accepted=accepted,
                  baseline=baseline if isinstance(baseline, str) else None,
                  problems=tuple(str(p) for p in data.get("problems") or ()),
                  autopsy_version=str(data.get("autopsy_version") or ""),
                  series=_from_json_value(dict(series)) if isinstance(series, Mapping) else None, fix=fix)


def _resume_from_dict(d: Any) -> ResumePlan | None:
    if not isinstance(d, Mapping) or not isinstance(d.get("cwd"), str):
        return None

    def text(k: str) -> str | None:
        v = d.get(k)
        return v if isinstance(v, str) else None

    return ResumePlan(cwd=d["cwd"], checkpoint=text("checkpoint"), command=text("command"), script=text("script"),
                      option=text("option"), verified=d.get("verified") is True, source=text("source"),
                      note=text("note"))


MAX_SAVED_DEPTH = 64  # a report autopsy writes nests about 8 deep
MAX_SAVED_VALUES = 2_000_000  # a report of a large run holds tens of thousands


def _depth_ok(data: Any) -> bool:
    """Whether no container nests deeper than :data:`MAX_SAVED_DEPTH` (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        obj, depth = stack.pop()
        if depth > MAX_SAVED_DEPTH:
            return False
        if isinstance(obj, dict):
            stack.extend((v, depth + 1) for v in obj.values() if isinstance(v, (dict, list)))
        elif isinstance(obj, list):
            stack.extend((v, depth + 1) for v in obj if isinstance(v, (dict, list)))
    return True


def reports_from_text(text: str) -> list[Report]:
    """Read a saved report: one JSON object, a JSON array of them, or JSON Lines.

    Hostile input is a :class:`ReportFormatError`, never a crash: nesting deeper than
    :data:`MAX_SAVED_DEPTH`, more than :data:`MAX_SAVED_VALUES` values, numbers out of range,
    fields of the wrong type.
    """
    stripped = text.strip()
    if not stripped:
        raise ReportFormatError("empty file")
    # Each JSON value costs 30-60 bytes of Python objects for 2-3 bytes of text ("[]," is a
    # list): a 31 MB file of them took 1.6 GB. Commas and openers bound the value count.
    values = stripped.count(",") + stripped.count("[") + stripped.count("{")
    if values > MAX_SAVED_VALUES:
        raise ReportFormatError(f"holds more than {MAX_SAVED_VALUES:,} JSON values: not an autopsy report")
    try:
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError:
            try:
                data = [json.loads(line) for line in stripped.splitlines() if line.strip()]
            except json.JSONDecodeError as exc:
                raise ReportFormatError(f"not JSON: {exc}") from None
        if not _depth_ok(data):
            raise ReportFormatError(f"nested deeper than {MAX_SAVED_DEPTH} levels: not an autopsy report")
        items = data if isinstance(data, list) else [data]
        return [report_from_dict(d) for d in items]
    except RecursionError:
        raise ReportFormatError(f"nested deeper than {MAX_SAVED_DEPTH} levels: not an autopsy report") from None
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        if isinstance(exc, ReportFormatError):
            raise
        raise ReportFormatError(f"malformed report: {type(exc).__name__}: {str(exc)[:200]}") from None
