"""Pattern compilation and the literal prefilter of the log scanner.

Why a prefilter: running 20 regexes over every line of a GB log in Python costs ~10 s;
finding the few lines that *can* match costs ~0.01 s. Each :class:`PatternSpec` names
literals (a line cannot match unless it contains one), so the scanner searches all
literals of all patterns at once over a whole multi-MB chunk and runs the full ``regex``
only on the segments (lines, or ``\\r`` redraws) that contain a literal.

The multi-literal search uses ``ahocorasick_rs`` (Rust Aho-Corasick with SIMD prefilters,
~10 GB/s) when it is installed, else one compiled ``re`` alternation of the escaped
literals (~300 MB/s); both report leftmost non-overlapping matches, which is enough: every
segment holding any literal gets at least one match, and the scanner then tests each
pattern's own literals on that segment with ``in`` (so a literal hidden under an
overlapping one is still seen). Case-insensitive patterns search their lower-cased
literals in a lower-cased copy of the chunk. A pattern without usable literals makes the
scanner test every segment (correct, slower).

:func:`reference_hits` is the plain line-by-line implementation the fast path must agree
with (tests compare them).
"""

from __future__ import annotations

import functools
import re
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import regex

from autopsy.parsers.log_text import LABEL_NONE, MAX_SEGMENT_BYTES, cap, clean, detect_label_mode, split_glued
from autopsy.parsers.types import Hit, HitList, PatternSpec

try:  # optional accelerator; identical results (tests run both finders)
    import ahocorasick_rs as _ac
except ImportError:  # pragma: no cover - depends on the environment
    _ac = None  # type: ignore[assignment]

HITS_KEPT = 20  # first and last K hits kept per pattern per file
REGEX_TIMEOUT_S = 0.25  # a hostile line cannot stall the scan in catastrophic backtracking
# Per file: once the regex searches of one file have taken this long in all, the rest of the
# file is read (series, tracebacks, context) but no longer searched for patterns, and the scan
# says so. The built-in patterns are linear by construction (tests/test_hostile_patterns.py)
# and are neither timed out nor counted (so their hits never depend on the machine's load);
# this bounds a user card's pattern, or many lines each just under the timeout.
REGEX_BUDGET_S = 20.0


@dataclass(frozen=True)
class CompiledPattern:
    """One pattern of the scan. ``rx`` is compiled on first use for a built-in card's pattern
    (``guarded`` False: the loader compiled it when it validated the card, so it cannot fail),
    and up front for any other, whose compile error :func:`compile_patterns` reports."""

    key: str
    source: str
    flags: int
    literals: tuple[str, ...]  # lower-cased when ignore_case; empty = test every segment
    ignore_case: bool
    guarded: bool = True  # searched with REGEX_TIMEOUT_S and counted against REGEX_BUDGET_S

    @functools.cached_property
    def rx(self) -> regex.Pattern[str]:
        return regex.compile(self.source, self.flags)


class LiteralFinder:
    """Start offsets of literal occurrences in a bytes chunk (one pass for all literals)."""

    def __init__(self, literals: Iterable[bytes], *, use_accelerator: bool = True) -> None:
        lits = sorted({lit for lit in literals if lit}, key=lambda b: (-len(b), b))
        self.literals = tuple(lits)
        self._ac = None
        self._re: re.Pattern[bytes] | None = None
        if not lits:
            return
        if use_accelerator and _ac is not None:
            # A DFA: the library's default picks a non-contiguous NFA for this many literals,
            # 6x slower over a block (20 vs 130 ms per 8 MB for the ~250 card literals)
            impl = getattr(getattr(_ac, "Implementation", None), "DFA", None)
            kw = {"implementation": impl} if impl is not None else {}
            self._ac = _ac.BytesAhoCorasick(list(lits), matchkind=_ac.MatchKind.LeftmostFirst, **kw)
        else:
            self._re = re.compile(b"|".join(re.escape(lit) for lit in lits))

    @property
    def engine(self) -> str:
        return "ahocorasick_rs" if self._ac is not None else ("re" if self._re is not None else "none")

    def positions(self, buf: bytes) -> list[int]:
        if self._ac is not None:
            return [m[1] for m in self._ac.find_matches_as_indexes(buf)]
        if self._re is not None:
            return [m.start() for m in self._re.finditer(buf)]
        return []


@dataclass
class CompiledPatterns:
    """What :func:`compile_patterns` returns; shared by every log of a run."""

    patterns: tuple[CompiledPattern, ...]
    finder: LiteralFinder  # case-sensitive literals
    finder_icase: LiteralFinder  # lower-cased literals of ignore_case patterns
    every_segment: bool  # some pattern has no literal: test all segments
    errors: dict[str, str] = field(default_factory=dict)  # key -> why it was not compiled

    def with_accelerator(self, enabled: bool) -> CompiledPatterns:
        """The same patterns with the optional accelerator on or off (tests, benchmarks)."""
        return CompiledPatterns(
            self.patterns,
            LiteralFinder(self.finder.literals, use_accelerator=enabled),
            LiteralFinder(self.finder_icase.literals, use_accelerator=enabled),
            self.every_segment, dict(self.errors),
        )


def _usable(lit: str) -> bool:
    return bool(lit) and "\n" not in lit and "\r" not in lit and "\x1b" not in lit


def compile_patterns(specs: Sequence[PatternSpec], *, use_accelerator: bool = True) -> CompiledPatterns:
    """Compile every spec (with ``regex``); a spec that does not compile is left out and
    named in ``errors`` instead of raising. A built-in card's spec (``guarded`` False), which
    the loader validated, is compiled on its first search instead (see :class:`CompiledPattern`)."""
    pats: list[CompiledPattern] = []
    errors: dict[str, str] = {}
    cs: list[bytes] = []
    ic: list[bytes] = []
    every = False
    for spec in specs:
        flags = regex.IGNORECASE if spec.ignore_case else 0
        rx = None
        if spec.guarded:  # built-in patterns (unguarded) compile on first use: most never do
            try:
                rx = regex.compile(spec.regex, flags)
            except (regex.error, TypeError, ValueError, OverflowError) as exc:
                errors[spec.key] = f"{type(exc).__name__}: {exc}"
                continue
        lits = tuple(spec.literals)
        if spec.ignore_case:
            # bytes.lower() only folds ASCII: a non-ASCII literal cannot prefilter
            if all(_usable(lit) and lit.isascii() for lit in lits):
                lits = tuple(lit.lower() for lit in lits)
            else:
                lits = ()
        elif not all(_usable(lit) for lit in lits):
            lits = ()
        if not lits:
            every = True
        (ic if spec.ignore_case else cs).extend(lit.encode("utf-8") for lit in lits)
        pat = CompiledPattern(spec.key, spec.regex, flags, lits, spec.ignore_case, spec.guarded)
        if rx is not None:
            pat.__dict__["rx"] = rx  # the cached_property's slot: compiled once, here
        pats.append(pat)
    return CompiledPatterns(
        tuple(pats),
        LiteralFinder(cs, use_accelerator=use_accelerator),
        LiteralFinder(ic, use_accelerator=use_accelerator),
        every, errors,
    )


class HitCollector:
    """First K and last K hits per pattern, all counted."""

    def __init__(self, path: str, compiled: CompiledPatterns) -> None:
        self.path = path
        self.compiled = compiled
        self.first: dict[str, list[Hit]] = {}
        self.last: dict[str, deque[Hit]] = {}
        self.count: dict[str, int] = {}
        self.timeouts = 0
        self.spent = 0.0  # seconds in regex searches so far
        self.exhausted_at: int | None = None  # set by the scanner: the line where the budget ran out

    def candidates(self, text: str, prefilter: bool = True) -> list[tuple[CompiledPattern, regex.Match[str]]]:
        """Patterns matching one cleaned segment (each pattern's literal checked first,
        unless ``prefilter`` is off: the reference path runs every regex)."""
        out: list[tuple[CompiledPattern, regex.Match[str]]] = []
        if self.spent > REGEX_BUDGET_S:
            return out
        lowered: str | None = None
        for p in self.compiled.patterns:
            if p.literals and prefilter:
                if p.ignore_case:
                    if lowered is None:
                        lowered = text.lower()
                    hay = lowered
                else:
                    hay = text
                for lit in p.literals:
                    if lit in hay:
                        break
                else:
                    continue
            if not p.guarded:  # a built-in pattern: linear by construction, never timed out
                m = p.rx.search(text)
                if m is not None:
                    out.append((p, m))
                continue
            started = time.perf_counter()
            try:
                m = p.rx.search(text, timeout=REGEX_TIMEOUT_S)
            except TimeoutError:
                self.timeouts += 1
                continue
            finally:
                self.spent += time.perf_counter() - started
            if m is not None:
                out.append((p, m))
        return out

    @property
    def exhausted(self) -> bool:
        """Whether the file's regex budget is spent (later segments are not searched)."""
        return self.spent > REGEX_BUDGET_S

    def add(self, hit: Hit) -> None:
        key = hit.key
        n = self.count.get(key, 0)
        self.count[key] = n + 1
        first = self.first.setdefault(key, [])
        if len(first) < HITS_KEPT:
            first.append(hit)
        else:
            self.last.setdefault(key, deque(maxlen=HITS_KEPT)).append(hit)

    def results(self) -> dict[str, HitList]:
        return {k: HitList(first=list(self.first[k]), last=list(self.last.get(k, ())), count=self.count[k])
                for k in self.first}


def make_hit(key: str, path: str, lineno: int, offset: int, text: str, m: regex.Match[str],
             rank: int | None, wall_time: float | None, step: int | None, wall_time_line: int | None = None,
             wall_time_step: int | None = None) -> Hit:
    groups = {k: v for k, v in m.groupdict().items() if v is not None}
    return Hit(key=key, path=path, lineno=lineno, offset=offset, text=cap(text), groups=groups,
               rank=rank, wall_time=wall_time, step=step, wall_time_line=wall_time_line,
               wall_time_step=wall_time_step)


_SEP = re.compile(rb"\r|\n")


def reference_hits(fs_path: Path, rel_path: str, compiled: CompiledPatterns) -> dict[str, HitList]:
    """Hits by the plain method: every segment of the whole file, every regex, no prefilter.

    Reads the whole file into memory: for tests and for checking the fast path only.
    Hits carry no step/wall_time (those come from the scanner's context tracking).
    """
    data = fs_path.read_bytes()
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        data = data.decode("utf-16", "replace").encode("utf-8", "replace")
    lines = data.split(b"\n")
    label_mode = detect_label_mode(lines[:200]) if lines else LABEL_NONE
    coll = HitCollector(rel_path, compiled)
    offset = 0
    for lineno, line in enumerate(lines, start=1):
        seg_off = offset
        for seg in line.split(b"\r"):
            if seg:
                text, rank = clean(seg[:MAX_SEGMENT_BYTES], label_mode)
                for piece in split_glued(text):
                    for p, m in coll.candidates(piece, prefilter=False):
                        coll.add(make_hit(p.key, rel_path, lineno, seg_off, piece, m, rank, None, None))
            seg_off += len(seg) + 1
        offset += len(line) + 1
    return coll.results()
