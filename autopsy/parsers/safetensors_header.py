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
# Bounds checked before any arithmetic on what a header claims (each beyond any real model):
MAX_TENSORS = 1_000_000  # tensors in one file
MAX_RANK = 64  # dimensions of one tensor
MAX_DIM = 2**63 - 1  # one dimension, and every offset (what the library's u64/usize can hold)
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
               "C64": 8, "F4": 1, "F6_E2M3": 1, "F6_E3M2": 1}


_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def human_bytes(n: float, like: float | None = None) -> str:
    """1234567 -> '1.2 MB' (decimal units, as df -H shows them); ``like`` picks the unit of another size.

    Any int is accepted (an offset near 2^64, a claim of 10^4000 bytes): past the largest unit
    the figure is written in scientific notation, never through a float conversion that overflows.
    """
    if isinstance(like, int) and abs(like) >= 10**300:
        like = None
    if isinstance(n, int) and abs(n) >= 10**300:  # float(n) would overflow
        return f"about 10^{len(str(abs(n))) - 1} B" if abs(n) < 10**4000 else "more than 10^4000 B"
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
    if len(header) > MAX_TENSORS + 1:
        return bad(f"header lists {len(header):,} tensors (more than {MAX_TENSORS:,}): not a real checkpoint")
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
    name = _short(name)
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_DIM for x in offsets)):
        return f"tensor {name}: bad data_offsets {_short(offsets)} (two integers from 0 to 2^63-1)"
    begin, end = offsets
    if end < begin:
        return f"tensor {name}: data_offsets end before they begin"
    shape = info.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_RANK:
        return f"tensor {name}: bad shape {_short(shape)} (a list of at most {MAX_RANK} dimensions)"
    if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_DIM for d in shape):
        return f"tensor {name}: bad shape {_short(shape)}"
    dtype = info.get("dtype")
    width = DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
    if width is not None and dtype not in ("F4", "F6_E2M3", "F6_E3M2"):  # sub-byte types pack
        # overflow-safe: stop as soon as the product passes what the offsets give (<= 2^63)
        n = width
        cut = False
        for k, d in enumerate(shape):
            n *= d
            if n > end - begin and 0 not in shape and k < len(shape) - 1:
                cut = True
                break
        if n != end - begin:
            more = " or more" if cut else ""
            return f"tensor {name}: {dtype}{_short(shape)} needs {n:,}{more} bytes, offsets give {end - begin:,}"
    return None


def _short(value: Any, limit: int = 60) -> str:
    """A repr of at most ``limit`` characters, built without repr'ing a huge or deep value whole."""
    if isinstance(value, list) and len(value) > 8:
        return f"[{len(value):,} items: " + ", ".join(_short(v, 12) for v in value[:4]) + ", ...]"
    if isinstance(value, (list, dict)):
        try:
            text = repr(value) if len(str(type(value))) and _shallow(value) else f"<nested {type(value).__name__}>"
        except RecursionError:
            text = f"<nested {type(value).__name__}>"
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        text = f"<{'-' if value < 0 else ''}{len(str(abs(value))) if abs(value) < 10**4000 else 'many'}-digit int>"
    elif isinstance(value, str):
        text = repr(value[:limit])
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _shallow(value: Any, depth: int = 0) -> bool:
    """Whether a list/dict is small and at most 3 deep (safe to repr)."""
    if depth > 3:
        return False
    items = value.values() if isinstance(value, dict) else value
    if len(items) > 16:
        return False
    return all(_shallow(v, depth + 1) for v in items if isinstance(v, (list, dict)))
