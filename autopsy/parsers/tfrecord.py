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
    if int(lengths.max()) < 1 << 20:  # a lookup table by length: no sort
        uniq = np.flatnonzero(np.bincount(lengths))
        table = np.zeros(int(uniq[-1]) + 1, np.uint32)
        table[uniq] = [masked_crc(_Q.pack(int(v))) for v in uniq.tolist()]
        expected = table[lengths]
    else:
        uniq, inv = np.unique(lengths, return_inverse=True)
        expected = np.array([masked_crc(_Q.pack(int(v))) for v in uniq.tolist()], np.uint32)[inv]
    bad = np.flatnonzero(stored != expected)
    return int(bad[0]) if len(bad) else None


def _gather_u32(a: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    return _unaligned(a, "<u4")[offsets]


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
    c = crc.astype(np.uint32, copy=False)
    out = c >> np.uint32(15)
    out |= c << np.uint32(17)  # uint32 arithmetic wraps: the rotate and the add need no masking
    out += np.uint32(_MASK_DELTA)
    return out


def bad_data_crcs_by_template(buf: bytes, ap: np.ndarray, p: np.ndarray, lengths: np.ndarray, grp: np.ndarray,
                              head: np.ndarray, slot: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Verify the data CRCs of records that share a template outside a few known bytes.

    ``p``: payload offsets. Records with the same ``grp`` and payload length may differ
    only at payload positions ``1..head-1`` (wall_time and step) and
    ``slot..slot+width-1`` (the value). ``ap`` is the buffer's uint8 view with >= 32
    bytes of zero padding. Returns the indices of records whose stored CRC does not match.

    Per (group, length), the *template* is the first record with those bytes zeroed; its
    CRC is one C call. A record's CRC is then the template's XOR the raw CRC of its own
    bytes at those positions (the rest being zero in the difference): a dozen table
    lookups per record, vectorised, instead of one Python-level call per record.
    """
    if _crc32c is None or not len(p):
        return np.empty(0, np.int64)
    z = _zero_tables()
    hw = int(head.max()) - 1  # window [1, 1 + hw): every record's wall_time and step
    hw += hw & 1  # read as byte pairs
    # A window that would run past the payload or into the value: those few records are
    # checked one call each.
    odd = None
    if int(lengths.min()) < 1 + hw or int(lengths.max()) > MAX_TABLE_DISTANCE or int(slot.min()) < 1 + hw:
        odd = (lengths < 1 + hw) | ((width > 0) & (slot < 1 + hw)) | (lengths > MAX_TABLE_DISTANCE)
    bad: list[np.ndarray] = []
    if odd is not None and odd.any():
        oi = np.flatnonzero(odd)
        bad.append(oi[_bad_one_by_one(buf, ap, p[oi], lengths[oi])])
        keep = np.flatnonzero(~odd)
        p, lengths, grp, slot, width = p[keep], lengths[keep], grp[keep], slot[keep], width[keep]
    else:
        keep = None
    if len(p):
        codes, used, reps, n_codes = _template_codes(grp, lengths)
        mv = memoryview(buf)
        tcrc = np.zeros(n_codes, np.uint32)
        for t, i in zip(used.tolist(), reps.tolist(), strict=True):
            s, n, at, w = int(p[i]), int(lengths[i]), int(slot[i]), int(width[i])
            tmpl = bytearray(mv[s:s + n])
            tmpl[1:1 + hw] = bytes(hw)
            tmpl[at:at + w] = bytes(w)
            tcrc[t] = _crc32c(tmpl)
        crc = tcrc[codes]
        del codes
        len32 = lengths.astype(np.int32)
        if hw > 0:
            # (records, hw) bytes read as hw/2 little-endian pairs; pair j is followed by
            # hw - 2 - 2j zero bytes inside the window: one 16-bit table row each
            m = np.ascontiguousarray(_windows(ap, hw)[p + 1]).view("<u2")
            z16 = _pair_tables(hw // 2)
            reg = z16[0][m[:, hw // 2 - 1]]
            for j in range(hw // 2 - 1):
                reg ^= z16[hw // 2 - 1 - j][m[:, j]]
            del m
            crc ^= _shift(z, reg, len32 - np.int32(1 + hw))
        stored = None
        for w in (4, 8):  # the value bytes, each at its distance from the payload's end
            rows = np.flatnonzero(width == w) if w == 8 or not (width == 4).all() else None
            if rows is not None and not len(rows):
                continue
            v_at = slot if rows is None else slot[rows]
            at_p = (p if rows is None else p[rows]) + v_at
            tail = (lengths if rows is None else lengths[rows]) - v_at  # value start to payload end
            t0 = int(tail[0])
            same = bool((tail == t0).all())
            if rows is None and same and t0 == w == 4:
                # simple_value: the value ends the payload, the stored CRC follows; one gather
                both = _unaligned(ap, "<u8")[at_p]
                v = both.view(np.uint8).reshape(-1, 8)
                stored = both.view("<u4").reshape(-1, 2)[:, 1]
            else:
                v = _unaligned(ap, "<u4" if w == 4 else "<u8")[at_p].view(np.uint8).reshape(-1, w)
            if same:  # the usual case: one distance for every record, fixed table rows
                d0 = t0 - 1
                acc = z[(d0 - w + 1) * 256:(d0 - w + 2) * 256][v[:, w - 1]]
                for k in range(w - 1):
                    acc ^= z[(d0 - k) * 256:(d0 - k + 1) * 256][v[:, k]]
            else:
                base = (tail.astype(np.int32) - np.int32(1)) * np.int32(256)
                acc = z[base + v[:, 0]]
                for k in range(1, w):
                    base -= np.int32(256)
                    acc ^= z[base + v[:, k]]
            if rows is None:
                crc ^= acc
            else:
                crc[rows] ^= acc
        if stored is None:
            stored = _unaligned(ap, "<u4")[p + lengths]
        found = np.flatnonzero(_mask(crc) != stored)
        bad.append(found if keep is None else keep[found])
    return np.sort(np.concatenate(bad)) if bad else np.empty(0, np.int64)


def _template_codes(grp: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Codes of each record's (group, length): (code per record, codes in use, one record of each, code count).

    Any record of a code serves as its template: they all give the same zeroed bytes.
    """
    lmin = int(lengths.min())
    span = int(lengths.max()) - lmin + 1
    size = (int(grp.max()) + 1) * span
    raw = grp * span + (lengths - lmin)
    if size <= 4 * len(grp) + 4096:  # dense codes: no hashing
        some = np.full(size, -1, np.int64)
        some[raw] = np.arange(len(raw))
        used = np.flatnonzero(some >= 0)
        return raw, used, some[used], size
    import pandas as pd

    codes, _ = pd.factorize(raw, sort=False)
    n = int(codes.max()) + 1
    some = np.empty(n, np.int64)
    some[codes] = np.arange(len(codes))
    return codes, np.arange(n), some, n


def _unaligned(ap: np.ndarray, dtype: str) -> np.ndarray:
    """``ap`` read as little-endian words starting at every byte: element i is bytes i..i+width-1."""
    width = np.dtype(dtype).itemsize
    return np.ndarray((len(ap) - width + 1,), dtype, buffer=ap, offset=0, strides=(1,))


def _bad_one_by_one(buf: bytes, ap: np.ndarray, p: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    mv = memoryview(buf)
    got = np.array([_crc32c(mv[s:s + n]) for s, n in zip(p.tolist(), lengths.tolist(), strict=True)], np.uint32)
    stored = np.ascontiguousarray(_windows(ap, 4)[p + lengths]).view("<u4").ravel()
    return np.flatnonzero(_mask(got) != stored)


_Z16: dict[int, list[np.ndarray]] = {}


def _pair_tables(n: int) -> list[np.ndarray]:
    """Rows r < n of the 16-bit table: raw CRC of the byte pair v (low byte first) then 2r zero bytes."""
    if n not in _Z16:
        z = _zero_tables().reshape(MAX_TABLE_DISTANCE, 256)
        v = np.arange(65536)
        _Z16[n] = [z[2 * r + 1][v & 0xFF] ^ z[2 * r][v >> 8] for r in range(n)]
    return _Z16[n]


def _shift(z: np.ndarray, reg: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The CRC register ``reg`` after ``k`` more zero bytes (``0 <= k < MAX_TABLE_DISTANCE``).

    Byte j of the register leaves it after j + 1 zero bytes and then runs k - 1 - j more
    (row k - 1 - j of Z); bytes still inside after k steps just move down.
    """
    b = reg.view(np.uint8).reshape(-1, 4)  # little-endian: column j is byte j, no copy
    if int(k.min()) >= 4:  # the usual case: every byte leaves the register
        base = (k - np.int32(1)) * np.int32(256)
        out = z[base + b[:, 0]]
        for j in range(1, 4):
            base -= np.int32(256)
            out ^= z[base + b[:, j]]
        return out
    out = ((reg.astype(np.uint64) >> (np.minimum(k, 4) * 8).astype(np.uint64)) & np.uint64(_U32)).astype(np.uint32)
    for j in range(4):
        row = k - np.int32(1 + j)
        byte = b[:, j].astype(np.int32)
        byte[row < 0] = 0  # z[.., 0] == 0: a byte still inside contributes nothing here
        out ^= z[np.maximum(row, 0) * 256 + byte]
    return out


def _windows(ap: np.ndarray, width: int) -> np.ndarray:
    return np.lib.stride_tricks.sliding_window_view(ap, width)
