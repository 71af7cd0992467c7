"""Line cleaning for the log scanner: decoding, ANSI/OSC stripping, rank prefixes, timestamps.

A *segment* is the text between two line separators, where both ``\\n`` and ``\\r`` separate:
a tqdm bar redrawn with ``\\r`` gives one segment per redraw, all sharing the line number
of the ``\\n``-terminated line they sit on (so ``file:line`` agrees with ``grep -n`` and
editors). Segments are decoded as UTF-8 with replacement (NUL bytes survive), escape
sequences are removed, then launcher prefixes (``[rank3]:``, ``[default3]:``,
``stderr: ``, srun's ``3: ``) are stripped and the rank they name is returned.
"""

from __future__ import annotations

import bisect
import calendar
import itertools
import re
from collections.abc import Iterable

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
    if text[:2] == "**" and text[2:3] != "*" and len(text.strip()) > 4:
        stripped = text.strip()
        if stripped.endswith("**") and stripped[-3] != "*":
            # a line pasted in markdown bold ("**Killed**") is the line itself; HF's
            # "***** eval metrics *****" banner is not bold and keeps its stars
            text = stripped[2:-2]
    if text[:1] in ("[", "s"):
        for _ in range(3):
            m = _PREFIX.match(text)
            if not m:
                break
            if m.group(1) is not None:
                rank = int(m.group(1))
            text = text[m.end():]
    return text, rank


# A progress bar's end, where a message written without a newline gets glued on (tqdm writes
# none after its last redraw, so the shell's "Killed" or slurmstepd's notice lands on the bar's
# line: "... 512/2048 [02:10<06:31, 3.92it/s]Killed"). tqdm closes its bar with
# "[elapsed<remaining, rate{postfix}]" ("[00:03, 14.2it/s]" without a total); Keras with its
# "N/M [====>...] - ETA: 3s - loss: 0.69" metrics, each value a number or a time.
_TQDM_END = re.compile(r"\[(?:\d+:)?\d\d:\d\d(?:<(?:(?:\d+:)?\d\d:\d\d|\?))?,[^\[\]\n]*\]")
# Keras 2 draws "[====>....]"; Keras 3 draws "━" in two colours (ANSI, stripped before this).
KERAS_BAR = re.compile(r"\s*\d+/\d+ (?:\[[=>.]*\]|━+)")
# Keras' Progbar redrawn in place: "\r 57/1875 [>....] - ETA: 1:02 - loss: 0.4123 - accuracy: 0.87".
# Its metrics are the epoch's running means and the reader puts them on the epoch axis, so every
# redraw of one epoch has the same step: only the last one of a physical line says more.
_ANSI_B = rb"(?:\x1b\[[0-9;]*m)*"
_KERAS_REDRAW = re.compile(rb"[ \t]*" + _ANSI_B + rb"\d+/\d+" + _ANSI_B + rb" " + _ANSI_B
                           + rb"(?:\[[=>.]*\] - |\xe2\x94\x81)")


def keras_redrawn(buf: bytes, end: int) -> bool:
    """The segment ending at ``end`` is followed, after its ``\r``, by another Keras Progbar redraw."""
    return buf[end:end + 1] == b"\r" and _KERAS_REDRAW.match(buf, end + 1) is not None


# In a Keras bar, a capitalised word right after a digit or a unit letter ("0.6931Killed",
# "5ms/stepTraceback") starts the glued message; Keras' own keys are lowercase or follow a space.
_KERAS_TAIL = re.compile(r"(?<=[0-9a-z])(?=[A-Z][a-z]+(?:[ :(.]|$))")


# A shell's job report glued to the end of whatever the job last wrote without a newline (any
# progress display: "eta 28:34:54 \\Terminated", "100% 5/5Killed"): bash and zsh print these words
# right after the dead job's output; a letter or a space before them is ordinary prose.
_SHELL_TAILS = ("Killed", "Terminated", "core dumped)", "Segmentation fault", "Bus error", "Aborted")
_SHELL_TAIL = re.compile(
    r"(?<=[^\sA-Za-z])(?:Killed|Terminated|Segmentation fault|Bus error|Aborted)(?: \(core dumped\))?\s*$")


# The same report in a Chinese locale: bash's zh_CN "Killed" ("... ETA: 157s已杀死" after an mmcv
# evaluation bar). A letter may precede it; a Chinese character before it is prose ("进程已杀死").
_LOCALISED_TAIL = re.compile(r"(?<=[^\s\u3400-\u9fff])已杀死\s*$")

# zsh's reports end in the dead job's command, so they are found by their start: "zsh: <signal
# word>" for a foreground job, "[1]    31192 <signal word>" for a job report, glued to whatever
# progress display the job last drew ("- acc: 0.1561[1]    31192 segmentation fault  python
# resnet.py", "- accuracy: 0.3065zsh: segmentation fault  python cifar10_cnn.py", "?it/szsh: bus
# error  python"). A bar ends in a digit, a letter, "]", "|", "%", ")" or "/"; a space or a quote
# before the report is prose that quotes it.
_ZSH_WORDS = ("killed", "terminated", "segmentation fault", "bus error", "abort", "illegal hardware", "hangup")
_ZSH_TAIL = re.compile(
    r"(?<=[0-9A-Za-z\]|%)/])(?:zsh: |\[\d+\][ \t]+(?:[+-][ \t]+)?\d+ )"
    r"(?:killed|terminated|segmentation fault|bus error|abort|illegal hardware instruction|hangup)"
    r"(?: \(core dumped\))?[ \t]+\S")


def split_glued(text: str) -> list[str]:
    """A segment split where a message was glued onto a progress bar: [bar, message], else [text].

    Rules match each piece on its own, so a pattern anchored at a line start ("^Killed$") and a
    traceback header find their text whatever bar the terminal left before it.
    """
    if text.rstrip().endswith(_SHELL_TAILS):
        m0 = _SHELL_TAIL.search(text)
        if m0 is not None and m0.start() > 0:
            return [text[:m0.start()], text[m0.start():]]
    if text.rstrip().endswith("已杀死"):
        m1 = _LOCALISED_TAIL.search(text)
        if m1 is not None:
            return [text[:m1.start()], text[m1.start():]]
    if any(w in text for w in _ZSH_WORDS):
        mz = _ZSH_TAIL.search(text)
        if mz is not None and mz.start() > 0:
            return [text[:mz.start()], text[mz.start():]]
    close = text.find("]")
    if close >= 0:
        for m in _TQDM_END.finditer(text):
            rest = text[m.end():].lstrip()
            if rest and not rest.startswith("|"):
                return [text[:m.end()], rest]
    kb = KERAS_BAR.match(text)
    if kb is not None:  # Keras 3's bar has no "]": the tail is searched after the bar
        m2 = _KERAS_TAIL.search(text, kb.end())
        if m2 is not None:
            return [text[:m2.start()], text[m2.start():]]
    return [text]


def detect_label_mode(lines: list[bytes]) -> int:
    """Is this file written by ``srun --label`` ("0: ") or a "[0] " labeller? Needs most lines."""
    nonempty = [ln for ln in lines if ln.strip()][:200]
    if len(nonempty) < 3:
        return LABEL_NONE
    for mode, label in ((LABEL_SRUN, _LABEL), (LABEL_BRACKET, _BRACKET_LABEL)):
        got = [m for m in (label.match(decode(ln[:16])) for ln in nonempty) if m is not None]
        if len(got) >= 0.8 * len(nonempty):
            return LABEL_NONE if _counter([int(m.group(1)) for m in got]) else mode
    return LABEL_NONE


def _counter(labels: list[int]) -> bool:
    """Labels that rise on every line are an iteration counter (CatBoost "61:     learn ...", WaveGlow
    "123873: -5.48"), not ranks: ranks repeat ("0: ", "1: ", "0: ") or stay put (one rank). A job whose
    ranks print one line each in rank order starts at rank 0 and has few of them."""
    rising = all(b > a for a, b in itertools.pairwise(labels))
    return len(labels) >= 3 and rising and (labels[0] > 0 or len(labels) > 32)


def cap(text: str) -> str:
    return text if len(text) <= MAX_KEPT_CHARS else text[:MAX_KEPT_CHARS] + "…"


# ----------------------------------------------------------------------- timestamps

# ISO-like dates: "2024-05-01 12:00:00,123", "[2024-05-01 12:00:00]", "2024-05-01T12:00:00Z",
# torchrun's "2024-05-01_12:00:00". Anchored on the first "-" so `re` scans with a literal
# prefix (several GB/s); the year is checked in Python from the 4 bytes before the match.
_TS_ISO = re.compile(
    rb"-(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?"
)
# glog (absl, torch elastic): "I0501 12:00:00.123456  4242 file.cc:12]"; torch >= 2.3 c10
# logging (NCCL watchdog): "[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607]", month not
# zero-padded, nanoseconds, no thread id. Anchored on the first ":"; the "[IWEF]MMDD HH"
# prefix is checked from the bytes before. 6-9 fraction digits keep "12:00:00.5" out.
_TS_GLOG = re.compile(rb":(\d\d):(\d\d)\.(\d{6,9})(?=[ \]])")
_GLOG_HEAD = re.compile(rb"[IWEF](\d{3,4}) (\d\d)$")


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


def iso_year(buf: bytes, m: re.Match[bytes]) -> int:
    """The year of an ISO match :func:`_iso_at` accepted (the 4 digits before it)."""
    return int(buf[m.start() - 4:m.start()])


def _glog_at(buf: bytes, m: re.Match[bytes], year: int) -> float | None:
    s = m.start()
    head = _GLOG_HEAD.search(buf, max(0, s - 9), s)
    if head is None or head.end() != s:
        return None
    h0 = head.start()
    if h0 > 0 and (buf[h0 - 1:h0].isalnum() or buf[h0 - 1] == 95):  # "PARTI0501 ..." is a word, not a level
        return None
    md = head.group(1)
    mon, day = (int(md[:2]), int(md[2:])) if len(md) == 4 else (int(md[:1]), int(md[1:]))
    hour = int(head.group(2))
    minute, second, frac = int(m.group(1)), int(m.group(2)), m.group(3)
    if not (1 <= mon <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        return None
    try:
        return calendar.timegm((year, mon, day, hour, minute, second, 0, 0, 0)) + int(frac) / 10 ** len(frac)
    except (ValueError, OverflowError):
        return None


class YearContext:
    """Which year a glog line (which prints none) belongs to: the year of the nearest full-date
    timestamp before it in the same log, else the nearest after it, else ``fallback`` (the
    file's mtime year, wrong for a copied run: so only when the log has no dated line)."""

    def __init__(self, fallback: int, before: int | None) -> None:
        self.fallback = fallback
        self.before = before  # the last full-date year earlier in the file (None: none yet)
        self.pos: list[int] = []  # full-date timestamps in the text at hand, in order
        self.years: list[int] = []

    def add(self, pos: int, year: int) -> None:
        self.pos.append(pos)
        self.years.append(year)

    def year_at(self, pos: int) -> int:
        i = bisect.bisect_left(self.pos, pos)
        if i:
            return self.years[i - 1]
        if self.before is not None:
            return self.before
        return self.years[0] if self.years else self.fallback


def glog_times(buf: bytes, matches: Iterable[re.Match[bytes]], years: YearContext) -> list[tuple[int, float]]:
    """(position, time) of the glog matches that are timestamps, with years from ``years``."""
    out = []
    for m in matches:
        t = _glog_at(buf, m, years.year_at(m.start()))
        if t is not None:
            out.append((m.start(), t))
    return out


def last_iso_year(buf: bytes, start: int, end: int) -> int | None:
    """The year of the last full-date timestamp in ``buf[start:end]`` (searched backwards)."""
    lo, width = end, 4096
    while lo > start:
        lo = max(start, end - width)
        last = None
        for m in _TS_ISO.finditer(buf, lo, end):
            if _iso_at(buf, m) is not None:
                last = iso_year(buf, m)
        if last is not None:
            return last
        width *= 16
    return None


def last_timestamp(buf: bytes, start: int, end: int, year: int,
                   year_before: int | None = None) -> tuple[int, float, int | None] | None:
    """(position, unix time, dated year) of the last timestamp in ``buf[start:end]``, or None.

    Naive times are read as UTC (a log does not say its zone); glog lines carry no year:
    see :class:`YearContext` (``year_before``: the last full-date year before ``start``;
    ``year``: the file's modification year). ``dated year`` is the year of the last
    full-date timestamp in the range (None: none), which dates the glog lines after it.
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
        years = YearContext(year, year_before)
        for m in _TS_ISO.finditer(buf, lo, end):
            t = _iso_at(buf, m)
            if t is not None:
                best = (m.start(), t)
                years.add(m.start(), iso_year(buf, m))
        earlier = None
        glogs = list(_TS_GLOG.finditer(buf, lo, end))
        if glogs and lo > start and (not years.pos or glogs[0].start() < years.pos[0]):
            # a glog line before the window's first dated line: the nearest dated line before it
            earlier = last_iso_year(buf, start, lo)
            if earlier is not None:
                years.before = earlier
        for pos, t in glog_times(buf, glogs, years):
            if best is None or pos > best[0]:
                best = (pos, t)
        if best is not None:
            return best[0], best[1], years.years[-1] if years.years else earlier
        width *= 16
    return None


def first_timestamp(buf: bytes, year: int, limit: int = 1 << 20, year_before: int | None = None) -> float | None:
    """The first timestamp in the first ``limit`` bytes of ``buf``."""
    best: tuple[int, float] | None = None
    years = YearContext(year, year_before)
    for m in _TS_ISO.finditer(buf, 0, limit):
        t = _iso_at(buf, m)
        if t is not None:
            best = (m.start(), t)
            years.add(m.start(), iso_year(buf, m))
            break
    if years.before is None and not years.pos:
        after = next((iso_year(buf, m) for m in _TS_ISO.finditer(buf, limit) if _iso_at(buf, m) is not None), None)
        if after is not None:
            years.add(len(buf), after)
    for m in _TS_GLOG.finditer(buf, 0, best[0] if best else limit):
        t = _glog_at(buf, m, years.year_at(m.start()))
        if t is not None:
            return t
    return best[1] if best else None
