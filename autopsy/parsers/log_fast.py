"""The scanner's fast path for the line an HF Trainer log is made of.

About a million times per GB an HF log holds ``\\r``-redrawn tqdm bars followed by a
metrics dict: ``...\\r  5%|▌  | 50/1000 [00:10<03:10,  4.98it/s]\\r{'loss': 2.1, ...}\\n``.
The general walk (:meth:`log_scanner.LogScanner._segment`) decodes and cleans the dict, parses it
with ``findall``, then looks back for the bar (:meth:`log_context.BlockContext._advance_bars`). Here
a run of such dicts is handled straight from the bytes: one ``match`` of a learnt key
layout (:class:`log_series.DictTemplate`), two bounded ``rfind``-s and one ``match`` for
the bar, the scanner's context in local variables, the series columns appended directly.

It does exactly what the general walk does for these segments, and gives up (returning
where it stopped, before touching anything for that entry) on anything else: a pattern
literal or another trigger in the dict, a bar of another kind (description, other
total, eval bar), no bar, a traceback or report open. ``tests/test_logs_fast.py``
compares both paths on generated logs.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from typing import Any

from autopsy.parsers.log_store import _NO_STEP, MAX_STEP

_PAT, _TRIG = 1, 2


def combo(tpl_rx: re.Pattern[bytes]) -> re.Pattern[bytes]:
    """Bar, one blank redraw, then the dict of a template: HF's line, in one match."""
    return re.compile(_BAR_STRICT + rb"\r[ \t]*\r" + tpl_rx.pattern + rb"(?=[\r\n]|\Z)")
# The plain training bar from its segment start (the general path's _BAR_NODESC + _BAR_FAST):
# "  5%|▌         | 50/1000 [00:10<03:10,  4.98it/s]"
_BAR_AT = re.compile(rb" *\d{1,3}%\|[^\r\n]*?(\d+)/(\d+) \[[^\]\r\n,]{0,40},\s*(\d+(?:\.\d+)?|\?)(it/s|s/it)\]")
# The same bar, strict enough to be matched together with what follows it: nothing but
# the bar in its segment (no "/" before the count, no line break inside), ending at "]".
_BAR_STRICT = rb" *\d{1,3}%\|[^|/\r\n]*\| (\d+)/(\d+) \[[^\]\r\n,]{0,40},[ \t]*(\d+(?:\.\d+)?|\?)(it/s|s/it)\]"
_BAR_LOOKBACK = 80  # the general path searches the bar from at most this far before its rate


def _appenders(store: Any) -> tuple[Any, ...]:
    """The store's columns as bound methods; taken again after the store thins (it replaces them)."""
    cols = store.fast_columns()
    values = cols[7]
    return (values, *(c.append for c in cols[:7]), cols[6].extend, values.fromlist, values.append)


def fast_run(sc: Any, entries: list[int], idx: int, done: int) -> tuple[int, int]:
    """Handle consecutive plain dict entries from ``entries[idx]``; returns (idx, done) reached."""
    buf, n, base = sc.buf, sc.n, sc.base
    templates = sc.templates
    store = sc.series
    max_total = sc.max_total
    ts = sc.ts_index
    if not max_total or ts is None or sc.tb.active or sc.cf.active or sc.cfg.active:
        return idx, done  # no bar total known yet, lazily looked-up timestamps, slow mode
    ne = len(entries)
    rfind, count = buf.rfind, buf.count
    bar_at = _BAR_AT.match
    ts_pos, ts_vals = ts
    no_wall = math.nan if sc.ts_prev is None else sc.ts_prev
    total_b = str(max_total).encode()
    lo = sc.bar_scan
    cur_step, step_pos, last_rate = sc.cur_step, sc.step_pos, sc.last_rate_step
    nl_pos, nl_count, lines0 = sc.nl_pos, sc.nl_count, sc.lines_before + 1
    dict_count = sc.dict_count
    unit_tids: dict[bytes, int] = {}
    records, stride, cap = store.records, store.stride, store.cap
    kind_next = store.kind_next
    (values, a_start, a_step, a_lineno, a_wall, a_rank, a_rec, a_tag,
     extend_tags, values_fromlist, a_value) = _appenders(store)
    while idx < ne:
        ent = entries[idx]
        if ent & 7 != _TRIG:
            break
        p = ent >> 3
        if p == 0 or p < done or p < nl_pos or buf[p] != 123:
            break
        c = buf[p - 1]
        # HF's exact shape first: "\r<plain bar>\r<blank>\r{dict}", one regex from the bar's start
        m = None
        via_combo = False
        if c == 13:
            r2 = rfind(b"\r", lo, p - 1)
            r1 = rfind(b"\r", lo, r2) if r2 > lo else -1
            if r1 >= lo:
                for t, ids, crx in templates:
                    m = crx.match(buf, r1 + 1)
                    if m is not None:
                        tpl, tids = t, ids
                        break
        elif c != 10:
            break
        if m is not None:
            # the bar is the segment (r1, r2) and holds the last rate before the dict, with no
            # separator in it (see _BAR_STRICT): it is what _advance_bars + _fast_bar find
            g = m.groups()
            bar_n, bar_total, rate_b, unit, vals = g[0], g[1], g[2], g[3], g[4:]
            sb = r1 + 1
            bar_end = m.end(4) + 1
            if bar_end - 5 - _BAR_LOOKBACK > sb or bar_total != total_b:
                break
            bar_line_offset = 0
            via_combo = True
            e = m.end()
        else:
            for t, ids, _ in templates:
                m = t.rx.match(buf, p)
                if m is not None:
                    tpl, tids = t, ids
                    break
            else:
                break
            vals = m.groups()
            e = m.end()
            if e < n and buf[e] != 10 and buf[e] != 13:
                break
        j = idx + 1
        pat = False
        while j < ne and entries[j] >> 3 <= e:
            pat = pat or bool(entries[j] & _PAT)
            j += 1
        if pat:  # a pattern literal inside: the general path runs the regexes
            break
        if not via_combo:
            # the bar: what _advance_bars(e) finds when it ends in _fast_bar
            q = rfind(b"it/s", lo, e)
            q = max(q, rfind(b"s/it", max(lo, q), e))  # a "s/it" before the last "it/s" is no matter
            if q < 0:
                break
            r = rfind(b"\r", lo, q)
            sb = max(r, rfind(b"\n", max(lo, r + 1), q)) + 1
            if sb == 0:
                sb = lo
            if q - _BAR_LOOKBACK > sb:
                break
            bm = bar_at(buf, sb, q + 5)
            if bm is None or int(bm.group(2)) != max_total:
                break
            bar_n, _, rate_b, unit = bm.groups()
            bar_end = bm.end()
            bar_line_offset = count(b"\n", sb, p)
        if len(bar_n) > 18 and int(bar_n) >= MAX_STEP:
            break  # no step (the general path refuses such a bar): let it handle the line
        # ---- from here on the entry is ours: same effects as the general path, in its order
        nl_count += count(b"\n", nl_pos, p)
        nl_pos = p
        lineno = lines0 + nl_count
        lo = e
        step = int(bar_n)
        if base + sb > step_pos:
            cur_step = step
            step_pos = base + sb
        if step != last_rate and rate_b != b"?":
            last_rate = step
            rate = float(rate_b)
            ut = unit_tids.get(unit)
            if ut is None:
                ut = unit_tids[unit] = store._tid(unit.decode())
            key = kind_next.get(ut, 0)
            kind_next[ut] = key + 1
            records += 1
            if key % stride == 0 or not math.isfinite(rate):
                i = bisect_left(ts_pos, bar_end)
                a_start(len(values))
                a_step(step)
                a_lineno(lineno - bar_line_offset)
                a_wall(ts_vals[i - 1] if i else no_wall)
                a_rank(-1)
                a_rec(key)
                a_tag(ut)
                a_value(rate)
                if len(values) >= cap:  # thinned before the next line is offered, as add_ids does
                    store.records = records
                    store._thin()
                    stride = store.stride
                    (values, a_start, a_step, a_lineno, a_wall, a_rank, a_rec, a_tag,
                     extend_tags, values_fromlist, a_value) = _appenders(store)
        if tpl.is_train:
            dict_count += 1
        key = kind_next.get(tids[0], 0)
        kind_next[tids[0]] = key + 1
        records += 1
        i = bisect_left(ts_pos, e)
        if key % stride == 0:
            a_start(len(values))
            a_step(_NO_STEP if cur_step is None else cur_step)
            a_lineno(lineno)
            a_wall(ts_vals[i - 1] if i else no_wall)
            a_rank(-1)
            a_rec(key)
            extend_tags(tids)
            values_fromlist([float(v) for v in vals])
            thin = len(values) >= cap
        else:
            store.records = records
            store.add_thinned_line(key, tids, vals, cur_step, lineno, ts_vals[i - 1] if i else sc.ts_prev, None)
            thin = True  # refresh the columns: the store may have thinned (and replaced them)
        idx = j
        done = e + 1
        if thin:
            store.records = records
            store._thin()
            stride = store.stride
            (values, a_start, a_step, a_lineno, a_wall, a_rank, a_rec, a_tag,
             extend_tags, values_fromlist, a_value) = _appenders(store)
    store.records = records
    store._expanded = None
    sc.bar_scan = lo
    sc.cur_step, sc.step_pos, sc.last_rate_step = cur_step, step_pos, last_rate
    sc.nl_pos, sc.nl_count = nl_pos, nl_count
    sc.dict_count = dict_count
    return idx, done
