"""Derive prefilter literals from a regex: substrings every matching line must contain.

The log scanner skips a line unless it contains one of a pattern's literals, so a
derived set must be *conservative*: every line the regex can match contains at least
one of them. When in doubt (syntax of the ``regex`` module the stdlib parser does not
know, inline case flags, fuzzy matching, alternatives without a literal) we return
``()``: no prefilter, slower but never wrong.
"""

from __future__ import annotations

import re

try:  # Python >= 3.11 moved the parser; the old name warns.
    from re import _constants as _c  # type: ignore[attr-defined]
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

MIN_LITERAL_CHARS = 3  # a shorter literal hits nearly every line: not worth a prefilter
MAX_ALTERNATIVES = 16

# regex-module syntax the stdlib parser would misread as literal text (fuzzy matching
# "{e<=1}", named lists "\L<name>", version/behaviour flags).
_UNSAFE = re.compile(r"\{[^}]*\b[eids]\s*[<=]|\\L<|\(\?[a-zA-Z]*[Vfbe]|\\[pPXmMGK]")

_Alts = tuple[str, ...]
_REPEATS = tuple(x for x in (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", None)) if x)
_ATOMIC_GROUP = getattr(_c, "ATOMIC_GROUP", object())  # Python >= 3.11


def derive_literals(pattern: str, *, ignore_case: bool = False) -> tuple[str, ...]:
    """Substrings one of which every match of ``pattern`` contains, or ``()`` if unsure.

    With ``ignore_case`` the literals are returned lower-cased (the scanner lower-cases
    the line before the prefilter test).
    """
    if _UNSAFE.search(pattern):
        return ()
    try:
        parsed = _sre_parse.parse(pattern)
    except Exception:  # any syntax the stdlib does not know: no prefilter
        return ()
    global_flags = parsed.state.flags
    if global_flags & re.IGNORECASE and not ignore_case:
        return ()  # (?i) inside the regex: a case-sensitive prefilter would miss lines
    alts = _best(list(parsed))
    if not alts or min(len(a) for a in alts) < MIN_LITERAL_CHARS:
        return ()
    if ignore_case:
        alts = tuple(dict.fromkeys(a.lower() for a in alts))
    return tuple(sorted(set(alts)))


def _best(items: list) -> _Alts | None:  # type: ignore[type-arg]
    """The best disjunction of required substrings for a sequence of parsed items."""
    candidates: list[_Alts] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            candidates.append(("".join(run),))
            run.clear()

    for op, av in items:
        if op is _c.LITERAL:
            run.append(chr(av))
            continue
        flush()
        if op is _c.SUBPATTERN:
            _group, add_flags, _del_flags, sub = av
            if add_flags & re.IGNORECASE:
                continue  # a case-insensitive group cannot feed a case-sensitive prefilter
            got = _best(list(sub))
            if got:
                candidates.append(got)
        elif op in _REPEATS:
            lo, _hi, sub = av
            if lo >= 1:
                got = _best(list(sub))
                if got:
                    candidates.append(got)
        elif op is _ATOMIC_GROUP:
            got = _best(list(av))
            if got:
                candidates.append(got)
        elif op is _c.BRANCH:
            _unused, branches = av
            alts: list[str] = []
            for branch in branches:
                got = _best(list(branch))
                if not got:
                    alts = []
                    break
                alts.extend(got)
            if alts and len(alts) <= MAX_ALTERNATIVES:
                candidates.append(tuple(alts))
        # Everything else (classes, ANY, anchors, lookarounds, backrefs) requires no
        # particular literal; it only ends the current run of literal characters.
    flush()
    if not candidates:
        return None
    # Most selective: the longest shortest-alternative, then the fewest alternatives.
    return max(candidates, key=lambda alts: (min(len(a) for a in alts), -len(alts)))
