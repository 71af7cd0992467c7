"""Log line templates: numbers, paths, hex ids and timestamps masked, lines grouped.

A template seen only in the bad run, shortly before its failure, is the classic clue ("a new
warning appeared"); one that vanished (a "done" line, a periodic eval) tells what stopped.
The masking is a fixed sequence of compiled substitutions, so a template is a pure function
of its line and both runs are grouped alike whatever order they are read in. bench/README.md
("Log templates") measures it against drain3's learned trees and a digits-only baseline: on
the real fixture logs drain3 costs 8x the CPU and merges traceback frames that differ only in
the function name (adjusted Rand index 0.84 against masking); on the fixture pairs all three
find the same new lines.

Only the head and the tail of a long log are templated (``HEAD_LINES`` / ``TAIL_LINES``):
the middle of a training log is the same few step lines repeated, and the tail is where a
failure's clues are. Line numbers stay exact (the middle's newlines are counted).
"""

from __future__ import annotations

import os
import re
import stat
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HEAD_LINES = 100_000
TAIL_LINES = 100_000
MAX_TEMPLATES = 50_000
TEMPLATE_CHARS = 160
_CHUNK = 1 << 20

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?")
# Each mask with the characters it needs: a pass whose characters are absent is skipped (most
# lines lack most of them; the skips make it 2-3x faster, see bench/README.md "Log templates").
_BAR = re.compile(r"\|[\u2588\u2589\u258a\u258b\u258c\u258d\u258e\u258f #]*\||\[[=>.\-]{3,}\]")
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[ T_]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?")
_TIME = re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.+@~=-]+){2,}[\\/]?|(?:\.{1,2}/)[\w.+@~=/-]+")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{8,}\b")
# a counter glued to a word by "_" or "-" (step_100.pt, checkpoint-500, rank_3), not x86_64
_COUNTER = re.compile(r"(?<=[A-Za-z][_-])\d+(?![A-Za-z0-9])")
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+(?:[.,]\d+)*|\.\d+)(?:[eE][-+]?\d+)?")
_HEX_RUN = re.compile(r"[0-9a-f]{8}")  # what _HEX's second branch needs, without its lookaheads
_DIGIT = re.compile(r"\d")
_LETTERS = re.compile(r"[A-Za-z]{2,}")


def mask(line: str) -> str:
    """The template of one log line (ANSI removed, variable parts masked, capped).

    In order: progress-bar bodies, timestamps, paths, hex ids, counters glued to words,
    numbers; then runs of whitespace become one space.
    """
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "|" in line or "[" in line:
        line = _BAR.sub("|<BAR>|", line)
    if _DIGIT.search(line) is not None:  # no pass below adds a digit
        if ":" in line:
            if "-" in line:
                line = _DATE_TIME.sub("<TS>", line)
            line = _TIME.sub("<TS>", line)
        if "/" in line or "\\" in line:
            line = _PATH.sub("<PATH>", line)
        if "0x" in line or _HEX_RUN.search(line) is not None:
            line = _HEX.sub("<HEX>", line)
        if "_" in line or "-" in line:
            line = _COUNTER.sub("<N>", line)
        line = _NUMBER.sub("<N>", line)
    elif "/" in line or "\\" in line:
        line = _PATH.sub("<PATH>", line)
    return " ".join(line.split())[:TEMPLATE_CHARS]


_PROGRESS = re.compile(r"it/s\]|s/it\]|<BAR>|\d+%\|")


def is_progress(template: str) -> bool:
    """A progress-bar redraw: new ones appear in every run that ran longer, so they say little."""
    return _PROGRESS.search(template) is not None


def is_informative(template: str) -> bool:
    """At least one word: a bar of masks and punctuation says nothing on its own."""
    return _LETTERS.search(template.replace("<N>", "").replace("<TS>", "").replace("<PATH>", "")
                           .replace("<HEX>", "")) is not None


@dataclass
class TemplateStats:
    template: str
    path: str
    count: int
    first_line: int
    last_line: int
    example: str


def open_regular(path: Path) -> int:
    """An fd for a regular file, never following a symlink nor blocking on a FIFO."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path.name}: not a regular file")
    return fd


def _last_segment(raw: bytes) -> str:
    # A tqdm redraw line holds many bars separated by \r: the last non-empty one is what shows.
    if b"\r" in raw:
        parts = [p for p in raw.split(b"\r") if p.strip()]
        raw = parts[-1] if parts else b""
    return raw.decode("utf-8", "replace").rstrip("\n")


def log_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of the head and the tail of a log; the middle's lines are counted.

    The middle costs one ``bytes.count`` per chunk: recent chunks are kept (as bytes) only
    until they hold ``TAIL_LINES`` lines, and split into lines once, at the end.
    """
    fd = open_regular(path)
    lineno = 0
    pending = b""
    recent: deque[tuple[int, bytes]] = deque()  # (line number before the chunk, chunk of whole lines)
    recent_lines = 0
    try:
        while True:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            data = pending + chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                pending = data
                continue
            pending = data[cut + 1:]
            body = data[:cut + 1]
            if lineno < HEAD_LINES:
                lines = body.split(b"\n")[:-1]
                take = min(len(lines), HEAD_LINES - lineno)
                for raw in lines[:take]:
                    lineno += 1
                    yield lineno, _last_segment(raw)
                if take == len(lines):
                    continue
                body = b"\n".join(lines[take:]) + b"\n"
            n = body.count(b"\n")
            recent.append((lineno, body))
            recent_lines += n
            lineno += n
            while recent and recent_lines - recent[0][1].count(b"\n") >= TAIL_LINES:
                recent_lines -= recent.popleft()[1].count(b"\n")
        if pending:
            if lineno < HEAD_LINES:
                lineno += 1
                yield lineno, _last_segment(pending)
            else:
                recent.append((lineno, pending + b"\n"))
                lineno += 1
    finally:
        os.close(fd)
    if recent:
        first = recent[0][0]
        lines = b"".join(body for _, body in recent).split(b"\n")[:-1]
        skip = max(0, len(lines) - TAIL_LINES)
        for i, raw in enumerate(lines[skip:], first + skip + 1):
            yield i, _last_segment(raw)


def template_file(path: Path, rel_path: str, into: dict[str, TemplateStats],
                  on_line: object = None) -> None:
    """Add one log's templates to ``into`` (template -> stats; first file that has it wins)."""
    for lineno, text in log_lines(path):
        if callable(on_line):
            on_line(lineno, text)
        if not text.strip():
            continue
        tpl = mask(text)
        st = into.get(tpl)
        if st is None:
            if len(into) >= MAX_TEMPLATES or not is_informative(tpl):
                continue
            into[tpl] = TemplateStats(tpl, rel_path, 1, lineno, lineno, text.strip()[:240])
        else:
            st.count += 1
            if st.path == rel_path:
                st.last_line = lineno
