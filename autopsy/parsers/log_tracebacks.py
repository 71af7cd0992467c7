"""Python tracebacks, as a per-line state machine (torchrun's reports: :mod:`log_child_failures`).

The scanner feeds it only the lines around a trigger (``Traceback (most recent call
last):``, chain markers) and keeps feeding every line while one is open, so the rest of a
multi-GB log never pays for it.

Tracebacks are tracked per rank (the prefix each line carried), because torchrun prefixes
every line with ``[rankN]:`` and the tracebacks of several ranks interleave line by line.
A traceback ends at its ``ExcType: message`` line plus continuation lines (torch's CUDA
errors add "CUDA kernel errors might be asynchronously reported..." lines) up to a blank line
or something that is clearly a new log record. Chains: a traceback printed after "During
handling of the above exception, another exception occurred:" gets ``chain="context"``,
after "The above exception was the direct cause of the following exception:"
``chain="cause"``, and ``cause`` points to the one printed above it. Only the last traceback
of a chain (the one that ended the program) is listed; the others hang off ``cause``.
An exception line without a ``Traceback`` header is not a traceback.

Other shapes of the same thing:

* IPython/Jupyter (``OutOfMemoryError      Traceback (most recent call last)``, then
  ``Cell In[5], line 3`` / ``File /x/y.py:1501, in f(...)`` frames whose code is the
  ``---->`` line; IPython < 8 wrote ``<ipython-input-5-..> in <module>`` and ``/x/y.py in f(...)``).
* A header after a logger prefix on its own line (``2024-... ERROR Traceback (most recent
  call last):``) opens a traceback as usual.
* A traceback flattened onto one line: joined with literal ``\n`` (JSON loggers; its parts
  are fed as lines) or with spaces (frames and the exception are picked out by regex).
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from autopsy.parsers.types import Frame, Traceback

MAX_FRAMES_HEAD = 8  # outermost frames kept
MAX_FRAMES_TAIL = 56  # innermost frames kept (where the error is)
MAX_MESSAGE_CHARS = 4096
MAX_MESSAGE_LINES = 40
MAX_TRACEBACKS = 100  # first and last this many chain heads are kept per file
MAX_NOISE_LINES = 20  # unrelated column-0 lines tolerated inside a traceback
MAX_TB_LINES = 2000  # a traceback still open after this many lines is closed as cut off
CHAIN_LOOKAHEAD = 8  # lines after a traceback within which a chain marker may follow

HEADER = "Traceback (most recent call last):"
# The message of a traceback the log ends (or another record interrupts) before its exception line.
CUT_OFF = "(traceback cut off before its exception line)"
_IPY_HEADER = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)\s+Traceback \(most recent call last\)\s*$")
_IPY_CELL = re.compile(r"^(?P<file>(?:Cell|Input) In\s*\[\d+\]), (?:line (?P<line>\d+)|in (?P<func><[^>]*>|[^\s(]+))")
_IPY_FILE = re.compile(r"^File (?P<file>\S.*?):(?P<line>\d+)(?:, in (?P<func><[^>]*>|[^\s(]+))?")
_IPY_OLD = re.compile(r"^(?P<file><ipython-input-[^>]*>|\S.*?\.pyx?) in (?P<func><[^>]*>|[^\s(]+)")
_IPY_ARROW = re.compile(r"^-*> ?\s*(?P<line>\d+)\s?(?P<code>.*)$")
_IPY_CONTEXT = re.compile(r"^\s+\d+\s")
_FLAT_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>[^\s]+))?')
_FLAT_EXC = re.compile(
    r"(?<![\w.])(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure|Fault|Timeout"
    r"|Warning|Iteration))(?::\s*(?P<msg>(?:.*\S)?))?\s*$"
)
_CONTEXT = "During handling of the above exception, another exception occurred:"
_CAUSE = "The above exception was the direct cause of the following exception:"

_FRAME = re.compile(r'\s*(?:>\s*)?File "(?P<file>[^"]*)", line (?P<line>\d+)(?:, in (?P<func>.(?:.*\S)?))?\s*$')
_EXC = re.compile(r"(?P<type>[A-Za-z_][\w.]*)(?::(?: (?P<msg>.*))?)?\s*$")
# A line that is surely a new record, not part of an exception message.
_NEW_RECORD = re.compile(
    r"\d{4}-\d\d-\d\d[ T_]\d\d:\d\d|\[?\d{4}-\d\d-\d\d|[IWEF]\d{4} \d\d:\d\d:\d\d"
    r"|(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\b[:| \]]|wandb:|\s*\d{1,3}%\|"
    r"|\{['\"]|\[(?:INFO|WARNING|ERROR|DEBUG)"
)


def _looks_like_exc_type(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return bool(last) and (last[0].isupper() or last in ("timeout", "error", "gaierror", "herror"))


@dataclass
class _Open:
    start: int
    rank: int | None
    step: int | None
    wall_time: float | None
    chain: str | None
    cause: Traceback | None
    head: list[Frame] = field(default_factory=list)
    tail: deque[Frame] = field(default_factory=lambda: deque(maxlen=MAX_FRAMES_TAIL))
    pending: tuple[str, int | None, str | None] | None = None  # frame awaiting its code line
    exc_type: str | None = None
    message: list[str] = field(default_factory=list)
    message_chars: int = 0
    noise: int = 0
    last_line: int = 0
    ipython: bool = False
    header_type: str | None = None  # IPython names the exception in its header line

    def add_frame(self, frame: Frame) -> None:
        if len(self.head) < MAX_FRAMES_HEAD:
            self.head.append(frame)
        else:
            self.tail.append(frame)

    def flush_pending(self, code: str | None = None) -> None:
        if self.pending is not None:
            f, ln, fn = self.pending
            self.add_frame(Frame(f, ln, fn, code))
            self.pending = None


class TracebackTracker:
    """Collects tracebacks from lines fed in order; see the module docstring."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.open: dict[int | None, _Open] = {}
        self.first: list[Traceback] = []
        self.last: deque[Traceback] = deque(maxlen=MAX_TRACEBACKS)
        # rank -> (traceback just finished, line it ended, chain marker seen after it)
        self.recent: dict[int | None, tuple[Traceback, int, str | None]] = {}
        self.peak_first = 0  # the most ``first`` ever held (a parallel merge needs it)

    @property
    def active(self) -> bool:
        return bool(self.open) or bool(self.recent)

    def results(self) -> list[Traceback]:
        return self.first + list(self.last)

    def _emit(self, tb: Traceback) -> None:
        if tb.cause is not None:
            # the cause was listed as a head until now: replace it by this one
            for store in (self.last, self.first):
                for i in range(len(store) - 1, max(-1, len(store) - 50), -1):
                    if store[i] is tb.cause:
                        del store[i]
                        break
                else:
                    continue
                break
        if len(self.first) < MAX_TRACEBACKS:
            self.first.append(tb)
            self.peak_first = max(self.peak_first, len(self.first))
        else:
            self.last.append(tb)

    def _finish(self, st: _Open, end_line: int, cut_off: bool = False) -> None:
        st.flush_pending()
        frames = tuple(st.head) + tuple(st.tail)
        message = "\n".join(st.message)
        exc_type = st.exc_type or st.header_type or ""
        if cut_off and not st.exc_type:
            message = CUT_OFF
        tb = Traceback(path=self.path, line_start=st.start, line_end=max(end_line, st.start),
                       exc_type=exc_type, message=message[:MAX_MESSAGE_CHARS], frames=frames,
                       rank=st.rank, cause=st.cause, chain=st.chain, step=st.step, wall_time=st.wall_time)
        self._emit(tb)
        del self.open[st.rank]
        self.recent[st.rank] = (tb, end_line, None)

    def feed(self, lineno: int, text: str, rank: int | None, step: int | None, wall: float | None) -> None:
        stripped = text.strip()
        st = self.open.get(rank)
        if stripped.startswith(HEADER[:30]) and len(stripped) <= len(HEADER) + 1:
            self._open(lineno, rank, step, wall)
            return
        if HEADER[:30] in stripped:
            self._odd_header(lineno, stripped, rank, step, wall)
            return
        if stripped in (_CONTEXT, _CAUSE):
            if st is not None:
                self._finish(st, st.last_line, cut_off=st.exc_type is None)
            rec = self.recent.get(rank)
            if rec is not None:
                self.recent[rank] = (rec[0], lineno, "context" if stripped == _CONTEXT else "cause")
            return
        if st is None:
            self._expire(lineno, rank)
            return
        if lineno - st.start > MAX_TB_LINES:
            self._finish(st, st.last_line, cut_off=st.exc_type is None)
            return
        if st.exc_type is None:
            self._frames_phase(st, lineno, text, stripped)
        else:
            self._message_phase(st, lineno, text, stripped)
        self._expire(lineno, rank)

    def _open(self, lineno: int, rank: int | None, step: int | None, wall: float | None,
              ipython: bool = False) -> _Open:
        st = self.open.get(rank)
        if st is not None:
            self._finish(st, st.last_line, cut_off=st.exc_type is None)
        chain = cause = None
        rec = self.recent.pop(rank, None)
        if rec is not None and rec[2] is not None:
            cause, chain = rec[0], rec[2]
        st = self.open[rank] = _Open(lineno, rank, step, wall, chain, cause, last_line=lineno, ipython=ipython)
        return st

    def _odd_header(self, lineno: int, stripped: str, rank: int | None, step: int | None,
                    wall: float | None) -> None:
        """An IPython header, a prefixed header, or a whole traceback on one line."""
        m = _IPY_HEADER.match(stripped)
        if m:
            self._open(lineno, rank, step, wall, ipython=True).header_type = m.group("type")
            return
        at = stripped.find(HEADER[:30])
        if stripped[:at].rstrip().endswith(("traceback :", "traceback:")):
            return  # a row of torchrun's ChildFailedError report: ChildFailureTracker keeps it
        rest = stripped[at + len(HEADER[:30]):]
        rest = rest[rest.find(")") + 1:].lstrip(":").strip() if ")" in rest[:5] else rest
        if not rest:
            self._open(lineno, rank, step, wall)  # "<logger prefix> Traceback (most recent call last):"
            return
        if "\\n" in rest:
            st = self._open(lineno, rank, step, wall)
            for part in rest.replace('\\"', '"').split("\\n")[:MAX_TB_LINES]:
                if rank not in self.open:
                    break
                if st.exc_type is None:
                    self._frames_phase(st, lineno, part, part.strip())
                elif part.strip() and not set(part.strip()) <= set('"}]), '):
                    self._message_phase(st, lineno, part, part.strip())
            if rank in self.open:
                self._finish(st, lineno, cut_off=st.exc_type is None)
            return
        self._flat(lineno, rest, rank, step, wall)

    def _flat(self, lineno: int, rest: str, rank: int | None, step: int | None, wall: float | None) -> None:
        """``File "a.py", line 3, in f  code  File ... ExcType: message`` joined with spaces."""
        frames = list(_FLAT_FRAME.finditer(rest))
        tail_from = frames[-1].end() if frames else 0
        em = _FLAT_EXC.search(rest, tail_from)
        if em is None and not frames:
            return
        st = self._open(lineno, rank, step, wall)
        for i, fm in enumerate(frames):
            end = frames[i + 1].start() if i + 1 < len(frames) else (em.start() if em else len(rest))
            code = rest[fm.end():end].strip() or None
            st.add_frame(Frame(fm.group("file"), int(fm.group("line")), fm.group("func"), code))
        if em is not None:
            st.exc_type = em.group("type")
            msg = (em.group("msg") or "").strip()
            if msg:
                st.message.append(msg[:MAX_MESSAGE_CHARS])
        self._finish(st, lineno, cut_off=em is None)

    def _expire(self, lineno: int, rank: int | None) -> None:
        rec = self.recent.get(rank)
        if rec is not None and lineno - rec[1] > CHAIN_LOOKAHEAD:
            del self.recent[rank]

    def _frames_phase(self, st: _Open, lineno: int, text: str, stripped: str) -> None:
        if st.ipython and self._ipython_line(st, lineno, text, stripped):
            return
        m = _FRAME.match(text)
        if m:
            st.flush_pending()
            st.pending = (m.group("file"), int(m.group("line")), m.group("func"))
            st.last_line = lineno
            return
        if not stripped:
            return
        if text[:1].isspace():
            # the code line of a frame, a caret line (3.11+), "[Previous line repeated N times]"
            if st.pending is not None and not set(stripped) <= set("^~ "):
                if not stripped.startswith("[Previous line repeated"):
                    st.flush_pending(stripped)
            st.last_line = lineno
            return
        em = _EXC.match(stripped)
        if em and _looks_like_exc_type(em.group("type")):
            st.flush_pending()
            st.exc_type = em.group("type")
            msg = em.group("msg")
            if msg:
                st.message.append(msg)
                st.message_chars = len(msg)
            st.last_line = lineno
            return
        st.noise += 1
        if st.noise > MAX_NOISE_LINES:
            self._finish(st, st.last_line, cut_off=True)

    def _ipython_line(self, st: _Open, lineno: int, text: str, stripped: str) -> bool:
        """A frame, code or context line of an IPython traceback; False for anything else."""
        if not stripped:
            return True
        m = _IPY_ARROW.match(stripped) if stripped[0] == "-" else None
        if m is not None:
            if st.pending is not None:
                f, ln, fn = st.pending
                st.pending = (f, ln if ln is not None else int(m.group("line")), fn)
                st.flush_pending(m.group("code").strip() or None)
            st.last_line = lineno
            return True
        if text[:1].isspace():
            if _IPY_CONTEXT.match(text) or stripped.startswith("["):  # context, "[... skipping hidden 1 frame]"
                st.last_line = lineno
                return True
            return False
        for rx in (_IPY_CELL, _IPY_FILE, _IPY_OLD):
            m = rx.match(stripped)
            if m is not None:
                st.flush_pending()
                line = m.groupdict().get("line")
                st.pending = (m.group("file"), int(line) if line else None, m.groupdict().get("func"))
                st.last_line = lineno
                return True
        return False

    def _message_phase(self, st: _Open, lineno: int, text: str, stripped: str) -> None:
        if not stripped or stripped.startswith(HEADER[:30]) or _NEW_RECORD.match(stripped):
            self._finish(st, st.last_line)
            return
        if len(st.message) >= MAX_MESSAGE_LINES or st.message_chars >= MAX_MESSAGE_CHARS:
            self._finish(st, st.last_line)
            return
        st.message.append(text.rstrip())
        st.message_chars += len(text)
        st.last_line = lineno

    def close(self) -> None:
        """End of input: tracebacks still open are kept as cut off (or complete, if they had
        their exception line)."""
        for st in list(self.open.values()):
            self._finish(st, st.last_line, cut_off=st.exc_type is None)
        self.recent.clear()
