"""One piece of a regular ``log_history`` array (whole entries) read into columns with numpy.

The byte-level reading of ``autopsy.parsers.ts_columns`` (see its docstring for the shape
and the three steps): quotes paired into keys, keys identified by (length, first 8 bytes,
last 8 bytes), values cut from fixed-width windows and parsed by one ``orjson.loads``.
Any irregularity returns None and the caller takes the plain path.
"""

from __future__ import annotations

import numpy as np

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None  # type: ignore[assignment]

# Value windows: a space, the value, its comma (after "\n    }" for an entry's last value).
# 24 bytes hold what the Trainer writes; 32 is the retry for longer values.
WIDTHS = (24, 32)
WIN = max(WIDTHS)  # room needed after a piece's end
_Q, _COLON, _LBRACE, _RBRACE, _COMMA, SPACE = 34, 58, 123, 125, 44, 32
_C1, _C2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F)


def scan_piece(buf: np.ndarray, lb: int, rb: int) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray, int] | None:
    """(key code, keys, step, value) of the numeric values of the entries in ``buf[lb:rb]``,
    and the entry count; None when the piece is not the regular shape.

    The piece is whole entries: the array's "[" or the byte after a "," between entries,
    up to the array's "]" or just past an entry's "}".
    """
    q = np.flatnonzero(buf[lb:rb] == _Q)
    if len(q) % 2 or not len(q):
        return None
    op, cl = q[0::2] + lb, q[1::2] + lb  # file offsets of each key's quotes
    del q
    if (buf[cl + 1] != _COLON).any():
        return None  # a string that is not a key: a string value
    codes, keys = _key_codes(buf, op, cl)
    if codes is None or any(ch in k for k in keys for ch in '{}[],:'):
        return None  # a key holding a structural byte would have fooled the byte counts below
    region = buf[lb:rb]
    ob = np.flatnonzero(region == _LBRACE) + lb
    n_entries = len(ob)
    if not n_entries or np.count_nonzero(region == _RBRACE) != n_entries \
            or np.count_nonzero(region == _COMMA) != len(op) - 1:
        return None  # with flat objects: one "}" per "{", one comma between values and between entries
    # the first key of each entry: the first after its "{" (200k lookups, not one per key)
    firsts = np.searchsorted(op, ob)
    # every entry holds a key: its first key comes before the next entry's "{"
    if firsts[0] != 0 or (np.diff(firsts) < 1).any() or firsts[-1] >= len(op) or (op[firsts[1:] - 1] > ob[1:]).any():
        return None
    last = np.zeros(len(op), bool)  # the last key of its entry
    last[firsts[1:] - 1] = True
    last[-1] = True
    entry = np.repeat(np.arange(n_entries), np.diff(np.append(firsts, len(op))))
    upto = np.append(op[1:], rb)
    parsed = None
    for width in WIDTHS:  # a narrow window is cheaper; a long value needs the wide one
        parsed = _values(buf, cl + 2, upto, last, width)
        if parsed is not None:
            break
    if parsed is None:
        return None
    vals, numeric = parsed
    ends = np.flatnonzero(last)
    starts = np.concatenate([[0], ends[:-1] + 1])
    # A repeated key in one entry: json keeps the last value, the scan would keep both.
    if len(keys) >= 64:
        return None
    per = np.bitwise_or.reduceat(np.left_shift(np.uint64(1), codes.astype(np.uint64)), starts)
    if (np.bitwise_count(per) != ends - starts + 1).any():
        return None
    step_code = keys.index("step") if "step" in keys else -1
    is_step = codes == step_code
    # every entry needs exactly one integer step: anything else (missing, float, null) takes the plain path
    if step_code < 0 or int(is_step.sum()) != n_entries:
        return None
    step_vals = vals[is_step]
    # integral (a "5.0" step reads as 5: equal to json's 5.0) and exact in int64
    if not numeric[is_step].all() or not (np.abs(step_vals) < 2.0**53).all() \
            or (step_vals != np.floor(step_vals)).any():
        return None
    steps = step_vals.astype(np.int64)
    keep = numeric & ~is_step
    return codes[keep], keys, steps[entry[keep]], vals[keep], n_entries


def _key_codes(buf: np.ndarray, op: np.ndarray, cl: np.ndarray) -> tuple[np.ndarray | None, list[str]]:
    """A small int per key occurrence and the key strings, or (None, []) if keys are not all text."""
    import pandas as pd

    kl = (cl - op - 1).astype(np.int64)
    u8 = _unaligned(buf, "<u8")
    first = u8[op + 1]
    last = u8[np.maximum(cl - 8, 0)]
    short = kl < 8
    if short.any():  # keep only the key's own bytes
        keep_bits = np.where(short, (np.uint64(1) << (np.minimum(kl, 7) * 8).astype(np.uint64)) - np.uint64(1),
                             np.uint64(0xFFFFFFFFFFFFFFFF))
        first &= keep_bits
    last = np.where(kl > 8, last, np.uint64(0))  # up to 8 bytes, ``first`` holds the whole key
    with np.errstate(over="ignore"):
        h = (first * _C1) ^ (last * _C2) ^ kl.astype(np.uint64)
    codes, _ = pd.factorize(h, sort=False)
    n = int(codes.max()) + 1
    rep = np.empty(n, np.int64)
    rep[codes] = np.arange(len(codes))
    r = rep[codes]
    if (kl != kl[r]).any() or (first != first[r]).any() or (last != last[r]).any():
        return None, []  # a hash collision: rare enough to leave to the plain path
    keys = []
    for c in range(n):
        i = int(rep[c])
        s, e = int(op[i]) + 1, int(cl[i])
        keys.append(buf[s:e].tobytes())
        if e - s > 16:  # bytes 8..len-9 are not in the identity: compare them
            members = np.flatnonzero(codes == c)
            win = np.lib.stride_tricks.sliding_window_view(buf, e - s)[op[members] + 1]
            if (win != buf[s:e]).any():
                return None, []
    try:
        return codes.astype(np.int64), [k.decode("utf-8") for k in keys]
    except UnicodeDecodeError:
        return None, []


def _values(buf: np.ndarray, at: np.ndarray, upto: np.ndarray, last: np.ndarray,
            width: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(float values, numeric mask) of the values at ``at``, each followed by junk up to ``upto``.

    Each window keeps the value and what follows it up to the next key (blanked where it
    falls inside): the comma, and for the last value of an entry the braces too, which
    become spaces. The rows laid end to end are then a JSON array of the values.
    """
    n = len(at)
    # The windows are laid out as the text handed to orjson: "       [" + rows + "]"
    # (the 8-byte lead keeps the rows 8-byte aligned for the word-wise blanking below).
    text = np.empty(8 + n * width + 1, np.uint8)
    text[:8] = np.frombuffer(b"       [", np.uint8)
    text[-1] = ord("]")
    win = text[8:-1].reshape(n, width)
    win[...] = np.lib.stride_tricks.sliding_window_view(buf, width)[at]
    span = upto - at
    if span.min() < 2:
        return None  # an empty value
    words = win.view("<u8")
    mask = _blank_masks(width)[np.minimum(span, width)]
    words &= ~mask
    mask &= np.uint64(0x2020202020202020)
    words |= mask
    del mask
    rows = np.flatnonzero(last)
    ends = win[rows]
    ends[(ends == _LBRACE) | (ends == _RBRACE)] = SPACE
    win[rows] = ends
    del ends, rows
    first = np.where(win[:, 0] == SPACE, win[:, 1], win[:, 0])
    if (_JUNK[first] == 1).any():
        return None  # more than one space after the colon, or no value
    # literals orjson rejects (NaN, Infinity) or that are not numbers (null, true, false):
    # parsed as 0 and put right afterwards, by first byte ("-I" for -Infinity)
    lead = np.where(first == ord("-"), np.where(win[:, 0] == SPACE, win[:, 2], win[:, 1]), first)
    special = np.isin(lead, np.frombuffer(b"NItfn", np.uint8))
    if special.any():
        srows = np.flatnonzero(special)
        if not _literals_exact(buf, at[srows], lead[srows], first[srows]):
            return None
        for r, s0 in zip(srows.tolist(), at[srows].tolist(), strict=True):
            e = s0 + (1 if buf[s0] == SPACE else 0) + len(_LITERALS[int(lead[r])]) + (first[r] == ord("-"))
            win[r, :e - s0] = SPACE
            win[r, e - s0 - 1] = ord("0")
    try:  # a value cut by the window end merges with the next row or breaks the syntax: caught here
        parsed = _orjson.loads(text.data)
        vals = np.fromiter(parsed, np.float64, len(parsed)) if isinstance(parsed, list) else None
    except (_orjson.JSONDecodeError, OverflowError, TypeError, ValueError):
        return None
    if vals is None or len(vals) != n:
        return None
    numeric = np.ones(n, bool)
    if special.any():
        vals[lead == ord("N")] = np.nan
        inf = lead == ord("I")
        vals[inf & (first == ord("-"))] = -np.inf
        vals[inf & (first != ord("-"))] = np.inf
        numeric[np.isin(lead, np.frombuffer(b"tfn", np.uint8))] = False
    return vals, numeric


_JUNK = np.zeros(256, np.uint8)  # bytes that may follow a value before the next key
_JUNK[np.frombuffer(b" \t\r\n,{}", np.uint8)] = 1


_MASKS: dict[int, np.ndarray] = {}


def _blank_masks(width: int) -> np.ndarray:
    """Row e: the bytes of a ``width``-byte window from column e on, as 64-bit words."""
    if width not in _MASKS:
        m = np.zeros((width + 1, width), np.uint8)
        for e in range(width + 1):
            m[e, e:] = 0xFF
        _MASKS[width] = m.view("<u8")
    return _MASKS[width]
_LITERALS = {ord("N"): b"NaN", ord("I"): b"Infinity", ord("t"): b"true", ord("f"): b"false", ord("n"): b"null"}


def _literals_exact(buf: np.ndarray, at: np.ndarray, lead: np.ndarray, first: np.ndarray) -> bool:
    """The special values are exactly their literal (few of them: checked one by one)."""
    for s0, ld, fs in zip(at.tolist(), lead.tolist(), first.tolist(), strict=True):
        s = s0 + (1 if buf[s0] == SPACE else 0)
        word = _LITERALS[ld]
        if fs == ord("-"):
            if word != b"Infinity":
                return False
            word = b"-" + word
        e = s + len(word)
        if buf[s:e].tobytes() != word or buf[e] not in (_COMMA, _RBRACE, 10, 13, SPACE, 9):
            return False
    return True


def _unaligned(buf: np.ndarray, dtype: str) -> np.ndarray:
    """``buf`` read as little-endian words starting at every byte: element i is bytes i..i+width-1."""
    width = np.dtype(dtype).itemsize
    return np.ndarray((len(buf) - width + 1,), dtype, buffer=buf, offset=0, strides=(1,))
