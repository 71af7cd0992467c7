"""torchrun ``ChildFailedError`` reports, as a per-line state machine.

The scanner feeds it the lines around ``Failures:`` / ``Root Cause`` and every line while
a report is open. Each ``[N]:`` row of the report (rank, local rank, exit code or signal,
host, time, error file, message) becomes one :class:`ChildFailure`; the root-cause row is
marked as such.
"""

from __future__ import annotations

import re
import signal

from autopsy.parsers.log_tracebacks import MAX_MESSAGE_CHARS
from autopsy.parsers.types import ChildFailure

# torch >= 1.10: "Failures:" / "Root Cause (first observed failure):" with "[N]:" rows of
# "  time      : 2024-05-01_12:00:00" ... ; torch 1.9: "Root Cause:" / "Other Failures:" with
# "  time: ..." rows and "msg: ..." instead of "traceback : ...".
_SECTION = re.compile(r"\s*(Failures|Other Failures|Root Cause(?: \(first observed failure\))?)\s*:\s*$")
_ROW = re.compile(r"\s*\[(\d+)\]\s*:\s*$")
_FIELD = re.compile(r"(\s*)(time|host|rank|local_rank|exitcode|error_file|traceback|msg)\s*:\s?(.*)$")
_RANK = re.compile(r"(-?\d+)(?:\s*\(local_rank:\s*(-?\d+)\))?")
_EXIT = re.compile(r"(-?\d+)(?:\s*\(pid:\s*(\d+)\))?")
_SIGNAL = re.compile(r"Signal (\d+) \((SIG\w+)\) received by PID (\d+)")
MAX_CHILD_FAILURES = 512


def _signal_name(code: int) -> str | None:
    try:
        return signal.Signals(code).name
    except (ValueError, OverflowError):
        return None


class ChildFailureTracker:
    """Parses the failure rows of torchrun's ``ChildFailedError`` report (old and new layout)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.results: list[ChildFailure] = []
        self.section: str | None = None
        self.row: dict[str, str] | None = None
        self.row_line = 0
        self.field_indent = 0
        self.last_field: str | None = None

    @property
    def active(self) -> bool:
        return self.section is not None

    def _flush(self) -> None:
        row, self.row = self.row, None
        if row is None or len(self.results) >= MAX_CHILD_FAILURES:
            return
        rank = local_rank = exitcode = pid = None
        sig: str | None = None
        m = _RANK.match(row.get("rank", "").strip())
        if m:
            rank = int(m.group(1))
            local_rank = int(m.group(2)) if m.group(2) else None
        if "local_rank" in row and local_rank is None:
            lm = _RANK.match(row["local_rank"].strip())
            local_rank = int(lm.group(1)) if lm else None
        m = _EXIT.match(row.get("exitcode", "").strip())
        if m:
            exitcode = int(m.group(1))
            pid = int(m.group(2)) if m.group(2) else None
        tb_text = row.get("traceback") or row.get("msg")
        if tb_text:
            tb_text = tb_text.strip().strip('"')
            sm = _SIGNAL.search(tb_text)
            if sm:
                sig = sm.group(2)
                pid = pid if pid is not None else int(sm.group(3))
        if sig is None and exitcode is not None and exitcode < 0:
            sig = _signal_name(-exitcode)
        error_file = (row.get("error_file") or "").strip() or None
        if error_file in ("<N/A>", "N/A"):
            error_file = None
        host = (row.get("host") or "").strip() or None
        when = (row.get("time") or "").strip() or None
        failure = ChildFailure(path=self.path, line=self.row_line, rank=rank, local_rank=local_rank,
                               exitcode=exitcode, signal=sig, host=host, pid=pid, error_file=error_file,
                               traceback=tb_text or None, time=when,
                               root_cause=self.section is not None and self.section.startswith("Root"))
        self.results.append(failure)

    def feed(self, lineno: int, text: str) -> None:
        sm = _SECTION.match(text)
        if sm:
            self._flush()
            self.section = sm.group(1)
            return
        if self.section is None:
            return
        stripped = text.strip()
        rm = _ROW.match(text)
        if rm:
            self._flush()
            self.row = {}
            self.row_line = lineno
            self.last_field = None
            return
        if stripped.startswith(("===", "***")):
            self._flush()
            self.section = None
            return
        if stripped.startswith("---") or stripped.startswith("<NO_OTHER_FAILURES>") or not stripped:
            if stripped.startswith("---"):
                self._flush()
            return
        if self.row is None:
            self.section = None  # not a ChildFailedError report after all
            return
        fm = _FIELD.match(text)
        if fm and (self.last_field is None or len(fm.group(1)) <= self.field_indent):
            self.field_indent = len(fm.group(1))
            self.last_field = fm.group(2)
            self.row[self.last_field] = fm.group(3)
            return
        indent = len(text) - len(text.lstrip())
        if self.last_field is not None and (
                indent > self.field_indent or (self.last_field == "traceback" and indent > 0)):
            # the child's traceback, printed under "traceback :" one line at a time
            val = self.row.get(self.last_field, "")
            if len(val) < MAX_MESSAGE_CHARS:
                self.row[self.last_field] = val + "\n" + text.rstrip()
            return
        self._flush()
        self.section = None

    def close(self) -> None:
        self._flush()
        self.section = None
