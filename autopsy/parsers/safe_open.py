"""Open a run's file as a descriptor that cannot block, follow a swapped-in link, or be a device.

The run is walked first and read later; in between, a file can be replaced by a FIFO (a
plain ``open`` would block forever) or by a symlink to a secret outside the run (a plain
``open`` would follow it). Every reader opens with ``O_NOFOLLOW | O_NONBLOCK``, checks the
opened descriptor with ``fstat`` (a regular file) and reads only from that descriptor.

``O_NOFOLLOW`` guards the last component only: a *directory* of the run replaced by a link
to a directory outside it would still be followed. So a run's root is registered
(:func:`confine_to`, done by ``autopsy.run.Run``), and a path under a registered root is
opened from the root's descriptor one component at a time (``openat`` with
``O_NOFOLLOW | O_DIRECTORY``): a directory swapped for a link is refused, not followed.
The walk itself never descends through a link (``autopsy.discover``), so a path it listed
never legitimately crosses one. Not defended: a directory swapped *while it is being
listed* can make the walk list names (and sizes) from outside the run; their contents
are then refused by the open above. The root itself is opened as the user named it
(it may be a link, e.g. ``runs/latest``).
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path
from typing import BinaryIO

FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
         | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
_DIR_FLAGS = (os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
              | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
_CAN_WALK = os.open in os.supports_dir_fd and hasattr(os, "O_DIRECTORY") and hasattr(os, "O_NOFOLLOW")
_ROOTS: set[str] = set()  # lexical absolute paths of the run roots being read
# The descriptor of the directory the last confined open walked to, its lexical path and its
# (device, inode): the files of one directory are read one after another, and walking from the
# root again for each costs a run of 10,000 small files three extra opens per file. The kept
# descriptor is used only while an ``lstat`` of its path still gives that directory; anything
# else (the directory swapped for a link, deleted, re-created) walks from the root again, which
# refuses a link. Dropped whenever a run is registered.
_LAST_DIR: list[tuple[str, int, tuple[int, int]]] = []
_LAST_DIR_LOCK = threading.Lock()


def confine_to(root: str | os.PathLike[str]) -> None:
    """Open every later path under ``root`` component by component, never through a link."""
    _ROOTS.add(os.path.abspath(os.fspath(root)))
    with _LAST_DIR_LOCK:
        _drop_last_dir()


def _drop_last_dir() -> None:
    while _LAST_DIR:
        _, fd, _ = _LAST_DIR.pop()
        try:
            os.close(fd)
        except OSError:
            pass


def _root_of(path: str) -> str | None:
    best = None
    for root in _ROOTS:
        if path.startswith(root + os.sep) and (best is None or len(root) > len(best)):
            best = root
    return best


def _open_confined(root: str, path: str) -> int:
    parts = path[len(root) + 1:].split(os.sep)
    if any(p in ("", ".", "..") for p in parts):
        return os.open(path, FLAGS)  # not a path the walk gives; the plain guarded open
    folder = path[: len(path) - len(parts[-1]) - 1]
    with _LAST_DIR_LOCK:
        if _LAST_DIR and _LAST_DIR[0][0] == folder:
            try:
                st = os.lstat(folder)
                same = (st.st_dev, st.st_ino) == _LAST_DIR[0][2] and stat.S_ISDIR(st.st_mode)
            except OSError:
                same = False
            if same:
                return os.open(parts[-1], FLAGS, dir_fd=_LAST_DIR[0][1])
        dfd = _walk_to(root, parts[:-1])
        try:
            fd = os.open(parts[-1], FLAGS, dir_fd=dfd)
            st = os.fstat(dfd)
        except BaseException:
            os.close(dfd)
            raise
        _drop_last_dir()
        _LAST_DIR.append((folder, dfd, (st.st_dev, st.st_ino)))
        return fd


def _walk_to(root: str, dirs: list[str]) -> int:
    """A descriptor on ``root/dirs...``, opened one component at a time, never through a link."""
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        for part in dirs:
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=dfd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise OSError(exc.errno, f"directory {part!r} on its path is a symbolic link or not a "
                                             "directory (replaced after the run was listed?): not followed") from None
                raise
            os.close(dfd)
            dfd = nfd
        return dfd
    except BaseException:
        os.close(dfd)
        raise


def open_regular(fs_path: str | os.PathLike[str]) -> int:
    """A read-only descriptor on a regular file; OSError for a link, FIFO, device or socket."""
    path = os.path.abspath(os.fspath(fs_path))
    root = _root_of(path) if _CAN_WALK and _ROOTS else None
    try:
        fd = os.open(path, FLAGS) if root is None else _open_confined(root, path)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not (exc.strerror or "").startswith("directory "):
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


def open_binary(fs_path: str | os.PathLike[str]) -> BinaryIO:
    """:func:`open_regular` as a buffered binary file (closing it closes the descriptor)."""
    return os.fdopen(open_regular(fs_path), "rb")


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
