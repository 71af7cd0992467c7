"""Where a position of the log scanner's current block is: its line, segment, step and time.

:class:`BlockContext` is the base of the scanner (:mod:`log_scanner`), which sets every
attribute declared here. Line numbers are counted forward from the last position asked
(positions come in order). The step and wall time of a hit are resolved lazily, in position
order: progress bars are found by searching *backwards* for ``it/s``/``s/it`` from the
event (``rfind``), so the millions of tqdm redraws of a long run are never parsed one by
one; rate points (``it/s``/``s/it``, Lightning postfix metrics) are sampled at those
lookups. Timestamps are indexed per block (ISO, ``[...]``, glog, torchrun) with regexes
anchored on a literal, or looked up backwards when a block is densely timestamped.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator

from autopsy.parsers import log_text as lt
from autopsy.parsers.log_match import LiteralFinder
from autopsy.parsers.log_series import MAX_STEP, Bar, SeriesStore, parse_bar

_TS_INDEX_LIMIT = 2000  # timestamps per block indexed up front; denser blocks look back lazily
_BAR_TRIES = 32
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


class BlockContext:
    """Positions of the current block: line numbers, segments, and the step and time there."""

    # the scanner's state that these methods read and move (set in LogScanner)
    year: int  # the file's mtime year: glog lines' year when the log holds no full date
    year_seen: int | None  # year of the last full-date timestamp read (dates glog lines)
    ts_years: int | None  # year of the current block's last full-date timestamp (indexed blocks)
    label_mode: int
    series: SeriesStore
    buf: bytes
    n: int
    has_cr: bool
    base: int
    skip_at: int
    skip_len: int
    lines_before: int
    nl_next: int
    nl_pos: int
    nl_count: int
    bar_scan: int
    cur_step: int | None
    step_pos: int
    max_total: int
    max_steps_seen: int | None
    last_rate_step: int | None
    last_rate_tags: tuple[int | None, frozenset[str | None]]
    last_rate_records: int
    ts_index: tuple[list[int], list[float]] | None
    ts_scanned: int
    ts_prev: float | None
    ts_prev_line: int | None  # line of ts_prev (earlier blocks)
    ts_prev_step: int | None  # step current at ts_prev's line (None: not known)
    ts_step: tuple[int, int | None]  # (file position, step current there) of the last indexed timestamp passed
    ts_lazy: float | None
    ts_lazy_pos: int
    wall_src: int  # block position of the timestamp the last _wall_at gave; -1: ts_prev (earlier blocks)
    wall_src_line: tuple[int, int]  # (wall_src, its line): asked once per timestamp, not once per hit

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


    # ------------------------------------------------------------------ context

    def _context(self, end: int) -> tuple[int | None, float | None]:
        self._advance_bars(end)
        return self.cur_step, self._wall_at(end)

    def _advance_bars(self, end: int) -> None:
        """Take the last training progress bar in [bar_scan, end) as the current step."""
        lo = self.bar_scan
        if end <= lo:
            return
        self._note_ts_step(lo, end)
        self.bar_scan = end
        buf = self.buf
        q = end
        for _ in range(_BAR_TRIES):
            q = max(buf.rfind(b"it/s", lo, q), buf.rfind(b"s/it", lo, q))
            if q < 0:
                return
            s = self._seg_start(q, lo)
            if buf.find(b"[", s, q) < 0:
                # no bar: tqdm's unit sits inside its brackets, after the '[' (an open-world
                # "54.8 ms/iter" or "bits/s" line is no bar, and parse_bar's regex would say so slowly)
                q = s
                continue
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

    def _note_ts_step(self, lo: int, end: int) -> None:
        """Note the step current at the last indexed timestamp in [lo, end), before the bars after it
        move the step on: a timestamp many steps before a hit does not date it (tqdm redraws a bar
        with \r, so hundreds of steps can sit on one physical line)."""
        if self.ts_index is None:
            return
        pos = self.ts_index[0]
        i = bisect.bisect_left(pos, end)
        if not i or pos[i - 1] < lo:
            return
        ts = pos[i - 1]
        self.ts_step = (self.base + ts, self._peek_step(lo, ts))

    def _peek_step(self, lo: int, end: int) -> int | None:
        """The step of the last training bar in [lo, end), else the current one; moves nothing."""
        buf = self.buf
        q = end
        for _ in range(_BAR_TRIES):
            q = max(buf.rfind(b"it/s", lo, q), buf.rfind(b"s/it", lo, q))
            if q < 0:
                break
            s = self._seg_start(q, lo)
            if self.base + s <= self.step_pos:
                break  # a step line or dict after this bar set the current step
            if buf.find(b"[", s, q) < 0:  # no bar (see _advance_bars)
                q = s
                continue
            text, _ = lt.clean(buf[s:min(self._bar_end(q), s + 4096)], self.label_mode)
            bar = parse_bar(text)
            if bar is not None and bar.training and not (bar.total and bar.epoch is None
                                                         and bar.total < self.max_total):
                return bar.step
            q = s
        return self.cur_step

    def _fast_bar(self, s: int, q: int) -> bool:
        """The plain training bar (no description, no postfix, the known total), from bytes."""
        buf = self.buf
        m = _BAR_FAST.search(buf, max(s, q - 80), q + 5)
        if m is None or int(m.group(2)) != self.max_total or not _BAR_NODESC.match(buf, s):
            return False
        step = int(m.group(1))
        if step >= MAX_STEP:
            return False  # parse_bar refuses it too: not a bar
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

    def _rate_points(self, bar: Bar, s: int, e: int, rank: int | None) -> None:
        step = bar.step
        if bar.n == 0:  # nothing done under this bar yet: its postfix is the previous step's (a reset)
            self.last_rate_step, self.last_rate_tags = step, (step, frozenset())
            return
        pairs = list(bar.postfix)
        if bar.rate is not None and bar.unit:
            pairs.insert(0, (bar.unit, bar.rate))
        if step == self.last_rate_step:
            if step is None:
                return  # bars without a global step record nothing more
            # The same step drawn again, when the postfix changes. Which draw holds the step's own
            # values depends on the caller: Lightning's bar ("Epoch 3: ...") calls update(n) and
            # then set_postfix(step's metrics) in on_train_batch_end, so its first draw shows the
            # previous step's loss and the later one wins (in place, while the bar's line is the
            # last one stored); a plain loop's set_postfix runs before tqdm counts the iteration
            # (and gaussian-splatting's before update(10)), so there the first draw is the step's.
            # What a redraw adds (the epoch's last bar gains val_loss) is added; the fast paths
            # record the rate alone.
            seen_step, seen = self.last_rate_tags
            seen = seen if seen_step == step else frozenset({bar.unit})
            if seen_step == step and bar.epoch is not None and bar.epoch_known:
                ids = dict(zip(self.series.tag_ids([t for t, _ in pairs]), (v for _, v in pairs), strict=True))
                self.series.redraw_last(self.last_rate_records, ids, self._lineno(s), self._wall_at(e))
            pairs = [(t, v) for t, v in pairs if t not in seen]
            if not pairs:
                return
            self.last_rate_tags = (step, seen | {t for t, _ in pairs})
        else:
            self.last_rate_step = step
            self.last_rate_tags = (step, frozenset(t for t, _ in pairs))
        tags = [t for t, _ in pairs]
        values = [v for _, v in pairs]
        if tags:
            self.series.add_line(tags, values, step, self._lineno(s), self._wall_at(e), rank)
            self.last_rate_records = self.series.records

    def _index_timestamps(self, buf: bytes) -> None:
        pos: list[int] = []
        vals: list[float] = []
        self.ts_index = (pos, vals)
        self.ts_scanned = 0
        self.ts_lazy = None
        self.ts_lazy_pos = -1
        self.wall_src = -1
        self.wall_src_line = (-1, 0)
        self.ts_years = None
        items: list[tuple[int, float]] = []
        years = lt.YearContext(self.year, self.year_seen)
        for i, m in enumerate(_ts_matches(lt._TS_ISO, buf)):
            if i >= _TS_INDEX_LIMIT:
                self.ts_index = None
                return
            t = lt._iso_at(buf, m)
            if t is not None:
                items.append((m.start(), t))
                years.add(m.start(), lt.iso_year(buf, m))
        glogs = []
        for i, m in enumerate(_ts_matches(lt._TS_GLOG, buf)):
            if i >= _TS_INDEX_LIMIT:
                self.ts_index = None
                return
            glogs.append(m)
        items.extend(lt.glog_times(buf, glogs, years))
        if years.years:
            self.ts_years = years.years[-1]
        items.sort()
        pos.extend(p for p, _ in items)
        vals.extend(v for _, v in items)

    def _wall_at(self, end: int) -> float | None:
        if self.ts_index is not None:
            pos, vals = self.ts_index
            i = bisect.bisect_left(pos, end)
            self.wall_src = pos[i - 1] if i else -1
            return vals[i - 1] if i else self.ts_prev
        if end > self.ts_scanned:
            found = lt.last_timestamp(self.buf, self.ts_scanned, end, self.year, self.year_seen)
            self.ts_scanned = end
            if found is not None:
                if found[2] is not None:  # dated lines read so far date the glog lines after them
                    self.year_seen = found[2]
                self.ts_lazy = found[1]
                self.ts_lazy_pos = self.wall_src = found[0]
                return found[1]
        if self.ts_lazy is not None:
            self.wall_src = self.ts_lazy_pos
            return self.ts_lazy
        self.wall_src = -1
        return self.ts_prev

    def _wall_line(self) -> int | None:
        """The line of the timestamp the last :meth:`_wall_at` gave (None: no timestamp yet)."""
        src = self.wall_src
        if src < 0:
            return self.ts_prev_line
        if self.wall_src_line[0] != src:
            self.wall_src_line = (src, self._lineno(src))
        return self.wall_src_line[1]

    def _wall_step(self) -> int | None:
        """The step current at the timestamp the last :meth:`_wall_at` gave (None: not known)."""
        src = self.wall_src
        if src < 0:
            return self.ts_prev_step
        return self.ts_step[1] if self.ts_step[0] == self.base + src else None
