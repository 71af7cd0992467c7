"""Display series: what the charts of a report need, small enough to travel in its JSON.

``autopsy analyze`` collects them (:func:`collect_series`) so that ``autopsy report
saved.json --format html`` draws the same plots without the run directory. They are for
display only, never for rules: each (source, file, tag, rank) series of a canonical metric
is cut to at most :data:`MAX_POINTS` points keeping every x-bucket's first, last, minimum
and maximum (a one-step spike survives), plus the edges of every non-finite stretch (the
first NaN step stays exact). Values are rounded to 7 significant digits, which no chart
can tell apart, to keep the JSON small; steps are integers. Order is fixed (metric, then
the charts' own line order), so the same run gives the same bytes.

The layout (documented in docs/json-schema.md)::

    {"metrics": [{"metric", "source", "path", "tag", "rank", "n_points", "steps", "values"}],
     "checkpoints": [{"path", "layout", "step", "bytes", "status", "problems", "missing", "latest"}],
     "disk": {"run_bytes", "checkpoint_bytes"}}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from autopsy.report.charts import SOURCE_ORDER, minmax_indices, sorted_points
from autopsy.run_frames import splits_of

if TYPE_CHECKING:
    import pandas as pd

MAX_POINTS = 500  # finite points per series: 125 buckets x (first, last, min, max)
MAX_NONFINITE_RUNS = 25  # per series: each kept as its first and last point
MAX_SERIES_PER_METRIC = 8  # the charts draw 6 lines; a few spare for duplicates they fold
DISPLAY_METRICS = ("loss", "eval_loss", "lr", "lr_multiplier", "grad_norm", "throughput", "step_time")
SIGNIFICANT_DIGITS = 7


def downsample(steps: np.ndarray, values: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) sorted by step, at most ``max_points`` finite points plus non-finite run edges."""
    steps, values = sorted_points(steps, values)
    finite = np.isfinite(values)
    fin_idx = np.flatnonzero(finite)
    keep_fin = fin_idx[minmax_indices(steps[fin_idx], values[fin_idx], max(1, max_points // 4))]
    bad = (~finite).astype(np.int8)
    edges = np.flatnonzero(np.diff(np.concatenate(([0], bad, [0]))))
    starts, ends = edges[::2][:MAX_NONFINITE_RUNS], edges[1::2][:MAX_NONFINITE_RUNS] - 1
    # A finite point on each side of a non-finite stretch keeps the gap where it was.
    around = np.concatenate((starts - 1, ends + 1))
    around = around[(around >= 0) & (around < len(values))]
    keep = np.unique(np.concatenate((keep_fin, starts, ends, around))).astype(np.int64)
    return steps[keep], values[keep]


def _round(v: float) -> float:
    if not math.isfinite(v) or v == 0:
        return float(v)
    return float(f"{v:.{SIGNIFICANT_DIGITS}g}")


def _rank(value: Any) -> int | None:
    try:
        return None if value is None or bool(value != value) or str(value) == "<NA>" else int(value)
    except (TypeError, ValueError):
        return None


def metric_series(scalars: pd.DataFrame | None) -> list[dict[str, Any]]:
    """Downsampled series of the display metrics, in the charts' order."""
    if scalars is None or scalars.empty:
        return []
    # Rows are selected by position and only the group keys are copied, never the frame: on a
    # big trainer_state (1.2M rows) a filtered copy of the frame was the analysis' memory peak.
    shown = scalars["metric"].isin(DISPLAY_METRICS).to_numpy(dtype=bool) & scalars["step"].notna().to_numpy(dtype=bool)
    keys = scalars[["source", "path", "tag", "rank"]]
    out: list[dict[str, Any]] = []
    for metric in DISPLAY_METRICS:
        rows = np.flatnonzero(shown & (scalars["metric"] == metric).to_numpy(dtype=bool))
        if not rows.size:
            continue
        groups = []
        for (source, path, tag, rank), at in keys.iloc[rows].groupby(["source", "path", "tag", "rank"], observed=True,
                                                                     dropna=False, sort=False).indices.items():
            r = _rank(rank)
            # the charts' line order: whole-run lines first, then ranks, densest first, then by source
            key = (0 if r is None else 1, -1 if r is None else r, -len(at), SOURCE_ORDER.get(str(source), 9),
                   str(path), str(tag))
            groups.append((key, str(source), str(path), str(tag), r, rows[at]))
        groups.sort(key=lambda g: g[0])
        for _key, source, path, tag, r, at in groups[:MAX_SERIES_PER_METRIC]:
            s, v = downsample(scalars["step"].iloc[at].to_numpy(dtype="float64", na_value=np.nan),
                              scalars["value"].iloc[at].to_numpy(dtype="float64", na_value=np.nan))
            out.append({"metric": metric, "source": source, "path": path, "tag": tag, "rank": r,
                        "n_points": len(at), "steps": [int(x) for x in s], "values": [_round(x) for x in v]})
    return out


def checkpoint_rows(run: Any) -> list[dict[str, Any]]:
    latest = run.latest_valid_checkpoint
    rows = []
    for c in run.checkpoint_list:
        status = "in_progress" if c.in_progress else ("valid" if c.valid else "corrupt")
        rows.append({"path": c.path, "layout": c.layout, "step": c.step, "bytes": int(c.bytes), "status": status,
                     "problems": list(c.problems), "missing": list(c.missing),
                     "latest": latest is not None and c.path == latest.path})
    return rows


def collect_series(run: Any) -> dict[str, Any] | None:
    """The display series of a run, or None when it has neither metrics nor checkpoints."""
    metrics = metric_series(run.scalars)
    checkpoints = checkpoint_rows(run)
    if not metrics and not checkpoints:
        return None
    disk = run.disk
    return {"metrics": metrics, "checkpoints": checkpoints,
            "disk": {"run_bytes": int(disk.run_bytes), "checkpoint_bytes": int(disk.checkpoint_bytes)}}


# ------------------------------------------------------------------ reading them back


def series_frame(series: Mapping[str, Any]) -> pd.DataFrame:
    """The saved metric series as a long frame shaped like ``Run.scalars`` (no wall times)."""
    import pandas as pd

    cols: dict[str, list[Any]] = {k: [] for k in ("source", "path", "tag", "metric", "step", "wall_time", "value",
                                                  "rank")}
    for s in series.get("metrics") or ():
        steps, values = list(s.get("steps") or ()), list(s.get("values") or ())
        n = min(len(steps), len(values))
        for k in ("source", "path", "tag", "metric", "rank"):
            cols[k].extend([s.get(k)] * n)
        cols["step"].extend(steps[:n])
        cols["value"].extend(float(v) for v in values[:n])
        cols["wall_time"].extend([math.nan] * n)
    frame = pd.DataFrame(cols)
    frame.insert(4, "split", splits_of(frame["tag"].astype(str), frame["source"].astype(str)))
    frame["step"] = pd.to_numeric(frame["step"], errors="coerce").astype("Int64")
    frame["rank"] = pd.to_numeric(frame["rank"], errors="coerce").astype("Int64")
    frame["value"] = frame["value"].astype("float64")
    frame["wall_time"] = frame["wall_time"].astype("float64")
    return frame


def series_run(series: Mapping[str, Any], disk_at_analysis: Mapping[str, Any] | None) -> Any:
    """A stand-in for :class:`~autopsy.run.Run` with what the HTML sections read: scalars,
    checkpoint_list, latest_valid_checkpoint and disk (volume figures as measured at analysis)."""
    from autopsy.parsers.types import Checkpoint, DiskUsage

    cps = []
    latest = None
    for row in series.get("checkpoints") or ():
        c = Checkpoint(path=str(row.get("path")), layout=str(row.get("layout") or "loose"), step=row.get("step"),
                       files=(), bytes=int(row.get("bytes") or 0), mtime=0.0,
                       missing=tuple(str(m) for m in row.get("missing") or ()),
                       problems=tuple(str(p) for p in row.get("problems") or ()),
                       in_progress=row.get("status") == "in_progress")
        cps.append(c)
        if row.get("latest"):
            latest = c
    disk = series.get("disk") or {}
    vol = disk_at_analysis or {}
    usage = DiskUsage(int(disk.get("run_bytes") or 0), int(disk.get("checkpoint_bytes") or 0),
                      vol.get("fs_total_bytes"), vol.get("fs_free_bytes"), vol.get("fs_used_bytes"))
    return SimpleNamespace(scalars=series_frame(series), checkpoint_list=cps, latest_valid_checkpoint=latest,
                           disk=usage)

