"""Open a run's file as a descriptor that cannot block, follow a swapped-in link, or be a device.

The run is walked first and read later; in between, a file can be replaced by a FIFO (a
plain ``open`` would block forever) or by a symlink to a secret outside the run (a plain
``open`` would follow it). Every reader opens with ``O_NOFOLLOW | O_NONBLOCK``, checks the
opened descriptor with ``fstat`` (a regular file) and reads only from that descriptor.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
         | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


def open_regular(fs_path: str | os.PathLike[str]) -> int:
    """A read-only descriptor on a regular file; OSError for a link, FIFO, device or socket."""
    try:
        fd = os.open(fs_path, FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "is a symbolic link (replaced after the run was listed?): not followed") \
                from None
        raise
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file (FIFO, socket or device): not read")
    return fd


def read_regular(fs_path: str | os.PathLike[str] | Path, limit: int) -> bytes:
    """At most ``limit`` bytes of a regular file, read from the checked descriptor."""
    fd = open_regular(fs_path)
    try:
        size = os.fstat(fd).st_size
        want = min(limit, size) if size > 0 else limit  # /proc-like files report 0
        chunks: list[bytes] = []
        got = 0
        while got < want or (size == 0 and got < limit):
            chunk = os.read(fd, min(1 << 24, (want if size > 0 else limit) - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)
