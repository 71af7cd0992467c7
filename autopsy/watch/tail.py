"""Follow one growing file by byte offset: read only what was appended since the last poll.

A file is identified by ``(st_dev, st_ino)``. Between two polls it may have:

* grown: the new bytes from the saved offset are returned;
* shrunk below the offset (truncated in place, ``> train.log`` again): reading restarts at 0;
* been replaced (``logrotate``'s rename-and-create, an editor's atomic save: a new inode at
  the same path): reading restarts at 0 of the new file;
* vanished: reported once, the offset is kept in case it comes back as the same inode.

Only regular files are read (a FIFO or a device at a log's path is never opened for
reading: it could block the loop), never through a symlink that points out of the run,
and never more than ``max_bytes`` per poll (the rest is read at the next poll), so one
poll's cost is bounded by the bytes that arrived.
"""

from __future__ import annotations

import enum
import os
import stat
from dataclasses import dataclass
from pathlib import Path

READ_CHUNK = 8 << 20


class TailChange(str, enum.Enum):
    """What happened to the file since the previous poll."""

    NONE = "none"
    NEW = "new"  # first seen
    GREW = "grew"
    TRUNCATED = "truncated"  # same file, now shorter than what was read: restart at 0
    REPLACED = "replaced"  # another inode at the same path: restart at 0
    VANISHED = "vanished"
    UNREADABLE = "unreadable"

    def __str__(self) -> str:
        return self.value


@dataclass
class TailRead:
    """One poll of one file: what changed, the new bytes, and where they start in the file."""

    change: TailChange
    data: bytes = b""
    start: int = 0  # file offset of data[0]
    size: int = 0  # the file's size at this poll
    mtime: float = 0.0
    note: str | None = None


class FileTail:
    """Offset, identity and size of one followed file (see the module docstring)."""

    def __init__(self, path: Path, *, max_bytes: int = 64 << 20) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.offset = 0
        self.ident: tuple[int, int] | None = None
        self.size = 0
        self.mtime = 0.0
        self.gone = False

    def poll(self) -> TailRead:
        """Stat the file and read what is new; never raises for the file's own state."""
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except OSError:
            if self.ident is not None and not self.gone:
                self.gone = True
                return TailRead(TailChange.VANISHED)
            return TailRead(TailChange.NONE)
        if not stat.S_ISREG(st.st_mode):
            return TailRead(TailChange.UNREADABLE, note="not a regular file: not followed")
        ident = (st.st_dev, st.st_ino)
        change = TailChange.GREW
        if self.ident is None:
            change = TailChange.NEW
        elif ident != self.ident:
            change = TailChange.REPLACED
            self.offset = 0
        elif st.st_size < self.offset:
            change = TailChange.TRUNCATED
            self.offset = 0
        self.ident, self.size, self.mtime, self.gone = ident, st.st_size, st.st_mtime, False
        if st.st_size == self.offset:
            return TailRead(change if change is not TailChange.GREW else TailChange.NONE, start=self.offset,
                            size=st.st_size, mtime=st.st_mtime)
        start = self.offset
        try:
            data = self._read(start, min(st.st_size, start + self.max_bytes))
        except OSError as exc:
            return TailRead(TailChange.UNREADABLE, start=start, size=st.st_size, mtime=st.st_mtime,
                            note=f"read failed: {exc.strerror or exc}")
        self.offset = start + len(data)
        return TailRead(change, data, start, st.st_size, st.st_mtime)

    def _read(self, start: int, end: int) -> bytes:
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.path, flags)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return b""
            parts = []
            pos = start
            while pos < end:
                chunk = os.pread(fd, min(READ_CHUNK, end - pos), pos)
                if not chunk:
                    break
                parts.append(chunk)
                pos += len(chunk)
            return b"".join(parts)
        finally:
            os.close(fd)

    @property
    def pending(self) -> bool:
        """More bytes are on disk than were read (the per-poll cap was reached)."""
        return self.size > self.offset
