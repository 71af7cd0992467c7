"""HF ``trainer_state.json``: the Trainer's own record of steps, schedule and log history.

The file is written by ``TrainerState.save_to_json`` (``json.dumps(..., indent=2,
sort_keys=True)``), so it holds Python's ``NaN``/``Infinity`` literals when a loss blew
up, and a crash mid-save leaves it cut short. Both are read: orjson (when installed) for
speed, the stdlib for the non-standard literals, and a salvage pass that keeps every
complete ``log_history`` entry and the top-level fields written before the cut. Big regular
files are streamed and skip the per-entry dicts: ``autopsy.parsers.ts_columns`` reads the history into
columns and ``log_history`` becomes a :class:`LazyHistory` (dicts parsed on first use).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, overload

from autopsy.model import ParseStatus
from autopsy.parsers.numbers import INT_MAX, bounded_float, bounded_int
from autopsy.parsers.safe_open import open_regular
from autopsy.parsers.ts_columns import HistoryColumns, scan_history_stream
from autopsy.parsers.types import Parsed, TrainerState

if TYPE_CHECKING:
    import numpy as np

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None  # type: ignore[assignment]

MAX_BYTES = 1024**3  # a trainer_state beyond 1 GiB is not a trainer_state
_KNOWN = ("global_step", "max_steps", "num_train_epochs", "epoch", "save_steps", "logging_steps",
          "eval_steps", "train_batch_size", "best_model_checkpoint", "log_history")
# A top-level key as json.dumps(indent=2) writes it: two spaces, key, a scalar value.
_TOP_FIELD = re.compile(rb'^  "(?P<key>[^"\\]+)": (?P<val>-?[0-9][0-9.eE+-]*|null|true|false|NaN|-?Infinity'
                        rb'|"(?:[^"\\]|\\.)*"),?\r?$', re.M)


def read_trainer_state(fs_path: Path, rel_path: str) -> Parsed:
    """Parse one trainer_state.json; never raises on damage (status + note instead)."""
    try:
        with os.fdopen(open_regular(fs_path), "rb") as fh:
            st = os.fstat(fh.fileno())
            size, identity = st.st_size, _identity(st)
            # A big regular file is read as a stream straight into columns, never whole
            found = scan_history_stream(fh, size, MAX_BYTES) if 0 < size <= MAX_BYTES else None
            if found is not None:
                fast = _columnar_state(*found, rel_path, _Reread(fs_path, identity))
                if fast is not None:
                    return Parsed(fast, ParseStatus.OK, None)
            fh.seek(0)
            # readall() sizes its buffer from fstat; read(1 GiB) allocates and copies far more
            data = fh.read() if 0 < size <= MAX_BYTES else fh.read(MAX_BYTES + 1)
    except OSError as exc:
        return Parsed(None, ParseStatus.UNREADABLE, f"cannot read: {exc.strerror or exc}")
    if not data or data.isspace():  # isspace stops at the first other byte; strip() would copy the file
        return Parsed(None, ParseStatus.UNREADABLE, "empty file" if size == 0 else "only whitespace")
    if len(data) > MAX_BYTES:
        return Parsed(None, ParseStatus.SKIPPED, f"larger than {MAX_BYTES} bytes; not read")
    obj, error = _loads(data)
    if error is None:
        if not isinstance(obj, dict):
            return Parsed(None, ParseStatus.UNREADABLE, f"not a JSON object (a {type(obj).__name__})")
        return Parsed(_build(obj, rel_path), ParseStatus.OK, None)
    fields, entries, complete = _salvage(data)
    if not fields and not entries:
        return Parsed(None, ParseStatus.UNREADABLE, f"not valid JSON: {error}")
    fields["log_history"] = entries
    how = "cut short" if complete else "damaged"
    note = (f"invalid JSON ({error}); {how}: kept {len(entries)} complete log_history entries"
            f" and {len(fields) - 1} top-level fields written before the damage")
    return Parsed(_build(fields, rel_path), ParseStatus.TRUNCATED, note)


# Python's json writes NaN/Infinity bare; orjson refuses them. After a key (": NaN") they
# are swapped for sentinel strings with C-speed bytes.replace and swapped back in the
# parsed dicts. Anywhere else (inside a list, inside a string) the swap breaks the JSON or
# does not happen, and the stdlib, which accepts the literals, reads the file instead.
_SENTINELS = {"__autopsy_NaN__": math.nan, "__autopsy_Infinity__": math.inf, "__autopsy_-Infinity__": -math.inf}


def _loads(data: bytes) -> tuple[Any, str | None]:
    if _orjson is not None:
        try:
            return _orjson.loads(data), None
        except _orjson.JSONDecodeError:
            if b"NaN" not in data and b"Infinity" not in data:
                return _stdlib_loads(data)  # same verdict; the stdlib's message is clearer
        try:
            obj = _orjson.loads(_swap_nonfinite(data))
        except _orjson.JSONDecodeError:
            return _stdlib_loads(data)
        _restore(obj)
        return obj, None
    return _stdlib_loads(data)


def _swap_nonfinite(data: bytes) -> bytes:
    for token in (b"NaN", b"Infinity", b"-Infinity"):
        for sep in (b": ", b":"):  # json.dumps(indent=2) and compact separators
            data = data.replace(sep + token, sep + b'"__autopsy_' + token + b'__"')
    return data


def _restore(obj: Any) -> None:
    """Put NaN/inf back where :func:`_swap_nonfinite` left sentinels (top level and log_history entries)."""
    if not isinstance(obj, dict):
        return
    dicts = [obj] + [e for e in obj.get("log_history") or () if isinstance(e, dict)]
    nan_s, inf_s, ninf_s = _SENTINELS
    for d in dicts:
        vals = d.values()
        if nan_s in vals or inf_s in vals or ninf_s in vals:
            for k, v in d.items():
                if isinstance(v, str) and v in _SENTINELS:
                    d[k] = _SENTINELS[v]


def _stdlib_loads(data: bytes) -> tuple[Any, str | None]:
    try:
        return json.loads(data.decode("utf-8", "replace")), None
    except (ValueError, RecursionError) as exc:
        return None, str(exc).split("\n")[0][:200]


def _salvage(data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
    """Top-level scalar fields and complete log_history entries of a damaged file.

    Returns (fields, entries, looks_cut_short): the last flag is False when the damage is
    not at the end (the entries after it are lost either way).
    """
    fields: dict[str, Any] = {}
    for m in _TOP_FIELD.finditer(data):
        try:
            fields[m.group("key").decode("utf-8", "replace")] = json.loads(m.group("val"))
        except ValueError:
            continue
    entries: list[dict[str, Any]] = []
    start = data.find(b'"log_history"')
    # A file cut mid-write does not end with the closing brace of the top-level object.
    cut_short = not data.rstrip().endswith(b"}")
    if start >= 0:
        bracket = data.find(b"[", start)
        if bracket >= 0:
            text = data[bracket + 1:].decode("utf-8", "replace")
            decoder = json.JSONDecoder()
            i, n = 0, len(text)
            while True:
                while i < n and text[i] in " \t\r\n,":
                    i += 1
                if i >= n or text[i] == "]":
                    break
                try:
                    obj, i = decoder.raw_decode(text, i)
                except (ValueError, RecursionError):
                    break
                if isinstance(obj, dict):
                    entries.append(obj)
    return fields, entries, cut_short


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class _Reread:
    """The bytes of a trainer_state.json read again, for the entry dicts of a :class:`LazyHistory`
    asked for after the read: opened the safe way and only if it is the same file, unchanged
    (device, inode, size, modification time), so the dicts are those of the file the columns came from."""

    def __init__(self, fs_path: Path, identity: tuple[int, ...]) -> None:
        self.fs_path, self.identity = fs_path, identity

    def __call__(self) -> bytes:
        with os.fdopen(open_regular(self.fs_path), "rb") as fh:
            if _identity(os.fstat(fh.fileno())) != self.identity:
                raise ValueError(f"{os.path.basename(self.fs_path)} changed since it was read: its log_history entries "
                                 "are no longer those of the columns read")
            return fh.read()


def _columnar_state(cols: HistoryColumns, rest: bytes, rel_path: str,
                    reread: Callable[[], bytes]) -> TrainerState | None:
    """The state of a big, regular file from its history's columns and ``rest`` (the file with
    the history array replaced by ``[]``); dicts only on demand. None: read it the plain way."""
    # The rest must parse and give exactly that empty history: then the array the scan read is
    # the file's log_history.
    obj, error = _loads(rest)
    if error is not None or not isinstance(obj, dict) or obj.get("log_history") != []:
        return None
    return _build(obj, rel_path, LazyHistory(reread, cols))


class LazyHistory(Sequence[dict[str, Any]]):
    """``log_history`` read as columns; the entry dicts are parsed on first use (equal to ``json.load``'s).

    Holds the columns only, not the file's bytes (issue 14: memory follows the frame, not the
    text): the dicts, wanted by API users, not by the rules, come from the file read again
    (``reread``; a file changed since raises ValueError). ``history_columns`` returns the
    columns without building a dict.
    """

    def __init__(self, reread: Callable[[], bytes], columns: Any) -> None:
        self._reread = reread
        self.columns = columns  # autopsy.parsers.ts_columns.HistoryColumns
        self._entries: tuple[dict[str, Any], ...] | None = None

    def _all(self) -> tuple[dict[str, Any], ...]:
        if self._entries is None:
            # wrapped in an object so that _loads puts NaN/Infinity back in the entries
            data = self._reread()
            obj, error = _loads(b'{"log_history": ' + data[self.columns.start:self.columns.end] + b"}")
            if error is not None or not isinstance(obj, dict):  # the scan accepted it, so this cannot happen
                raise ValueError(f"log_history no longer parses: {error}")
            self._entries = tuple(e for e in obj["log_history"] if isinstance(e, dict))
        return self._entries

    def __len__(self) -> int:
        return self.columns.n_entries

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[dict[str, Any], ...]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | tuple[dict[str, Any], ...]:
        return self._all()[i]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyHistory):
            other = other._all()
        return isinstance(other, tuple | list) and self._all() == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LazyHistory({self.columns.n_entries} entries)"


def _build(obj: dict[str, Any], rel_path: str, lazy: LazyHistory | None = None) -> TrainerState:
    history = obj.get("log_history")
    if lazy is not None:
        # the contract says tuple; a Sequence of the same dicts, parsed on first use
        entries = cast("Sequence[dict[str, Any]]", lazy)
    else:
        entries = tuple(e for e in history if isinstance(e, dict)) if isinstance(history, list) else ()
    best = obj.get("best_model_checkpoint")
    return TrainerState(
        path=rel_path,
        global_step=_int(obj.get("global_step")),
        max_steps=_int(obj.get("max_steps")),
        num_train_epochs=_float(obj.get("num_train_epochs")),
        epoch=_float(obj.get("epoch")),
        save_steps=_int(obj.get("save_steps")),
        logging_steps=_int(obj.get("logging_steps")),
        eval_steps=_int(obj.get("eval_steps")),
        train_batch_size=_int(obj.get("train_batch_size")),
        best_model_checkpoint=best if isinstance(best, str) else None,
        log_history=entries,
        extra={k: v for k, v in obj.items() if k not in _KNOWN},
    )


def _int(v: Any) -> int | None:
    return bounded_int(v)


def _float(v: Any) -> float | None:
    return bounded_float(v, allow_nonfinite=False)


def history_columns(log_history: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tag, step, value) arrays of every numeric value of ``log_history``, in entry order.

    tag and step are object arrays (step None where an entry has none), value float64;
    for a :class:`LazyHistory` the precomputed columns (step int64: every entry has one).
    The plain way (a tuple per value) costs ~0.6 us a value; here entries are grouped by
    their key tuple (a Trainer writes a handful of shapes), each key becomes one column
    gathered by a list comprehension, and only columns that are not all int/float (bools,
    strings, None) are filtered value by value. Equal to the plain loop (tests/test_fastpaths.py).
    """
    import operator

    import numpy as np

    if isinstance(log_history, LazyHistory):  # read as columns already (steps int64: every entry has one)
        cols = log_history.columns
        return cols.tags, cols.steps, cols.values
    hist = [e for e in log_history if isinstance(e, dict)]
    # group entries by key tuple with C-level map/comprehension; per entry Python work is the cost here
    shape_of = list(map(tuple, hist))
    shapes = {k: i for i, k in enumerate(dict.fromkeys(shape_of))}
    codes = np.fromiter(map(shapes.__getitem__, shape_of), dtype=np.int64, count=len(shape_of)) \
        if len(shapes) > 1 else None
    # Pass 1: per (shape, key) column, the kept values; pass 2 scatters them to their
    # place in entry order (offset of the entry + rank of the key among its kept keys).
    columns: list[tuple[np.ndarray, str, np.ndarray, np.ndarray, np.ndarray]] = []
    counts = np.zeros(len(hist), dtype=np.int64)
    for keys, code in shapes.items():
        if codes is None:
            idx = np.arange(len(hist), dtype=np.int64)
            entries = hist
        else:
            idx = np.flatnonzero(codes == code)
            entries = [hist[i] for i in idx.tolist()]
        step_col = np.empty(len(entries), dtype=object)
        get_step = operator.itemgetter("step") if "step" in keys else operator.methodcaller("get", "step")
        # a step beyond int64 (10**20, or 1e20 as a JSON reader may give it) or NaN is no step
        step_col[:] = [s if type(s) not in _NUMBER_TYPES or -INT_MAX <= s <= INT_MAX else None
                       for s in map(get_step, entries)]
        for key in keys:
            if key == "step":
                continue
            col = list(map(operator.itemgetter(key), entries))
            vals = None
            if set(map(type, col)) <= _NUMBER_TYPES:
                try:
                    vals = np.fromiter(col, dtype=np.float64, count=len(col))
                    kept = idx
                    kept_steps = step_col
                except OverflowError:  # an int too large for a float: out of range, left out below
                    vals = None
            if vals is None:
                sel = [j for j, v in enumerate(col) if isinstance(v, (int, float)) and not isinstance(v, bool)
                       and bounded_float(v) is not None]
                vals = np.array([float(col[j]) for j in sel], dtype=np.float64)
                kept = idx[sel]
                kept_steps = step_col[sel]
            columns.append((kept, key, kept_steps, vals, idx))
            counts[kept] += 1
    total = int(counts.sum())
    out_tag = np.empty(total, dtype=object)
    out_step = np.empty(total, dtype=object)
    out_val = np.empty(total, dtype=np.float64)
    cursor = np.cumsum(counts) - counts  # next free slot of each entry
    for kept, key, kept_steps, vals, _ in columns:  # keys of one shape come in entry order
        dest = cursor[kept]
        out_tag[dest] = key
        out_step[dest] = kept_steps
        out_val[dest] = vals
        cursor[kept] += 1
    return out_tag, out_step, out_val


_NUMBER_TYPES = frozenset({int, float})
