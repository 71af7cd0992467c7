"""TFRecord framing, found with numpy instead of a Python loop per record.

A TFRecord file is a sequence of frames::

    uint64 length | uint32 masked crc32c(length bytes) | data[length] | uint32 masked crc32c(data)

Walking it one frame at a time costs a few hundred nanoseconds of interpreter work per
record, which alone eats the time budget on a million scalars. Instead
:func:`scan_frames` finds *candidate* frame starts in one vectorised pass (a length below
64 KiB has six zero high bytes, and an Event payload starts with ``0x09``, its
``wall_time`` field), then proves the chain: each candidate's end must be the next
candidate. Where the chain breaks (a record that does not start with wall_time, a
large record, a false candidate inside a payload) it falls back to reading that one
header in Python and re-joins the chain. The result is exact whatever the bytes hold.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

try:  # a C implementation; without it only the framing is checked, not the CRCs
    from crc32c import crc32c as _crc32c
except ImportError:  # pragma: no cover - depends on the environment
    _crc32c = None  # type: ignore[assignment]

HEADER = 12  # length + crc of length
OVERHEAD = 16  # header + crc of data
_Q = struct.Struct("<Q")
_I = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF


def crc_available() -> bool:
    return _crc32c is not None


def masked_crc(data: bytes | memoryview) -> int:
    """TFRecord's masked crc32c (rotate right by 15, add a constant)."""
    if _crc32c is None:
        raise RuntimeError("crc32c is not installed")
    crc = _crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & _U32) + _MASK_DELTA) & _U32


@dataclass
class FrameScan:
    """Frames found in one buffer. ``starts``/``lengths`` cover complete frames only.

    ``stop`` is the buffer offset where reading must stop or resume: the start of an
    incomplete frame (``need`` then says how many bytes that frame has in all) or of a
    frame whose header is corrupt (``error``: ``"length"`` when its length field exceeds
    ``max_record``, ``need`` then holding it; ``"length_crc"`` when the length CRC is wrong).
    """

    starts: np.ndarray
    lengths: np.ndarray
    stop: int
    need: int = 0
    error: str | None = None


def scan_frames(buf: bytes, a: np.ndarray, *, max_record: int, check_crc: bool) -> FrameScan:
    """Find every complete frame of ``buf`` (``a`` is its uint8 view) from offset 0.

    ``max_record``: a length field above this is corrupt (it cannot fit the file).
    With ``check_crc`` the length CRCs are verified (vectorised: one CRC per distinct
    length); a mismatch stops the scan with ``error`` because the framing after it
    cannot be trusted.
    """
    n = len(a)
    cand = _candidates(a)
    if len(cand):
        lens = a[cand].astype(np.int64) | (a[cand + 1].astype(np.int64) << 8)
        nxt = cand + OVERHEAD + lens
        breaks = np.flatnonzero(nxt[:-1] != cand[1:])
    else:
        lens = nxt = breaks = np.empty(0, np.int64)
    seg_starts: list[np.ndarray] = []
    seg_lens: list[np.ndarray] = []
    pos = 0
    need = 0
    error: str | None = None
    while pos + HEADER <= n:
        j = int(np.searchsorted(cand, pos))
        if j < len(cand) and cand[j] == pos:
            t = int(np.searchsorted(breaks, j))
            k = int(breaks[t]) if t < len(breaks) else len(cand) - 1
            # cand[j..k] chain; drop the tail whose frames run past the buffer end
            stop_k = j + int(np.searchsorted(nxt[j:k + 1], n, side="right"))
            if stop_k > j:
                seg_starts.append(cand[j:stop_k])
                seg_lens.append(lens[j:stop_k])
                pos = int(nxt[stop_k - 1])
            if stop_k <= k:  # the next frame is incomplete
                need = int(lens[stop_k]) + OVERHEAD
                break
            continue
        length = _Q.unpack_from(buf, pos)[0]
        if check_crc and _crc32c is not None and masked_crc(buf[pos:pos + 8]) != _I.unpack_from(buf, pos + 8)[0]:
            error = "length_crc"
            break
        if length > max_record:
            need, error = OVERHEAD + length, "length"
            break
        if pos + OVERHEAD + length > n:
            need = OVERHEAD + length
            break
        seg_starts.append(np.array([pos], np.int64))
        seg_lens.append(np.array([length], np.int64))
        pos += OVERHEAD + length
    starts = np.concatenate(seg_starts) if seg_starts else np.empty(0, np.int64)
    lengths = np.concatenate(seg_lens) if seg_lens else np.empty(0, np.int64)
    if check_crc and _crc32c is not None and len(starts):
        bad = _bad_length_crcs(a, starts, lengths)
        if bad is not None:
            # keep the frames before the first bad header; the framing after it is suspect
            pos = int(starts[bad])
            starts, lengths = starts[:bad], lengths[:bad]
            need, error = 0, "length_crc"
    return FrameScan(starts, lengths, pos, need, error)


def _candidates(a: np.ndarray) -> np.ndarray:
    """Offsets where a frame with length < 64 KiB and an Event starting with wall_time could start."""
    m_len = len(a) - OVERHEAD + 1
    if m_len <= 0:
        return np.empty(0, np.int64)
    # 0x09 is rare in other bytes, so test it first over the whole buffer, the length after.
    cand = np.flatnonzero(a[HEADER:HEADER + m_len] == 0x09)
    head = np.ascontiguousarray(np.lib.stride_tricks.sliding_window_view(a, 8)[cand]).view("<u8").ravel()
    return cand[head < 65536].astype(np.int64)


def _bad_length_crcs(a: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> int | None:
    """Index of the first frame whose length CRC is wrong, else None (one CRC per distinct length)."""
    stored = _gather_u32(a, starts + 8)
    uniq, inv = np.unique(lengths, return_inverse=True)
    expected = np.array([masked_crc(_Q.pack(int(v))) for v in uniq], np.uint32)[inv]
    bad = np.flatnonzero(stored != expected)
    return int(bad[0]) if len(bad) else None


def _gather_u32(a: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    idx = offsets[:, None] + np.arange(4)
    return np.ascontiguousarray(a[idx]).view("<u4").ravel()


def bad_data_crcs(buf: bytes, a: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Indices of frames whose data CRC does not match (one C call per record)."""
    if _crc32c is None or not len(starts):
        return np.empty(0, np.int64)
    stored = _gather_u32(a, starts + HEADER + lengths)
    # map() keeps the per-record loop in C: slice objects, memoryview slices, crc calls.
    first = (starts + HEADER).tolist()
    views = map(memoryview(buf).__getitem__, map(slice, first, (starts + HEADER + lengths).tolist()))
    got = np.fromiter(map(_crc32c, views), np.uint32, len(first)).astype(np.uint64)
    masked = ((((got >> 15) | (got << 17)) & _U32) + _MASK_DELTA) & _U32
    return np.flatnonzero(masked.astype(np.uint32) != stored)



# ------------------------------------------------------------------ vectorised data CRCs
#
# CRC32C is linear over GF(2): for two payloads x and y of equal length,
# crc(x) ^ crc(y) == R(x ^ y), where R is the raw register update from 0 with no final
# xor, and R(d) is the XOR over every nonzero byte d[k] of the contribution of that byte
# followed by (len - 1 - k) zero bytes. Records of one tag differ from a reference record
# only in wall_time, step and the value, so one C call per reference plus a table lookup
# per differing byte verifies every record, without a Python call per record.

_POLY = 0x82F63B78
MAX_TABLE_DISTANCE = 2048  # payloads longer than this are checked one by one
_ZTABLE: np.ndarray | None = None


def _zero_tables() -> np.ndarray:
    """Z[j, v]: raw CRC of byte v followed by j zero bytes, flattened to j * 256 + v."""
    global _ZTABLE
    if _ZTABLE is None:
        t = np.arange(256, dtype=np.uint32)
        for _ in range(8):
            t = np.where(t & 1, (t >> 1) ^ np.uint32(_POLY), t >> 1).astype(np.uint32)
        z = np.empty((MAX_TABLE_DISTANCE, 256), np.uint32)
        z[0] = t
        for j in range(1, MAX_TABLE_DISTANCE):
            prev = z[j - 1]
            z[j] = t[prev & 0xFF] ^ (prev >> 8)
        _ZTABLE = z.ravel()
    return _ZTABLE


def _mask(crc: np.ndarray) -> np.ndarray:
    c = crc.astype(np.uint64)
    return (((((c >> 15) | (c << 17)) & _U32) + _MASK_DELTA) & _U32).astype(np.uint32)


def bad_data_crcs_by_reference(buf: bytes, ap: np.ndarray, p: np.ndarray, lengths: np.ndarray, ref: np.ndarray,
                               head: np.ndarray, slot: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Verify data CRCs of records that equal a reference record outside a few known bytes.

    ``p``: payload offsets; ``ref``: index (into these arrays) of each record's reference,
    which has the same length; bytes may differ only at payload positions ``1..head-1``
    and ``slot..slot+width-1``. ``ap`` is the buffer's uint8 view with >= 32 bytes of
    zero padding. Returns the indices of records whose stored CRC does not match.
    """
    if _crc32c is None or not len(p):
        return np.empty(0, np.int64)
    z = _zero_tables()
    leads = np.unique(ref)
    lead_crc = np.zeros(len(p), np.uint32)
    mv = memoryview(buf)
    lead_crc[leads] = [_crc32c(mv[s:s + n]) for s, n in zip(p[leads].tolist(), lengths[leads].tolist(), strict=True)]
    crc = lead_crc[ref]
    len32 = lengths.astype(np.int32)
    # wall_time and step (payload positions 1..hw): the register of their difference,
    # each byte looked up in the first hw rows of Z (a few KiB, cache-resident), then
    # moved to the record's end with one 4-lookup shift.
    hw = int(head.max()) - 1
    if hw > 0:
        m = np.ascontiguousarray(_windows(ap, hw)[p + 1])  # (records, hw), row-major: row gathers are contiguous
        d = m ^ m[ref]
        del m
        short = head - 1 < hw
        if short.any():  # bytes past a record's own step belong to its (unchanged) rest
            d[np.arange(hw)[None, :] >= (head - 1)[:, None]] = 0
        reg = np.zeros(len(p), np.uint32)
        for k in range(hw):
            reg ^= z[(hw - 1 - k) * 256 + d[:, k].astype(np.int32)]
        del d
        crc ^= _shift(z, reg, len32 - np.int32(1 + hw))
    # the value bytes: each looked up at its distance from the record's end
    has = np.flatnonzero(width > 0)
    if len(has):
        ww = int(width.max())
        v = np.ascontiguousarray(_windows(ap, ww)[p + slot])
        dv = (v ^ v[ref])[has]
        del v
        if (width[has] < ww).any():
            dv[np.arange(ww)[None, :] >= width[has][:, None]] = 0
        dist = len32[has] - np.int32(1) - slot[has].astype(np.int32)
        acc = np.zeros(len(has), np.uint32)
        for k in range(ww):
            acc ^= z[np.maximum(dist - k, 0) * 256 + dv[:, k]]
        crc[has] ^= acc
    stored = np.ascontiguousarray(_windows(ap, 4)[p + lengths]).view("<u4").ravel()
    return np.flatnonzero(_mask(crc) != stored)


def _shift(z: np.ndarray, reg: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The CRC register ``reg`` after ``k`` more zero bytes (``0 <= k < MAX_TABLE_DISTANCE``).

    Byte j of the register leaves it after j + 1 zero bytes and then runs k - 1 - j more
    (row k - 1 - j of Z); bytes still inside after k steps just move down.
    """
    out = ((reg.astype(np.uint64) >> (np.minimum(k, 4) * 8).astype(np.uint64)) & np.uint64(_U32)).astype(np.uint32)
    for j in range(4):
        row = k - np.int32(1 + j)
        byte = ((reg >> np.uint32(8 * j)) & np.uint32(0xFF)).astype(np.int32)
        byte[row < 0] = 0  # z[.., 0] == 0: a byte still inside contributes nothing here
        out ^= z[np.maximum(row, 0) * 256 + byte]
    return out


def _windows(ap: np.ndarray, width: int) -> np.ndarray:
    return np.lib.stride_tricks.sliding_window_view(ap, width)
