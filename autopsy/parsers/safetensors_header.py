"""Integrity of a safetensors file from its header alone, in constant time.

Format: ``uint64 little-endian N`` | ``N bytes of JSON`` | tensor bytes. The JSON maps each
tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` relative to the data
section (plus an optional ``__metadata__``). The safetensors library refuses a file
unless the tensors tile the data section exactly, so a save that died part-way (disk
full, killed job) shows as "the header says more bytes than the file has" without
reading a single tensor byte.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

from autopsy.parsers.types import FileCheck

MAX_HEADER = 100_000_000  # the safetensors library's own limit on the header size
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
               "C64": 8, "F4": 1, "F6_E2M3": 1, "F6_E3M2": 1}


_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def human_bytes(n: float, like: float | None = None) -> str:
    """1234567 -> '1.2 MB' (decimal units, as df -H shows them); ``like`` picks the unit of another size."""
    ref = abs(like if like is not None else n)
    k = 0
    while ref >= 1000 and k < len(_UNITS) - 1:
        ref /= 1000
        k += 1
    value = n / 1000**k
    return f"{value:.0f} B" if k == 0 else f"{value:.1f} {_UNITS[k]}"


def check_safetensors(path: str, fd: int, size: int) -> FileCheck:
    """Check the header of the open file ``fd`` (of ``size`` bytes); ``path`` is for the record."""
    def bad(problem: str, entries: int | None = None) -> FileCheck:
        return FileCheck(path, size, "safetensors", False, problem, entries=entries)

    if size < 8:
        return bad(f"file has {size} bytes, too short for a safetensors header (8-byte length + JSON)")
    head = os.pread(fd, 8, 0)
    if len(head) < 8:
        return bad("could not read the 8-byte header length")
    n = struct.unpack("<Q", head)[0]
    if n > size - 8:
        return bad(f"header length field says {n} bytes but the file has only {size - 8} after it")
    if n > MAX_HEADER:
        return bad(f"header length {n} exceeds the {MAX_HEADER}-byte limit of the safetensors library")
    raw = os.pread(fd, n, 8)
    if len(raw) < n:
        return bad(f"header cut short: read {len(raw)} of {n} bytes")
    return check_header_bytes(path, size, raw)


def check_header_bytes(path: str, size: int, raw: bytes) -> FileCheck:
    """Validate a header already read (``raw`` = the JSON bytes) against the file size."""
    def bad(problem: str, entries: int | None = None) -> FileCheck:
        return FileCheck(path, size, "safetensors", False, problem, entries=entries)

    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return bad(f"header is not valid JSON: {str(exc)[:120]}")
    if not isinstance(header, dict):
        return bad("header is not a JSON object")
    spans: list[tuple[int, int, str]] = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        problem = _tensor_problem(name, info)
        if problem:
            return bad(problem, len(header))
        begin, end = info["data_offsets"]
        spans.append((begin, end, name))
    data_size = size - 8 - len(raw)
    max_end = max((e for _, e, _ in spans), default=0)
    if max_end > data_size:
        return bad(f"header says {human_bytes(max_end)} of tensors, file has {human_bytes(data_size, max_end)} "
                   f"({max_end - data_size} bytes missing: written only in part)", len(spans))
    spans.sort()
    pos = 0
    for begin, end, name in spans:
        if begin != pos:
            what = "overlaps the previous one" if begin < pos else f"leaves a gap of {begin - pos} bytes"
            return bad(f"tensor {name!r} {what} (offsets are not contiguous)", len(spans))
        pos = end
    if max_end < data_size:
        return bad(f"{data_size - max_end} bytes after the last tensor (the library refuses such a file)",
                   len(spans))
    return FileCheck(path, size, "safetensors", True, entries=len(spans))


def _tensor_problem(name: str, info: Any) -> str | None:
    if not isinstance(info, dict):
        return f"tensor {name!r}: entry is not an object"
    offsets = info.get("data_offsets")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in offsets)):
        return f"tensor {name!r}: bad data_offsets {offsets!r:.60}"
    begin, end = offsets
    if end < begin:
        return f"tensor {name!r}: data_offsets end before they begin"
    shape = info.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                               for d in shape):
        return f"tensor {name!r}: bad shape {shape!r:.60}"
    dtype = info.get("dtype")
    width = DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
    if width is not None and dtype not in ("F4", "F6_E2M3", "F6_E3M2"):  # sub-byte types pack
        n = width
        for d in shape:
            n *= d
        if n != end - begin:
            return f"tensor {name!r}: {dtype}{shape} needs {n} bytes, offsets give {end - begin}"
    return None
