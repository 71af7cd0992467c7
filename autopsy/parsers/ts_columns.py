"""``log_history`` of a big trainer_state.json straight into columns, without a dict per entry.

A 200k-entry history parsed into dicts costs as much as ``json.load`` itself, and turning
the dicts into (tag, step, value) columns costs as much again. The Trainer writes the
history in one regular shape (``json.dumps(indent=2, sort_keys=True)``: flat objects of
``"key": number``), so this module reads that shape with numpy over the raw bytes:

1. every ``"`` of the history array is found at once; with no backslash anywhere, quotes
   pair up into strings, and every string must be a key (followed by ``:``);
2. keys are identified by (length, first 8 bytes, last 8 bytes), exact up to 16 bytes and
   compared byte for byte beyond;
3. each value is cut from a fixed-width window after its key (up to the next ``,`` or
   ``}``), the windows are joined into one flat JSON array and parsed by one
   ``orjson.loads`` call (C speed, correctly rounded, same floats as ``json``). ``NaN``,
   ``Infinity``, ``null``, ``true`` and ``false`` are recognised by their first byte.

The file is read as a stream, in pieces of whole entries (``PIECE_BYTES``): the bytes held
at any time are one piece and the room after it, never the file, so memory is the columns
plus one piece's work (issue 14: a 400 MB file took 8x its size when the whole array was
scanned at once from the whole file's bytes). The piece reading itself is
``autopsy.parsers.ts_pieces``.

Anything else (string or nested values, duplicate keys, odd whitespace, a value longer than
the window, no orjson) returns None and the caller parses the file the plain way, so the
result always equals ``json.load`` + the per-value loop (tests/test_fastpaths.py).
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from autopsy.parsers.ts_pieces import SPACE, WIN, scan_piece

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None  # type: ignore[assignment]

MIN_BYTES = 1 << 20  # below this the plain parse is as fast; tests lower it to cover this path
PIECE_BYTES = 2 << 20  # the history is scanned this much at a time (tests lower it to cut often)
PREFIX_MAX = 1 << 20  # "log_history" must start within this (the Trainer writes ~300 bytes of fields before it)
ENTRY_MAX = 16 << 20  # an entry (or a run of blanks) longer than this is not the Trainer's shape
_ROOM = WIN + 8  # bytes a piece's value windows read past its end (blanked)
_HISTORY = re.compile(rb'"log_history"\s*:\s*\[')
_OPENS = re.compile(rb"\s*\{")
_WS = re.compile(rb"\s*")
_CLOSES = re.compile(rb".*\}\s*\]\Z", re.S)


@dataclass
class HistoryColumns:
    """Where the history array sits in the file, its entry count and its (tag, step, value) columns."""

    start: int  # offset of "[" in the file
    end: int  # offset just past the matching "]"
    n_entries: int
    tag_codes: np.ndarray  # int, index into tag_names
    tag_names: np.ndarray  # object (str)
    steps: np.ndarray  # int64
    values: np.ndarray  # float64

    @property
    def tags(self) -> np.ndarray:
        """The tag of each value (object array of str), built on demand: the frame reads the codes."""
        return self.tag_names[self.tag_codes]


def scan_history(data: bytes) -> HistoryColumns | None:
    """Columns of a regular ``log_history`` array in ``data``, or None to take the plain path."""
    found = scan_history_stream(io.BytesIO(data), len(data), len(data))
    return None if found is None else found[0]


def scan_history_stream(fh: BinaryIO, size: int, limit: int) -> tuple[HistoryColumns, bytes] | None:
    """Columns of a regular ``log_history`` read from ``fh`` (at its start, ``size`` bytes by
    fstat), and the file's other bytes with the array replaced by ``[]``; None to take the
    plain path (then ``fh`` must be read again from its start). More than ``limit`` bytes in
    the stream (a file that grew) is None too: the plain path reports the size."""
    if _orjson is None or size < MIN_BYTES:
        return None
    src = _Source(fh, limit)
    head = b""
    while (m := _HISTORY.search(head)) is None:
        if len(head) > PREFIX_MAX or not src.more():
            return None
        head += src.take()
    # no escapes anywhere (every block is checked as it is read): quotes then delimit strings exactly
    if src.escaped or m.start() > PREFIX_MAX or head.count(b'"', 0, m.start()) % 2:
        return None  # an escape, or "log_history" found inside a string
    lb = m.end() - 1
    prefix, pending = head[:lb], _fill(src, head[lb:], 1 + _ROOM)  # pending starts at "["
    del head
    if not _OPENS.match(pending, 1):
        return None  # empty, or not a list of objects
    base = lb  # file offset of pending[0], the current piece's first byte
    where: dict[str, int] = {}  # key -> its code in the whole history
    code_parts: list[np.ndarray] = []
    step_parts: list[np.ndarray] = []
    value_parts: list[np.ndarray] = []
    n_entries = 0
    while True:
        pending = _fill(src, pending, PIECE_BYTES + _ROOM)
        rb = pending.find(b"]")
        while rb < 0 and pending.find(b"}", PIECE_BYTES) < 0:  # an entry longer than the room
            if not src.more() or len(pending) > ENTRY_MAX:
                return None  # unterminated, or not the Trainer's shape
            pending += src.take()
            rb = pending.find(b"]")
        cut = rb if 0 <= rb <= PIECE_BYTES else pending.find(b"}", PIECE_BYTES, rb if rb >= 0 else len(pending)) + 1
        if cut <= 0:
            cut = rb
        if pending.find(b"[", 1 if base == lb else 0, cut) >= 0:
            return None  # nested arrays (or a key holding "["): not the regular shape
        if cut == rb and not _CLOSES.match(pending[max(1 if base == lb else 0, rb - 64):rb + 1]):
            return None  # the array does not end with an entry
        piece = scan_piece(_padded(pending, cut), 0, cut)
        if piece is None:
            return None
        codes, piece_keys, steps, vals, n = piece
        # int32: the code column is kept beside the frame
        to_global = np.array([where.setdefault(k, len(where)) for k in piece_keys], np.int32)
        code_parts.append(to_global[codes])
        step_parts.append(steps)
        value_parts.append(vals)
        n_entries += n
        if cut == rb:
            break
        # the next piece starts after the "," between two entries
        after = _WS.match(pending, cut).end()  # type: ignore[union-attr]  # \s* always matches
        if after == len(pending):  # blanks up to what was read: read on (a bounded run of them)
            pending = _fill(src, pending, cut + ENTRY_MAX)
            after = _WS.match(pending, cut).end()  # type: ignore[union-attr]
        if pending[after:after + 1] == b"]":  # the cut fell after the last entry
            rb = after
            if not _CLOSES.match(pending[max(0, rb - 64):rb + 1]):
                return None  # the same test on the array's end as above
            break
        if pending[after:after + 1] != b",":
            return None
        pending = pending[after + 1:]
        base += after + 1
    end = base + rb + 1
    rest = pending[rb + 1:] + src.rest()
    del pending
    if src.escaped or src.over:
        return None
    columns = HistoryColumns(start=lb, end=end, n_entries=n_entries, tag_codes=_joined(code_parts),
                             tag_names=np.array(sorted(where, key=where.__getitem__), dtype=object),
                             steps=_joined(step_parts), values=_joined(value_parts))
    return columns, prefix + b"[]" + rest


def _padded(pending: bytes, cut: int) -> np.ndarray:
    """``pending[:cut]`` and the room its value windows read after it (blanked there): the
    bytes that follow, or spaces at the stream's end."""
    buf = np.frombuffer(pending, np.uint8, count=min(len(pending), cut + _ROOM))
    if len(buf) < cut + _ROOM:
        buf = np.concatenate([buf, np.full(cut + _ROOM - len(buf), SPACE, np.uint8)])
    return buf


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """One column's pieces end to end, the pieces dropped as soon as they are copied: joining
    the columns one at a time peaks at the columns plus one column, not twice the columns."""
    out = np.concatenate(parts) if len(parts) > 1 else parts[0]
    parts.clear()
    return out


def _fill(src: _Source, pending: bytes, need: int) -> bytes:
    """``pending`` with blocks read after it until it holds ``need`` bytes or the stream ends."""
    if len(pending) >= need or not src.more():
        return pending
    blocks, have = [pending], len(pending)
    while have < need and src.more():
        block = src.take()
        blocks.append(block)
        have += len(block)
    return b"".join(blocks)


class _Source:
    """The stream read in blocks, each checked for a backslash as it comes (the scan's
    precondition: with no escapes, quotes delimit strings); more than ``limit`` bytes is ``over``."""

    def __init__(self, fh: BinaryIO, limit: int) -> None:
        self.fh, self.limit, self.read = fh, limit, 0
        self.escaped = self.over = self.ended = False

    def more(self) -> bool:
        return not (self.ended or self.escaped or self.over)

    def take(self) -> bytes:
        return self._seen(self.fh.read(max(PIECE_BYTES, 64 << 10)))

    def rest(self) -> bytes:
        """What is left of the stream: the fields after the history (small). ``read()`` with no
        size sizes its buffer from fstat; a size argument would allocate it whole first."""
        return self._seen(self.fh.read()) if self.more() else b""

    def _seen(self, block: bytes) -> bytes:
        if not block:
            self.ended = True
        self.read += len(block)
        self.over = self.over or self.read > self.limit
        self.escaped = self.escaped or b"\\" in block
        return block
