"""Shared helpers for series and structure rules: one clean series, robust statistics, config look-ups.

Checks never read ``run.scalars`` row by row: they ask :func:`load_series` for one
canonical metric from one source, one tag and one rank, as numpy arrays. Robust
statistics (medians, Theil-Sen slopes) keep noisy real-world losses from fooling the
rules. Config helpers try the several spellings frameworks use for one setting and keep
the :class:`ConfigEntry` so findings can cite ``file:line``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from autopsy.model import Evidence

if TYPE_CHECKING:
    import pandas as pd

    from autopsy.parsers.types import ConfigEntry
    from autopsy.run import Run


@dataclass(frozen=True)
class Series:
    """One metric from one source file set, one tag and one rank, sorted by step.

    ``wall_times`` holds NaN where the source has no time. ``synthetic_steps`` is True when
    the source had no step numbers and the points were numbered 1..n in file order.
    """

    metric: str
    source: str
    path: str
    tag: str
    rank: int | None
    steps: np.ndarray  # int64
    values: np.ndarray  # float64, NaN/inf kept
    wall_times: np.ndarray  # float64
    synthetic_steps: bool = False

    def __len__(self) -> int:
        return int(self.values.size)

    def finite(self) -> Series:
        """The same series without its NaN/inf points."""
        mask = np.isfinite(self.values)
        return Series(self.metric, self.source, self.path, self.tag, self.rank, self.steps[mask],
                      self.values[mask], self.wall_times[mask], self.synthetic_steps)

    def since(self, first_step: float) -> Series:
        mask = self.steps >= first_step
        return Series(self.metric, self.source, self.path, self.tag, self.rank, self.steps[mask],
                      self.values[mask], self.wall_times[mask], self.synthetic_steps)

    def evidence(self, step: int | None = None, step_end: int | None = None, excerpt: str | None = None,
                 detail: str | None = None) -> Evidence:
        """Evidence pointing at this series (tag + step range in its file)."""
        return Evidence(path=self.path, tag=self.tag, step=step, step_end=step_end, excerpt=excerpt,
                        detail=detail, rank=self.rank)

    @property
    def where(self) -> str:
        """``train/loss in runs/events.out...`` for messages."""
        rank = f" (rank {self.rank})" if self.rank is not None else ""
        return f"{self.tag} in {self.path}{rank}"


def _frame_to_series(metric: str, sel: pd.DataFrame) -> Series | None:
    return series_at(metric, sel, np.arange(len(sel)))


def series_at(metric: str, frame: pd.DataFrame, rows: np.ndarray) -> Series | None:
    """The series of ``metric`` made of ``frame``'s rows at positions ``rows``.

    Rows stay positions and only the columns the series needs are read at them: filtered,
    sorted and deduplicated copies of the frame were a check's memory peak on big runs.
    """
    if not len(rows):
        return None
    import pandas as pd

    # One tag only: trainer_state mixes per-step "loss" with the end-of-run "train_loss" average,
    # TensorBoard may hold both "loss" and "train/loss"; the tag with most points is the series.
    # On a tie the tag seen first; factorized, not cast to str (a categorical's codes, not 1M strings).
    codes, uniques = pd.factorize(frame["tag"].iloc[rows])
    counts = np.bincount(codes[codes >= 0], minlength=len(uniques))
    tag = str(uniques[int(np.argmax(counts))]) if len(uniques) else ""
    if len(uniques) > 1:
        rows = rows[codes == int(np.argmax(counts))]
    del codes
    steps = frame["step"].iloc[rows]
    synthetic = bool(steps.isna().any())
    if synthetic:
        step_arr = np.arange(1, len(rows) + 1, dtype=np.int64)
    else:
        step_arr = steps.astype("int64").to_numpy()
        order = np.argsort(step_arr, kind="stable")
        step_arr = step_arr[order]
        # Restarted runs re-log steps: keep the last written value of each step.
        keep = np.ones(len(step_arr), dtype=bool)
        keep[:-1] = step_arr[1:] != step_arr[:-1]
        rows = rows[order][keep]
        step_arr = step_arr[keep]
    del steps
    rank_vals = frame["rank"].iloc[rows].dropna().unique()
    rank = int(rank_vals[0]) if len(rank_vals) == 1 else None
    paths = frame["path"].iloc[rows].unique()  # in order of first appearance (a categorical's: no strings)
    path = str(paths[-1]) if len(paths) else ""
    return Series(
        metric=metric,
        source=str(frame["source"].iloc[int(rows[0])]),
        path=path,
        tag=str(tag),
        rank=rank,
        steps=step_arr,
        values=frame["value"].to_numpy(dtype="float64")[rows],
        wall_times=frame["wall_time"].to_numpy(dtype="float64")[rows],
        synthetic_steps=synthetic,
    )


def load_series(run: Run, metric: str, *, rank: int | None = None) -> Series | None:
    """The best single series of ``metric`` (most points, one source, one tag, one rank), or None.

    Without ``rank``, rows without a rank win, else the lowest rank: rank 0 is the one
    that usually logs. ``run.series`` already chose one source.
    """
    df = run.series(metric, rank=rank)
    if df is None or df.empty:
        return None
    if rank is None and df["rank"].notna().any():
        if df["rank"].isna().any():
            df = df[df["rank"].isna()]
        else:
            df = df[df["rank"] == df["rank"].min()]
    return _frame_to_series(metric, df)


def per_rank_series(run: Run, metric: str, *, min_points: int = 1) -> dict[int, Series]:
    """One series per rank for ``metric`` (ranks from line prefixes or per-rank files)."""
    df = run.metric_rows(metric)
    sel = df[df["rank"].notna()]
    out: dict[int, Series] = {}
    for rank_value in sorted(sel["rank"].unique()):
        rows = sel[sel["rank"] == rank_value]
        counts = rows.groupby("source", observed=True).size()
        if counts.empty:
            continue
        best = counts.idxmax()
        s = _frame_to_series(metric, rows[rows["source"] == best])
        if s is not None and len(s) >= min_points:
            out[int(rank_value)] = s
    return out


# ----------------------------------------------------------------------------- statistics


def theil_sen_slope(x: np.ndarray, y: np.ndarray, max_points: int = 200) -> float:
    """Median of pairwise slopes: a trend that a few outliers or heavy noise cannot drag.

    Subsamples evenly to ``max_points`` so the cost stays bounded on long series.
    """
    n = x.size
    if n < 2:
        return 0.0
    if n > max_points:
        idx = np.linspace(0, n - 1, max_points).round().astype(int)
        x, y = x[idx], y[idx]
    dx = x[None, :] - x[:, None]
    dy = y[None, :] - y[:, None]
    iu = np.triu_indices(x.size, k=1)
    dxu, dyu = dx[iu], dy[iu]
    ok = dxu != 0
    if not ok.any():
        return 0.0
    return float(np.median(dyu[ok] / dxu[ok]))


def mad(values: np.ndarray) -> float:
    """Median absolute deviation (unscaled)."""
    if values.size == 0:
        return 0.0
    return float(np.median(np.abs(values - np.median(values))))


def rolling_median_before(values: np.ndarray, window: int, min_periods: int) -> np.ndarray:
    """For each point, the median of the ``window`` points before it (NaN when too few)."""
    import pandas as pd

    s = pd.Series(values, dtype="float64")
    return s.rolling(window, min_periods=min_periods).median().shift(1).to_numpy()


def head_tail_medians(values: np.ndarray, fraction: float, min_points: int = 3) -> tuple[float, float]:
    """Median of the first and of the last ``fraction`` of the points."""
    k = max(min_points, round(values.size * fraction))
    k = min(k, values.size)
    return float(np.median(values[:k])), float(np.median(values[-k:]))


def points_for_steps(steps: np.ndarray, window_steps: float, minimum: int) -> int:
    """How many logged points cover ``window_steps`` steps at this series' logging cadence."""
    if steps.size < 2:
        return minimum
    d = np.diff(steps)
    d = d[d > 0]
    cadence = float(np.median(d)) if d.size else 1.0
    return max(minimum, math.ceil(window_steps / max(cadence, 1e-9)))


def median_cadence(steps: Iterable[int]) -> float | None:
    """The median positive difference of sorted steps, or None."""
    arr = np.array(sorted(set(int(s) for s in steps)), dtype=np.int64)
    if arr.size < 2:
        return None
    d = np.diff(arr)
    d = d[d > 0]
    return float(np.median(d)) if d.size else None


def fmt_value(v: float) -> Any:
    """A fact-safe number: NaN/inf become the strings 'nan'/'inf'/'-inf' (JSON has no NaN)."""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def rounded(v: float, digits: int = 6) -> float:
    """Round to ``digits`` significant digits so facts stay readable and deterministic."""
    if v == 0 or not math.isfinite(v):
        return v
    return float(f"{v:.{digits}g}")


# ----------------------------------------------------------------------------- config


def config_entry(run: Run, keys: Sequence[str]) -> ConfigEntry | None:
    """The first configured key of ``keys`` (in order of preference), or None."""
    for key in keys:
        entry = run.config_value(key)
        if entry is not None:
            return entry
    return None


def as_float(value: Any) -> float | None:
    """A number from a config value written leniently ("2e-4", 2, "0.1"), else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip().rstrip(",").strip("'\""))
        except ValueError:
            return None
    return None


def config_float(run: Run, keys: Sequence[str]) -> tuple[float | None, ConfigEntry | None]:
    """The first key of ``keys`` whose value is a number: (value, entry) or (None, None)."""
    for key in keys:
        entry = run.config_value(key)
        if entry is not None:
            v = as_float(entry.value)
            if v is not None and math.isfinite(v):
                return v, entry
    return None, None


def as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    if isinstance(value, str):
        low = value.strip().lower()
        if low in {"1", "true", "yes", "on", "y"}:
            return True
        if low in {"0", "false", "no", "off", "n", ""}:
            return False
    return None


def cite(entry: ConfigEntry | None) -> str | None:
    """``configs/train.yaml:12`` for an entry (path alone when the line is unknown)."""
    if entry is None:
        return None
    return f"{entry.path}:{entry.line}" if entry.line is not None else entry.path


def config_evidence(entry: ConfigEntry) -> Evidence:
    return Evidence(path=entry.path, line=entry.line, excerpt=f"{entry.raw_key}: {entry.text}")
