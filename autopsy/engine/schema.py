"""Validate a parsed rule-card YAML document and turn it into a :class:`Card`.

The schema is strict on purpose (lenient parsers, strict rules): an unknown key, a
misspelt severity or a regex with an unnamed group is an error that names the file and
the field (``rules/oom/cuda.yaml: match.any[0].regex: unnamed capturing group``), so a
typo never silently disables a rule. Validation is plain Python: no jsonschema at run
time, and nothing here imports pandas.

``match:`` semantics (evaluated per file by :mod:`autopsy.engine.patterns`):

* ``any``: a line matching one of these patterns is a hit;
* ``all``: every one of these patterns must match within ``window_lines`` lines of each
  other in the same file (0 = anywhere in the file); when a card has both ``any`` and
  ``all``, the ``any`` group counts as one more member of the ``all`` set;
* ``none``: suppressors; a hit is dropped when a ``none`` pattern matches in the same
  file within ``window_lines`` of it (0 = anywhere in the file).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import regex

from autopsy.engine.types import DOC_SECTIONS, NEEDS, Card, Match, Pattern
from autopsy.model import Confidence, Severity

ID_RE = regex.compile(r"^[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+$")
PATTERN_NAME_RE = regex.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CHECK_RE = regex.compile(r"^[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
STATUSES = ("experimental", "stable")

_TOP_KEYS = frozenset({
    "id", "title", "severity", "confidence", "status", "needs", "docs", "match", "samples", "check",
    "params", "supersedes", "explains", "aliases", "specificity",
})
_MATCH_KEYS = frozenset({"any", "all", "none", "window_lines"})
_PATTERN_KEYS = frozenset({"name", "regex", "comment", "literals", "ignore_case"})
_SAMPLE_KEYS = frozenset({"match", "no_match"})
_TEXT_DOCS = ("summary", "why", "confirm", "action")
_LIST_DOCS = ("false_positives", "references")


class CardError(Exception):
    """A card that cannot be loaded: ``source`` (the file), ``field`` (dotted path) and why."""

    def __init__(self, source: str, field: str, message: str, rule: str | None = None) -> None:
        self.source = source
        self.field = field
        self.message = message
        self.rule = rule  # the card's id when it could be read, so the error can be reported per rule
        super().__init__(f"{source}: {field}: {message}" if field else f"{source}: {message}")


def compile_regex(source: str, *, ignore_case: bool = False) -> regex.Pattern[str]:
    """Compile a card regex the way the log scanner does (``regex`` module, V0 syntax)."""
    flags = regex.IGNORECASE if ignore_case else 0
    return regex.compile(source, flags)


def parse_card(data: Any, source: str) -> Card:
    """Validate one YAML document (already parsed) and build its :class:`Card`.

    Raises :class:`CardError` naming ``source`` and the offending field.
    """
    v = _Validator(source)
    if not isinstance(data, Mapping):
        raise CardError(source, "", f"a card must be a YAML mapping, got {type(data).__name__}")
    rule_id = data.get("id")
    v.rule = rule_id if isinstance(rule_id, str) else None
    unknown = sorted(set(map(str, data)) - _TOP_KEYS)
    if unknown:
        v.fail(unknown[0], f"unknown key (allowed: {', '.join(sorted(_TOP_KEYS))})")

    card_id = v.ident(data, "id")
    title = v.text(data, "title")
    severity = v.enum(data, "severity", Severity.parse)
    confidence = v.enum(data, "confidence", Confidence.parse)
    status = v.text(data, "status")
    if status not in STATUSES:
        v.fail("status", f"{status!r} is not one of {', '.join(STATUSES)}")
    docs = _docs(v, data.get("docs"))
    match = _match(v, data.get("match"))
    check = data.get("check")
    if check is not None and (not isinstance(check, str) or not CHECK_RE.match(check)):
        v.fail("check", f"{check!r} is not 'package.module:function'")
    if match is None and check is None:
        v.fail("match", "a card needs match: (pattern rule) or check: (Python rule), or both")
    needs = v.str_list(data, "needs", required=True)
    for i, need in enumerate(needs):
        if need not in NEEDS:
            v.fail(f"needs[{i}]", f"{need!r} is not one of {', '.join(NEEDS)}")
    if match is not None and "log" not in needs:
        # A pattern card reads the logs whatever the author listed; saying so keeps
        # "not evaluated: no text logs found" honest.
        needs = ["log", *needs]
    params = data.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        v.fail("params", "must be a mapping of names to values")
    samples = data.get("samples") or {}
    if not isinstance(samples, Mapping):
        v.fail("samples", "must be a mapping with match: and no_match: lists")
    unknown = sorted(set(map(str, samples)) - _SAMPLE_KEYS)
    if unknown:
        v.fail(f"samples.{unknown[0]}", "unknown key (allowed: match, no_match)")
    samples_match = v.str_list(samples, "match", prefix="samples.")
    samples_no_match = v.str_list(samples, "no_match", prefix="samples.")
    if match is not None and not samples_match:
        v.fail("samples.match", "a pattern card needs at least one sample line that must match")
    relations = {}
    for key in ("supersedes", "explains", "aliases"):
        ids = v.str_list(data, key)
        for i, other in enumerate(ids):
            if not ID_RE.match(other):
                v.fail(f"{key}[{i}]", f"{other!r} is not a rule id (family.name)")
            if other == card_id:
                v.fail(f"{key}[{i}]", "a card cannot name itself")
        relations[key] = tuple(ids)
    specificity = data.get("specificity", 0)
    if isinstance(specificity, bool) or not isinstance(specificity, int):
        v.fail("specificity", f"must be an integer, got {specificity!r}")

    return Card(
        id=card_id,
        title=title,
        severity=severity,
        confidence=confidence,
        status=status,
        docs=docs,
        needs=tuple(needs),
        match=match,
        check=check,
        params=dict(params),
        supersedes=relations["supersedes"],
        explains=relations["explains"],
        aliases=relations["aliases"],
        specificity=specificity,
        samples_match=tuple(samples_match),
        samples_no_match=tuple(samples_no_match),
        source=source,
    )


class _Validator:
    def __init__(self, source: str) -> None:
        self.source = source
        self.rule: str | None = None

    def fail(self, field: str, message: str) -> None:
        raise CardError(self.source, field, message, rule=self.rule)

    def text(self, data: Mapping[str, Any], key: str, prefix: str = "", required: bool = True) -> str:
        value = data.get(key)
        if value is None and not required:
            return ""
        if not isinstance(value, str) or not value.strip():
            self.fail(prefix + key, "required text is missing or empty" if value is None else
                      f"must be non-empty text, got {type(value).__name__}")
        return str(value).strip()

    def ident(self, data: Mapping[str, Any], key: str) -> str:
        value = self.text(data, key)
        if not ID_RE.match(value):
            self.fail(key, f"{value!r} is not a rule id: lower-case 'family.name'")
        return value

    def enum(self, data: Mapping[str, Any], key: str, parse: Any) -> Any:
        value = self.text(data, key)
        try:
            return parse(value)
        except ValueError as exc:
            self.fail(key, str(exc))

    def str_list(self, data: Mapping[str, Any], key: str, prefix: str = "", required: bool = False) -> list[str]:
        value = data.get(key)
        if value is None:
            if required:
                self.fail(prefix + key, "required list is missing")
            return []
        if isinstance(value, str) or not isinstance(value, list):
            self.fail(prefix + key, f"must be a list, got {type(value).__name__}")
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item:
                self.fail(f"{prefix}{key}[{i}]", f"must be non-empty text, got {item!r}")
        return list(value)


def _docs(v: _Validator, docs: Any) -> dict[str, Any]:
    if not isinstance(docs, Mapping):
        v.fail("docs", "required mapping with " + ", ".join(DOC_SECTIONS))
    unknown = sorted(set(map(str, docs)) - set(DOC_SECTIONS))
    if unknown:
        v.fail(f"docs.{unknown[0]}", f"unknown section (allowed: {', '.join(DOC_SECTIONS)})")
    out: dict[str, Any] = {}
    for key in _TEXT_DOCS:
        # Only the summary is required by the schema (a team's own card may be terse);
        # the catalog meta-tests hold the built-in cards to every section.
        out[key] = v.text(docs, key, prefix="docs.", required=key == "summary")
    for key in _LIST_DOCS:
        out[key] = tuple(v.str_list(docs, key, prefix="docs."))
    return out


def _match(v: _Validator, match: Any) -> Match | None:
    if match is None:
        return None
    if not isinstance(match, Mapping):
        v.fail("match", "must be a mapping with any:/all:/none: lists")
    unknown = sorted(set(map(str, match)) - _MATCH_KEYS)
    if unknown:
        v.fail(f"match.{unknown[0]}", f"unknown key (allowed: {', '.join(sorted(_MATCH_KEYS))})")
    groups: dict[str, tuple[Pattern, ...]] = {}
    seen: set[str] = set()
    for group in ("any", "all", "none"):
        items = match.get(group) or []
        if not isinstance(items, list):
            v.fail(f"match.{group}", "must be a list of patterns")
        pats = []
        for i, item in enumerate(items):
            pat = _pattern(v, item, f"match.{group}[{i}]")
            if pat.name in seen:
                v.fail(f"match.{group}[{i}].name", f"duplicate pattern name {pat.name!r} in this card")
            seen.add(pat.name)
            pats.append(pat)
        groups[group] = tuple(pats)
    if not groups["any"] and not groups["all"]:
        v.fail("match", "needs at least one pattern under any: or all:")
    window = match.get("window_lines", 0)
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        v.fail("match.window_lines", f"must be an integer >= 0, got {window!r}")
    return Match(any=groups["any"], all=groups["all"], none=groups["none"], window_lines=window)


def _pattern(v: _Validator, item: Any, where: str) -> Pattern:
    if not isinstance(item, Mapping):
        v.fail(where, "a pattern must be a mapping with name:, regex:, comment:")
    unknown = sorted(set(map(str, item)) - _PATTERN_KEYS)
    if unknown:
        v.fail(f"{where}.{unknown[0]}", f"unknown key (allowed: {', '.join(sorted(_PATTERN_KEYS))})")
    name = v.text(item, "name", prefix=where + ".")
    if not PATTERN_NAME_RE.match(name):
        v.fail(f"{where}.name", f"{name!r} must be an identifier (letters, digits, _)")
    source = item.get("regex")
    if not isinstance(source, str) or not source:
        v.fail(f"{where}.regex", "required regex is missing or empty")
    comment = v.text(item, "comment", prefix=where + ".")
    ignore_case = item.get("ignore_case", False)
    if not isinstance(ignore_case, bool):
        v.fail(f"{where}.ignore_case", f"must be true or false, got {ignore_case!r}")
    try:
        compiled = compile_regex(source, ignore_case=ignore_case)
    except regex.error as exc:
        v.fail(f"{where}.regex", f"does not compile: {exc}")
    if compiled.groups > len(compiled.groupindex):
        v.fail(f"{where}.regex", "unnamed capturing group: use (?P<name>...) or (?:...)")
    if compiled.search(""):
        v.fail(f"{where}.regex", "matches the empty string, so it would hit every line")
    literals = item.get("literals")
    if literals is not None:
        if isinstance(literals, str) or not isinstance(literals, list) or not literals:
            v.fail(f"{where}.literals", "must be a non-empty list of substrings (omit it to derive them)")
        for i, lit in enumerate(literals):
            if not isinstance(lit, str) or not lit:
                v.fail(f"{where}.literals[{i}]", f"must be non-empty text, got {lit!r}")
    return Pattern(name=name, regex=source, comment=comment, literals=tuple(literals or ()),
                   ignore_case=ignore_case)
