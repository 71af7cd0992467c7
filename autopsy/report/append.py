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
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from autopsy.report.markdown import FINGERPRINT_LABEL

_FINGERPRINT = re.compile(re.escape(FINGERPRINT_LABEL) + r":\s*`+\s*([a-z0-9_.]+:[0-9a-f]{12})")
# The same line with the run it is about: ``(run `exp42@2026-11-21T12:32:38Z`, path ...)``; entries
# written before run identities existed say ``(run `runs/exp42`)`` (the path as typed).
_ENTRY = re.compile(re.escape(FINGERPRINT_LABEL) + r":\s*`+\s*([a-z0-9_.]+:[0-9a-f]{12})\s*`+"
                    r"(?:\s*\(run\s+(`+)\s*(.*?)\s*\2)?")


@dataclass(frozen=True)
class AppendResult:
    added: tuple[str, ...]  # fingerprints appended
    skipped: tuple[str, ...]  # fingerprints already in the log


def fingerprints_in(text: str) -> set[str]:
    return set(_FINGERPRINT.findall(text))


def entry_keys_in(text: str) -> set[tuple[str, str | None]]:
    """(fingerprint, run) of every entry in a log; run None where the entry names none."""
    return {(m.group(1), _run_key(m.group(3))) for m in _ENTRY.finditer(text)}


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
    upgrading autopsy never appends a failure a second time.
    """
    fp, run = key
    for kfp, krun in known:
        if kfp != fp:
            continue
        if run is None or krun is None or krun == run:
            return True
        if "@" not in krun and run.split("@", 1)[0] == krun:
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
    """Append (fingerprint, markdown) entries whose (fingerprint, run) is not yet in the log.

    The run is read from the entry's own fingerprint line; creates the log if missing.
    """
    path = Path(log_path)
    with _locked(path):
        existing = path.read_bytes() if path.exists() else b""
        known = entry_keys_in(existing.decode("utf-8", "replace"))
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
