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

    The text columns (source, path, tag, metric, split) are categoricals built from each part's
    codes: a tag is named once per distinct value, never once per row (a 300k-entry trainer_state
    is 1.2M rows; one str column of them cost ~40 MB and the build ~3x the frame).
    """
    parts: list[_Part] = []
    for path, frame in tfevents:
        if len(frame):
            parts.append(_Part.of_values("tensorboard", path, frame["tag"], frame["step"], frame["wall_time"],
                                         frame["value"]))
    ts = trainer_state
    if ts is not None:
        from autopsy.parsers.trainer_state import history_columns

        # columnar: a tuple per value costs ~3x json.load on a 200k-entry history
        cols = getattr(ts.log_history, "columns", None)  # a LazyHistory: its columns hold tag codes
        if cols is not None and len(cols.values):
            parts.append(_Part.of_values("trainer_state", ts.path, (cols.tag_codes, cols.tag_names), cols.steps,
                                         None, cols.values))
        elif cols is None:
            tags, steps, values = history_columns(ts.log_history)
            if len(values):
                parts.append(_Part.of_values("trainer_state", ts.path, tags, steps, None, values))
    for scan in logs:
        if scan.series:
            parts.append(_log_part(scan))
    for rows in metric_files:
        if rows.values:
            parts.append(_Part.of_values(rows.source, rows.path, rows.tags, rows.steps, rows.wall_times,
                                         rows.values, splits=rows.splits))
    if not parts:
        return _empty_scalars()
    return _assemble(parts)


class _Part:
    """One source file's rows: tag codes into ``names``, numeric columns, and the split each row
    was given by its file (metric files only)."""

    def __init__(self, source: str, path: str, codes: Any, names: list[str], numbers: dict[str, Any],
                 splits: Any = None) -> None:
        self.source, self.path, self.codes, self.names, self.numbers, self.splits = (
            source, path, codes, names, numbers, splits)

    @classmethod
    def of_values(cls, source: str, path: str, tags: Any, steps: Any, wall_times: Any, values: Any,
                  splits: Any = None) -> _Part:
        import numpy as np
        import pandas as pd

        if isinstance(tags, tuple):  # (codes, names) already
            codes, uniques = tags
        else:
            codes, uniques = pd.factorize(np.asarray(tags, dtype=object), use_na_sentinel=False)
        n = len(codes)
        numbers = {  # arrays, not a frame: the frame is built once, from these, without a copy
            "step": _int64(steps),
            "wall_time": np.full(n, math.nan) if wall_times is None else _float64(wall_times),
            "value": np.asarray(values, dtype="float64"),
            "rank": pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool)),
        }
        names = [str(u) for u in uniques]
        return cls(source, path, codes, names, numbers,
                   None if splits is None else np.asarray(splits, dtype=object))


def _float64(values: Any) -> Any:
    import pandas as pd

    return pd.to_numeric(pd.Series(list(values) if isinstance(values, (list, tuple)) else values),
                         errors="coerce").to_numpy("float64", na_value=math.nan)


def _int64(values: Any) -> Any:
    """An Int64 array (NA where a value is missing or not a number), index-free."""
    import numpy as np
    import pandas as pd

    if isinstance(values, np.ndarray) and values.dtype == np.int64:  # trainer_state's columns: no copy
        return pd.arrays.IntegerArray(values, np.zeros(len(values), dtype=bool))
    return pd.to_numeric(pd.Series(np.asarray(values) if not hasattr(values, "array") else values.array),
                         errors="coerce").astype("Int64").array


def _assemble(parts: list[_Part]) -> pd.DataFrame:
    """The long frame of ``parts``: numbers concatenated once, text columns from codes."""
    import numpy as np
    import pandas as pd

    sizes = [len(p.codes) for p in parts]
    tag_cats = sorted({n for p in parts for n in p.names})
    tag_id = {t: i for i, t in enumerate(tag_cats)}
    paths = sorted({p.path for p in parts})
    sources = sorted({p.source for p in parts})
    # what each distinct tag means: its canonical metric and, per file, its split
    metric_of = [canonical_metric(t) for t in tag_cats]
    metric_cats = sorted({m for m in metric_of if m is not None} | {"eval_loss"})
    metric_id = {m: i for i, m in enumerate(metric_cats)}
    tag_metric = np.array([metric_id[m] if m is not None else -1 for m in metric_of], dtype=np.int32)
    twins = _train_twins(parts)
    split_names: dict[str, int] = {}

    def split_code(name: str) -> int:
        return split_names.setdefault(name, len(split_names))

    # int32 codes: each n-row working array is half an int64's size (a 4M-row frame: 16 MB, not 32)
    tag_codes, split_codes = [], []
    for p in parts:
        local_to_tag = np.array([tag_id[n] for n in p.names], dtype=np.int32)
        local_split = np.array([split_code(_tag_split(n, p, twins)) for n in p.names], dtype=np.int32)
        codes = np.asarray(p.codes, dtype=np.int32)
        tag_codes.append(local_to_tag[codes] if len(codes) else codes)
        row_split = local_split[codes] if len(codes) else codes
        if p.splits is not None:  # metric files say the split of each row themselves (a column, a record's mode)
            given, given_names = pd.factorize(p.splits, use_na_sentinel=True)
            given_map = np.array([split_code(str(g)) if str(g) else -1 for g in given_names] + [-1], dtype=np.int32)
            given_codes = given_map[given]  # -1 (NA) indexes the trailing -1
            row_split = np.where(given_codes >= 0, given_codes, row_split)
        split_codes.append(row_split)
    tag_all = np.concatenate(tag_codes)
    split_all = np.concatenate(split_codes)
    metric_all = tag_metric[tag_all]
    # a "loss" the file put in a validation/test row (mmcv's {"mode": "val", "loss": ...}) is
    # the eval loss: rules asking for the train loss must not get it
    held_out = [code for name, code in split_names.items() if name in ("eval", "val", "test")]
    if "loss" in metric_id and held_out:
        metric_all[(metric_all == metric_id["loss"]) & np.isin(split_all, held_out)] = metric_id["eval_loss"]
    split_cats = sorted(split_names)
    split_order = np.empty(len(split_names), dtype=np.int32)
    for name, code in split_names.items():
        split_order[code] = split_cats.index(name)
    path_codes = np.repeat(np.array([paths.index(p.path) for p in parts], dtype=np.int32), sizes)
    source_codes = np.repeat(np.array([sources.index(p.source) for p in parts], dtype=np.int32), sizes)

    def cat(codes: np.ndarray, cats: list[str]) -> pd.Categorical:
        return pd.Categorical.from_codes(codes, categories=pd.Index(cats, dtype=object))

    def numbers(name: str) -> Any:
        arrays = [p.numbers[name] for p in parts]
        if len(arrays) == 1:
            return arrays[0]
        if isinstance(arrays[0], np.ndarray):
            return np.concatenate(arrays)
        return type(arrays[0])._concat_same_type(arrays)

    return pd.DataFrame({
        "source": cat(source_codes, sources), "path": cat(path_codes, paths), "tag": cat(tag_all, tag_cats),
        "metric": cat(metric_all, metric_cats), "split": cat(split_order[split_all], split_cats),
        "step": numbers("step"), "wall_time": numbers("wall_time"), "value": numbers("value"),
        "rank": numbers("rank"),
    }, copy=False)


def _tag_split(tag: str, part: _Part, twins: set[tuple[str, str]]) -> str:
    """The split a tag names (:func:`~autopsy.metrics.split_of`), else "train" for an unprefixed
    trainer_state key other than ``epoch`` (HF prefixes eval_/test_ keys only) and for a tag
    whose val/eval/test twin is in the same file, else ""."""
    split = split_of(tag)
    if split:
        return split
    if part.source == "trainer_state" and canonical_metric(tag) != EPOCH:
        return TRAIN
    return TRAIN if (part.path, tag) in twins else ""


def _train_twins(parts: list[_Part]) -> set[tuple[str, str]]:
    """(path, tag) of every unprefixed series whose val/eval/test twin is in the same file (Keras'
    ``loss`` beside ``val_loss`` on a console line, TensorBoard's ``loss`` beside ``eval/loss``):
    the rule :func:`~autopsy.parsers.metric_tables.column_splits` applies to a table's columns,
    applied to every source."""
    import numpy as np

    from autopsy.parsers.metric_tables import column_splits

    by_path: dict[str, dict[str, None]] = {}
    for p in parts:
        used = np.flatnonzero(np.bincount(np.asarray(p.codes, dtype=np.int64), minlength=len(p.names)))
        tags = by_path.setdefault(p.path, {})
        tags.update((p.names[i], None) for i in used.tolist())
    out: set[tuple[str, str]] = set()
    for path, tags in by_path.items():
        got = column_splits(list(tags))
        out.update((path, t) for t, sp in got.items() if sp == TRAIN and not split_of(t))
    return out


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


def distinct_rows(df: pd.DataFrame, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """The distinct value tuples of ``columns``, in no set order: from the categories' codes when
    every column is categorical (one int64 per row, not a hash of every row's strings), else
    ``drop_duplicates``. Missing values come back as None."""
    import numpy as np
    import pandas as pd

    cols = [df[c] for c in columns]
    if not all(isinstance(c.dtype, pd.CategoricalDtype) for c in cols):
        return [tuple(None if v is None or v != v else v for v in row)
                for row in df[list(columns)].drop_duplicates().itertuples(index=False)]
    key = np.zeros(len(df), dtype=np.int64)
    sizes = [len(c.cat.categories) + 1 for c in cols]  # +1: code -1 (missing) shifted to 0
    for c, size in zip(cols, sizes, strict=True):
        key = key * size + (c.cat.codes.to_numpy(dtype=np.int64) + 1)
    out = []
    for k in np.unique(key).tolist():
        row = []
        for c, size in zip(reversed(cols), reversed(sizes), strict=True):
            k, code = divmod(k, size)
            row.append(None if code == 0 else c.cat.categories[code - 1])
        out.append(tuple(reversed(row)))
    return out


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


def _log_series_frame(scan: Any, *, with_tags: bool = True) -> pd.DataFrame:
    """tag, step, wall_time, value, rank of one log's series, straight from its columns
    when the scanner kept them in arrays (a SeriesPoint per value costs ~1 us); without
    ``with_tags``, the numeric columns only (the caller reads the tag codes itself)."""
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
    tag = {"tag": names[np.frombuffer(series.tag, dtype=np.uint32)] if len(names) else np.empty(0, dtype=object)}
    return pd.DataFrame({
        **(tag if with_tags else {}),
        "step": step,
        "wall_time": np.frombuffer(series.wall, dtype=np.float64),
        "value": np.frombuffer(series.value, dtype=np.float64),
        "rank": rank,
    })


def _log_part(scan: Any) -> _Part:
    """One log's rows; its tag codes straight from the scanner's columns when it kept them."""
    import numpy as np

    series = scan.series
    if getattr(series, "tag", None) is None or not hasattr(series, "tag_names"):
        f = _log_series_frame(scan)
        part = _Part.of_values("log", scan.path, f["tag"], f["step"], f["wall_time"], f["value"])
        part.numbers["rank"] = _int64(f["rank"])  # the points' own ranks, else the log's
        return part
    f = _log_series_frame(scan, with_tags=False)
    numbers = {name: f[name].array if name in ("step", "rank") else f[name].to_numpy()
               for name in ("step", "wall_time", "value", "rank")}
    return _Part("log", scan.path, np.frombuffer(series.tag, dtype=np.uint32), list(series.tag_names), numbers)


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
