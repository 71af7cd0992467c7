"""Static check that a card's regex cannot backtrack catastrophically on a hostile line.

Log lines are untrusted text. A backtracking engine takes exponential or high-polynomial
time on some inputs when a pattern can match the same text in many ways: the two shapes
that do it are

- **nested quantifiers** (star height above one): ``(a+)+``, ``(?:\\w+\\s?)*``: a repeated
  group whose body itself repeats without bound, so a run of ``a`` splits in 2^n ways;
- **ambiguous adjacent repeats**: ``\\d+\\d*x``, ``.*:.*:.*X``: two unbounded repeats that
  can consume the same characters, with nothing mandatory between them that the first
  could not also consume, followed by something that can fail. Each additional such
  repeat adds one to the polynomial's degree. ``search()`` tries every start position,
  which acts as an implicit ``.*?`` before an unanchored pattern: a pattern that *starts*
  with an unbounded repeat is already quadratic (``\\s*Error`` on 64 KB of spaces).

:func:`regex_problems` walks the parse tree (``re``'s parser: card patterns are written in
the syntax both ``re`` and ``regex`` read) and names every such place. Possessive
quantifiers and atomic groups (``a++``, ``(?>...)``) never backtrack into themselves (but
an earlier repeat's retries still run them again, so they must not overlap it); accepted too
is a repeat whose body cannot overlap with its neighbours (``\\d+:\\d+``) and a repeat
after which nothing can fail (a trailing ``.*``). The analysis is conservative: it may
refuse a pattern that is in fact fast, never the reverse for the shapes above. Character
sets are compared on a sample alphabet (Latin-1, Latin Extended, common punctuation,
whitespace, CJK and an astral character), which is enough to tell ``\\d`` from ``:``
or ``\\s`` from ``\\w``.

The runtime guard for user cards, whose patterns are not checked, is the scanner's
per-search timeout and per-file regex budget (:mod:`autopsy.parsers.log_match`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

try:  # Python 3.11+
    from re import _constants as _c  # type: ignore[attr-defined]
    from re import _parser as _p  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _c
    import sre_parse as _p

_SAMPLE = frozenset(chr(c) for c in [*range(0, 0x250), 0x2028, 0x3000, 0x4E2D, 0xFF1A, 0x1F600])
_MAXREPEAT = _c.MAXREPEAT
_START = "the search's retry at every offset"
_BIG = 16  # a repeated body bounded above this counts as unbounded ((a+){1,1000} is (a+)+)
_ADJ_BIG = 256  # a single repeat bounded at most this costs a constant factor per offset


@dataclass(frozen=True)
class _Info:
    chars: frozenset[str]  # every character the node can consume
    nullable: bool  # can match the empty string


def regex_problems(pattern: str | bytes, *, ignore_case: bool = False, anchored: bool = False) -> list[str]:
    """Why ``pattern`` can backtrack catastrophically (empty: linear-safe by construction).

    ``anchored``: the pattern is only ever applied with ``match``/``fullmatch`` (one start
    position), so a leading repeat is not retried at every offset."""
    flags = re.IGNORECASE if ignore_case else 0
    try:
        tree = _p.parse(pattern, flags)
    except (re.error, OverflowError, RecursionError) as exc:
        return [f"not checkable: the re parser refuses it ({exc})"]
    icase = bool(tree.state.flags & re.IGNORECASE)
    walker = _Walker(icase)
    items = list(tree)
    walker.collect_groups(items)
    # search() retries at every offset: an implicit lazy ".*" before the pattern (dropped at
    # the first mandatory element, and by an anchor)
    walker.sequence(items, live=[] if anchored else [(_START, _SAMPLE)], tail_can_fail=False)
    return sorted(set(walker.problems))


class _Walker:
    def __init__(self, icase: bool) -> None:
        self.icase = icase
        self.problems: list[str] = []
        self.groups: dict[int, list[Any]] = {}  # group number -> its items (what a backreference repeats)

    def collect_groups(self, items: Iterable[Any]) -> None:
        for op, av in items:
            if op is _c.SUBPATTERN:
                if av[0] is not None:
                    self.groups[av[0]] = list(av[-1])
                self.collect_groups(av[-1])
            elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
                self.collect_groups(av[2])
            elif op is _c.ATOMIC_GROUP:
                self.collect_groups(av)
            elif op is _c.BRANCH:
                for b in av[1]:
                    self.collect_groups(b)
            elif op in (_c.ASSERT, _c.ASSERT_NOT):
                self.collect_groups(av[1])
            elif op is _c.GROUPREF_EXISTS:
                self.collect_groups(av[1])
                if av[2] is not None:
                    self.collect_groups(av[2])

    # ----------------------------------------------------------------- character sets

    def _fold(self, chars: Iterable[str]) -> frozenset[str]:
        out = set(chars)
        if self.icase:
            for ch in list(out):
                out.update((ch.lower(), ch.upper()))
        return frozenset(c for c in out if c in _SAMPLE) | (frozenset(out) - _SAMPLE)

    def _category(self, cat: Any) -> frozenset[str]:
        tests = {
            _c.CATEGORY_DIGIT: str.isdecimal, _c.CATEGORY_SPACE: str.isspace,
            _c.CATEGORY_WORD: lambda ch: ch.isalnum() or ch == "_",
        }
        negated = {_c.CATEGORY_NOT_DIGIT: _c.CATEGORY_DIGIT, _c.CATEGORY_NOT_SPACE: _c.CATEGORY_SPACE,
                   _c.CATEGORY_NOT_WORD: _c.CATEGORY_WORD}
        if cat in tests:
            return frozenset(ch for ch in _SAMPLE if tests[cat](ch))
        if cat in negated:
            return _SAMPLE - self._category(negated[cat])
        return _SAMPLE  # line-break categories and the like: assume anything

    def _in(self, items: list[Any]) -> frozenset[str]:
        chars: set[str] = set()
        negate = False
        for op, av in items:
            if op is _c.NEGATE:
                negate = True
            elif op is _c.LITERAL:
                chars.add(chr(av))
            elif op is _c.RANGE:
                lo, hi = av
                chars.update(ch for ch in _SAMPLE if lo <= ord(ch) <= hi)
                if lo <= 0x10FFFF and hi - lo < 4096:
                    chars.update(chr(c) for c in range(lo, hi + 1))
            elif op is _c.CATEGORY:
                chars |= self._category(av)
            else:  # pragma: no cover - charset opcodes re may add later
                chars |= _SAMPLE
        folded = self._fold(chars)
        return (_SAMPLE - folded) if negate else folded

    # -------------------------------------------------------------------- the walk

    def info(self, items: Iterable[Any]) -> _Info:
        """What a sequence can consume, and whether it can match empty (no problem reporting)."""
        chars: set[str] = set()
        nullable = True
        for op, av in items:
            i = self._atom_info(op, av)
            chars |= i.chars
            nullable = nullable and i.nullable
        return _Info(frozenset(chars), nullable)

    def can_fail(self, items: Iterable[Any]) -> bool:
        """Whether a sequence can fail to match where it is tried: it must consume something, or
        holds an assertion (``$``, ``\\b``, a lookaround) that the text can refuse. A trailing
        ``\\s*$`` can fail, and each failure sends the engine back into the repeats before it."""
        for op, av in items:
            if op in (_c.AT, _c.ASSERT, _c.ASSERT_NOT, _c.GROUPREF):
                return True
            if not self._atom_info(op, av).nullable:
                return True
            if op is _c.SUBPATTERN and self.can_fail(av[-1]):
                return True
            if op is _c.ATOMIC_GROUP and self.can_fail(av):
                return True
            if op is _c.BRANCH and all(self.can_fail(b) for b in av[1]):
                return True
            if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT) and av[0] > 0 and self.can_fail(av[2]):
                return True
        return False

    def _atom_info(self, op: Any, av: Any) -> _Info:
        if op is _c.LITERAL:
            return _Info(self._fold(chr(av)), False)
        if op is _c.NOT_LITERAL:
            return _Info(_SAMPLE - self._fold(chr(av)), False)
        if op is _c.ANY:
            return _Info(_SAMPLE - {"\n"}, False)
        if op is _c.IN:
            return _Info(self._in(av), False)
        if op is _c.SUBPATTERN:
            return self.info(av[-1])
        if op is _c.ATOMIC_GROUP:
            return self.info(av)
        if op is _c.BRANCH:
            parts = [self.info(b) for b in av[1]]
            return _Info(frozenset().union(*(p.chars for p in parts)), any(p.nullable for p in parts))
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
            lo, _hi, body = av
            b = self.info(body)
            return _Info(b.chars, lo == 0 or b.nullable)
        if op is _c.GROUPREF_EXISTS:
            _group, yes, no = av
            parts = [self.info(yes)] + ([self.info(no)] if no is not None else [_Info(frozenset(), True)])
            return _Info(frozenset().union(*(p.chars for p in parts)), any(p.nullable for p in parts))
        if op is _c.GROUPREF:  # the text its group matched: what the group can consume
            return self.info(self.groups[av]) if av in self.groups else _Info(_SAMPLE, True)
        return _Info(frozenset(), True)  # AT, ASSERT, ASSERT_NOT: zero-width

    def sequence(self, items: list[Any], live: list[tuple[str, frozenset[str]]],
                 tail_can_fail: bool) -> list[tuple[str, frozenset[str]]]:
        """Check a sequence; return the repeats still live after it.

        ``live``: earlier unbounded repeats, each with its *pump set*: the characters it
        could consume that every mandatory element since it could also have matched (a run
        of such a character can be split between that repeat and a later one in many ways).
        ``tail_can_fail``: whether what follows this sequence (in the enclosing ones) can
        fail, which is what makes the engine backtrack into the repeats of this one.
        """
        live = list(live)
        for k, (op, av) in enumerate(items):
            rest_can_fail = tail_can_fail or self.can_fail(items[k + 1:])
            if op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
                _lo, hi, body = av
                b = self.info(body)
                body_items = list(body)
                self.sequence(body_items, [], tail_can_fail=True)
                if (hi is _MAXREPEAT or hi > _BIG) and self._ambiguous_body(body_items):
                    self.problems.append(f"nested quantifier: {_show(op, av)} repeats a body that repeats")
                if (hi is _MAXREPEAT or hi > _ADJ_BIG) and b.chars:
                    if rest_can_fail:
                        for name, pump in live:
                            if pump & b.chars:
                                self.problems.append(
                                    f"ambiguous adjacent repeats: {_show(op, av)} can consume what {name} "
                                    f"consumes ({_sample(pump & b.chars)})")
                    live = [*self._through(live, self._atom_info(op, av)), (_show(op, av), b.chars)]
                else:  # an optional one (x?, x{0,3}) narrows nothing: it can match empty
                    live = self._through(live, self._atom_info(op, av))
                continue
            if op is _c.POSSESSIVE_REPEAT or op is _c.ATOMIC_GROUP:
                # It never gives characters back, but each retry of an earlier repeat runs it
                # again over the same characters: it still must not overlap a live pump set.
                inner = list(av[-1] if op is _c.POSSESSIVE_REPEAT else av)
                i = self._atom_info(op, av)
                if rest_can_fail and i.chars:
                    for name, pump in live:
                        if pump & i.chars and (self._repeats_inside(inner) if op is _c.ATOMIC_GROUP
                                                else av[1] is _MAXREPEAT or av[1] > _ADJ_BIG):
                            self.problems.append(
                                f"ambiguous adjacent repeats: a possessive or atomic part can consume what {name} "
                                f"consumes ({_sample(pump & i.chars)})")
                self.sequence(inner, [], tail_can_fail=True)
                live = self._through(live, i)
                continue
            if op is _c.SUBPATTERN:
                live = self.sequence(list(av[-1]), live, rest_can_fail)
                continue
            if op is _c.BRANCH:
                after: dict[str, frozenset[str]] = {}
                for alt in av[1]:
                    for name, pump in self.sequence(list(alt), live, rest_can_fail):
                        after[name] = after.get(name, frozenset()) | pump
                live = list(after.items())
                continue
            if op is _c.AT:
                if av in (_c.AT_BEGINNING, _c.AT_BEGINNING_STRING):
                    live = []  # anchored: no earlier repeat (nor a retry offset) reaches past it
                elif av in (_c.AT_BOUNDARY, _c.AT_UNI_BOUNDARY) and k + 1 < len(items):
                    # \b before a word-only repeat: it cannot start inside a word
                    nxt = self._atom_info(*items[k + 1])
                    word = self._category(_c.CATEGORY_WORD)
                    if nxt.chars and nxt.chars <= word:
                        live = [(n, c - word) for n, c in live if c - word]
                continue
            if op is _c.ASSERT_NOT and av[0] == -1:
                # (?<![^\s:]) / (?<!\S): the next match cannot start right after such a character
                guard = self.info(av[1])
                self.sequence(list(av[1]), [], tail_can_fail=True)
                if not guard.nullable:
                    live = [(n, c - guard.chars) for n, c in live if c - guard.chars]
                continue
            if op in (_c.ASSERT, _c.ASSERT_NOT):
                self.sequence(list(av[1]), [], tail_can_fail=True)
                continue
            if op is _c.GROUPREF_EXISTS:
                _group, yes, no = av
                self.sequence(list(yes), live, rest_can_fail)
                if no is not None:
                    self.sequence(list(no), live, rest_can_fail)
            live = self._through(live, self._atom_info(op, av))
        return live

    def _through(self, live: list[tuple[str, frozenset[str]]], i: _Info) -> list[tuple[str, frozenset[str]]]:
        """The live repeats after an element: an optional one changes nothing; a mandatory one
        narrows each pump set to the characters it can also match (empty: no longer live)."""
        if i.nullable:
            return live
        return [(n, c & i.chars) for n, c in live if c & i.chars and n != _START]

    def _ambiguous_body(self, items: list[Any]) -> bool:
        """Whether a repeated body can split one text into iterations in more than one way.

        It can when it holds an unbounded repeat and no mandatory delimiter that the inner
        repeats cannot consume (``(?:[a-z]\\w*\\.)+`` is safe: every iteration ends at a
        dot that ``\\w*`` cannot take; ``(?:\\w+\\s?)+`` is not).
        """
        if not self._repeats_inside(items):
            return False
        inner = self._inner_repeat_chars(items)
        for op, av in items:
            i = self._atom_info(op, av)
            if not i.nullable and op not in (_c.MAX_REPEAT, _c.MIN_REPEAT) and not (i.chars & inner):
                return False
        return True

    def _inner_repeat_chars(self, items: Iterable[Any]) -> frozenset[str]:
        out: set[str] = set()
        for op, av in items:
            if op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
                out |= self.info(av[2]).chars
            elif op is _c.SUBPATTERN:
                out |= self._inner_repeat_chars(av[-1])
            elif op is _c.BRANCH:
                for b in av[1]:
                    out |= self._inner_repeat_chars(b)
        return frozenset(out)

    def _repeats_inside(self, items: Iterable[Any]) -> bool:
        """Whether a body holds an unbounded, backtracking repeat of something non-empty."""
        for op, av in items:
            if op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
                _lo, hi, body = av
                if (hi is _MAXREPEAT or hi > _BIG) and self.info(body).chars:
                    return True
                if self._repeats_inside(body):
                    return True
            elif op is _c.SUBPATTERN and self._repeats_inside(av[-1]):
                return True
            elif op is _c.BRANCH and any(self._repeats_inside(b) for b in av[1]):
                return True
        return False


def _show(op: Any, av: Any) -> str:
    lo, hi, _body = av
    top = "" if hi is _MAXREPEAT else str(hi)
    lazy = "?" if op is _c.MIN_REPEAT else ""
    return f"a repeat {{{lo},{top}}}{lazy}"


def _sample(chars: frozenset[str]) -> str:
    shown = sorted(chars)[:6]
    return "e.g. " + " ".join(repr(c) for c in shown)
