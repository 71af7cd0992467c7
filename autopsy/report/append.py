"""Append ISSUES-log entries to an existing log: atomically, once per failure.

The new file is written beside the log and renamed over it (``os.replace``), so a crash
or a full disk never leaves a half-written log; the earlier bytes are copied unchanged.
An entry is appended once per (fingerprint, run): the ``autopsy fingerprint`` line of
Related Guidelines names both (``autopsy.report.markdown.run_identity``), so the same run's
failure is never written twice while another run's failure of the same kind is. Concurrent appenders are serialised with
an advisory ``flock`` on the log's directory where the platform has ``fcntl``; no lock
file is created.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from autopsy.fileio import atomic_replace
from autopsy.report.markdown import FINGERPRINT_LABEL

# The same line with the run it is about: ``(run `exp42@2026-11-21T12:32:38Z`, path ...)``; entries
# written before run identities existed say ``(run `runs/exp42`)`` (the path as typed).
_ENTRY = re.compile(re.escape(FINGERPRINT_LABEL) + r":\s*`+\s*([a-z0-9_.]+:[0-9a-f]{12})\s*`+"
                    r"(?:\s*\(run\s+(`+)\s*(.*?)\s*\2)?")


@dataclass(frozen=True)
class AppendResult:
    added: tuple[str, ...]  # fingerprints appended
    skipped: tuple[str, ...]  # fingerprints already in the log


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_LINE_START = "- " + FINGERPRINT_LABEL + ":"
_CHUNK = 1 << 16


def _lines(fh: BinaryIO) -> Iterator[str]:
    """The log's lines, streamed; a line longer than 64 KB is cut into pieces whose later parts
    are never a line start (so they can neither open a fence nor pass for a fingerprint)."""
    at_start = True
    while True:
        piece = fh.readline(_CHUNK)
        if not piece:
            return
        ends = piece.endswith(b"\n")
        if at_start:
            yield piece.decode("utf-8", "replace").rstrip("\r\n")
        at_start = ends


def _keys_in_lines(lines: Iterable[str]) -> set[tuple[str, str | None]]:
    """(fingerprint, run) of the entries autopsy wrote: its own fingerprint line, at the start of
    a line and outside fenced code blocks (a log excerpt quoting such a line is in a fence)."""
    keys: set[tuple[str, str | None]] = set()
    fence: str | None = None
    for line in lines:
        m = _FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
                continue
        else:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip(" `~"):
                fence = None
            continue
        if line.startswith(_LINE_START):
            e = _ENTRY.match(line, 2)
            if e:
                keys.add((e.group(1), _run_key(e.group(3))))
    return keys


def fingerprints_in(text: str) -> set[str]:
    return {fp for fp, _run in _keys_in_lines(text.splitlines())}


def entry_keys_in(text: str) -> set[tuple[str, str | None]]:
    """(fingerprint, run) of every entry in a log; run None where the entry names none."""
    return _keys_in_lines(text.splitlines())


def _run_key(run: str | None) -> str | None:
    """``name@time`` as written; an old entry's path as typed becomes its last component."""
    if not run:
        return None
    if "@" in run:
        return run
    return run.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or run


def _known(key: tuple[str, str | None], known: set[tuple[str, str | None]]) -> bool:
    """Whether the log already holds this failure of this run.

    Same fingerprint and same run; an entry that names no run (or only a directory name,
    written before run identities carried a time) matches any run of that name, so
    upgrading autopsy never appends a failure a second time. Runs are named
    ``parent/name@time``; an entry of an older autopsy names ``name@time`` only.
    """
    fp, run = key
    for kfp, krun in known:
        if kfp != fp:
            continue
        if run is None or krun is None or krun == run:
            return True
        name_time = run.rsplit("/", 1)[-1]
        if ("/" not in krun or "/" not in run) and krun.rsplit("/", 1)[-1] == name_time:
            return True  # one side names no parent (typed as a bare name, or an older autopsy)
        if "@" not in krun and name_time.split("@", 1)[0] == krun:
            return True
    return False


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on the log's directory while reading and replacing the log.

    Not on the log itself: the rename swaps its inode, so a waiter holding the old one
    would not exclude the next appender. Not on a sidecar lock file: that would be left
    beside the log (and unlinking it reopens the same race). A directory fd is never
    replaced, and the lock goes away with the fd, so nothing is left behind.
    """
    try:
        import fcntl
    except ImportError:  # Windows: the rename is still atomic, only concurrent appends race
        yield
        return
    try:
        fd = os.open(path.parent if str(path.parent) else ".", os.O_RDONLY)
    except OSError:  # a directory we may write but not read: go on unlocked, the rename stays atomic
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _separator(tail: bytes) -> bytes:
    """What goes between the old log (``tail``: its last bytes) and the first new entry."""
    if not tail.strip():
        return b""
    body = tail.rstrip()
    nl = b"\r\n" if b"\r\n" in tail[-200:] else b"\n"
    lead = b"" if tail.endswith(nl) else nl
    if body.endswith(b"---"):
        return lead + nl  # the log already ends with a separator line
    return lead + nl + b"---" + nl + nl


def _open_log(path: Path) -> BinaryIO | None:
    """The existing log, opened without blocking and checked to be a regular file (None: no log yet)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return os.fdopen(fd, "rb")


def append_entries(log_path: str | os.PathLike[str], entries: Sequence[tuple[str, str]]) -> AppendResult:
    """Append (fingerprint, markdown) entries whose (fingerprint, run) is not yet in the log.

    ``log_path`` is the real file (the CLI resolves a symlinked log first: the link is kept).
    The log is streamed twice (keys, then copy): memory does not grow with its size. The run
    is read from the entry's own fingerprint line; creates the log if missing.
    """
    path = Path(log_path)
    with _locked(path):
        old = _open_log(path)
        try:
            known = _keys_in_lines(_lines(old)) if old is not None else set()
            added: list[str] = []
            skipped: list[str] = []
            chunks: list[str] = []
            for fp, text in entries:
                runs = [run for efp, run in entry_keys_in(text) if efp == fp]
                key = (fp, runs[0] if runs else None)
                if _known(key, known):
                    skipped.append(fp)
                    continue
                known.add(key)
                added.append(fp)
                chunks.append(text.rstrip("\n") + "\n")
            if not chunks:
                return AppendResult((), tuple(skipped))
            size = os.fstat(old.fileno()).st_size if old is not None else 0
            tail = os.pread(old.fileno(), 200, max(0, size - 200)) if old is not None else b""
            new = "\n---\n\n".join(chunks).encode("utf-8")
            mode = stat.S_IMODE(os.fstat(old.fileno()).st_mode) if old is not None else 0o644
            with atomic_replace(path, mode) as fh:
                if old is not None:
                    old.seek(0)
                    shutil.copyfileobj(old, fh, _CHUNK * 16)
                fh.write(_separator(tail) + new)
            return AppendResult(tuple(added), tuple(skipped))
        finally:
            if old is not None:
                old.close()
