"""W&B's binary run log (``run-<id>.wandb``) read without the wandb SDK.

An offline run (``WANDB_MODE=offline``) keeps its history only here until ``wandb sync``.
The file is a LevelDB-style log (wandb/sdk/internal/datastore.py): a 7-byte file header
(``:W&B``, magic 0xBEE1, version 0), then 32 KiB blocks of records, each with a 7-byte
header (CRC-32 of type and data, length, type: 1 full, 2 first, 3 middle, 4 last); a record
never crosses a block, and a block's last < 7 bytes are zero padding. Each assembled record
is a protobuf ``Record`` (wandb/proto/wandb_internal.proto); only these fields are decoded::

    Record:        history=2, config=5, run=17 (RunRecord.config=4), exit=18
    HistoryRecord: item=1 (repeated), step=2 -> HistoryStep.num=1
    HistoryItem:   key=1, nested_key=2 (repeated), value_json=16
    ConfigRecord:  update=1 (repeated ConfigItem: key=1, nested_key=2, value_json=16)
    RunExitRecord: exit_code=1, runtime=2

Everything else (stats, output, telemetry, files...) is skipped by wire type. A record that
fails its CRC or does not decode is counted and skipped; a file cut mid-record is truncated.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from pathlib import Path
from typing import Any

from autopsy.model import ParseStatus
from autopsy.parsers.config_aliases import canonical_key
from autopsy.parsers.metric_tables import column_splits, split_of, to_float, wall_seconds
from autopsy.parsers.safe_open import open_binary
from autopsy.parsers.tb_proto import ProtoError, read_varint
from autopsy.parsers.types import ConfigEntry, MetricRows, Parsed

_FILE_HEADER = struct.Struct("<4sHB")
_REC_HEADER = struct.Struct("<IHB")
_BLOCK = 32768
_IDENT, _MAGIC = b":W&B", 0xBEE1
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_HISTORY, _CONFIG, _RUN, _EXIT = 2, 5, 17, 18
_RUN_CONFIG = 4  # RunRecord.config: what wandb.init(config=...) was given


def read_wandb_log(fs_path: Path, rel_path: str, *, max_bytes: int) -> Parsed:
    """History rows and config of a ``.wandb`` file; never raises on damage."""
    rows = MetricRows(rel_path, "wandb")
    try:
        with open_binary(fs_path) as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        return Parsed(rows, ParseStatus.UNREADABLE, f"cannot read: {exc.strerror or exc}")
    partial = len(data) > max_bytes
    data = data[:max_bytes]
    if len(data) < _FILE_HEADER.size:
        return Parsed(rows, ParseStatus.TRUNCATED if data else ParseStatus.OK,
                      "shorter than the W&B file header" if data else "empty file")
    ident, magic, version = _FILE_HEADER.unpack_from(data, 0)
    if ident != _IDENT or magic != _MAGIC:
        return Parsed(rows, ParseStatus.UNREADABLE, "not a W&B record log (no ':W&B' header); not read")
    if version != 0:
        return Parsed(rows, ParseStatus.SKIPPED, f"W&B record log version {version}; only version 0 is read")
    cut = False
    n_records = 0
    for record, bad in _records(data):
        if bad is not None:
            if bad == "cut":
                cut = True
                break
            rows.bad(bad)
            continue
        n_records += 1
        try:
            _record(record, rows)
        except ProtoError as exc:
            rows.bad(f"record {n_records}: {exc}")
    notes = []
    status = ParseStatus.OK
    if rows.bad_rows:
        notes.append(f"{rows.bad_rows} record(s) could not be read and were skipped (first: {rows.first_bad})")
    if cut:
        status = ParseStatus.TRUNCATED
        notes.append("the last record is cut short (the run was killed or is still writing)")
    if partial:
        status = ParseStatus.TRUNCATED
        notes.append(f"only the first {max_bytes} bytes were read")
    return Parsed(rows, status, "; ".join(notes) or None)


def _records(data: bytes) -> Any:
    """Yield (record bytes, None) or (b"", problem); problem "cut" ends the file."""
    pos = _FILE_HEADER.size
    n = len(data)
    parts: list[bytes] = []
    while pos < n:
        left = _BLOCK - pos % _BLOCK
        if left < _REC_HEADER.size:
            pos += left  # zero padding at the end of a block
            continue
        if pos + _REC_HEADER.size > n:
            if any(data[pos:]):
                yield b"", "cut"
            return
        crc, length, rtype = _REC_HEADER.unpack_from(data, pos)
        if crc == 0 and length == 0 and rtype == 0:
            pos += left  # preallocated / padded tail of a block
            continue
        start = pos + _REC_HEADER.size
        end = start + length
        if end > n:
            yield b"", "cut"
            return
        if length > left - _REC_HEADER.size or rtype not in (_FULL, _FIRST, _MIDDLE, _LAST):
            yield b"", f"offset {pos}: bad record header (type {rtype}, length {length})"
            pos += left  # resynchronise at the next block
            parts = []
            continue
        payload = data[start:end]
        pos = end
        if zlib.crc32(payload, zlib.crc32(bytes([rtype]))) & 0xFFFFFFFF != crc:
            yield b"", f"offset {start - _REC_HEADER.size}: CRC mismatch"
            parts = []
            continue
        if rtype == _FULL:
            parts = []
            yield payload, None
        elif rtype == _FIRST:
            parts = [payload]
        elif rtype == _MIDDLE:
            parts.append(payload)
        else:
            parts.append(payload)
            yield b"".join(parts), None
            parts = []


def proto_fields(buf: bytes | memoryview) -> Any:
    """(field number, wire type, value) of one protobuf message: a varint's int, a
    length-delimited field's memoryview, or a fixed64/fixed32 field's offset in ``buf``."""
    mv = memoryview(buf)
    i, end = 0, len(mv)
    while i < end:
        key, i = read_varint(mv, i, end)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = read_varint(mv, i, end)
            yield field, wire, value
        elif wire == 2:
            length, i = read_varint(mv, i, end)
            if i + length > end:
                raise ProtoError("length-delimited field runs past the record")
            yield field, wire, mv[i:i + length]
            i += length
        elif wire == 1:
            yield field, wire, i
            i += 8
        elif wire == 5:
            yield field, wire, i
            i += 4
        else:
            raise ProtoError(f"unsupported wire type {wire}")
        if i > end:
            raise ProtoError("field runs past the record")


def _text(mv: Any) -> str:
    return bytes(mv).decode("utf-8", "replace")


def _record(buf: bytes, rows: MetricRows) -> None:
    for field, wire, value in proto_fields(buf):
        if wire != 2:
            continue
        if field == _HISTORY:
            _history(value, rows)
        elif field == _CONFIG:
            _config(value, rows)
        elif field == _RUN:
            for f, w, v in proto_fields(value):
                if f == _RUN_CONFIG and w == 2:
                    _config(v, rows)
        elif field == _EXIT:
            for f, w, v in proto_fields(value):
                if f == 1 and w == 0:
                    code = v - (1 << 64) if v >= 1 << 63 else v
                    rows.config.append(ConfigEntry("exit_code", "exit.exit_code", code, str(code), rows.path,
                                                   None, "wandb"))


def _item(buf: Any) -> tuple[str, Any]:
    key, nested, value_json = "", [], ""
    for f, w, v in proto_fields(buf):
        if w != 2:
            continue
        if f == 1:
            key = _text(v)
        elif f == 2:
            nested.append(_text(v))
        elif f == 16:
            value_json = _text(v)
    name = "/".join(nested) if nested else key
    try:
        value = json.loads(value_json) if value_json else None
    except (ValueError, RecursionError):
        value = value_json
    return name, value


def _history(buf: Any, rows: MetricRows) -> None:
    items: dict[str, Any] = {}
    step_num: int | None = None
    for f, w, v in proto_fields(buf):
        if f == 1 and w == 2:
            name, value = _item(v)
            items[name] = value
        elif f == 2 and w == 2:
            for sf, sw, sv in proto_fields(v):
                if sf == 1 and sw == 0:
                    step_num = sv
    step_val = to_float(items.get("_step"))
    step = int(step_val) if step_val is not None and math.isfinite(step_val) else step_num
    wall = wall_seconds(to_float(items.get("_timestamp")))
    rows.rows_read += 1
    splits = column_splits(items)
    for name, value in items.items():
        if name.startswith("_"):
            continue
        number = to_float(value)
        if number is not None:
            rows.add(name, step, wall, number, splits.get(name) or split_of(name))


def _config(buf: Any, rows: MetricRows) -> None:
    for f, w, v in proto_fields(buf):
        if f != 1 or w != 2:
            continue
        name, value = _item(v)
        if name.startswith("_"):
            continue  # W&B's own (_wandb: versions, telemetry)
        if isinstance(value, dict) and set(value) <= {"value", "desc"} and "value" in value:
            value = value["value"]
        _flatten_config(name, value, rows, 0)


def _flatten_config(name: str, value: Any, rows: MetricRows, depth: int) -> None:
    if isinstance(value, dict) and depth < 8:
        for k, v in value.items():
            _flatten_config(f"{name}.{k}", v, rows, depth + 1)
        return
    if isinstance(value, (dict, list)):
        value = json.dumps(value)[:200]
    leaf = name.rsplit(".", 1)[-1]
    parent = name.rsplit(".", 2)[-2] if "." in name else None
    rows.config.append(ConfigEntry(canonical_key(leaf, value, parent=parent), name, value, str(value)[:200],
                                   rows.path, None, "wandb"))
