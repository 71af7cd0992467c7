"""Append ISSUES-log entries to an existing log: atomically, once per failure.

The new file is written beside the log and renamed over it (``os.replace``), so a crash
or a full disk never leaves a half-written log; the earlier bytes are copied unchanged.
An entry whose fingerprint already appears in the log (the ``autopsy fingerprint`` line
of Related Guidelines) is not appended again. Concurrent appenders are serialised with
an advisory ``flock`` on the log's directory where the platform has ``fcntl``; no lock
file is created.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from autopsy.report.markdown import FINGERPRINT_LABEL

_FINGERPRINT = re.compile(re.escape(FINGERPRINT_LABEL) + r":\s*`+\s*([a-z0-9_.]+:[0-9a-f]{12})")


@dataclass(frozen=True)
class AppendResult:
    added: tuple[str, ...]  # fingerprints appended
    skipped: tuple[str, ...]  # fingerprints already in the log


def fingerprints_in(text: str) -> set[str]:
    return set(_FINGERPRINT.findall(text))


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


def _separator(existing: bytes) -> bytes:
    """What goes between the old log and the first new entry."""
    if not existing.strip():
        return b""
    body = existing.rstrip()
    nl = b"\r\n" if b"\r\n" in existing[-200:] else b"\n"
    lead = b"" if existing.endswith(nl) else nl
    if body.endswith(b"---"):
        return lead + nl  # the log already ends with a separator line
    return lead + nl + b"---" + nl + nl


def append_entries(log_path: str | os.PathLike[str], entries: Sequence[tuple[str, str]]) -> AppendResult:
    """Append (fingerprint, markdown) entries not yet in the log; create the log if missing."""
    path = Path(log_path)
    with _locked(path):
        existing = path.read_bytes() if path.exists() else b""
        known = fingerprints_in(existing.decode("utf-8", "replace"))
        added: list[str] = []
        skipped: list[str] = []
        chunks: list[str] = []
        for fp, text in entries:
            if fp in known:
                skipped.append(fp)
                continue
            known.add(fp)
            added.append(fp)
            chunks.append(text.rstrip("\n") + "\n")
        if not chunks:
            return AppendResult((), tuple(skipped))
        new = "\n---\n\n".join(chunks).encode("utf-8")
        data = existing + _separator(existing) + new
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent if str(path.parent) else ".")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return AppendResult(tuple(added), tuple(skipped))
