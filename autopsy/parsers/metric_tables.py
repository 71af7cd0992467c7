"""Metric tables: CSV / TSV files and JSON-lines logs with one row per logged step.

Frameworks write these without any shared schema: Lightning's ``CSVLogger`` (``metrics.csv``,
sparse rows: train rows and val rows interleaved), Keras' ``CSVLogger`` (``epoch,loss,val_loss``,
often named ``training.log``), ultralytics ``results.csv`` (padded headers), timm
``summary.csv``, detectron2 / mmengine / DETR JSON lines (``metrics.json``, ``log.txt``,
``*.jsonl``), a Keras ``history.history`` dumped as one JSON object of lists.

The reading is generic: the step axis is the first column named like a step (``step``,
``global_step``, ``iter``, ``iteration``, ``epoch``...; an ``epoch`` axis numbered from 0 is read
as epochs done, 1 for the first row), a wall-time column is used only when
its values look like Unix times, and every other column holding numbers is a series. The
split of each series (train / eval / val / test) comes from its name (``val_loss``,
``train/box_loss``); an unprefixed column whose prefixed twin exists (Keras' ``loss`` beside
``val_loss``) is the train split. Rows are streamed; a row that cannot be read is counted
and the first one named in the note, never an exception.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from autopsy.model import ParseStatus
from autopsy.parsers.safe_open import open_binary
from autopsy.parsers.types import MetricRows, Parsed

MAX_FIELD_CHARS = 1 << 20  # a pathological CSV cell; the csv module's default is 128 KiB
_STEP_KEYS = ("global_step", "step", "_step", "iteration", "iter", "it", "steps", "batch", "epoch")
_WALL_KEYS = ("_timestamp", "timestamp", "wall_time", "walltime", "time", "created_at")
# mmcv json logs: {"mode": "val", ...}; torchaudio's MetricLogger: {"name": "validation", ...} (a "name" that is
# no split word, {"name": "resnet50"}, states none)
_SPLIT_KEYS = ("split", "mode", "phase", "stage", "name")
# A column whose name says it is a metric (so a dataset CSV is not read as a run's series).
_METRIC_WORDS = re.compile(
    r"(?i)(loss|acc|lr\b|lr[_/\-]|learning.?rate|perplex|ppl|map\d*|f1|auc|bleu|rouge|top\d|prec|recall|iou|"
    r"dice|err|mae|mse|rmse|score|reward|grad|norm|nll|bpb|bpc|fitness|metric|wer|cer)"
)
# ``val_loss``, ``train/box_loss``, ``eval-accuracy``; and suffixes: ``loss_val``, ``acc/test``.
_SPLIT_PREFIX = re.compile(r"(?i)^(train|training|eval|evaluation|val|valid|validation|test|testing)(?:[_/\-. :]|$)")
_SPLIT_NAMES = {"train": "train", "training": "train", "eval": "eval", "evaluation": "eval", "val": "val",
                "valid": "val", "validation": "val", "test": "test", "testing": "test"}
_TENSOR = re.compile(r"^tensor\((?P<v>[^,)]+)")  # tensor(0.5, device='cuda:0')


def split_of(tag: str) -> str:
    """The split a series name says (``val_loss`` -> "val"), or "" (:func:`autopsy.metrics.split_of`)."""
    from autopsy.metrics import split_of as tag_split

    return tag_split(tag)


def column_splits(tags: Iterable[str]) -> dict[str, str]:
    """Split per column of one table: from the name, and "train" for an unprefixed column
    whose val/eval/test twin is in the same table (``loss`` beside ``val_loss``)."""
    tags = list(tags)
    out = {t: split_of(t) for t in tags}
    twinned = set()
    for t in tags:
        m = _SPLIT_PREFIX.match(t.strip())
        if m and out[t] in ("val", "eval", "test"):
            twinned.add(t.strip()[m.end():])
    for t in tags:
        if not out[t] and t.strip() in twinned:
            out[t] = "train"
    return out


def to_float(text: Any) -> float | None:
    """A number as a metric file writes it (``nan``, ``-inf``, ``1.2E+00``, ``tensor(0.5)``), else None."""
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return float(text)
    if not isinstance(text, str):
        return None
    t = text.strip()
    if not t:
        return None
    try:
        return float(t)
    except ValueError:
        pass
    m = _TENSOR.match(t)
    if m:
        try:
            return float(m.group("v"))
        except ValueError:
            return None
    low = t.lower()
    if low in ("-nan", "+nan", "nan%"):
        return math.nan
    return None


def wall_seconds(value: float | None) -> float:
    """Seconds since the epoch from a value that looks like a Unix time (s or ms), else NaN."""
    if value is None or not math.isfinite(value):
        return math.nan
    if 1e9 <= value < 1e10:
        return value
    if 1e12 <= value < 1e13:
        return value / 1000.0
    return math.nan


def looks_like_metric_table(header: list[str]) -> bool:
    """True when a header names at least one metric-like column (a dataset CSV does not)."""
    return any(_METRIC_WORDS.search(h) for h in header if h.strip().lower() not in _STEP_KEYS)


def sniff_table_head(head: bytes) -> str | None:
    """"csv" / "tsv" when the first bytes are a metric table (a Keras ``training.log``), else None."""
    text = head.decode("utf-8", "replace")
    lines = text.splitlines()
    if len(lines) < 2:
        return None
    first = lines[0].strip()
    sep = "\t" if first.count("\t") > first.count(",") else ","
    header = [h.strip() for h in first.split(sep)]
    if len(header) < 2 or not all(re.fullmatch(r"[\w/().\-@: ]{1,80}", h) for h in header):
        return None
    if not looks_like_metric_table(header):
        return None
    row = lines[1].split(sep)
    if len(row) != len(header) or sum(to_float(c) is not None for c in row) < max(1, len(row) // 2):
        return None
    return "tsv" if sep == "\t" else "csv"


# ----------------------------------------------------------------------------- CSV / TSV


def read_table(fs_path: Path, rel_path: str, *, max_bytes: int, delimiter: str | None = None) -> Parsed:
    """Series of one CSV/TSV metric table, streamed row by row; never raises on damage."""
    rows = MetricRows(rel_path, "csv")
    try:
        fh = open_binary(fs_path)
    except OSError as exc:
        return Parsed(rows, ParseStatus.UNREADABLE, f"cannot read: {exc.strerror or exc}")
    state = {"partial": False, "no_newline": False}
    with fh:
        lines = _text_lines(fh, max_bytes, state)
        first = next(lines, "")
        while first and not first.strip():
            first = next(lines, "")
        first = first.lstrip("\ufeff")
        if delimiter is None:
            delimiter = "\t" if first.count("\t") > first.count(",") else ","
        csv.field_size_limit(MAX_FIELD_CHARS)
        try:
            header = [h.strip() for h in next(csv.reader([first], delimiter=delimiter))]
        except (StopIteration, csv.Error):
            return Parsed(rows, ParseStatus.OK, "empty table")
        if not looks_like_metric_table(header):
            return Parsed(rows, ParseStatus.SKIPPED, "table without metric columns (header: "
                          + ", ".join(header[:8])[:160] + "); not read as a run's series")
        cut_last = _table_rows(csv.reader(lines, delimiter=delimiter), header, rows, state)
    status, note = _status(rows, state["partial"], cut_last, max_bytes)
    return Parsed(rows, status, note)


def _text_lines(fh: Any, max_bytes: int, state: dict[str, bool]) -> Iterator[str]:
    """Decoded lines of a binary file, stopping after ``max_bytes`` (``state`` says how it ended)."""
    read = 0
    for raw in fh:
        read += len(raw)
        if read > max_bytes:
            state["partial"] = True
            return
        state["no_newline"] = not raw.endswith((b"\n", b"\r"))
        yield raw.decode("utf-8", "replace")


def _table_rows(reader: Any, header: list[str], rows: MetricRows, state: dict[str, bool]) -> bool:
    """Read the data rows; True when the last row was cut mid-write (the file ends inside it)."""
    lower = [h.lower() for h in header]
    step_col = next((lower.index(k) for k in _STEP_KEYS if k in lower), None)
    wall_col = next((lower.index(k) for k in _WALL_KEYS if k in lower), None)
    split_col = next((lower.index(k) for k in _SPLIT_KEYS if k in lower), None)
    splits = column_splits(header)
    skip = {step_col, wall_col, split_col}
    n_cols = len(header)
    # An epoch-only axis numbered from 0 (Keras' CSVLogger, timm's summary.csv) indexes the epoch
    # whose end the row measures: the row is read at epoch + 1 epochs done, the number the console
    # prints ("Epoch 1/5") and checkpoints carry (model_01.keras). A 1-based one (ultralytics) is kept.
    by_epoch = step_col is not None and lower[step_col] == "epoch"
    shift: int | None = None if by_epoch else 0
    pending_bad: str | None = None  # a short row is damage unless it is the file's cut last line
    try:
        for record in reader:
            if pending_bad is not None:
                rows.bad(pending_bad)
                pending_bad = None
            if not record or all(not c.strip() for c in record):
                continue
            if len(record) != n_cols:
                pending_bad = f"line {reader.line_num + 1}: {len(record)} fields, header has {n_cols}"
                continue
            rows.rows_read += 1
            step = _as_step(record[step_col]) if step_col is not None else rows.rows_read - 1
            if shift is None and step is not None:
                shift = 1 if step == 0 else 0
            if shift and step is not None:
                step += shift
            if by_epoch and step is not None:
                rows.epochs_done = max(rows.epochs_done or 0, step)
            wall = wall_seconds(to_float(record[wall_col])) if wall_col is not None else math.nan
            row_split = _SPLIT_NAMES.get(record[split_col].strip().lower(), "") if split_col is not None else ""
            for i, cell in enumerate(record):
                if i in skip:
                    continue
                value = to_float(cell)
                if value is not None:
                    rows.add(header[i], step, wall, value, splits[header[i]] or row_split)
    except csv.Error as exc:
        rows.bad(f"line {reader.line_num + 1}: {exc}")
    if pending_bad is not None:
        if state["no_newline"] and not state["partial"]:
            return True
        rows.bad(pending_bad)
    return False  # a last row with every field cannot be told from a complete one


def _as_step(cell: Any) -> int | None:
    v = to_float(cell)
    if v is None or not math.isfinite(v) or v != int(v) or abs(v) > 2**62:
        return None
    return int(v)


def _status(rows: MetricRows, partial: bool, cut_last: bool, max_bytes: int) -> tuple[ParseStatus, str | None]:
    notes = []
    status = ParseStatus.OK
    if rows.bad_rows:
        notes.append(f"{rows.bad_rows} row(s) could not be read and were skipped (first: {rows.first_bad})")
    if cut_last:
        status = ParseStatus.TRUNCATED
        notes.append("last row cut short (the file ends mid-row)")
    if partial:
        status = ParseStatus.TRUNCATED
        notes.append(f"only the first {max_bytes} bytes were read")
    return status, "; ".join(notes) or None


# ----------------------------------------------------------------------------- JSON lines


def read_jsonl(fs_path: Path, rel_path: str, *, max_bytes: int, source: str = "jsonl") -> Parsed:
    """Series of a JSON-lines log (one object a line); never raises on damage."""
    rows = MetricRows(rel_path, source)
    try:
        fh = open_binary(fs_path)
    except OSError as exc:
        return Parsed(rows, ParseStatus.UNREADABLE, f"cannot read: {exc.strerror or exc}")
    with fh:
        partial, cut_last = _read_records(_lines(fh, max_bytes), rows)
    status, note = _status(rows, partial[0], cut_last, max_bytes)
    return Parsed(rows, status, note)


def _lines(fh: Any, max_bytes: int) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, bytes, whether the read stopped at max_bytes) per line, streamed."""
    read = 0
    for no, line in enumerate(fh, 1):
        read += len(line)
        if read > max_bytes:
            yield no, b"", True
            return
        yield no, line, False


def _read_records(lines: Iterator[tuple[int, bytes, bool]], rows: MetricRows) -> tuple[list[bool], bool]:
    partial = [False]
    cut_last = False
    pending: tuple[int, bytes] | None = None
    for no, line, stop in lines:
        if stop:
            partial[0] = True
            break
        if pending is not None:
            _record(pending[0], pending[1], rows, last=False)
        pending = (no, line)
    if pending is not None:
        read_ok = _record(pending[0], pending[1], rows, last=True)
        cut_last = not read_ok and not pending[1].endswith(b"\n")
    return partial, cut_last


def _record(no: int, line: bytes, rows: MetricRows, *, last: bool) -> bool:
    """Read one JSON line into ``rows``; False when it is not a JSON object (counted as bad
    unless it is the last line and merely cut short)."""
    text = line.strip()
    if not text:
        return True
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        if not (last and not line.endswith(b"\n")):
            rows.bad(f"line {no}: not a JSON object")
        return False
    if not isinstance(obj, dict):
        rows.bad(f"line {no}: a JSON {type(obj).__name__}, not an object")
        return True
    rows.rows_read += 1
    add_record(obj, rows, rows.rows_read - 1)
    return True


def add_record(obj: dict[str, Any], rows: MetricRows, ordinal: int | None) -> None:
    """One logged record (a dict of named values) into ``rows``: its step, time, split and numbers."""
    flat = dict(_flatten(obj, ""))
    lower = {k.lower(): k for k in flat}
    step_key = next((lower[k] for k in _STEP_KEYS if k in lower and _as_step(flat[lower[k]]) is not None), None)
    step = _as_step(flat[step_key]) if step_key is not None else ordinal
    wall_key = next((lower[k] for k in _WALL_KEYS
                     if k in lower and not math.isnan(wall_seconds(to_float(flat[lower[k]])))), None)
    wall = wall_seconds(to_float(flat[wall_key])) if wall_key is not None else math.nan
    split_key = next((lower[k] for k in _SPLIT_KEYS if k in lower and isinstance(flat[lower[k]], str)
                      and flat[lower[k]].strip().lower() in _SPLIT_NAMES), None)
    row_split = _SPLIT_NAMES[str(flat[split_key]).strip().lower()] if split_key is not None else ""
    splits = column_splits(flat)
    for key, raw in flat.items():
        if key in (step_key, wall_key, split_key) or key.startswith("_"):
            continue
        value = to_float(raw)
        if value is not None:
            rows.add(key, step, wall, value, splits[key] or row_split)


def _flatten(obj: dict[str, Any], prefix: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    for k, v in obj.items():
        key = f"{prefix}/{k}" if prefix else str(k)
        if isinstance(v, dict) and "_type" in v:
            continue  # a W&B media/histogram/table object, not a number
        if isinstance(v, dict) and depth < 4:
            yield from _flatten(v, key, depth + 1)
        elif not isinstance(v, (list, dict)):
            yield key, v


# ----------------------------------------------------------------------------- one JSON document


def read_json_metrics(fs_path: Path, rel_path: str, *, max_bytes: int, source: str = "json") -> Parsed:
    """A whole-file JSON of metrics: JSON lines (detectron2's ``metrics.json``), a list of
    records, a dict of lists (Keras ``history.history``) or one dict of final values."""
    rows = MetricRows(rel_path, source)
    try:
        with open_binary(fs_path) as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        return Parsed(rows, ParseStatus.UNREADABLE, f"cannot read: {exc.strerror or exc}")
    if len(data) > max_bytes:
        return Parsed(rows, ParseStatus.SKIPPED, f"larger than {max_bytes} bytes; not read")
    try:
        obj = json.loads(data)
    except RecursionError:
        return Parsed(rows, ParseStatus.UNREADABLE, "nested too deeply")
    except ValueError as exc:
        if data.lstrip().startswith(b"{") and b"\n{" in data:  # JSON lines under a .json name
            rows.source = "jsonl" if source == "json" else source
            partial, cut_last = _read_records(
                ((no, ln, False) for no, ln in enumerate(io.BytesIO(data), 1)), rows)
            status, note = _status(rows, partial[0], cut_last, max_bytes)
            return Parsed(rows, status, note)
        return Parsed(rows, ParseStatus.UNREADABLE, f"not valid JSON: {str(exc)[:160]}")
    if isinstance(obj, list):
        for i, rec in enumerate(obj):
            if isinstance(rec, dict):
                rows.rows_read += 1
                add_record(rec, rows, i)
            else:
                rows.bad(f"item {i}: a JSON {type(rec).__name__}, not an object")
    elif isinstance(obj, dict) and obj and all(isinstance(v, list) for v in obj.values()):
        splits = column_splits(obj)
        for key, seq in obj.items():
            for i, raw in enumerate(seq):
                value = to_float(raw)
                if value is not None:
                    rows.add(key, i, math.nan, value, splits[key])
        rows.rows_read = max((len(v) for v in obj.values()), default=0)
    elif isinstance(obj, dict):
        rows.rows_read = 1
        add_record(obj, rows, None)
    else:
        return Parsed(rows, ParseStatus.SKIPPED, f"a JSON {type(obj).__name__}, not metrics")
    status, note = _status(rows, False, False, max_bytes)
    return Parsed(rows, status, note)
