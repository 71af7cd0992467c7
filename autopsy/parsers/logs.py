"""Streaming text-log scanner: one pass, constant memory, C-speed on the common case.

``scan_log`` reads a log in 8 MB blocks (never the whole file), cut at the last line
separator so no line is split. Per block it does only C-level work over the whole bytes:

1. counts ``\\n`` (line numbers agree with ``grep -n``; ``\\r`` tqdm redraws are separate
   *segments* of the same line), NUL and invalid UTF-8 bytes (``binary_fraction``);
2. finds candidate segments with two multi-literal searches (see :mod:`log_match`): the
   literals of every pattern rule, and a fixed set of triggers (``{'`` for HF dicts,
   ``step``/``iter`` lines, ``Traceback (most recent call last)``, torchrun's
   ``Failures:``/``Root Cause``, chain markers, ESC for coloured lines);
3. only those segments are decoded, cleaned (ANSI/OSC stripped, ``[rank3]:`` prefixes
   stripped and recorded) and handed to the Python handlers. While a traceback or a
   ``ChildFailedError`` report is open every segment is handled (slow mode), until it closes.

Context (the step and wall time of a hit) is resolved lazily, in position order:
progress bars are found by searching *backwards* for ``it/s``/``s/it`` from the event
(``rfind``), so the millions of tqdm redraws of a long run are never parsed one by one;
rate points (``it/s``/``s/it``, Lightning postfix metrics) are sampled at those lookups and
every 32 KB (every bar in files under 1 MB), one per step. Timestamps are indexed per block
(ISO, ``[...]``, glog, torchrun) with regexes anchored on a literal, or looked up backwards
when a block is densely timestamped. Naive times are read as UTC.

Bounded memory: a segment is searched in its first 64 KB and kept (hits, head, tail) in
its first 4 KB; a line longer than a block is carried at most 64 KB; hits keep the first
and last 20 per pattern; tracebacks 100 + 100 chain heads. Never raises: an unreadable or
non-regular file (FIFO, device) gives ``status=unreadable``; ``max_bytes`` gives
``status=truncated`` with "read only the first N bytes of M". UTF-16 logs (BOM, or NUL
every other byte) are transcoded to UTF-8 first; offsets then count transcoded bytes.
"""

from __future__ import annotations

import bisect
import codecs
import gc
import os
import re
import stat
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from autopsy.model import ParseStatus
from autopsy.parsers import log_parallel, log_window
from autopsy.parsers import log_text as lt
from autopsy.parsers.log_config import TRIGGERS as CONFIG_TRIGGERS
from autopsy.parsers.log_config import LogConfigTracker
from autopsy.parsers.log_fast import combo, fast_run
from autopsy.parsers.log_match import (
    CompiledPatterns,
    HitCollector,
    LiteralFinder,
    compile_patterns,
    make_hit,
    reference_hits,
)
from autopsy.parsers.log_series import (
    DictTemplate,
    EpochStepGuard,
    SeriesStore,
    dict_template,
    parse_bar,
    parse_dict_record,
    parse_step_line,
)
from autopsy.parsers.log_tracebacks import HEADER, ChildFailureTracker, TracebackTracker
from autopsy.parsers.types import LogScan, PatternSpec

__all__ = ["CompiledPatterns", "PatternSpec", "compile_patterns", "reference_hits", "scan_log"]

BLOCK = 8 << 20
HEAD_LINES = 20
TAIL_LINES = 50
BAR_STRIDE = 32 << 10
EVERY_BAR_BELOW = 1 << 20  # files smaller than this get a rate point from every bar
MAX_TEMPLATES = 8  # dict key layouts read by the fast path (HF prints one or two)
_TS_INDEX_LIMIT = 2000  # timestamps per block indexed up front; denser blocks look back lazily
_BAR_TRIES = 32

_PAT, _TRIG, _BAR = 1, 2, 4
# Trigger literals in two finders and a byte search: one automaton over all of them (with
# "{'", which starts every HF dict line, and the one-byte ESC) runs ~7x slower than these.
_TRIGGERS = (
    LiteralFinder([
        b"Traceback (most recent call last)", b"Failures:", b"Root Cause",
        b"During handling of the above exception", b"The above exception was the direct cause",
        b"step", b"Step", b"STEP", b"iter", b"Iter", b"ITER",
        b"Epoch(", b"Epoch [", b"Epoch: [",  # mmengine / mmcv / PyTorch example step heads
        *CONFIG_TRIGGERS,  # configuration printed by nanoGPT and HF Trainer (log_config)
    ]),
    LiteralFinder([b"{'", b'{"']),  # HF / JSON metrics dicts
)
_RANK_LITERALS = (b"[rank", b"[default", b"[RANK", b"[Rank")
_RANK_FINDER = LiteralFinder(_RANK_LITERALS)
_RANK_FIND = re.compile(rb"\[(?:rank|default|Rank|RANK)[ _]?(\d{1,6})\]")
_LABEL_FIND = re.compile(rb"(?m)^ {0,4}(\d{1,6}): ")
_BRACKET_FIND = re.compile(rb"(?m)^\[(\d{1,6})\] ")
# The common tqdm redraw, read straight from bytes: "| 25/100 [00:10<00:30,  2.45it/s]"
_BAR_FAST = re.compile(rb"(\d+)/(\d+) \[[^\]\r\n,]{0,40},\s*(\d+(?:\.\d+)?|\?)(it/s|s/it)\]")
_BAR_NODESC = re.compile(rb" *\d{1,3}%\|")


# Every match of the timestamp regexes holds "-DD-" (ISO: "-05-01 12:00:00") or ":DD."
# (glog: ":00:00.123456") at a fixed place: two literal searches find the few places to
# try at GB/s, where the regexes alone stop at every "-" and ":" (each dict's "e-05", two
# per progress bar). No two matches overlap, so trying each candidate (and, for ISO, the
# candidate an overlapping literal hid: "-01-01-") gives exactly ``finditer``'s matches.
_ISO_CANDIDATES = LiteralFinder([b"-%02d-" % i for i in range(100)])
_GLOG_CANDIDATES = LiteralFinder([b":%02d." % i for i in range(100)])


def _ts_matches(rx: re.Pattern[bytes], buf: bytes) -> Iterator[re.Match[bytes]]:
    if _ISO_CANDIDATES.engine != "ahocorasick_rs":
        yield from rx.finditer(buf)
        return
    match = rx.match
    if rx is lt._TS_ISO:
        for c in _ISO_CANDIDATES.positions(buf):
            m = match(buf, c) or match(buf, c + 3)
            if m is not None:
                yield m
    else:
        for c in _GLOG_CANDIDATES.positions(buf):
            if c >= 3:
                m = match(buf, c - 3)
                if m is not None:
                    yield m


def _blocks(fd: int, limit: int) -> Iterator[bytes]:
    left = limit
    while left > 0:
        data = os.read(fd, min(BLOCK, left))
        if not data:
            return
        left -= len(data)
        yield data


def _utf16_kind(head: bytes) -> str | None:
    if head[:2] == b"\xff\xfe":
        return "utf-16-le"
    if head[:2] == b"\xfe\xff":
        return "utf-16-be"
    sample = head[:4096]
    if len(sample) < 64:
        return None
    even, odd = sample[0::2], sample[1::2]
    ez, oz = even.count(0) / len(even), odd.count(0) / len(odd)
    if oz > 0.4 and ez < 0.05:
        return "utf-16-le"
    if ez > 0.4 and oz < 0.05:
        return "utf-16-be"
    return None


def _transcode(first: bytes, rest: Iterator[bytes], kind: str) -> Iterator[bytes]:
    dec = codecs.getincrementaldecoder("utf-16" if first[:2] in (b"\xff\xfe", b"\xfe\xff") else kind)("replace")
    yield dec.decode(first).encode("utf-8", "replace")
    for block in rest:
        yield dec.decode(block).encode("utf-8", "replace")
    tail = dec.decode(b"", final=True)
    if tail:
        yield tail.encode("utf-8", "replace")


class _Scanner:
    def __init__(self, rel_path: str, compiled: CompiledPatterns, rank: int | None, size: int, year: int) -> None:
        self.rel = rel_path
        self.compiled = compiled
        self.file_rank = rank
        self.year = year
        self.every_bar = size < EVERY_BAR_BELOW
        self.hits = HitCollector(rel_path, compiled)
        self.tb = TracebackTracker(rel_path)
        self.cf = ChildFailureTracker(rel_path)
        self.cfg = LogConfigTracker(rel_path)
        self.epoch_guard = EpochStepGuard()
        self.after_gap = False  # reading the tail after a skipped middle (max_bytes)
        self.series = SeriesStore()
        # learnt dict layouts, with the store's tag ids and the bar + dict regex (log_fast)
        self.templates: list[tuple[DictTemplate, list[int], re.Pattern[bytes]]] = []
        self.ranks: set[int] = set()
        self.label_mode = lt.LABEL_NONE
        self.head: list[str] = []
        self.tail: deque[tuple[int, str]] = deque(maxlen=TAIL_LINES)
        self.first_buf = True
        self.lines_before = 0  # "\n" before the current block
        self.processed = 0
        self.nul = 0
        self.bad = 0
        # context, in file positions (block base + index)
        self.base = 0
        self.cur_step: int | None = None
        self.step_pos = -1
        self.max_total = 0
        self.max_steps_seen: int | None = None
        self.dict_count = 0
        self.last_rate_step: int | None = None
        self.first_wall: float | None = None
        self.last_wall: float | None = None
        self.ts_prev: float | None = None  # last timestamp of earlier blocks
        self.ts_lazy: float | None = None
        self.note: str | None = None
        self.skip_at = -1  # a block holding an over-long line: positions >= skip_at map
        self.skip_len = 0  # to file offsets skip_len further on (the dropped middle)

    # ------------------------------------------------------------------ per block

    def block(self, buf: bytes, skip_at: int = -1, skip_len: int = 0) -> None:
        n = len(buf)
        self.skip_at, self.skip_len = skip_at, skip_len
        self.buf = buf
        self.n = n
        self.processed += n
        self.series.new_block()
        if b"\x00" in buf:
            self.nul += buf.count(b"\x00")
        if not buf.isascii():
            try:
                buf.decode("utf-8")
            except UnicodeDecodeError:
                self.bad += buf.decode("utf-8", "replace").count("\ufffd") - buf.count(b"\xef\xbf\xbd")
        if self.first_buf:
            self._first_block(buf)
        if _RANK_FINDER.engine == "ahocorasick_rs":
            has_rank = bool(_RANK_FINDER.positions(buf))
        else:
            has_rank = any(lit in buf for lit in _RANK_LITERALS)
        if has_rank:
            self.ranks.update(int(r) for r in set(_RANK_FIND.findall(buf)))
        if self.label_mode == lt.LABEL_SRUN:
            self.ranks.update(int(r) for r in set(_LABEL_FIND.findall(buf)))
        elif self.label_mode == lt.LABEL_BRACKET:
            self.ranks.update(int(r) for r in set(_BRACKET_FIND.findall(buf)))
        self.has_cr = b"\r" in buf
        self.nl_next = -1
        self.nl_pos = 0
        self.nl_count = 0
        self.bar_scan = 0
        self._index_timestamps(buf)

        entries = [p << 3 | _PAT for p in self.compiled.finder.positions(buf)]
        if self.compiled.finder_icase.literals:
            entries.extend(p << 3 | _PAT for p in self.compiled.finder_icase.positions(buf.lower()))
        for finder in _TRIGGERS:
            entries.extend(p << 3 | _TRIG for p in finder.positions(buf))
        i = buf.find(b"\x1b")
        while i >= 0:
            entries.append(i << 3 | _TRIG)
            i = buf.find(b"\x1b", i + 1)
        if self.every_bar:
            for lit in (b"it/s", b"s/it"):
                i = buf.find(lit)
                while i >= 0:
                    entries.append(i << 3 | _BAR)
                    i = buf.find(lit, i + 4)
        else:
            entries.extend(p << 3 | _BAR for p in range(BAR_STRIDE, n, BAR_STRIDE))
        entries.sort()
        self._walk(buf, entries)

        self._advance_bars(n)
        if self.ts_index is not None:
            if self.ts_index[1]:
                self.ts_prev = self.ts_index[1][-1]
                if self.first_wall is None:
                    self.first_wall = self.ts_index[1][0]
        else:
            if self.first_wall is None:
                self.first_wall = lt.first_timestamp(buf, self.year)
            found = lt.last_timestamp(buf, 0, n, self.year)
            if found is not None:
                self.ts_prev = found[1]
        if self.ts_prev is not None:
            self.last_wall = self.ts_prev
        total_nl = self.nl_count + buf.count(b"\n", self.nl_pos)  # the walk counted up to nl_pos
        self._update_tail(buf, total_nl)
        self.lines_before += total_nl
        self.base += n + max(0, skip_len)

    def _first_block(self, buf: bytes) -> None:
        self.first_buf = False
        first_lines = buf[: 1 << 20].split(b"\n", 200)[:200]
        self.label_mode = lt.detect_label_mode(first_lines)
        for raw in first_lines:
            if len(self.head) >= HEAD_LINES:
                break
            self.head.append(self._display(raw))

    def _display(self, raw: bytes) -> str:
        """What a terminal shows of a line: its last non-empty ``\\r`` segment, cleaned."""
        segs = [s for s in raw[:lt.MAX_SEGMENT_BYTES].split(b"\r") if s.strip()]
        text, _ = lt.clean(segs[-1] if segs else b"", self.label_mode)
        return lt.cap(text)

    def _update_tail(self, buf: bytes, total_nl: int) -> None:
        end = len(buf)
        if buf.endswith(b"\n"):
            end -= 1
            total_nl -= 1
        lineno = self.lines_before + total_nl + 1
        lines: list[tuple[int, bytes]] = []
        while len(lines) < TAIL_LINES:
            start = buf.rfind(b"\n", 0, end) + 1
            lines.append((lineno, buf[start:end]))
            if start == 0:
                break
            end = start - 1
            lineno -= 1
        lines.reverse()
        # a block that ended inside a line (at a "\r") left that line's start in the tail
        while self.tail and self.tail[-1][0] >= lines[0][0]:
            self.tail.pop()
        for ln, raw in lines:
            self.tail.append((ln, self._display(raw)))

    # ------------------------------------------------------------------ segments

    def _offset(self, s: int) -> int:
        return self.base + s + (self.skip_len if 0 <= self.skip_at <= s else 0)

    def _lineno(self, pos: int) -> int:
        if pos >= self.nl_pos:
            self.nl_count += self.buf.count(b"\n", self.nl_pos, pos)
            self.nl_pos = pos
            return self.lines_before + self.nl_count + 1
        return self.lines_before + self.nl_count - self.buf.count(b"\n", pos, self.nl_pos) + 1

    def _seg_start(self, pos: int, lo: int) -> int:
        buf = self.buf
        r = buf.rfind(b"\n", lo, pos)
        if self.has_cr:
            r = max(r, buf.rfind(b"\r", max(lo, r + 1), pos))
        return r + 1 if r >= 0 else lo

    def _seg_end(self, pos: int) -> int:
        buf = self.buf
        if self.nl_next < pos:
            self.nl_next = buf.find(b"\n", pos)
            if self.nl_next < 0:
                self.nl_next = self.n
        e = self.nl_next
        if self.has_cr:
            r = buf.find(b"\r", pos, e)
            if r >= 0:
                e = r
        return e

    def _walk(self, buf: bytes, entries: list[int]) -> None:
        n = self.n
        idx = 0
        done = 0
        every = self.compiled.every_segment
        ne = len(entries)
        while True:
            if every or self.tb.active or self.cf.active or self.cfg.active:
                if done >= n:
                    break
                e = self._seg_end(done)
                flags = _PAT | _TRIG
                while idx < ne and entries[idx] >> 3 <= e:
                    flags |= entries[idx] & 7
                    idx += 1
                self._segment(done, e, flags, slow=True)
                done = e + 1
                continue
            if idx >= ne:
                break
            pos = entries[idx] >> 3
            if pos >= n:
                break
            s = self._seg_start(pos, done)
            e = self._seg_end(pos)
            flags = 0
            while idx < ne and entries[idx] >> 3 <= e:
                flags |= entries[idx] & 7
                idx += 1
            if not (buf[s] == 123 and not flags & _PAT and self._fast_dict(s, e)):  # 123: "{"
                self._segment(s, e, flags, slow=False)
            done = e + 1
            if self.templates and idx < ne and entries[idx] & 7 == _TRIG:
                idx, done = fast_run(self, entries, idx, done)

    def _segment(self, s: int, e: int, flags: int, slow: bool) -> None:
        raw = self.buf[s:min(e, s + lt.MAX_SEGMENT_BYTES)]
        if not slow and flags == _BAR:
            self._advance_bars(e)
            return
        text, rank = lt.clean(raw, self.label_mode)
        if rank is not None:
            self.ranks.add(rank)
        lineno = self._lineno(s)
        if flags & _PAT or (flags & _TRIG and b"\x1b" in raw):
            found = self.hits.candidates(text)
            if found:
                step, wall = self._context(e)
                hit_rank = rank if rank is not None else self.file_rank
                for p, m in found:
                    self.hits.add(make_hit(p.key, self.rel, lineno, self._offset(s), text, m, hit_rank, wall, step))
        if flags & _TRIG or slow:
            if "{" in text:
                keys = self._dict_line(text, lineno, rank, e)
                if keys is not None and rank is None and raw[:1] == b"{" and len(self.templates) < MAX_TEMPLATES:
                    self._learn(keys, raw, text)
            low = text.lower() if ("t" in text or "T" in text) else ""
            if low and ("step" in low or "iter" in low or ("Epoch" in text and "[" in text)):
                self._step_line(text, lineno, rank, e)
            if self.cfg.active or " = " in text or "Overriding" in text or "*****" in text:
                self.cfg.feed(lineno, text)
            if slow or HEADER[:30] in text or "above exception" in text:
                if HEADER[:30] in text:
                    step, wall = self._context(e)
                else:
                    step = wall = None
                self.tb.feed(lineno, text, rank, step, wall)
            if self.cf.active or "Failures" in text or "Root Cause" in text:
                self.cf.feed(lineno, text)
        if flags & _BAR:
            self._advance_bars(e)

    # ------------------------------------------------------------------ context

    def _context(self, end: int) -> tuple[int | None, float | None]:
        self._advance_bars(end)
        return self.cur_step, self._wall_at(end)

    def _advance_bars(self, end: int) -> None:
        """Take the last training progress bar in [bar_scan, end) as the current step."""
        lo = self.bar_scan
        if end <= lo:
            return
        self.bar_scan = end
        buf = self.buf
        q = end
        for _ in range(_BAR_TRIES):
            q = max(buf.rfind(b"it/s", lo, q), buf.rfind(b"s/it", lo, q))
            if q < 0:
                return
            s = self._seg_start(q, lo)
            if self.max_total and self._fast_bar(s, q):
                return
            e = self._bar_end(q)
            text, rank = lt.clean(buf[s:min(e, s + 4096)], self.label_mode)
            bar = parse_bar(text)
            if bar is not None and bar.training:
                if bar.total and bar.epoch is None:
                    if bar.total > self.max_total:
                        self.max_total = bar.total
                        if self.max_steps_seen is None or bar.total > self.max_steps_seen:
                            self.max_steps_seen = bar.total
                    if bar.total < self.max_total:
                        q = s
                        continue
                if self.base + s > self.step_pos:
                    self.cur_step = bar.step
                    self.step_pos = self.base + s
                self._rate_points(bar, s, e, rank)
                return
            q = s

    def _fast_bar(self, s: int, q: int) -> bool:
        """The plain training bar (no description, no postfix, the known total), from bytes."""
        buf = self.buf
        m = _BAR_FAST.search(buf, max(s, q - 80), q + 5)
        if m is None or int(m.group(2)) != self.max_total or not _BAR_NODESC.match(buf, s):
            return False
        step = int(m.group(1))
        if self.base + s > self.step_pos:
            self.cur_step = step
            self.step_pos = self.base + s
        if step != self.last_rate_step and m.group(3) != b"?":
            self.last_rate_step = step
            self.series.add_one("it/s" if m.group(4) == b"it/s" else "s/it", float(m.group(3)), step,
                                self._lineno(s), self._wall_at(m.end()), None)
        return True

    def _bar_end(self, q: int) -> int:
        """End of the bar segment at ``q``; bars are short, so look no further than 4 KB."""
        hi = min(self.n, q + 4096)
        if self.has_cr:
            r = self.buf.find(b"\r", q, hi)
            hi = r if r >= 0 else hi
        e = self.buf.find(b"\n", q, hi)
        return hi if e < 0 else e

    def _rate_points(self, bar, s: int, e: int, rank: int | None) -> None:  # type: ignore[no-untyped-def]
        step = bar.step
        if step == self.last_rate_step:
            return
        self.last_rate_step = step
        tags = [t for t, _ in bar.postfix]
        values = [v for _, v in bar.postfix]
        if bar.rate is not None and bar.unit:
            tags.insert(0, bar.unit)
            values.insert(0, bar.rate)
        if tags:
            self.series.add_line(tags, values, step, self._lineno(s), self._wall_at(e), rank)

    def _index_timestamps(self, buf: bytes) -> None:
        pos: list[int] = []
        vals: list[float] = []
        self.ts_index: tuple[list[int], list[float]] | None = (pos, vals)
        self.ts_scanned = 0
        self.ts_lazy = None
        items: list[tuple[int, float]] = []
        for rx, conv in ((lt._TS_ISO, lt._iso_at), (lt._TS_GLOG, None)):
            for i, m in enumerate(_ts_matches(rx, buf)):
                if i >= _TS_INDEX_LIMIT:
                    self.ts_index = None
                    return
                t = conv(buf, m) if conv is not None else lt._glog_at(buf, m, self.year)
                if t is not None:
                    items.append((m.start(), t))
        items.sort()
        pos.extend(p for p, _ in items)
        vals.extend(v for _, v in items)

    def _wall_at(self, end: int) -> float | None:
        if self.ts_index is not None:
            pos, vals = self.ts_index
            i = bisect.bisect_left(pos, end)
            return vals[i - 1] if i else self.ts_prev
        if end > self.ts_scanned:
            found = lt.last_timestamp(self.buf, self.ts_scanned, end, self.year)
            self.ts_scanned = end
            if found is not None:
                self.ts_lazy = found[1]
                return found[1]
        return self.ts_lazy if self.ts_lazy is not None else self.ts_prev

    # ------------------------------------------------------------------ series

    def _fast_dict(self, s: int, e: int) -> bool:
        """A dict segment in a learnt layout: what :meth:`_segment` does for it, from bytes."""
        buf = self.buf
        for t, ids, _ in self.templates:
            m = t.rx.fullmatch(buf, s, e)
            if m is not None:
                tpl, tids = t, ids
                break
        else:
            return False
        lineno = self._lineno(s)
        self._advance_bars(e)
        step = self.cur_step
        if tpl.is_train:
            self.dict_count += 1
        if self.step_pos < 0:  # as in _dict_line: no bar or step line yet
            step = None if self.after_gap else self.dict_count
            if tpl.is_train:
                self.cur_step = step
        self.series.add_ids(tids, m.groups(), step, lineno, self._wall_at(e), None)
        return True

    def _learn(self, keys: list[str], raw: bytes, text: str) -> None:
        tpl = dict_template(keys, text[1:2])
        # learnt only when the segment really has that layout (same keys, nothing else)
        if tpl is not None and tpl.rx.fullmatch(raw) and all(t.rx.pattern != tpl.rx.pattern
                                                             for t, _, _ in self.templates):
            self.templates.append((tpl, self.series.tag_ids(tpl.keys), combo(tpl.rx)))

    def _dict_line(self, text: str, lineno: int, rank: int | None, e: int) -> list[str] | None:
        parsed = parse_dict_record(text)
        if parsed is None:
            return None
        keys, values, own_step = parsed
        self._advance_bars(e)
        is_train = "loss" in keys
        if is_train:
            self.dict_count += 1
        step = self.cur_step
        if own_step is not None:  # the dict says its step: better than any bar
            step = self.cur_step = own_step
            self.step_pos = self.base + e
        elif self.step_pos < 0:  # no bar or step line yet: HF does not print the step
            # after a skipped middle the count of dicts is no step any more
            step = None if self.after_gap else self.dict_count
            if is_train:
                self.cur_step = step
        self.series.add_line(keys, values, step, lineno, self._wall_at(e), rank)
        return keys if own_step is None else None

    def _step_line(self, text: str, lineno: int, rank: int | None, e: int) -> None:
        sl = parse_step_line(text)
        if sl is None:
            return
        self._advance_bars(e)
        step = self.epoch_guard.step(sl)  # None once steps are seen to restart every epoch
        self.cur_step = step
        self.step_pos = self.base + e
        if sl.total and (self.max_steps_seen is None or sl.total > self.max_steps_seen):
            self.max_steps_seen = sl.total
        self.series.add_line([k for k, _ in sl.values], [v for _, v in sl.values], step, lineno,
                             self._wall_at(e), rank)

    def skip_middle(self, tail_start: int, middle_lines: int) -> None:
        """Continue at file offset ``tail_start`` after ``middle_lines`` unread lines (max_bytes):
        what was open in the head is closed, and the head's step and time do not carry over."""
        self.tb.close()
        self.cf.close()
        self.cfg.block_left = 0
        self.lines_before += middle_lines
        self.base = tail_start
        self.cur_step = None
        self.ts_prev = None
        self.tail.clear()
        self.after_gap = True

    # ------------------------------------------------------------------ result

    def finish(self, scan: LogScan) -> None:
        self.tb.close()
        self.cf.close()
        scan.hits = self.hits.results()
        scan.tracebacks = self.tb.results()
        scan.child_failures = list(self.cf.results)
        scan.config = self.cfg.entries
        scan.series = self.series  # type: ignore[assignment]  # a Sequence[SeriesPoint], in columns
        scan.head = self.head
        scan.tail = list(self.tail)
        scan.first_wall_time = self.first_wall
        scan.last_wall_time = self.last_wall
        scan.last_step = self.cur_step
        scan.max_steps_seen = self.max_steps_seen
        scan.ranks_seen = tuple(sorted(self.ranks))
        if scan.rank is None and len(self.ranks) == 1:
            scan.rank = next(iter(self.ranks))
        if self.processed:
            scan.binary_fraction = min(1.0, (self.nul + self.bad) / self.processed)
        notes = []
        if self.series.stride > 1:
            notes.append(f"series thinned to every {self.series.stride}th line to bound memory")
        if self.hits.timeouts:
            notes.append(f"{self.hits.timeouts} regex searches timed out on hostile lines")
        if self.compiled.errors:
            notes.append("patterns not compiled: " + ", ".join(sorted(self.compiled.errors)))
        if notes:
            scan.note = "; ".join(([scan.note] if scan.note else []) + notes)


def _feed(scanner: _Scanner, blocks: Iterator[bytes]) -> bool:
    """Cut blocks at their last separator and hand whole segments to the scanner.

    Returns whether the data ended with a line that has no ``\\n``. A line longer than a
    block keeps only its first 64 KB (the rest is read and dropped, not searched).
    """
    carry, dropped, last_byte = feed_blocks(scanner, blocks)
    if carry:
        scanner.block(carry, len(carry) if dropped else -1, dropped)
    return bool(last_byte) and last_byte != b"\n"


def feed_blocks(scanner: _Scanner, blocks: Iterator[bytes], carry: bytes = b"",
                dropped: int = 0) -> tuple[bytes, int, bytes]:
    """The work of :func:`_feed` without the end: returns the bytes after the last separator
    (not scanned yet), how many bytes of that over-long segment were dropped, and the last
    byte read. ``carry`` (and ``dropped``): what an earlier call returned, when the input
    goes on in more than one call."""
    last_byte = b""
    for block in blocks:
        last_byte = block[-1:]
        cut = max(block.rfind(b"\n"), block.rfind(b"\r"))
        if cut < 0:
            room = lt.MAX_SEGMENT_BYTES - len(carry)
            if room > 0:
                carry += block[:room]
            dropped += max(0, len(block) - max(room, 0))
            continue
        if dropped:
            nl, cr = block.find(b"\n"), block.find(b"\r")
            first = min(x for x in (nl, cr) if x >= 0)
            skip_at, skip_len = len(carry), dropped + first
            buf = carry + block[first:cut + 1]
        else:
            skip_at, skip_len = -1, 0
            # one copy (join of a view), not two (slice, then concatenation)
            buf = block if not carry and cut + 1 == len(block) else b"".join((carry, memoryview(block)[:cut + 1]))
        scanner.block(buf, skip_at, skip_len)
        carry = block[cut + 1:]
        dropped = max(0, len(carry) - lt.MAX_SEGMENT_BYTES)
        carry = carry[: lt.MAX_SEGMENT_BYTES]
    return carry, dropped, last_byte


def scan_log(fs_path: Path, rel_path: str, compiled: CompiledPatterns, *, max_bytes: int,
             rank: int | None) -> LogScan:
    """Scan one text log in a single streaming pass; never raises (see the module docstring)."""
    scan = LogScan(path=rel_path, size=0, bytes_read=0, n_lines=0, rank=rank)
    gc_was_on = gc.isenabled()
    gc.disable()  # the scan makes no reference cycles; collections only cost time
    try:
        return _scan(fs_path, rel_path, compiled, max_bytes, scan)
    finally:
        if gc_was_on:
            gc.enable()


def _scan(fs_path: Path, rel_path: str, compiled: CompiledPatterns, max_bytes: int, scan: LogScan) -> LogScan:
    rank = scan.rank
    try:
        fd = os.open(fs_path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        scan.status = ParseStatus.UNREADABLE
        scan.note = f"cannot open: {exc.strerror or exc}"
        return scan
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            scan.status = ParseStatus.UNREADABLE
            scan.note = "not a regular file (FIFO, socket or device): not read"
            return scan
        scan.size = st.st_size
        # Read what the file held when opened: a log that grows while it is read (training still
        # running) gives a consistent snapshot, and a fast writer cannot keep the scan going.
        limit = max(0, min(int(max_bytes), st.st_size))
        # over the budget: read the head and the tail (the crash is at the end), skip the middle
        window = log_window.plan(fd, st.st_size, max_bytes)
        approx_from: int | None = None
        year = time.gmtime(st.st_mtime).tm_year if st.st_mtime > 0 else time.gmtime().tm_year
        scanner = _Scanner(rel_path, compiled, rank, st.st_size, year)
        counted = _Counter(_blocks(fd, limit if window is None else window.head_end))
        stream: Iterator[bytes] = counted
        first = next(counted, b"")
        kind = _utf16_kind(first) if first else None
        if kind:
            stream = _transcode(first, counted, kind)
            scanner.note = f"decoded as {kind.upper()}; offsets count UTF-8 bytes"
        else:
            stream = _chain(first, counted)
        notes = [scanner.note] if scanner.note else []
        par = None
        if window is None and log_parallel.usable(st.st_size, limit):
            par = log_parallel.plan(fd, limit, BLOCK)
        try:
            if par is not None:
                counted.it = _chain(first, _blocks(fd, par.chunk_start - len(first)))
                counted.total = 0
                def make() -> _Scanner:
                    return _Scanner(rel_path, compiled, rank, st.st_size, year)

                unterminated, extra = log_parallel.scan(fd, scanner, limit, make, counted, par, BLOCK)
                counted.total += extra
            else:
                unterminated = _feed(scanner, stream)
            if window is not None and not kind and window.tail_start < window.size:
                middle, exact = log_window.middle_newlines(fd, window)
                scanner.skip_middle(window.tail_start, middle)
                if not exact:
                    approx_from = scanner.lines_before + 1
                os.lseek(fd, window.tail_start, os.SEEK_SET)
                counted.it = _blocks(fd, window.size - window.tail_start)
                unterminated = _feed(scanner, counted)
        except OSError as exc:
            scan.status = ParseStatus.TRUNCATED
            notes.append(f"read error after {counted.total:,} bytes: {exc.strerror or exc}")
            unterminated = False
        scan.bytes_read = counted.total
        scan.n_lines = scanner.lines_before + (1 if unterminated else 0)
        if scan.status is ParseStatus.OK and scan.size > limit:
            scan.status = ParseStatus.TRUNCATED
            if window is not None and not kind:
                notes.insert(0, window.note(approx_from))
                scan.approx_lines_from = approx_from
            else:
                notes.insert(0, f"read only the first {scan.bytes_read:,} bytes of {scan.size:,}")
        scan.note = "; ".join(notes) or None
        scanner.finish(scan)
    except Exception as exc:  # the contract is "never raise"; keep what was read
        scan.status = ParseStatus.TRUNCATED if scan.bytes_read else ParseStatus.UNREADABLE
        scan.note = f"scanner stopped: {type(exc).__name__}: {exc}"
    finally:
        os.close(fd)
    return scan


class _Counter:
    """Iterator over blocks that counts the raw bytes it handed out."""

    def __init__(self, it: Iterator[bytes]) -> None:
        self.it = it
        self.total = 0

    def __iter__(self) -> _Counter:
        return self

    def __next__(self) -> bytes:
        b = next(self.it)
        self.total += len(b)
        return b


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


def scan_text(text: str | bytes, compiled: CompiledPatterns | None = None, *, rel_path: str = "test.log",
              rank: int | None = None) -> LogScan:
    """Scan an in-memory log (tests, notebooks): same code path as :func:`scan_log`."""
    import tempfile

    data = text.encode("utf-8") if isinstance(text, str) else text
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "log.txt"
        p.write_bytes(data)
        return scan_log(p, rel_path, compiled or compile_patterns(()), max_bytes=1 << 40, rank=rank)
