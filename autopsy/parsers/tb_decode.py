"""Decode the scalars of a chunk of complete TFRecord frames, mostly with numpy.

``wall_time`` and ``step`` sit at fixed places at the start of every Event, so they are
gathered for all records at once (the step varint is decoded with numpy). What follows
them is byte-for-byte identical for every event of one tag except the value itself:
records are grouped by those bytes, one record per group is decoded in Python
(:mod:`autopsy.parsers.tb_proto`) to find where the float sits, and the values of the
whole group are read with one numpy gather. Records that fit no group are decoded one by
one. :class:`Columns` collects the result across chunks; :mod:`autopsy.parsers.tensorboard`
reads the file and finds the frames.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from autopsy.parsers import tfrecord
from autopsy.parsers.tb_proto import SLOT_F32, SLOT_F64, ProtoError, ScalarValue, decode_event

if TYPE_CHECKING:
    import pandas as pd

_WALL_OFF = 1  # payload: 0x09 <8-byte wall_time> [0x10 <step varint>] <rest>
_SHIFTS = (np.arange(10, dtype=np.uint64) * np.uint64(7))


class Columns:
    """Growing column chunks plus the tag table; the DataFrame is built once at the end."""

    def __init__(self) -> None:
        self.tag_codes: dict[str, int] = {}
        self.tags: list[str] = []
        self.tag_plugin: dict[int, str | None] = {}  # plugin named by a tag's metadata
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.n_values = 0

    def code(self, tag: str) -> int:
        c = self.tag_codes.get(tag)
        if c is None:
            c = self.tag_codes[tag] = len(self.tags)
            self.tags.append(tag)
        return c

    def note_plugin(self, code: int, sv: ScalarValue) -> None:
        if sv.plugin is not None and code not in self.tag_plugin:
            self.tag_plugin[code] = sv.plugin

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        if self.parts:
            codes, steps, walls, values, tensor = (np.concatenate(c) for c in zip(*self.parts, strict=True))
        else:
            codes = np.empty(0, np.int32)
            steps = np.empty(0, np.int64)
            walls = values = np.empty(0, np.float64)
            tensor = np.empty(0, bool)
        # Tensor values count only when their tag is a scalars-plugin tag (or carries no
        # metadata at all); TF2 writes the metadata on a tag's first event only.
        other = [c for c, p in self.tag_plugin.items() if p not in (None, "", "scalars")]
        if other and tensor.any():
            keep = ~(tensor & np.isin(codes, np.array(other, np.int32)))
            codes, steps, walls, values = codes[keep], steps[keep], walls[keep], values[keep]
        tag_arr = np.array(self.tags, dtype=object) if self.tags else np.empty(0, dtype=object)
        return pd.DataFrame({
            "tag": tag_arr[codes] if len(codes) else pd.Series([], dtype="str"),
            "step": steps.astype(np.int64, copy=False),
            "wall_time": walls.astype(np.float64, copy=False),
            "value": values.astype(np.float64, copy=False),
        })



def decode_frames(buf: bytes, a: np.ndarray, starts: np.ndarray, lengths: np.ndarray, cols: Columns,
            check_crc: bool) -> np.ndarray:
    """Decode the scalars of complete frames into ``cols``; returns the starts of frames with a bad data CRC."""
    n = len(starts)
    nb = len(a)
    # Zero padding lets fixed-width windows run past the last record without index checks.
    ap = np.zeros(nb + 32, np.uint8)
    ap[:nb] = a
    p = starts + tfrecord.HEADER
    e = p + lengths
    code = np.full(n, -1, np.int32)
    step = np.zeros(n, np.int64)
    wall = np.full(n, math.nan)
    value = np.full(n, math.nan)
    tensor = np.zeros(n, bool)
    extra: list[tuple[int, int, int, float, float, bool]] = []  # (record, code, step, wall, value, tensor)
    slow: list[int] = []
    # For the CRC check: records decoded by group, their group, head length and value slot.
    grp = np.full(n, -1, np.int64)
    head = np.zeros(n, np.int64)
    slot_at = np.zeros(n, np.int64)
    slot_w = np.zeros(n, np.int64)

    fast = (lengths >= 9) & (ap[p] == 0x09)
    slow.extend(np.flatnonzero(~fast).tolist())
    fi = np.flatnonzero(fast)
    if len(fi):
        pf, ef = p[fi], e[fi]
        wall[fi] = np.ascontiguousarray(_windows(ap, 8)[pf + _WALL_OFF]).view("<f8").ravel()
        q = pf + 9
        has_step = (q < ef) & (ap[q] == 0x10)
        b = _windows(ap, 10)[q + 1]
        ends = b < 0x80
        vlen = ends.argmax(axis=1) + 1
        ok = ends.any(axis=1)
        shifted = np.where(np.arange(10) < vlen[:, None], (b & 0x7F).astype(np.uint64) << _SHIFTS, np.uint64(0))
        steps = np.bitwise_or.reduce(shifted, axis=1).view(np.int64)
        r = np.where(has_step, q + 1 + vlen, q)
        bad = (has_step & ~ok) | (r > ef)
        if bad.any():
            slow.extend(fi[bad].tolist())
            fi, r, ef, steps, has_step = fi[~bad], r[~bad], ef[~bad], steps[~bad], has_step[~bad]
        step[fi] = np.where(has_step, steps, 0)
        head[fi] = r - p[fi]
        _decode_rests(buf, ap, fi, r, ef - r, cols, code, value, tensor, slow, (grp, slot_at, slot_w))
        slot_at[fi] += head[fi]

    for i in sorted(slow):
        grp[i] = -1
        _decode_one(buf, int(p[i]), int(e[i]), i, cols, code, step, wall, value, tensor, extra)

    bad = _bad_crcs(buf, a, ap, starts, lengths, grp, head, slot_at, slot_w) if check_crc else np.empty(0, np.int64)
    if len(bad):
        code[bad] = -1
        if extra:
            bad_set = set(bad.tolist())
            extra = [x for x in extra if x[0] not in bad_set]
    keep = code >= 0
    parts = (code[keep], step[keep], wall[keep], value[keep], tensor[keep])
    if extra:  # merged summaries: several values in one record; restore file order
        order = np.concatenate([np.flatnonzero(keep).astype(np.float64),
                                np.array([x[0] + 0.5 for x in extra])])
        ex = list(zip(*extra, strict=True))
        parts = (np.concatenate([parts[0], np.array(ex[1], np.int32)]),
                 np.concatenate([parts[1], np.array(ex[2], np.int64)]),
                 np.concatenate([parts[2], np.array(ex[3], np.float64)]),
                 np.concatenate([parts[3], np.array(ex[4], np.float64)]),
                 np.concatenate([parts[4], np.array(ex[5], bool)]))
        srt = np.argsort(order, kind="stable")
        parts = tuple(x[srt] for x in parts)  # type: ignore[assignment]
    cols.parts.append(parts)
    cols.n_values += len(parts[0])
    return starts[bad]


def _bad_crcs(buf: bytes, a: np.ndarray, ap: np.ndarray, starts: np.ndarray, lengths: np.ndarray, grp: np.ndarray,
              head: np.ndarray, slot_at: np.ndarray, slot_w: np.ndarray) -> np.ndarray:
    """Indices of records whose data CRC is wrong: by group template where possible, else one by one."""
    p = starts + tfrecord.HEADER
    by_tmpl = (grp >= 0) & (lengths >= slot_at + slot_w)
    if by_tmpl.all():  # the usual case: no subsets to gather
        return tfrecord.bad_data_crcs_by_template(buf, ap, p, lengths, grp, head, slot_at, slot_w)
    ri = np.flatnonzero(by_tmpl)
    other = np.flatnonzero(~by_tmpl)
    bad: list[np.ndarray] = []
    if len(ri):
        # exact for every record, the template's own included: linearity needs only that
        # the records differ from it nowhere but at the positions accounted for
        found = tfrecord.bad_data_crcs_by_template(buf, ap, p[ri], lengths[ri], grp[ri], head[ri], slot_at[ri],
                                                   slot_w[ri])
        bad.append(ri[found])
    if len(other):
        bad.append(other[tfrecord.bad_data_crcs(buf, a, starts[other], lengths[other])])
    return np.unique(np.concatenate(bad)) if bad else np.empty(0, np.int64)


def _windows(ap: np.ndarray, width: int) -> np.ndarray:
    """Every ``width``-byte window of ``ap`` as a view: row i is ap[i:i+width] (no index matrix)."""
    return np.lib.stride_tricks.sliding_window_view(ap, width)


def _decode_rests(buf: bytes, ap: np.ndarray, rows: np.ndarray, r: np.ndarray, rlen: np.ndarray, cols: Columns,
                  code: np.ndarray, value: np.ndarray, tensor: np.ndarray, slow: list[int],
                  crc_info: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    """Group records by the bytes after wall_time/step and read each group's values at once.

    Within one rest length, the first record is decoded to find where its float value
    sits (the *slot*); those bytes are masked and the records are grouped by the rest.
    Every record of a group equals the group's first record outside the slot, so (the
    slot being the payload of a fixed-width field) it has the same structure and tag.
    """
    grp, slot_at, slot_w = crc_info
    n_groups = int(grp.max()) + 1
    uniq, inv = np.unique(rlen, return_inverse=True)
    for k, length in enumerate(uniq.tolist()):
        sel = np.flatnonzero(inv == k)
        if length == 0:
            continue  # an Event with only wall_time/step: nothing to read
        g_rows, g_r = rows[sel], r[sel]
        if len(sel) < 4:
            slow.extend(g_rows.tolist())
            continue
        r0 = int(g_r[0])
        slot = _template_slot(buf, r0, r0 + length)
        mat = _windows(ap, length)[g_r]  # a copy: safe to mask
        if slot is not None:
            mat[:, slot[0]:slot[0] + slot[1]] = 0
        if (mat == mat[0]).all():
            groups = [np.arange(len(sel))]
        else:
            groups, collided = _group_rows(mat)
            slow.extend(g_rows[collided].tolist())
        for members in groups:
            m_rows, m_r = g_rows[members], g_r[members]
            lr = int(m_r[0])
            try:
                _, _, vals = decode_event(buf, lr, lr + length)
            except ProtoError:
                if slot is not None:
                    slow.extend(m_rows.tolist())
                continue  # identical malformed bytes: nothing to read
            if slot is None:
                # Records identical byte for byte: the same scalar (or none) in each.
                if len(vals) == 1:
                    sv = vals[0]
                    c = cols.code(sv.tag)
                    cols.note_plugin(c, sv)
                    code[m_rows], value[m_rows], tensor[m_rows] = c, sv.value, sv.from_tensor
                    grp[m_rows], n_groups = n_groups, n_groups + 1
                elif vals:
                    slow.extend(m_rows.tolist())
                continue
            if len(vals) != 1 or (vals[0].slot - lr, vals[0].slot_kind) != slot:
                slow.extend(m_rows.tolist())
                continue
            sv = vals[0]
            c = cols.code(sv.tag)
            cols.note_plugin(c, sv)
            raw = np.ascontiguousarray(_windows(ap, slot[1])[m_r + slot[0]])
            code[m_rows] = c
            value[m_rows] = raw.view("<f4" if slot[1] == SLOT_F32 else "<f8").ravel()
            tensor[m_rows] = sv.from_tensor
            grp[m_rows], n_groups = n_groups, n_groups + 1
            slot_at[m_rows], slot_w[m_rows] = slot


def _group_rows(mat: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Group equal rows of a uint8 matrix by a 64-bit hash (O(n), no row sort).

    Returns the groups (row indices, first occurrence first) and the rows that differ
    from their group's first row (hash collisions), which the caller decodes one by one.
    """
    import pandas as pd

    n, width = mat.shape
    padded = np.zeros((n, -(-width // 8) * 8), np.uint8)
    padded[:, :width] = mat
    words = padded.view("<u8")
    mult = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93],
                    np.uint64)
    h = np.zeros(n, np.uint64)
    with np.errstate(over="ignore"):
        for k in range(words.shape[1]):
            h = (h ^ words[:, k]) * mult[k % 4] + np.uint64(k + 1)
            h ^= h >> np.uint64(29)
    codes, _ = pd.factorize(h, sort=False)
    order = np.argsort(codes, kind="stable")
    groups = np.split(order, np.flatnonzero(np.diff(codes[order])) + 1)
    leads = np.empty(len(groups), np.int64)
    for g, members in enumerate(groups):
        leads[g] = members[0]
    collided = np.flatnonzero(~(mat == mat[leads[codes]]).all(axis=1))
    if len(collided):
        bad = set(collided.tolist())
        groups = [g[[i not in bad for i in g.tolist()]] for g in groups]
        groups = [g for g in groups if len(g)]
    return groups, collided


def _template_slot(buf: bytes, start: int, end: int) -> tuple[int, int] | None:
    """(offset from ``start``, width) of the one fixed-width scalar value, else None."""
    try:
        _, _, vals = decode_event(buf, start, end)
    except ProtoError:
        return None
    if len(vals) == 1 and vals[0].slot_kind in (SLOT_F32, SLOT_F64):
        return vals[0].slot - start, vals[0].slot_kind
    return None


def _decode_one(buf: bytes, start: int, end: int, i: int, cols: Columns, code: np.ndarray, step: np.ndarray,
                wall: np.ndarray, value: np.ndarray, tensor: np.ndarray,
                extra: list[tuple[int, int, int, float, float, bool]]) -> None:
    try:
        w, s, vals = decode_event(buf, start, end)
    except ProtoError:
        return
    wt = w if w is not None else math.nan
    for j, sv in enumerate(vals):
        c = cols.code(sv.tag)
        cols.note_plugin(c, sv)
        if j == 0:
            code[i], step[i], wall[i], value[i], tensor[i] = c, s, wt, sv.value, sv.from_tensor
        else:
            extra.append((i, c, s, wt, sv.value, sv.from_tensor))
