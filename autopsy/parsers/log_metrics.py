"""The log scanner's side of the open-world metric reader (:mod:`metric_reader`).

The reader learns a file's templates from its first block and gives the scanner anchor
literals; segments carrying one (or any segment while a block or table style is open) that
neither the HF-dict nor the step-line parser took are handed to :func:`read_segment`, whose
readings go into the same :class:`~autopsy.parsers.log_store.SeriesStore` as every other point.
A reading without a step on its line takes the scanner's current step (a bar or step line
before it), else its order among the readings (flagged like dict ordinals: ``steps_inferred``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from autopsy.parsers.log_match import LiteralFinder
from autopsy.parsers.log_store import MAX_STEP

# Below this size every known style's anchors are searched for in the whole file; above it only
# the styles the first block shows (an extra full-text search would cost the 1 GB logs ~10%).
ALL_STYLES_BELOW = 64 << 20


def learn(sc: Any, head: bytes, size: int) -> None:
    """Learn ``head``'s templates into ``sc.reader`` and build ``sc.metric_finder`` (once)."""
    if sc.reader_learnt:
        return
    sc.reader_learnt = True
    sc.reader.learn(head, whole=size < ALL_STYLES_BELOW)
    anchors = sc.reader.anchors()
    sc.metric_finder = _finder(tuple(sorted(set(anchors)))) if anchors else None


@lru_cache(maxsize=64)
def _finder(anchors: tuple[bytes, ...]) -> LiteralFinder:
    # Built once per set of anchors, not once per log: building the automaton costs ~1 ms, which
    # was a third of the per-file cost in a run of thousands of small logs (most share one set).
    # A LiteralFinder is immutable after construction.
    return LiteralFinder(anchors)


def read_segment(sc: Any, text: str, lineno: int, rank: int | None, e: int) -> None:
    """Read one segment the other series parsers did not take."""
    r = sc.reader.read(text)
    if r is None:
        return
    sc._advance_bars(e)
    step = r.step if r.step is not None and 0 <= r.step < MAX_STEP else None
    if step is not None:
        sc.cur_step = step
        sc.step_pos = sc.base + e
    elif sc.step_pos >= 0:
        step = sc.cur_step
    elif not sc.after_gap:
        sc.reader_count += 1
        step = sc.reader_count
        sc.counted = True
    if r.step_total and (sc.max_steps_seen is None or r.step_total > sc.max_steps_seen):
        sc.max_steps_seen = r.step_total
    if r.epoch_total and (sc.max_epochs_seen is None or r.epoch_total > sc.max_epochs_seen):
        sc.max_epochs_seen = r.epoch_total
    sc.series.add_line([k for k, _ in r.values], [v for _, v in r.values], step, lineno, sc._wall_at(e), rank)
