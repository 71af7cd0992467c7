"""Real steps for HF dict lines printed without a progress bar (``LogScan.steps_inferred``).

With ``disable_tqdm=True`` or a file handler, an HF log holds only ``{'loss': ..., 'epoch': ...}``
lines: the scanner numbers them 1, 2, 3... A dict is written every ``logging_steps`` steps, so
ordinal ``k`` is step ``k * logging_steps + offset``, where the offset is the step a resumed
run started from. Both come from the run itself:

* the ``epoch`` a dict prints is the one ``trainer_state.json``'s ``log_history`` stores with
  its step: ordinals whose epoch matches one history entry give (ordinal, step) pairs, which
  fix the offset (and the interval when ``logging_steps`` is unknown);
* else ``logging_steps`` (trainer_state, config, what the log printed) with offset 0.

When neither says, the ordinals stay and ``steps_inferred`` stays set: ``Run.series`` then
prefers a source with real steps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from autopsy.parsers.log_series import _NO_STEP
from autopsy.parsers.types import ConfigEntry, HitList, LogScan, SeriesPoint, TrainerState

_MIN_FIT = 0.8  # share of matched (ordinal, step) pairs a line must fit to be believed


def logging_steps_of(states: Sequence[TrainerState], entries: Sequence[ConfigEntry]) -> int | None:
    """The run's logging interval in steps: trainer_state's, else a config's (a ratio < 1 is no interval)."""
    for ts in states:
        if ts.logging_steps and ts.logging_steps >= 1:
            return ts.logging_steps
    for e in entries:
        v = e.value
        if e.key == "logging_steps" and isinstance(v, (int, float)) and not isinstance(v, bool) \
                and v >= 1 and v == int(v):
            return int(v)
    return None


def history_epoch_steps(states: Sequence[TrainerState]) -> dict[float, int]:
    """epoch -> step of every log_history entry whose epoch no other step shares."""
    import numpy as np
    import pandas as pd

    from autopsy.parsers.trainer_state import history_columns

    keys, steps = [], []
    for ts in states:  # columns, not a loop over every value: a big history holds millions
        cols = getattr(ts.log_history, "columns", None)
        if cols is not None:
            names = list(cols.tag_names)
            if "epoch" not in names:
                continue
            mask = cols.tag_codes == names.index("epoch")
            keys.append(cols.values[mask])
            steps.append(cols.steps[mask].astype(np.int64))
            continue
        tags, st, values = history_columns(ts.log_history)
        mask = np.asarray(tags == "epoch", dtype=bool) & pd.notna(st)
        keys.append(np.asarray(values, dtype=np.float64)[mask])
        steps.append(np.asarray([int(x) for x in st[mask]], dtype=np.int64))
    if not keys:
        return {}
    df = pd.DataFrame({"key": np.round(np.concatenate(keys), 9), "step": np.concatenate(steps)})
    df = df[np.isfinite(df["key"])]
    grouped = df.groupby("key", sort=False)["step"]
    first, distinct = grouped.first(), grouped.nunique()
    return {float(k): int(v) for k, v in first[distinct == 1].items()}


def _ordinal_epochs(scan: LogScan) -> dict[int, float]:
    """ordinal -> epoch printed on that dict line (the first one of each ordinal)."""
    series: Any = scan.series
    out: dict[int, float] = {}
    names = getattr(series, "tag_names", None)
    if names is not None:
        if "epoch" not in names:
            return out
        import numpy as np

        tid = names.index("epoch")
        steps = np.frombuffer(series.step, dtype=np.int64)
        keep = (np.frombuffer(series.tag, dtype=np.uint32) == tid) & (steps != _NO_STEP)
        for k, v in zip(steps[keep].tolist(), np.frombuffer(series.value, dtype=np.float64)[keep].tolist(),
                        strict=True):
            out.setdefault(k, v)
        return out
    for p in series:
        if p.tag == "epoch" and p.step is not None:
            out.setdefault(p.step, p.value)
    return out


def fit_steps(pairs: Sequence[tuple[int, int]], logging_steps: int | None) -> tuple[int, int] | None:
    """(scale, offset) with ``step = ordinal * scale + offset`` for most pairs, or from logging_steps alone."""
    if pairs:
        need = max(1, int(len(pairs) * _MIN_FIT + 0.999))
        scales = [logging_steps] if logging_steps else []
        if len(pairs) >= 2:
            (k0, s0), (k1, s1) = min(pairs), max(pairs)
            if k1 > k0 and (s1 - s0) % (k1 - k0) == 0 and (s1 - s0) // (k1 - k0) > 0:
                scales.append((s1 - s0) // (k1 - k0))
        for scale in scales:
            offset, n = Counter(s - k * scale for k, s in pairs).most_common(1)[0]
            if n >= need and offset >= 0:
                return scale, offset
    return (logging_steps, 0) if logging_steps else None


def align_log_steps(scans: Sequence[LogScan], states: Sequence[TrainerState], logging_steps: int | None) -> None:
    """Rewrite, in place, the ordinal steps of every ``steps_inferred`` scan that can be aligned."""
    todo = [s for s in scans if s.steps_inferred]
    if not todo:
        return
    hist = history_epoch_steps(states) if states else {}
    for scan in todo:
        pairs = [(k, hist[round(e, 9)]) for k, e in _ordinal_epochs(scan).items() if round(e, 9) in hist]
        fit = fit_steps(pairs, logging_steps)
        if fit is not None:
            _apply(scan, *fit)


def _apply(scan: LogScan, scale: int, offset: int) -> None:
    def f(step: int | None) -> int | None:
        return None if step is None else step * scale + offset

    series: Any = scan.series
    if hasattr(series, "map_steps"):
        series.map_steps(scale, offset)
    else:
        scan.series = [p if p.step is None else SeriesPoint(p.tag, f(p.step), p.value, p.lineno, p.wall_time, p.rank)
                       for p in series]
    for key, hl in scan.hits.items():
        scan.hits[key] = HitList([replace(h, step=f(h.step)) for h in hl.first],
                                 [replace(h, step=f(h.step)) for h in hl.last], hl.count)
    scan.tracebacks = [tb if tb.step is None else replace(tb, step=f(tb.step)) for tb in scan.tracebacks]
    scan.last_step = f(scan.last_step)
    scan.steps_inferred = False
