"""``autopsy watch``: the post-mortem's parsers and rules on a run that is still alive.

``autopsy.watch(run_dir, on_finding=callback)`` follows a run directory until it is told to
stop; :class:`Watcher` is the same one poll at a time (tests, notebooks, other loops).
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable
from typing import Any

from autopsy.model import Finding
from autopsy.watch.watcher import Watcher, WatchEvent, WatchStatus, disk_volume

__all__ = ["WatchEvent", "WatchStatus", "Watcher", "disk_volume", "watch"]


def watch(run_dir: str | os.PathLike[str], on_finding: Callable[[Finding], Any] | None = None, *,
          interval: float = 10.0, stop: Callable[[], bool] | None = None, max_polls: int | None = None,
          **kw: Any) -> Watcher:
    """Follow ``run_dir``, calling ``on_finding`` once per new warning, until ``stop()`` returns
    true or ``max_polls`` polls were made (forever otherwise; Ctrl-C stops it). Returns the
    :class:`Watcher`, whose ``findings`` hold every warning. Keyword arguments go to :class:`Watcher`."""
    w = Watcher(run_dir, on_finding=on_finding, **kw)
    try:
        w.run(interval, stop=stop, max_polls=max_polls)
    except KeyboardInterrupt:
        pass
    return w


class _CallableModule(types.ModuleType):
    """``autopsy.watch`` is this package and, called, :func:`watch`: ``autopsy.watch(run_dir, on_finding=cb)``."""

    def __call__(self, run_dir: str | os.PathLike[str], on_finding: Callable[[Finding], Any] | None = None,
                 **kw: Any) -> Watcher:
        return watch(run_dir, on_finding, **kw)


sys.modules[__name__].__class__ = _CallableModule
