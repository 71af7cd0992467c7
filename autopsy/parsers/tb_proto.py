"""Minimal protobuf wire decoding of TensorBoard ``Event`` records, scalars only.

Only the fields a scalar needs are decoded (tensorboard/compat/proto/event.proto,
summary.proto, tensor.proto)::

    Event:       wall_time=1 (double), step=2 (int64), summary=5
    Summary:     value=1 (repeated)
    Value:       tag=1, simple_value=2 (float), tensor=8 (TensorProto), metadata=9
    TensorProto: dtype=1, tensor_shape=2, tensor_content=4, float_val=5, double_val=6,
                 int_val=7, int64_val=10, bool_val=11, half_val=13
    SummaryMetadata: plugin_data=1 -> PluginData.plugin_name=1

Every scalar comes with its *slot*: the byte offset and width of its value in the record
when the value is a fixed-width field (float32/float64). The vectorised reader uses the
slot to read every later record of the same shape with numpy instead of this module.
Malformed input raises :class:`ProtoError` and nothing else.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")
_H16 = struct.Struct("<e")

# TensorFlow DataType enum values that hold one number.
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_UINT8, DT_INT16, DT_INT8 = 1, 2, 3, 4, 5, 6
DT_INT64, DT_BOOL, DT_BFLOAT16, DT_HALF, DT_UINT32, DT_UINT64 = 9, 10, 14, 19, 22, 23
_INT_DTYPES = {DT_INT32: ("<i", 4), DT_UINT8: ("<B", 1), DT_INT16: ("<h", 2), DT_INT8: ("<b", 1),
               DT_INT64: ("<q", 8), DT_BOOL: ("<?", 1), DT_UINT32: ("<I", 4), DT_UINT64: ("<Q", 8)}
NUMERIC_DTYPES = frozenset({DT_FLOAT, DT_DOUBLE, DT_HALF, DT_BFLOAT16, *_INT_DTYPES})

SLOT_NONE, SLOT_F32, SLOT_F64 = 0, 4, 8  # slot kinds are their byte widths


class ProtoError(ValueError):
    """The bytes are not a well-formed protobuf message of the expected shape."""


@dataclass(frozen=True)
class ScalarValue:
    """One scalar of an Event. ``slot``: offset of the value bytes in the buffer, or -1."""

    tag: str
    value: float
    slot: int = -1
    slot_kind: int = SLOT_NONE
    plugin: str | None = None  # plugin_name from the value's metadata, when present
    from_tensor: bool = False  # a TF2-style tensor scalar (counts only for the scalars plugin)


def read_varint(buf: bytes | memoryview, i: int, end: int) -> tuple[int, int]:
    """Decode a base-128 varint at ``i``; returns (value, next offset)."""
    result = 0
    shift = 0
    while True:
        if i >= end or shift > 63:
            raise ProtoError("truncated or overlong varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes | memoryview, i: int, end: int):  # type: ignore[no-untyped-def]
    """Yield (field number, wire type, value or payload start, payload end)."""
    while i < end:
        key, i = read_varint(buf, i, end)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = read_varint(buf, i, end)
            yield field, wire, value, i
        elif wire == 1:
            if i + 8 > end:
                raise ProtoError("truncated fixed64")
            yield field, wire, i, i + 8
            i += 8
        elif wire == 2:
            n, i = read_varint(buf, i, end)
            if i + n > end:
                raise ProtoError("length-delimited field runs past its message")
            yield field, wire, i, i + n
            i += n
        elif wire == 5:
            if i + 4 > end:
                raise ProtoError("truncated fixed32")
            yield field, wire, i, i + 4
            i += 4
        else:
            raise ProtoError(f"unsupported wire type {wire}")


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def decode_event(buf: bytes | memoryview, start: int, end: int) -> tuple[float | None, int, list[ScalarValue]]:
    """Decode one Event: (wall_time or None, step, scalar values). Non-scalar values are skipped."""
    wall: float | None = None
    step = 0
    values: list[ScalarValue] = []
    for field, wire, a, b in _fields(buf, start, end):
        if field == 1 and wire == 1:
            wall = _F64.unpack_from(buf, a)[0]
        elif field == 2 and wire == 0:
            step = _signed64(a)
        elif field == 5 and wire == 2:
            for f2, w2, va, vb in _fields(buf, a, b):
                if f2 == 1 and w2 == 2:
                    sv = _decode_value(buf, va, vb)
                    if sv is not None:
                        values.append(sv)
    return wall, step, values


def _decode_value(buf: bytes | memoryview, start: int, end: int) -> ScalarValue | None:
    tag = ""
    simple: tuple[float, int] | None = None
    tensor: tuple[int, int] | None = None
    plugin: str | None = None
    for field, wire, a, b in _fields(buf, start, end):
        if field == 1 and wire == 2:
            tag = bytes(buf[a:b]).decode("utf-8", "replace")
        elif field == 2 and wire == 5:
            simple = (_F32.unpack_from(buf, a)[0], a)
        elif field == 8 and wire == 2:
            tensor = (a, b)
        elif field == 9 and wire == 2:
            plugin = _plugin_name(buf, a, b)
        elif field in (4, 5, 6):  # image, histo, audio: not scalars
            return None
    if simple is not None:
        return ScalarValue(tag, simple[0], simple[1], SLOT_F32, plugin)
    if tensor is not None:
        decoded = _decode_scalar_tensor(buf, tensor[0], tensor[1])
        if decoded is not None:
            return ScalarValue(tag, decoded[0], decoded[1], decoded[2], plugin, True)
    return None


def _plugin_name(buf: bytes | memoryview, start: int, end: int) -> str | None:
    for field, wire, a, b in _fields(buf, start, end):
        if field == 1 and wire == 2:  # plugin_data
            for f2, w2, pa, pb in _fields(buf, a, b):
                if f2 == 1 and w2 == 2:
                    return bytes(buf[pa:pb]).decode("utf-8", "replace")
    return None


def _shape_elements(buf: bytes | memoryview, start: int, end: int) -> int | None:
    """Number of elements a TensorShapeProto describes (1 for rank 0), None if unknown rank."""
    n = 1
    for field, wire, a, b in _fields(buf, start, end):
        if field == 2 and wire == 2:  # dim { size=1 }
            size = 0
            for f2, w2, v, _ in _fields(buf, a, b):
                if f2 == 1 and w2 == 0:
                    size = _signed64(v)
            n *= size
        elif field == 3 and wire == 0 and a:
            return None
    return n


def _decode_scalar_tensor(buf: bytes | memoryview, start: int, end: int) -> tuple[float, int, int] | None:
    """(value, slot offset, slot kind) of a one-element numeric TensorProto, else None."""
    dtype = 0
    n_elems: int | None = 1
    content: tuple[int, int] | None = None
    floats: list[tuple[int, int]] = []  # (offset, width) of each float/double value
    ints: list[int] = []
    for field, wire, a, b in _fields(buf, start, end):
        if field == 1 and wire == 0:
            dtype = a
        elif field == 2 and wire == 2:
            n_elems = _shape_elements(buf, a, b)
        elif field == 4 and wire == 2:
            content = (a, b)
        elif field == 5:  # float_val: packed (wire 2) or not (wire 5)
            if wire == 5:
                floats.append((a, 4))
            elif wire == 2:
                floats.extend((o, 4) for o in range(a, b - 3, 4))
        elif field == 6:  # double_val
            if wire == 1:
                floats.append((a, 8))
            elif wire == 2:
                floats.extend((o, 8) for o in range(a, b - 7, 8))
        elif field in (7, 10, 11, 13):  # int_val, int64_val, bool_val, half_val
            if wire == 0:
                ints.append(a)
            elif wire == 2:
                i = a
                while i < b:
                    v, i = read_varint(buf, i, b)
                    ints.append(v)
    if n_elems != 1 or dtype not in NUMERIC_DTYPES:
        return None
    if content is not None:
        a, b = content
        if dtype == DT_FLOAT and b - a == 4:
            return _F32.unpack_from(buf, a)[0], a, SLOT_F32
        if dtype == DT_DOUBLE and b - a == 8:
            return _F64.unpack_from(buf, a)[0], a, SLOT_F64
        if dtype == DT_HALF and b - a == 2:
            return _H16.unpack_from(buf, a)[0], -1, SLOT_NONE
        if dtype == DT_BFLOAT16 and b - a == 2:
            return _F32.unpack(b"\x00\x00" + bytes(buf[a:b]))[0], -1, SLOT_NONE
        if dtype in _INT_DTYPES:
            fmt, width = _INT_DTYPES[dtype]
            if b - a == width:
                return float(struct.unpack_from(fmt, buf, a)[0]), -1, SLOT_NONE
        return None
    if len(floats) == 1 and dtype in (DT_FLOAT, DT_DOUBLE):
        off, width = floats[0]
        value = (_F32 if width == 4 else _F64).unpack_from(buf, off)[0]
        return value, off, width
    if len(ints) == 1:
        v = ints[0]
        if dtype == DT_HALF:
            return _H16.unpack(struct.pack("<H", v & 0xFFFF))[0], -1, SLOT_NONE
        if dtype == DT_BFLOAT16:
            return _F32.unpack(struct.pack("<I", (v & 0xFFFF) << 16))[0], -1, SLOT_NONE
        if dtype in (DT_INT64, DT_INT32, DT_INT16, DT_INT8):
            return float(_signed64(v)), -1, SLOT_NONE
        return float(v), -1, SLOT_NONE
    return None
