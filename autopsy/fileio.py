"""Two file helpers shared across layers: a read capped at a size, and an atomic replace.

Low level on purpose (imports nothing from autopsy), so that the CLI (``cli_targets``),
the reports (``report.append``) and the settings readers (``baseline``, ``team_config``)
use one implementation each.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


def read_capped(path: str | os.PathLike[str], limit: int) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of ``path`` and whether the file holds more.

    Reads at most ``limit + 1`` bytes, whatever the file's size; OSError as ``open`` raises it.
    """
    with open(path, "rb") as fh:
        raw = fh.read(limit + 1)
    return raw[:limit], len(raw) > limit


@contextlib.contextmanager
def atomic_replace(target: Path, mode: int) -> Iterator[BinaryIO]:
    """A file to write that replaces ``target`` only when the block ends without an exception.

    The data goes to a temporary file beside ``target`` (same directory, so the rename is
    atomic), is flushed and fsynced, gets ``mode`` and is renamed over ``target``. On any
    exception the temporary file is removed and ``target`` is left as it was.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                               dir=target.parent if str(target.parent) else ".")
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
