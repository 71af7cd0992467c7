"""Per-rule case files (``fixtures/cases/<rule-id>.yaml``): load, materialise, check.

A case builds a tiny run directory from its ``files:`` spec, runs ``autopsy.analyze``
with the whole catalog, and compares the report with ``expect:``. The format is in the
shared brief; the parts it leaves open are settled here:

* file values: a string (text, written as is), null (an empty file), or a mapping with
  exactly one of ``text``, ``json``, ``yaml``, ``tfevents`` (rows, or
  ``{rows: [...], tensor_style: true}``), ``safetensors`` (``{tensors: {...},
  truncate_to: N}``), ``zip`` (entries), ``bytes`` (N zero bytes, sparse), plus an
  optional ``mtime``; a key ending in ``/`` makes an empty directory;
* times: analysis time is pinned to the case's ``now`` (default :data:`DEFAULT_NOW`) and
  every file's mtime defaults to :data:`DEFAULT_AGE_S` seconds before it; an ``mtime``
  below 1e8 is relative to ``now`` (``-7200`` = two hours before), else absolute;
* ``expect.fired``: true (the rule fired), false (evaluated and not fired), or
  ``not_evaluated`` (optionally with ``reason``: a substring of the reason); a rule
  error always fails the case, with its message;
* ``expect.facts``: a subset that one finding of the rule must carry (numbers equal
  within 1e-6 relative tolerance, lists and mappings compared element-wise);
* ``expect.primary``: the report's primary rule id, or ``none`` for no primary.

Unknown keys are errors, so a misspelt expectation can never pass silently.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

DEFAULT_NOW = 1_700_100_000.0  # after the builders' default event wall times (1.7e9 + step)
DEFAULT_AGE_S = 3600.0  # files were last written an hour before the analysis

_CASE_KEYS = frozenset({"name", "source", "files", "expect", "todo", "now"})
_EXPECT_KEYS = frozenset({"fired", "facts", "severity", "primary", "not_fired", "reason"})
_FILE_KINDS = ("text", "json", "yaml", "tfevents", "safetensors", "zip", "bytes")


class CaseError(Exception):
    """A malformed case file (names the file and the case)."""


@dataclass(frozen=True)
class Case:
    rule: str
    name: str
    source_file: str
    files: Mapping[str, Any]
    expect: Mapping[str, Any]
    todo: str | None
    now: float
    origin: str | None  # where the text is from (real-world wording)

    @property
    def id(self) -> str:
        return f"{self.rule}::{self.name}"


def load_case_file(path: Path) -> list[Case]:
    """All cases of one case file, validated."""
    where = path.name
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise CaseError(f"{where}: invalid YAML: {exc}") from None
    if not isinstance(data, Mapping) or set(data) - {"rule", "cases"}:
        raise CaseError(f"{where}: top level must be a mapping with rule: and cases:")
    rule = data.get("rule")
    if not isinstance(rule, str) or path.stem != rule:
        raise CaseError(f"{where}: rule: {rule!r} must equal the file name ({path.stem})")
    cases = data.get("cases")
    if not isinstance(cases, list) or not cases:
        raise CaseError(f"{where}: cases: must be a non-empty list")
    out: list[Case] = []
    names: set[str] = set()
    for i, raw in enumerate(cases):
        label = f"{where}: cases[{i}]"
        if not isinstance(raw, Mapping):
            raise CaseError(f"{label}: must be a mapping")
        unknown = sorted(set(raw) - _CASE_KEYS)
        if unknown:
            raise CaseError(f"{label}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(_CASE_KEYS))})")
        name = raw.get("name")
        if not isinstance(name, str) or not name or name in names:
            raise CaseError(f"{label}: name must be a unique non-empty string, got {name!r}")
        names.add(name)
        expect = raw.get("expect")
        if not isinstance(expect, Mapping) or "fired" not in expect:
            raise CaseError(f"{label} ({name}): expect: must be a mapping with fired:")
        unknown = sorted(set(expect) - _EXPECT_KEYS)
        if unknown:
            raise CaseError(f"{label} ({name}): expect: unknown key {unknown[0]!r}")
        if expect["fired"] not in (True, False, "not_evaluated"):
            raise CaseError(f"{label} ({name}): expect.fired must be true, false or not_evaluated")
        files = raw.get("files") or {}
        if not isinstance(files, Mapping):
            raise CaseError(f"{label} ({name}): files: must be a mapping of path to content")
        todo = raw.get("todo")
        out.append(Case(rule=rule, name=name, source_file=str(path), files=files, expect=expect,
                        todo=str(todo) if todo else None, now=float(raw.get("now", DEFAULT_NOW)),
                        origin=raw.get("source")))
    return out


def materialise(case: Case, root: Path) -> Path:
    """Write the case's files under ``root`` (which must exist); returns ``root``."""
    default_mtime = case.now - DEFAULT_AGE_S
    for rel, spec in case.files.items():
        rel = str(rel)
        parts = PurePosixPath(rel).parts
        if rel.startswith("/") or ".." in parts or not parts:
            raise CaseError(f"{case.id}: file path {rel!r} must be relative, inside the run")
        target = root.joinpath(*parts)
        if rel.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        mtime = _write(case, rel, target, spec)
        stamp = default_mtime if mtime is None else (case.now + mtime if abs(mtime) < 1e8 else mtime)
        os.utime(target, (stamp, stamp))
    return root


def _write(case: Case, rel: str, target: Path, spec: Any) -> float | None:
    if spec is None:
        target.write_bytes(b"")
        return None
    if isinstance(spec, (str, int, float)) and not isinstance(spec, bool):
        target.write_text(str(spec), encoding="utf-8")
        return None
    if not isinstance(spec, Mapping):
        raise CaseError(f"{case.id}: {rel}: expected text or a mapping, got {type(spec).__name__}")
    kinds = [k for k in spec if k in _FILE_KINDS]
    unknown = sorted(set(spec) - set(_FILE_KINDS) - {"mtime"})
    if len(kinds) != 1 or unknown:
        raise CaseError(f"{case.id}: {rel}: give exactly one of {', '.join(_FILE_KINDS)} (and optionally mtime)")
    kind, value = kinds[0], spec[kinds[0]]
    if kind == "text":
        target.write_text(str(value), encoding="utf-8")
    elif kind == "json":
        target.write_text(json.dumps(value, indent=1), encoding="utf-8")
    elif kind == "yaml":
        target.write_text(yaml.safe_dump(value, sort_keys=False), encoding="utf-8")
    elif kind == "bytes":
        with open(target, "wb") as fh:
            fh.truncate(int(value))
    else:
        import builders  # lazy: it imports tensorboard

        if kind == "tfevents":
            rows, style = (value.get("rows", []), bool(value.get("tensor_style", False))) \
                if isinstance(value, Mapping) else (value, False)
            builders.write_tfevents(target, [tuple(r) for r in rows], tensor_style=style)
        elif kind == "safetensors":
            builders.write_safetensors(target, value["tensors"], truncate_to=value.get("truncate_to"))
        else:
            builders.write_zip(target, dict(value))
    mtime = spec.get("mtime")
    return float(mtime) if mtime is not None else None


# ------------------------------------------------------------------ expectations


def facts_match(expected: Any, actual: Any) -> bool:
    """``expected`` is contained in ``actual``: numbers within 1e-6 relative, dicts as subsets."""
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(k in actual and facts_match(v, actual[k])
                                                   for k, v in expected.items())
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        if math.isnan(expected):
            return math.isnan(actual)
        return math.isclose(expected, actual, rel_tol=1e-6, abs_tol=1e-12)
    if isinstance(expected, list) and isinstance(actual, (list, tuple)):
        return len(expected) == len(actual) and all(facts_match(e, a) for e, a in zip(expected, actual, strict=True))
    return bool(expected == actual)


def check_report(case: Case, report: Any) -> list[str]:
    """Every way the report disagrees with ``case.expect`` (empty = the case passes)."""
    from autopsy.model import OutcomeKind

    exp = case.expect
    problems: list[str] = []
    outcomes = {o.rule: o for o in report.outcomes}
    outcome = outcomes.get(case.rule)
    findings = [f for f in report.findings if f.rule == case.rule]
    if outcome is None:
        return [f"no outcome for {case.rule}: is there a card rules/{case.rule.replace('.', '/')}.yaml?"]
    if outcome.kind is OutcomeKind.RULE_ERROR:
        return [f"{case.rule} raised: {outcome.reason}"]
    want = exp["fired"]
    got = {OutcomeKind.FIRED: True, OutcomeKind.NOT_FIRED: False, OutcomeKind.NOT_EVALUATED: "not_evaluated"}[
        outcome.kind]
    if got != want:
        detail = f" ({outcome.reason})" if outcome.reason else ""
        msgs = "; ".join(f.message for f in findings[:3])
        problems.append(f"fired: expected {want}, got {got}{detail}{': ' + msgs if msgs else ''}")
    if want == "not_evaluated" and exp.get("reason") and exp["reason"] not in (outcome.reason or ""):
        problems.append(f"reason: expected to contain {exp['reason']!r}, got {outcome.reason!r}")
    if "facts" in exp and findings:
        if not any(facts_match(exp["facts"], f.facts) for f in findings):
            problems.append(f"facts: no finding has {exp['facts']!r}; got {[f.facts for f in findings]!r}")
    if "severity" in exp and findings:
        sevs = sorted({str(f.severity) for f in findings})
        if str(exp["severity"]) not in sevs:
            problems.append(f"severity: expected {exp['severity']}, got {sevs}")
    if "primary" in exp:
        primary = report.primary.rule if report.primary is not None else "none"
        if str(exp["primary"]) != primary:
            problems.append(f"primary: expected {exp['primary']}, got {primary} "
                            f"(findings: {[f.rule for f in report.findings]})")
    for other in exp.get("not_fired") or ():
        bad = [f for f in report.findings if f.rule == other]
        if bad:
            problems.append(f"not_fired: {other} fired: {bad[0].message}")
    return problems
