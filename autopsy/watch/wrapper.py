"""Wrapper mode: run the training command, pass its output through, and keep it in the log the user named.

The child's stdout and stderr go to one pipe (as ``> log 2>&1`` does); a pump thread copies
every chunk to the terminal (``passthrough``) and to the log file, flushed as it arrives so
the watcher reads it at once. ``PYTHONUNBUFFERED=1`` is set for the child unless the
environment already says otherwise: through a pipe, Python block-buffers its prints and the
watcher would see a silent run (the very nohup case it warns about). The log file is only
ever the one the user named: the run directory is never written to.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO


class Child:
    """The watched command and its output pump."""

    def __init__(self, argv: Sequence[str], *, log_path: Path | None, passthrough: BinaryIO | None,
                 cwd: str | None = None) -> None:
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.log = open(log_path, "wb") if log_path is not None else None
        try:
            self.proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                         cwd=cwd)
        except OSError:
            if self.log is not None:
                self.log.close()
            raise
        self.passthrough = passthrough
        self.bytes = 0
        self.write_error: str | None = None
        self._pump = threading.Thread(target=self._copy, name="autopsy-watch-pump", daemon=True)
        self._pump.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _copy(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        try:
            while True:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return
                self.bytes += len(chunk)
                if self.passthrough is not None:
                    try:
                        self.passthrough.write(chunk)
                        self.passthrough.flush()
                    except (OSError, ValueError):  # the terminal went away: keep logging
                        self.passthrough = None
                if self.log is not None:
                    try:
                        self.log.write(chunk)
                        self.log.flush()
                    except OSError as exc:
                        self.write_error = f"writing the log failed: {exc.strerror or exc}"
                        self.log = None
        finally:
            if self.log is not None:
                self.log.close()

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self) -> int:
        code = self.proc.wait()
        self._pump.join(30)
        return code

    def terminate(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.terminate()
            except OSError:
                pass


def shell_code(returncode: int) -> int:
    """The exit status a shell reports: 128 + N for a child killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode
