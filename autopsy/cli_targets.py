"""Where autopsy writes: ``-o``, ``--append`` and the step summary, checked, then written atomically.

A target is refused (exit 2, one line) when it is not a regular file (a FIFO would block
forever, ``/dev/zero`` would be read until memory runs out, ``/dev/full`` cannot take the
report), or when it lies inside a run directory being analysed (autopsy never writes into a
run; ``--force`` allows it). A symlinked target is written through: the link's final target
is checked and replaced atomically, the link itself is kept (a shared ISSUES log stays
shared). Writes go to a temporary file beside the real target, are flushed to disk and
renamed over it, so a full disk or a crash never leaves half a report.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from autopsy.fileio import atomic_replace
from autopsy.report.sanitize import term_name

_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}


class TargetRefused(Exception):
    """A target autopsy will not write to; the message is one line for stderr."""


def file_kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def resolve_target(path: str, *, what: str, run_dirs: Sequence[str] = (), force: bool = False) -> Path:
    """The real file to write for ``path`` (symlinks followed), or :class:`TargetRefused`."""
    shown = term_name(path)
    real = Path(os.path.realpath(path))
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise TargetRefused(f"cannot use {what} {shown}: {exc.strerror or exc}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise TargetRefused(f"refusing to write {what} to {shown}: it is {file_kind(st.st_mode)}, not a regular file")
    if not force:
        for run in run_dirs:
            root = Path(os.path.realpath(run))
            if real == root or root in real.parents:
                raise TargetRefused(f"refusing to write {what} to {shown}: it is inside the run directory "
                                    f"{term_name(run)} (autopsy never writes into a run; --force allows it)")
    return real


def write_atomic(real: Path, data: bytes) -> None:
    """Replace ``real`` with ``data``: temp file beside it, fsync, keep its mode, rename."""
    try:
        mode = stat.S_IMODE(os.stat(real).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    with atomic_replace(real, mode) as fh:
        fh.write(data)
