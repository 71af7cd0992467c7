"""The log scanner's state machine: one block at a time, only the candidate segments in Python.

Per block it does only C-level work over the whole bytes: counts ``\\n``, NUL and invalid
UTF-8 bytes; finds candidate segments with two multi-literal searches (the literals of
every pattern rule, and a fixed set of triggers); then decodes, cleans and hands only those
segments to the handlers (hits, HF dicts and step lines, config dumps, tracebacks,
torchrun failure reports). While a traceback or a report is open every segment is handled
(slow mode), until it closes. Dict lines in a layout seen before go the byte-level fast
path (:mod:`log_fast`). Where a position is (line, step, time): :class:`BlockContext`.
"""

from __future__ import annotations

import dataclasses
import re
from collections import deque

from autopsy.model import ParseStatus
from autopsy.parsers import log_match, log_metrics
from autopsy.parsers import log_text as lt
from autopsy.parsers.log_child_failures import ChildFailureTracker
from autopsy.parsers.log_config import TRIGGERS as CONFIG_TRIGGERS
from autopsy.parsers.log_config import LogConfigTracker
from autopsy.parsers.log_context import BlockContext
from autopsy.parsers.log_fast import combo, fast_run
from autopsy.parsers.log_match import CompiledPatterns, HitCollector, LiteralFinder, make_hit
from autopsy.parsers.log_series import (
    DictTemplate,
    EpochStepGuard,
    SeriesStore,
    bar_only,
    custom_unit_bar,
    dict_template,
    parse_dict_record,
    parse_step_line,
    without_bar_postfix,
)
from autopsy.parsers.log_tracebacks import HEADER, TracebackTracker
from autopsy.parsers.metric_reader import MetricReader
from autopsy.parsers.types import LogScan

HEAD_LINES = 20
TAIL_LINES = 50
BAR_STRIDE = 32 << 10
EVERY_BAR_BELOW = 1 << 20  # files smaller than this get a rate point from every bar
MAX_TEMPLATES = 8  # dict key layouts read by the fast path (HF prints one or two)

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


class LogScanner(BlockContext):
    """One log's scan state: fed whole segments by :func:`log_blocks.feed_blocks`, read by ``finish``."""

    def __init__(self, rel_path: str, compiled: CompiledPatterns, rank: int | None, size: int, year: int) -> None:
        self.rel = rel_path
        self.compiled = compiled
        self.file_rank = rank
        self.year = year
        self.year_seen: int | None = None
        self.ts_years: int | None = None
        self.every_bar = size < EVERY_BAR_BELOW
        self.hits = HitCollector(rel_path, compiled)
        self.tb = TracebackTracker(rel_path)
        self.cf = ChildFailureTracker(rel_path)
        self.cfg = LogConfigTracker(rel_path)
        self.epoch_guard = EpochStepGuard()
        self.size = size
        self.reader = MetricReader()  # open-world metric lines (log_metrics), learnt from the first block
        self.reader_learnt = False
        self.reader_count = 0
        self.metric_finder: LiteralFinder | None = None
        self.max_epochs_seen: int | None = None
        self.step_line_epoch: int | None = None  # the highest epoch counter on a step line
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
        self.counted = False  # some step was a dict ordinal (LogScan.steps_inferred)
        self.last_rate_step: int | None = None
        self.last_rate_tags: tuple[int | None, frozenset[str | None]] = (None, frozenset())
        self.last_rate_records = -1  # the series store's record count right after the last bar line
        self.first_wall: float | None = None
        self.last_wall: float | None = None
        self.ts_prev: float | None = None  # last timestamp of earlier blocks
        self.ts_prev_line: int | None = None  # and its line
        self.ts_prev_step: int | None = None  # and the step current there (None: not known)
        self.ts_step: tuple[int, int | None] = (-1, None)  # (file position, step there) of the last indexed
        self.ts_lazy: float | None = None
        self.ts_lazy_pos = -1
        self.wall_src = -1
        self.wall_src_line = (-1, 0)
        self.note: str | None = None
        self.skip_at = -1  # a block holding an over-long line: positions >= skip_at map
        self.skip_len = 0  # to file offsets skip_len further on (the dropped middle)

    # ------------------------------------------------------------------ per block

    def block(self, buf: bytes, skip_at: int = -1, skip_len: int = 0) -> None:
        n = len(buf)
        year_before = self.year_seen  # lazy timestamp lookups move year_seen within the block
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
        if self.metric_finder is not None:
            entries.extend(p << 3 | _TRIG for p in self.metric_finder.positions(buf))
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
                self.ts_prev_line = self._lineno(self.ts_index[0][-1])
                # _advance_bars(n) just passed the block's last timestamp and noted the step there
                last_pos = self.base + self.ts_index[0][-1]
                self.ts_prev_step = self.ts_step[1] if self.ts_step[0] == last_pos else None
                if self.first_wall is None:
                    self.first_wall = self.ts_index[1][0]
            if self.ts_years is not None:
                self.year_seen = self.ts_years
        else:
            if self.first_wall is None:
                self.first_wall = lt.first_timestamp(buf, self.year, year_before=year_before)
            found = lt.last_timestamp(buf, 0, n, self.year, self.year_seen)
            if found is not None:
                self.ts_prev = found[1]
                self.ts_prev_line = self._lineno(found[0])
                self.ts_prev_step = None  # dense blocks are not indexed: the step there is not known
                if found[2] is not None:
                    self.year_seen = found[2]
        if self.ts_prev is not None:
            self.last_wall = self.ts_prev
        total_nl = self.nl_count + buf.count(b"\n", self.nl_pos)  # the walk counted up to nl_pos
        self._update_tail(buf, total_nl)
        self.lines_before += total_nl
        self.base += n + max(0, skip_len)

    def _first_block(self, buf: bytes) -> None:
        self.first_buf = False
        log_metrics.learn(self, buf, self.size)
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
        return lt.cap(lt.split_glued(text)[-1])  # a message glued to a bar is what the line says last

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

    def _walk(self, buf: bytes, entries: list[int]) -> None:
        n = self.n
        idx = 0
        done = 0
        every = self.compiled.every_segment
        ne = len(entries)
        while True:
            if every or self.tb.active or self.cf.active or self.cfg.active or self.reader.active:
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
        # a shell's or scheduler's message glued to a progress bar: split only where hits or a traceback
        # are looked for (most segments are metric lines, which need neither)
        pieces: list[str] | None = None
        if flags & _PAT or (flags & _TRIG and b"\x1b" in raw):
            pieces = lt.split_glued(text)
            for piece in pieces:
                found = self.hits.candidates(piece)
                if self.hits.exhausted and self.hits.exhausted_at is None:
                    self.hits.exhausted_at = lineno
                if found:
                    step, wall = self._context(e)
                    wall_line = self._wall_line()
                    wall_step = self._wall_step()
                    hit_rank = rank if rank is not None else self.file_rank
                    for p, m in found:
                        self.hits.add(make_hit(p.key, self.rel, lineno, self._offset(s), piece, m, hit_rank, wall,
                                               step, wall_line, wall_step))
        if flags & _TRIG or slow:
            taken = False
            if "{" in text:
                keys, taken = self._dict_line(text, lineno, rank, e)
                if keys is not None and rank is None and raw[:1] == b"{" and len(self.templates) < MAX_TEMPLATES:
                    self._learn(keys, raw, text)
            low = text.lower() if ("t" in text or "T" in text) else ""
            if not taken and low and ("step" in low or "iter" in low or ("Epoch" in text and "[" in text)) \
                    and not self.reader.claims(text):
                taken = self._step_line(text, lineno, rank, e)
            if not taken:
                reader_text: str | None = text
                if "it/s" in text or "s/it" in text:
                    stripped = without_bar_postfix(text)
                    if stripped is not text:  # a training bar's postfix: its metrics, at its global step
                        self._advance_bars(e)
                        reader_text = None if bar_only(text) else stripped
                elif "/s" in text and (cbar := custom_unit_bar(text)) is not None:
                    self._advance_bars(e)  # (an it/s bar before it, then this one's step and postfix)
                    if self.base + s > self.step_pos:
                        self.cur_step = cbar.step
                        self.step_pos = self.base + s
                    self._rate_points(dataclasses.replace(cbar, rate=None, unit=None), s, e, rank)
                    reader_text = None if bar_only(text) else without_bar_postfix(text)
                # a Keras bar redrawn right after: same epoch step, its running means superseded
                if reader_text is not None and not (lt.keras_redrawn(self.buf, e) and lt.KERAS_BAR.match(text)):
                    log_metrics.read_segment(self, reader_text, lineno, rank, e)
            if self.cfg.active or " = " in text or "Overriding" in text or "*****" in text:
                self.cfg.feed(lineno, text)
            if slow or HEADER[:30] in text or "above exception" in text:
                if HEADER[:30] in text:
                    step, wall = self._context(e)
                else:
                    step = wall = None
                for piece in (pieces if pieces is not None else lt.split_glued(text)):
                    self.tb.feed(lineno, piece, rank, step, wall)
            if self.cf.active or "Failures" in text or "Root Cause" in text:
                self.cf.feed(lineno, text)
        if flags & _BAR:
            self._advance_bars(e)


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
            self.counted = self.counted or step is not None
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

    def _dict_line(self, text: str, lineno: int, rank: int | None, e: int) -> tuple[list[str] | None, bool]:
        """(keys to learn a template from, whether the segment was a metrics dict)."""
        parsed = parse_dict_record(text)
        if parsed is None:
            return None, False
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
            self.counted = self.counted or step is not None
            if is_train:
                self.cur_step = step
        self.series.add_line(keys, values, step, lineno, self._wall_at(e), rank)
        return (keys if own_step is None else None), True

    def _step_line(self, text: str, lineno: int, rank: int | None, e: int) -> bool:
        sl = parse_step_line(text)
        if sl is None:
            return False
        self._advance_bars(e)
        step = self.epoch_guard.step(sl)  # None once steps are seen to restart every epoch
        if sl.epoch is not None and (self.step_line_epoch is None or sl.epoch > self.step_line_epoch):
            self.step_line_epoch = sl.epoch
        self.cur_step = step
        self.step_pos = self.base + e
        if sl.total and (self.max_steps_seen is None or sl.total > self.max_steps_seen):
            self.max_steps_seen = sl.total
        self.series.add_line([k for k, _ in sl.values], [v for _, v in sl.values], step, lineno,
                             self._wall_at(e), rank)
        return True

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
        self.ts_prev_line = None
        self.ts_prev_step = None
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
        scan.max_epochs_seen = self.max_epochs_seen
        scan.last_epoch_seen = self.reader.last_epoch if self.reader.last_epoch is not None else self.step_line_epoch
        scan.last_epoch_unfinished = self.reader.epoch_unfinished
        # no real step ever seen: every step given was a dict ordinal. (Ordinals before a later
        # bar or step line stay as they are: rare, and the real steps after them are right.)
        scan.steps_inferred = self.counted and self.step_pos < 0
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
        if self.hits.exhausted_at is not None:
            notes.append(f"regex budget of {log_match.REGEX_BUDGET_S:g} s spent at line {self.hits.exhausted_at:,}: "
                         "the rest of the file was read but not searched for failure patterns (partly searched)")
            if scan.status is ParseStatus.OK:
                scan.status = ParseStatus.TRUNCATED
        if self.compiled.errors:
            notes.append("patterns not compiled: " + ", ".join(sorted(self.compiled.errors)))
        if notes:
            scan.note = "; ".join(([scan.note] if scan.note else []) + notes)
