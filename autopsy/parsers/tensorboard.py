"""Every scalar of a TensorBoard event file, fast, without TensorFlow or TensorBoard.

TensorBoard's own ``EventAccumulator`` samples (10,000 points per tag by default) and
builds a Python protobuf object per event; on a million scalars that is tens of seconds.
This reader keeps every point and does almost no per-record Python work:

1. the file is read in chunks (memory stays bounded by the chunk size plus the result);
2. frames are found with numpy (:mod:`autopsy.parsers.tfrecord`);
3. ``wall_time`` and ``step`` sit at fixed places at the start of every Event, so they
   are gathered for all records at once (the step varint is decoded with numpy);
4. what follows them (the summary: tag, value, maybe a tensor header and plugin metadata)
   is byte-for-byte identical for every event of one tag, except the value itself. Records
   are grouped by those bytes; one record per group is decoded in Python
   (:mod:`autopsy.parsers.tb_proto`), which tells where the float sits, and the values of
   the whole group are read with one numpy gather (steps 3 and 4: :mod:`autopsy.parsers.tb_decode`).

Records that fit no group (merged summaries, integer tensors, odd writers) are decoded one
by one in Python, so the result is exact whatever wrote the file. TF2-style scalars (a
rank-0 numeric tensor with plugin ``scalars``) are included; images, histograms, text and
other plugins' tensors are not.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from autopsy.model import ParseStatus
from autopsy.parsers import tfrecord
from autopsy.parsers.safe_open import open_binary
from autopsy.parsers.tb_decode import Columns, decode_frames
from autopsy.parsers.types import Parsed

CHUNK_BYTES = 16 * 1024 * 1024
MAX_SCALAR_RECORD = 1024 * 1024  # a scalar event is ~50 bytes; bigger records are skipped unread

def read_scalars(fs_path: Path, *, max_bytes: int, check_crc: bool = True) -> Parsed:
    """All scalars of one event file as a DataFrame (tag, step, wall_time, value).

    Never raises on damage: a truncated last record, a corrupt length field or a CRC
    mismatch keeps every scalar read before it and returns status ``truncated`` with the
    byte offset in the note. Reads at most ``max_bytes`` bytes. With ``check_crc`` (and
    the ``crc32c`` package installed) both CRCs of every record are verified; a record
    with a bad data CRC is dropped and counted.
    """
    try:
        fh = open_binary(fs_path)  # closed in the finally below
    except OSError as exc:
        return Parsed(None, ParseStatus.UNREADABLE, f"cannot open: {exc.strerror or exc}")
    cols = Columns()
    notes: list[str] = []
    status = ParseStatus.OK
    try:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return Parsed(cols.frame(), ParseStatus.OK, "empty event file")
        if check_crc and not tfrecord.crc_available():
            notes.append("CRCs not checked (crc32c not installed)")
            check_crc = False
        # bytes appended after the open (a writer still running) are left for the next analysis
        status = _read_all(fh, size, min(max_bytes, size), check_crc, cols, notes)
    except OSError as exc:
        status = ParseStatus.TRUNCATED if cols.parts else ParseStatus.UNREADABLE
        notes.append(f"read error: {exc.strerror or exc}")
    except MemoryError:
        status = ParseStatus.TRUNCATED
        notes.append("out of memory while reading; kept what was read")
    finally:
        fh.close()
    return Parsed(cols.frame(), status, "; ".join(notes) or None)


def _read_all(fh, size: int, max_bytes: int, check_crc: bool,  # type: ignore[no-untyped-def]
              cols: Columns, notes: list[str]) -> ParseStatus:
    status = ParseStatus.OK
    file_off = 0  # absolute offset of buf[0]
    buf = b""
    read_total = 0
    bad_crc = 0
    first_bad: int | None = None
    while True:
        data = fh.read(min(CHUNK_BYTES, max(0, max_bytes - read_total)))
        read_total += len(data)
        eof = not data
        buf = buf + data if buf else data
        if not buf:
            break
        a = np.frombuffer(buf, np.uint8)
        scan = tfrecord.scan_frames(buf, a, max_record=max(0, size - file_off - tfrecord.OVERHEAD),
                                    check_crc=check_crc)
        if len(scan.starts):
            bad = decode_frames(buf, a, scan.starts, scan.lengths, cols, check_crc)
            if len(bad):
                bad_crc += len(bad)
                if first_bad is None:
                    first_bad = file_off + int(bad.min())
        stop_abs = file_off + scan.stop
        if scan.error == "length":
            length = scan.need - tfrecord.OVERHEAD
            notes.append(f"record at byte offset {stop_abs} has a length field of {length} bytes "
                         f"but the file has {size - stop_abs} bytes left; stopped there")
            status = ParseStatus.TRUNCATED
            break
        if scan.error == "length_crc":
            notes.append(f"bad length CRC in the record at byte offset {stop_abs}; stopped there")
            status = ParseStatus.TRUNCATED
            break
        if scan.need > MAX_SCALAR_RECORD:
            # A big record (graph, image) cannot be a scalar: skip it without reading it.
            target = stop_abs + scan.need
            if target > size:
                notes.append(f"last record at byte offset {stop_abs} is cut short "
                             f"({size - stop_abs} of {scan.need} bytes)")
                status = ParseStatus.TRUNCATED
                break
            fh.seek(target)
            read_total += target - (file_off + len(buf))
            file_off, buf = target, b""
            continue
        if eof:
            if scan.stop < len(buf):
                left = len(buf) - scan.stop
                if read_total >= max_bytes and file_off + len(buf) < size:
                    notes.append(f"read only the first {read_total} of {size} bytes (max bytes per file)")
                else:
                    want = f" of {scan.need}" if scan.need else ""
                    notes.append(f"last record at byte offset {stop_abs} is cut short ({left}{want} bytes)")
                status = ParseStatus.TRUNCATED
            elif read_total >= max_bytes and file_off + len(buf) < size:
                notes.append(f"read only the first {read_total} of {size} bytes (max bytes per file)")
                status = ParseStatus.TRUNCATED
            break
        file_off += scan.stop
        buf = buf[scan.stop:]
    if bad_crc:
        notes.append(f"{bad_crc} record(s) with a bad data CRC skipped (first at byte offset {first_bad})")
        status = ParseStatus.TRUNCATED
    return status
