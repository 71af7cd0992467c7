"""Builders for the binary artifacts tests need, written by the real libraries where possible.

- :func:`write_tfevents` frames records with TensorBoard's own ``RecordWriter`` and builds
  the Event protos with ``tensorboard.compat.proto`` (TF2-style tensor scalars through
  TensorBoard's own ``scalar_pb``), so the files are what TensorBoard itself would write.
- :func:`write_safetensors` writes the documented format (8-byte little-endian header
  length, JSON header padded with spaces, tensor bytes); a test checks that the
  ``safetensors`` library opens what it writes.
- :func:`write_zip` writes a zip archive like ``torch.save`` does (stored entries under
  ``archive/``); contents are whatever the test passes, never a real pickle of objects.
"""

from __future__ import annotations

import json
import os
import struct
import time
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

# Bytes per element of the safetensors dtypes.
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}


def write_tfevents(path: str | os.PathLike[str], rows: Iterable[Sequence[Any]], tensor_style: bool = False,
                   *, file_version: bool = True) -> Path:
    """Write an event file with one scalar event per row ``(tag, step, value[, wall_time])``.

    ``tensor_style`` writes TF2-style scalars (a rank-0 float tensor with ``scalars``
    plugin metadata, as ``tf.summary.scalar`` does) instead of ``simple_value``.
    """
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.plugins.scalar import summary_v2
    from tensorboard.summary.writer.record_writer import RecordWriter

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        writer = RecordWriter(fh)
        if file_version:
            writer.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
        for row in rows:
            tag, step, value = row[0], int(row[1]), float(row[2])
            wall = float(row[3]) if len(row) > 3 else 1_700_000_000.0 + step
            if tensor_style:
                summary = summary_v2.scalar_pb(tag, value)
            else:
                summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
            event = event_pb2.Event(wall_time=wall, step=step, summary=summary)
            writer.write(event.SerializeToString())
    return path


def write_safetensors(path: str | os.PathLike[str], tensors: Mapping[str, Sequence[Any]],
                      truncate_to: int | None = None, *, metadata: Mapping[str, str] | None = None) -> Path:
    """Write a safetensors file with zero-filled tensors ``{name: [dtype, shape]}``.

    ``truncate_to`` cuts the file to that many bytes afterwards (a crash mid-save).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = DTYPE_BYTES[str(dtype)]
        for dim in shape:
            n *= int(dim)
        header[name] = {"dtype": str(dtype), "shape": [int(d) for d in shape], "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header to 8-byte alignment
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        # zero data: a sparse region where the filesystem allows it, so big tensors cost nothing
        fh.seek(offset, os.SEEK_CUR)
        fh.truncate()
    if truncate_to is not None:
        os.truncate(path, truncate_to)
    return path


def write_zip(path: str | os.PathLike[str], entries: Mapping[str, str | bytes]) -> Path:
    """Write a zip like ``torch.save``'s: stored entries (``archive/data.pkl``, ``archive/version``...)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, data in entries.items():
            zf.writestr(name, data.encode() if isinstance(data, str) else data)
    return path


def torch_like_zip_entries(prefix: str = "archive") -> dict[str, bytes]:
    """Entries shaped like a ``torch.save`` archive (the pickle is inert bytes, never loaded)."""
    return {f"{prefix}/data.pkl": b"\x80\x02}q\x00.", f"{prefix}/byteorder": b"little",
            f"{prefix}/data/0": b"\x00" * 64, f"{prefix}/version": b"3\n"}


def bytes_read_while(fn: Any) -> tuple[Any, int]:
    """(fn(), bytes this process read through read() syscalls meanwhile), from Linux's /proc/self/io.

    A bound on work that does not depend on how loaded the machine is (unlike wall-clock time):
    reading a sparse terabyte, or every byte of 20,000 files, shows here whatever the CPU.
    """
    import pytest

    io = Path("/proc/self/io")
    if not io.exists():
        pytest.skip("needs /proc/self/io (Linux) to count bytes read")

    def rchar() -> int:
        return int(next(line for line in io.read_text().splitlines() if line.startswith("rchar:")).split()[1])

    before = rchar()
    out = fn()
    return out, rchar() - before


def analyze_text(tmp_path: Path, text: str, name: str = "console.txt") -> Any:
    """The report of a run directory holding one log, ``text``, quoted from a real message."""
    from autopsy.api import analyze

    (tmp_path / name).write_text(text, encoding="utf-8")
    return analyze(tmp_path)


def rules_of(report: Any) -> set[str]:
    """The ids of every finding of ``report``."""
    return {f.rule for f in report.findings}
