"""Column storage for the numeric series of one log, bounded whatever the log's size.

A log line gives a few values that share step, line number, wall time and rank, so the
store keeps those once per *line* (``l_*`` columns) and only tag and value per point:
adding an HF dict line costs a handful of ``array`` appends, not one object per value.
The per-point columns the frame builders read (``step``, ``lineno``, ``wall``, ``rank``,
``rec``) are expanded from the line columns on first access (numpy ``repeat``) and cached.

Bounded: when ``cap`` points are held the store is *thinned*: the stride doubles (until
under the cap) and only lines whose key is a multiple of it keep all their values, other
lines keep only their non-finite values (a NaN is evidence). A line's key is its index
among the lines of its *kind* (its first tag: a loss dict, a progress-bar rate, an eval
dict) in its scanner block (:meth:`SeriesStore.new_block` restarts it): kinds interleave
(a rate line, then a dict line...), so a key counted over all lines would keep one kind
and drop the other; and keys restart per block, so the result depends on the lines alone,
not on how the file was split: the two halves of a parallel scan (:mod:`log_parallel`)
merge into exactly what one sequential scan stores.
``stride`` > 1 says thinning happened.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from autopsy.parsers.types import SeriesPoint

_new = object.__new__
_NO_STEP = -(2**63)
# Steps are kept in int64 columns; a log can print any integer ("99999999999999999999999/5000").
# Parsers drop steps at or beyond this (no run takes 10**18 steps) and the store refuses them
# too, so one absurd line costs its step, never the scan (an OverflowError would lose the log).
MAX_STEP = 10**18
MAX_SERIES_POINTS = 2_000_000  # at most ~12 bytes a point + ~44 a line, whatever the log size
MAX_STRIDE = 1 << 30  # NaN floods cannot be thinned away: stop doubling there


def point(tag: str, step: int | None, value: float, lineno: int,
          wall_time: float | None, rank: int | None) -> SeriesPoint:
    """A SeriesPoint, equal to ``SeriesPoint(...)`` but built about twice as fast."""
    p = _new(SeriesPoint)
    p.__dict__.update(tag=tag, step=step, value=value, lineno=lineno, wall_time=wall_time, rank=rank)
    return p


class SeriesStore(Sequence[SeriesPoint]):
    """The points of one log in columns; a read-only sequence of :class:`SeriesPoint`, built
    on access. ``columns()`` hands plain columns to DataFrame builders."""

    def __init__(self, cap: int | None = None) -> None:
        self.cap = MAX_SERIES_POINTS if cap is None else cap  # read at run time: tests lower it
        self.tag_names: list[str] = []
        self._tag_ids: dict[str, int] = {}
        self._line_ids: dict[tuple[str, ...], list[int]] = {}  # a log repeats its lines' keys
        self.tag = array("I")  # per point
        self.value = array("d")
        self.l_start = array("q")  # per line: index of its first point
        self.l_step = array("q")
        self.l_lineno = array("q")
        self.l_wall = array("d")
        self.l_rank = array("q")
        self.l_rec = array("q")  # the line's key (thinning unit)
        self.records = 0  # lines offered, kept or not
        # a line's key: how many lines of its kind (first tag) came before it in its block
        self.kind_next: dict[int, int] = {}
        self.stride = 1
        self._expanded: dict[str, array[Any]] | None = None

    # ------------------------------------------------------------------ adding

    def _tid(self, tag: str) -> int:
        i = self._tag_ids.get(tag)
        if i is None:
            i = self._tag_ids[tag] = len(self.tag_names)
            self.tag_names.append(tag)
        return i

    def tag_ids(self, tags: Sequence[str]) -> list[int]:
        key = tuple(tags)
        ids = self._line_ids.get(key)
        if ids is None:
            ids = [self._tid(t) for t in tags]
            if len(self._line_ids) < 4096:
                self._line_ids[key] = ids
        return ids

    def new_block(self) -> None:
        """Line keys restart here (the scanner calls this at each block it reads)."""
        self.kind_next.clear()

    def _line(self, key: int, step: int | None, lineno: int, wall: float | None, rank: int | None) -> None:
        self.l_start.append(len(self.value))
        self.l_step.append(_NO_STEP if step is None or not -MAX_STEP < step < MAX_STEP else step)
        self.l_lineno.append(lineno)
        self.l_wall.append(math.nan if wall is None else wall)
        self.l_rank.append(-1 if rank is None else rank)
        self.l_rec.append(key)

    def add_ids(self, tids: Sequence[int], values: Iterable[float | bytes], step: int | None, lineno: int,
                wall: float | None, rank: int | None) -> None:
        """Store the values one log line gave (all share step, line, time and rank); ``tids``
        from :meth:`tag_ids`; values may be the bytes of numbers (``float`` reads them)."""
        kind = tids[0] if len(tids) else -1
        key = self.kind_next.get(kind, 0)
        self.kind_next[kind] = key + 1
        self.records += 1
        self._expanded = None
        if key % self.stride:
            self.add_thinned_line(key, tids, values, step, lineno, wall, rank)
            return
        else:
            self.l_start.append(len(self.value))
            self.l_step.append(_NO_STEP if step is None or not -MAX_STEP < step < MAX_STEP else step)
            self.l_lineno.append(lineno)
            self.l_wall.append(math.nan if wall is None else wall)
            self.l_rank.append(-1 if rank is None else rank)
            self.l_rec.append(key)
            self.tag.extend(tids)
            self.value.fromlist([float(v) for v in values])
        if len(self.value) >= self.cap:
            self._thin()

    def add_thinned_line(self, key: int, tids: Sequence[int], values: Iterable[float | bytes], step: int | None,
                         lineno: int, wall: float | None, rank: int | None) -> None:
        """The non-finite values of a line whose key the stride skips (``records`` counted by the caller)."""
        self._expanded = None
        vals = [float(v) for v in values]
        keep = [i for i, v in enumerate(vals) if not math.isfinite(v)]
        if keep:
            self._line(key, step, lineno, wall, rank)
            self.tag.extend([tids[i] for i in keep])
            self.value.extend([vals[i] for i in keep])
            if len(self.value) >= self.cap:
                self._thin()

    def redraw_last(self, records: int, values: dict[int, float], lineno: int, wall: float | None) -> bool:
        """Overwrite, in the line stored last, the values of the given tag ids: a progress bar drawn
        again for the same step with newer values. Only when that line is still the last one
        (``records`` unchanged since it was added) and unthinned; False when nothing was done."""
        if records != self.records or self.stride != 1 or not self.l_start:
            return False
        start = self.l_start[-1]
        for i in range(start, len(self.value)):
            v = values.get(self.tag[i])
            if v is not None:
                self.value[i] = v
        self.l_lineno[-1] = lineno
        self.l_wall[-1] = math.nan if wall is None else wall
        self._expanded = None
        return True

    def fast_columns(self) -> tuple[array[Any], ...]:
        """The arrays a caller may append to directly (l_start, l_step, l_lineno, l_wall, l_rank,
        l_rec, tag, value); fetched again after :meth:`_thin`, which replaces them."""
        return self.l_start, self.l_step, self.l_lineno, self.l_wall, self.l_rank, self.l_rec, self.tag, self.value

    def add_line(self, tags: Sequence[str], values: Sequence[float], step: int | None, lineno: int,
                 wall: float | None, rank: int | None) -> None:
        self.add_ids(self.tag_ids(tags), values, step, lineno, wall, rank)

    def add_one(self, tag: str, value: float, step: int | None, lineno: int, wall: float | None,
                rank: int | None) -> None:
        """``add_line`` for a single value (progress-bar rates)."""
        self.add_ids((self._tid(tag),), (value,), step, lineno, wall, rank)

    # ------------------------------------------------------------------ thinning

    def counts_by_stride(self, stride: int) -> int:
        """Points this store would hold at ``stride`` (a multiple of the current one)."""
        if not len(self.value):
            return 0
        import numpy as np

        keep = self._keep_mask(np, stride)
        return int(keep.sum())

    def _keep_mask(self, np: Any, stride: int) -> Any:
        counts = np.diff(np.append(np.frombuffer(self.l_start, np.int64), len(self.value)))
        full = np.repeat(np.frombuffer(self.l_rec, np.int64) % stride == 0, counts)
        return full | ~np.isfinite(np.frombuffer(self.value, np.float64))

    def _thin(self) -> None:
        while len(self.value) >= self.cap and self.stride < MAX_STRIDE:
            self.thin_to(self.stride * 2)

    def thin_to(self, stride: int) -> None:
        """Keep what a store that had used ``stride`` from the start would hold."""
        if stride <= self.stride:
            return
        self.stride = stride
        self._expanded = None
        if not len(self.value):
            return
        import numpy as np

        n_lines = len(self.l_start)
        counts = np.diff(np.append(np.frombuffer(self.l_start, np.int64), len(self.value)))
        keep = self._keep_mask(np, stride)
        line_of = np.repeat(np.arange(n_lines), counts)
        new_counts = np.bincount(line_of[keep], minlength=n_lines)
        keep_line = new_counts > 0
        starts = np.concatenate(([0], np.cumsum(new_counts[keep_line])[:-1])).astype(np.int64)

        def take(col: array[Any], mask: Any, dtype: Any) -> array[Any]:
            out = array(col.typecode)
            out.frombytes(np.frombuffer(col, dtype)[mask].tobytes())
            return out

        self.tag = take(self.tag, keep, np.uint32)
        self.value = take(self.value, keep, np.float64)
        for name, dt in (("l_step", np.int64), ("l_lineno", np.int64), ("l_wall", np.float64),
                         ("l_rank", np.int64), ("l_rec", np.int64)):
            setattr(self, name, take(getattr(self, name), keep_line, dt))
        self.l_start = array("q")
        self.l_start.frombytes(starts.tobytes())

    def extend_from(self, other: SeriesStore, lineno_offset: int, wall_default: float | None,
                    unknown_wall: float) -> None:
        """Append ``other``'s lines (a later part of the same log, already thinned to this
        store's stride) with line numbers shifted and ``unknown_wall`` wall times replaced
        by ``wall_default`` (None: missing)."""
        self._expanded = None
        remap = self.tag_ids(other.tag_names)
        base = len(self.value)
        self.tag.extend([remap[t] for t in other.tag])
        self.value.extend(other.value)
        self.l_start.extend([s + base for s in other.l_start])
        self.l_step.extend(other.l_step)
        self.l_lineno.extend([ln + lineno_offset for ln in other.l_lineno])
        fill = math.nan if wall_default is None else wall_default
        self.l_wall.extend([fill if w == unknown_wall else w for w in other.l_wall])
        self.l_rank.extend(other.l_rank)
        self.l_rec.extend(other.l_rec)
        self.records += other.records

    def map_steps(self, scale: int, offset: int) -> None:
        """Every known step ``k`` becomes ``k * scale + offset`` (dict ordinals aligned to real steps)."""
        self._expanded = None
        self.l_step = array("q", [s if s == _NO_STEP else _bounded(s * scale + offset) for s in self.l_step])

    # ------------------------------------------------------------------ reading

    def _expand(self) -> dict[str, array[Any]]:
        if self._expanded is None:
            import numpy as np

            counts = np.diff(np.append(np.frombuffer(self.l_start, np.int64), len(self.value)))
            out: dict[str, array[Any]] = {}
            for name, col, dt in (("step", self.l_step, np.int64), ("lineno", self.l_lineno, np.int64),
                                  ("wall", self.l_wall, np.float64), ("rank", self.l_rank, np.int64),
                                  ("rec", self.l_rec, np.int64)):
                a = array(col.typecode)
                if len(col):
                    a.frombytes(np.repeat(np.frombuffer(col, dt), counts).tobytes())
                out[name] = a
            self._expanded = out
        return self._expanded

    @property
    def step(self) -> array[int]:
        return self._expand()["step"]

    @property
    def lineno(self) -> array[int]:
        return self._expand()["lineno"]

    @property
    def wall(self) -> array[float]:
        return self._expand()["wall"]

    @property
    def rank(self) -> array[int]:
        return self._expand()["rank"]

    @property
    def rec(self) -> array[int]:
        return self._expand()["rec"]

    def __len__(self) -> int:
        return len(self.value)

    def _point(self, i: int) -> SeriesPoint:
        ex = self._expand()
        st, w, rk = ex["step"][i], ex["wall"][i], ex["rank"][i]
        return point(self.tag_names[self.tag[i]], None if st == _NO_STEP else st, self.value[i],
                     ex["lineno"][i], None if math.isnan(w) else w, None if rk < 0 else rk)

    def __getitem__(self, i):  # type: ignore[no-untyped-def,override]
        if isinstance(i, slice):
            return [self._point(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return self._point(i)

    def __iter__(self) -> Iterator[SeriesPoint]:
        for i in range(len(self)):
            yield self._point(i)

    def __repr__(self) -> str:
        return f"SeriesStore({len(self)} points, tags={self.tag_names!r}, stride={self.stride})"

    def columns(self) -> dict[str, list[Any]]:
        """Plain columns (tag, step, value, lineno, wall_time, rank) with None for missing."""
        ex = self._expand()
        return {
            "tag": [self.tag_names[t] for t in self.tag],
            "step": [None if s == _NO_STEP else s for s in ex["step"]],
            "value": list(self.value),
            "lineno": list(ex["lineno"]),
            "wall_time": [None if math.isnan(w) else w for w in ex["wall"]],
            "rank": [None if r < 0 else r for r in ex["rank"]],
        }


def _bounded(step: int) -> int:
    return step if -MAX_STEP < step < MAX_STEP else _NO_STEP
