"""Line cleaning for the log scanner: decoding, ANSI/OSC stripping, rank prefixes, timestamps.

A *segment* is the text between two line separators, where both ``\\n`` and ``\\r`` separate:
a tqdm bar redrawn with ``\\r`` gives one segment per redraw, all sharing the line number
of the ``\\n``-terminated line they sit on (so ``file:line`` agrees with ``grep -n`` and
editors). Segments are decoded as UTF-8 with replacement (NUL bytes survive), escape
sequences are removed, then launcher prefixes (``[rank3]:``, ``[default3]:``,
``stderr: ``, srun's ``3: ``) are stripped and the rank they name is returned.
"""

from __future__ import annotations

import calendar
import re

MAX_KEPT_CHARS = 4096  # a line's kept text (hits, head, tail) is capped here
MAX_SEGMENT_BYTES = 65536  # only the first 64 KB of a segment are searched (huge lines)

# CSI (colours, cursor moves), OSC (titles, hyperlinks; BEL or ST terminated, or cut off),
# charset selection and the remaining two-byte escapes. Decoded text only.
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\|$)"
    r"|\x1b[()*+][0-9A-Za-z]"
    r"|\x1b[@-Z\\-_=>]"
    r"|\x1b"
)

# Launcher prefixes, stripped repeatedly ("[default0]:[rank0]: ..."): torchrun --tee/--log-dir
# ("[default3]:"), torch >= 2.2 exception prefixes ("[rank3]:"), "[RANK 3]" style loggers,
# accelerate's "stderr: " / "stdout: " relays.
_PREFIX = re.compile(r"\[(?:rank|default|Rank|RANK)[ _]?(\d{1,6})\]:? ?|(?:stderr|stdout): ")
# srun --label ("3: text") and "[3] text" only when the file is consistently labelled,
# because "[1]:" also starts torchrun's ChildFailedError rows.
_LABEL = re.compile(r" {0,4}(\d{1,6}): ")
_BRACKET_LABEL = re.compile(r"\[(\d{1,6})\] ")

LABEL_NONE, LABEL_SRUN, LABEL_BRACKET = 0, 1, 2


def decode(raw: bytes) -> str:
    """UTF-8 with replacement; NUL and every other byte value survive as characters."""
    return raw.decode("utf-8", "replace")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text) if "\x1b" in text else text


def clean(raw: bytes, label_mode: int = LABEL_NONE) -> tuple[str, int | None]:
    """Decode one segment, strip escapes and launcher prefixes; return (text, rank)."""
    text = raw.decode("utf-8", "replace")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    rank: int | None = None
    if label_mode == LABEL_SRUN:
        m = _LABEL.match(text)
        if m:
            rank = int(m.group(1))
            text = text[m.end():]
    elif label_mode == LABEL_BRACKET:
        m = _BRACKET_LABEL.match(text)
        if m:
            rank = int(m.group(1))
            text = text[m.end():]
    if text[:1] in ("[", "s"):
        for _ in range(3):
            m = _PREFIX.match(text)
            if not m:
                break
            if m.group(1) is not None:
                rank = int(m.group(1))
            text = text[m.end():]
    return text, rank


def detect_label_mode(lines: list[bytes]) -> int:
    """Is this file written by ``srun --label`` ("0: ") or a "[0] " labeller? Needs most lines."""
    nonempty = [ln for ln in lines if ln.strip()][:200]
    if len(nonempty) < 3:
        return LABEL_NONE
    srun = sum(1 for ln in nonempty if _LABEL.match(decode(ln[:16])))
    if srun >= 0.8 * len(nonempty):
        return LABEL_SRUN
    brk = sum(1 for ln in nonempty if _BRACKET_LABEL.match(decode(ln[:16])))
    if brk >= 0.8 * len(nonempty):
        return LABEL_BRACKET
    return LABEL_NONE


def cap(text: str) -> str:
    return text if len(text) <= MAX_KEPT_CHARS else text[:MAX_KEPT_CHARS] + "…"


# ----------------------------------------------------------------------- timestamps

# ISO-like dates: "2024-05-01 12:00:00,123", "[2024-05-01 12:00:00]", "2024-05-01T12:00:00Z",
# torchrun's "2024-05-01_12:00:00". Anchored on the first "-" so `re` scans with a literal
# prefix (several GB/s); the year is checked in Python from the 4 bytes before the match.
_TS_ISO = re.compile(
    rb"-(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?"
)
# glog (absl, torch >= 2.2 C++ and elastic logs): "I0501 12:00:00.123456  4242 file.cc:12]".
# Anchored on the first ":"; the "[IWEF]MMDD HH" prefix is checked from the bytes before.
_TS_GLOG = re.compile(rb":(\d\d):(\d\d)\.(\d{6}) +\d+ ")
_GLOG_HEAD = re.compile(rb"[IWEF](\d\d)(\d\d) (\d\d)$")


def _iso_at(buf: bytes, m: re.Match[bytes]) -> float | None:
    s = m.start()
    year_b = buf[s - 4:s]
    if len(year_b) != 4 or not year_b.isdigit() or (s >= 5 and buf[s - 5:s - 4].isdigit()):
        return None
    mo, d, h, mi, sec, frac, tz = m.groups()
    try:
        mon, day, hour, minute, second = int(mo), int(d), int(h), int(mi), int(sec)
        if not (1 <= mon <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
            return None
        t = calendar.timegm((int(year_b), mon, day, hour, minute, second, 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    if frac:
        t += int(frac) / 10 ** len(frac)
    if tz and tz != b"Z":
        sign = 1 if tz[:1] == b"+" else -1
        digits = tz[1:].replace(b":", b"")
        t -= sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)
    return float(t)


def _glog_at(buf: bytes, m: re.Match[bytes], year: int) -> float | None:
    s = m.start()
    head = _GLOG_HEAD.search(buf, max(0, s - 8), s)
    if head is None or head.end() != s:
        return None
    mon, day, hour = int(head.group(1)), int(head.group(2)), int(head.group(3))
    minute, second, micro = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if not (1 <= mon <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        return None
    try:
        return calendar.timegm((year, mon, day, hour, minute, second, 0, 0, 0)) + micro / 1e6
    except (ValueError, OverflowError):
        return None


def last_timestamp(buf: bytes, start: int, end: int, year: int) -> tuple[int, float] | None:
    """(position, unix time) of the last timestamp in ``buf[start:end]``, or None.

    Naive times are read as UTC (a log does not say its zone); glog lines carry no year,
    so ``year`` (the file's modification year) is assumed.
    """
    if end <= start:
        return None
    # Most queries are answered from the last few KB; widen only when that finds nothing,
    # so a fully timestamped log does not pay one match object per line per query.
    lo = end
    width = 4096
    while lo > start:
        lo = max(start, end - width)
        best: tuple[int, float] | None = None
        for m in _TS_ISO.finditer(buf, lo, end):
            t = _iso_at(buf, m)
            if t is not None:
                best = (m.start(), t)
        for m in _TS_GLOG.finditer(buf, lo, end):
            t = _glog_at(buf, m, year)
            if t is not None and (best is None or m.start() > best[0]):
                best = (m.start(), t)
        if best is not None:
            return best
        width *= 16
    return None


def first_timestamp(buf: bytes, year: int, limit: int = 1 << 20) -> float | None:
    """The first timestamp in the first ``limit`` bytes of ``buf``."""
    best: tuple[int, float] | None = None
    for m in _TS_ISO.finditer(buf, 0, limit):
        t = _iso_at(buf, m)
        if t is not None:
            best = (m.start(), t)
            break
    for m in _TS_GLOG.finditer(buf, 0, best[0] if best else limit):
        t = _glog_at(buf, m, year)
        if t is not None:
            best = (m.start(), t)
            break
    return best[1] if best else None
