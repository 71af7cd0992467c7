"""The DataFrame views of a :class:`~autopsy.run.Run`, built from its parsed objects.

Each builder takes what the parsers returned (scans, event-file frames, checkpoints...)
and returns a frame with fixed columns and dtypes. The Run caches them; their columns are
documented on its properties. pandas (and numpy) are imported inside the builders, so
importing this module stays cheap.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from autopsy.metrics import EPOCH, TRAIN, canonical_metric, split_of
from autopsy.model import Artifact
from autopsy.parsers.types import Checkpoint, ConfigEntry, LogScan, MetricRows, Traceback, TrainerState

if TYPE_CHECKING:
    import pandas as pd

SCALAR_COLUMNS = ("source", "path", "tag", "metric", "split", "step", "wall_time", "value", "rank")


def map_by_value(values: pd.Series, fn: Callable[[str], object]) -> pd.Series:
    """``values.map(fn)``, calling ``fn`` once per distinct value: ``Series.map`` over a pandas 3
    string column costs ~6 us a row, a factorize and a take cost nothing next to it."""
    import numpy as np
    import pandas as pd

    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    mapped = np.empty(len(uniques), dtype=object)
    mapped[:] = [fn(u) for u in uniques]
    return pd.Series(mapped[codes], index=values.index, dtype=object)


def splits_of(tags: pd.Series, sources: pd.Series) -> pd.Series:
    """The ``split`` column: what each tag names (:func:`~autopsy.metrics.split_of`), else ""; an
    unprefixed trainer_state tag other than ``epoch`` is "train" (HF prefixes eval_/test_ keys only)."""
    split = map_by_value(tags, split_of)
    if len(sources):
        default = (sources == "trainer_state") & (split == "") & (map_by_value(tags, canonical_metric) != EPOCH)
        split = split.mask(default, TRAIN)
    return split.astype(object)


def scalars_frame(tfevents: Sequence[tuple[str, pd.DataFrame]], trainer_state: TrainerState | None,
                  logs: Sequence[LogScan], metric_files: Sequence[MetricRows] = ()) -> pd.DataFrame:
    """Every numeric series in one long frame: event files, trainer_state, logs, then metric files.

    ``split`` is what the source said (a metric file's column or record), else what the tag
    says (``eval_loss`` -> "eval", ``train/loss`` -> "train"), else "".
    """
    import pandas as pd

    frames = []
    for path, frame in tfevents:
        if len(frame):
            f = frame.assign(source="tensorboard", path=path,
                             rank=pd.Series(pd.NA, index=frame.index, dtype="Int64"))
            frames.append(f)
    ts = trainer_state
    if ts is not None:
        from autopsy.parsers.trainer_state import history_columns

        # columnar: a tuple per value costs ~3x json.load on a 200k-entry history
        tags, steps, values = history_columns(ts.log_history)
        if len(values):
            f = pd.DataFrame({"tag": tags, "step": steps, "wall_time": math.nan, "value": values})
            frames.append(f.assign(source="trainer_state", path=ts.path, rank=pd.NA))
    for scan in logs:
        if scan.series:
            frames.append(_log_series_frame(scan).assign(source="log", path=scan.path))
    for rows in metric_files:
        if rows.values:
            frames.append(pd.DataFrame({
                "tag": rows.tags, "step": pd.array(rows.steps, dtype="Int64"), "wall_time": rows.wall_times,
                "value": rows.values, "split": rows.splits,
            }).assign(source=rows.source, path=rows.path, rank=pd.NA))
    if not frames:
        return _empty_scalars()
    df = pd.concat(frames, ignore_index=True)
    tags = df["tag"].astype(str)
    df["metric"] = map_by_value(tags, canonical_metric).astype(tags.dtype)
    by_tag = splits_of(tags, df["source"].astype(str))
    if "split" in df:  # metric files say the split of each row themselves (a column, a record's mode)
        given = df["split"]
        df["split"] = given.where(given.notna() & (given != ""), by_tag).astype(object)
    else:
        df["split"] = by_tag
    _twins_are_train(df)
    # a "loss" the file put in a validation/test row (mmcv's {"mode": "val", "loss": ...}) is
    # the eval loss: rules asking for the train loss must not get it
    held_out = (df["metric"] == "loss") & df["split"].isin(("eval", "val", "test"))
    df.loc[held_out, "metric"] = "eval_loss"
    df["step"] = pd.to_numeric(df["step"], errors="coerce").astype("Int64")
    df["rank"] = pd.to_numeric(df["rank"], errors="coerce").astype("Int64")
    df["wall_time"] = pd.to_numeric(df["wall_time"], errors="coerce").astype("float64")
    df["value"] = df["value"].astype("float64")
    df["source"] = df["source"].astype("category")
    return df[list(SCALAR_COLUMNS)]


def best_series(scalars: pd.DataFrame, metric: str, *, source: str | None = None,
                rank: int | None = None, inferred_paths: frozenset[str] = frozenset(),
                rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """The rows of ``scalars`` for one canonical metric from the best single source (see ``Run.series``).

    ``inferred_paths``: logs whose steps are dict ordinals (``LogScan.steps_inferred``); without
    ``source``, their rows count only when no other source has the metric. ``rows``: the rows
    of ``scalars`` for ``metric`` when the caller has them already (``Run.metric_rows``).
    """
    df = scalars
    sel = df[df["metric"] == metric] if rows is None else rows
    if rank is not None:
        sel = sel[sel["rank"] == rank]
    if sel.empty:
        return sel
    if source is None and inferred_paths:
        real = sel[~sel["path"].isin(inferred_paths)]
        if not real.empty:
            sel = real
    if source is None:
        order = {"tensorboard": 0, "trainer_state": 1, "log": 2, "csv": 3, "jsonl": 3, "json": 3, "mlflow": 3,
                 "wandb": 3}
        counts = sel.groupby("source", observed=True).size()
        source = max(counts.index, key=lambda s: (counts[s], -order.get(str(s), 9)))
    sel = sel[sel["source"] == source]
    if sel["path"].nunique() > 1 and sel["step"].notna().any():
        sel = sel.sort_values(["step", "wall_time"], kind="stable")
    else:
        sel = sel.sort_values("step", kind="stable") if sel["step"].notna().any() else sel
    # Duplicates are the same tag re-logged at a step (a restart); two tags of one metric at a step
    # (Lightning's train_loss_step and train_loss_epoch) are two series, one chosen by the caller.
    return sel.drop_duplicates(subset=["step", "rank", "tag"], keep="last") if sel["step"].notna().all() else sel


def positions_by_value(column: pd.Series) -> dict[str, Any]:
    """value -> the ascending row positions holding it (missing values left out): one factorize
    of the column, so selecting one value's rows costs no comparison over every row."""
    import numpy as np
    import pandas as pd

    codes, uniques = pd.factorize(column)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(-1, len(uniques)) + 1, side="left")
    return {str(u): order[bounds[i]:bounds[i + 1]] for i, u in enumerate(uniques)}


def artifacts_frame(artifacts: Sequence[Artifact]) -> pd.DataFrame:
    import pandas as pd

    rows = [
        (a.path, a.kind.value, a.detail, a.size, a.mtime, a.status.value, a.note, a.rank)
        for a in artifacts
    ]
    return pd.DataFrame(rows, columns=["path", "kind", "detail", "size", "mtime", "status", "note", "rank"])


def checkpoints_frame(checkpoints: Sequence[Checkpoint]) -> pd.DataFrame:
    import pandas as pd

    rows = [
        (c.path, c.layout, c.step, len(c.files), c.bytes, c.mtime, c.valid, list(c.missing),
         list(c.problems), c.in_progress)
        for c in checkpoints
    ]
    df = pd.DataFrame(rows, columns=["path", "layout", "step", "n_files", "bytes", "mtime", "valid",
                                     "missing", "problems", "in_progress"])
    df["step"] = df["step"].astype("Int64")
    return df


def tracebacks_frame(tracebacks: Sequence[Traceback]) -> pd.DataFrame:
    import pandas as pd

    rows = []
    for tb in tracebacks:
        inner = tb.innermost
        rows.append((tb.path, tb.line_start, tb.line_end, tb.rank, tb.exc_type, tb.message,
                     f"{inner.file}:{inner.line}" if inner else None, inner.function if inner else None,
                     len(tb.frames), tb.chain, tb.step))
    df = pd.DataFrame(rows, columns=["path", "line_start", "line_end", "rank", "exc_type", "message",
                                     "innermost", "function", "n_frames", "chain", "step"])
    df["rank"] = df["rank"].astype("Int64")
    df["step"] = df["step"].astype("Int64")
    return df


def config_frame(entries: Sequence[ConfigEntry]) -> pd.DataFrame:
    import pandas as pd

    rows = [(e.key, e.raw_key, e.value, e.text, e.path, e.line, e.source) for e in entries]
    df = pd.DataFrame(rows, columns=["key", "raw_key", "value", "text", "path", "line", "source"])
    df["line"] = df["line"].astype("Int64")
    return df

# ------------------------------------------------------------------ summaries


def _log_series_frame(scan: Any) -> pd.DataFrame:
    """tag, step, wall_time, value, rank of one log's series, straight from its columns
    when the scanner kept them in arrays (a SeriesPoint per value costs ~1 us)."""
    import numpy as np
    import pandas as pd

    series = scan.series
    cols = getattr(series, "tag", None)
    if cols is None or not hasattr(series, "tag_names"):
        return pd.DataFrame(
            [(p.tag, p.step, p.wall_time if p.wall_time is not None else math.nan, p.value,
              p.rank if p.rank is not None else scan.rank) for p in series],
            columns=["tag", "step", "wall_time", "value", "rank"],
        )
    from autopsy.parsers.log_series import _NO_STEP

    names = np.empty(len(series.tag_names), dtype=object)
    names[:] = series.tag_names
    step = pd.array(np.frombuffer(series.step, dtype=np.int64), dtype="Int64")
    step[np.frombuffer(series.step, dtype=np.int64) == _NO_STEP] = pd.NA
    rank_raw = np.frombuffer(series.rank, dtype=np.int64)
    rank = pd.array(rank_raw, dtype="Int64")
    if scan.rank is not None:
        rank[rank_raw < 0] = scan.rank
    else:
        rank[rank_raw < 0] = pd.NA
    return pd.DataFrame({
        "tag": names[np.frombuffer(series.tag, dtype=np.uint32)] if len(names) else np.empty(0, dtype=object),
        "step": step,
        "wall_time": np.frombuffer(series.wall, dtype=np.float64),
        "value": np.frombuffer(series.value, dtype=np.float64),
        "rank": rank,
    })


def _twins_are_train(df: pd.DataFrame) -> None:
    """An unprefixed series whose val/eval/test twin is in the same file is the train split (Keras'
    ``loss`` beside ``val_loss`` on a console line, TensorBoard's ``loss`` beside ``eval/loss``):
    the rule :func:`~autopsy.parsers.metric_tables.column_splits` applies to a table's columns,
    applied to every source. In place; rows with a split already are left as they are."""
    from autopsy.parsers.metric_tables import column_splits

    unsplit = df["split"] == ""
    if not unsplit.any():
        return
    pairs = df[["path", "tag"]].astype(str).drop_duplicates()
    train: list[tuple[str, str]] = []
    for path, tags in pairs.groupby("path", sort=False)["tag"]:
        got = column_splits(tags.tolist())
        train.extend((str(path), t) for t, sp in got.items() if sp == "train" and not split_of(t))
    if not train:
        return
    import pandas as pd

    key = pd.MultiIndex.from_arrays([df["path"].astype(str), df["tag"].astype(str)])
    df.loc[unsplit & key.isin(train), "split"] = TRAIN


def _empty_scalars() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(
        {
            "source": pd.Series([], dtype="category"),
            "path": pd.Series([], dtype="object"),
            "tag": pd.Series([], dtype="object"),
            "metric": pd.Series([], dtype="object"),
            "split": pd.Series([], dtype="object"),
            "step": pd.Series([], dtype="Int64"),
            "wall_time": pd.Series([], dtype="float64"),
            "value": pd.Series([], dtype="float64"),
            "rank": pd.Series([], dtype="Int64"),
        }
    )
