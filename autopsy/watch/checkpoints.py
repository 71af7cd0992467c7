"""Checkpoints as they appear, and the disk-fill forecast they make possible.

Each poll lists the run directory (``os.scandir``, no symlinks followed, bounded depth and
file count: only names and ``stat``, never a file's content) and groups what looks like a
checkpoint: a directory named with a step (``checkpoint-500``, ``global_step500``,
``step_500``) or a weights file named with one (``ckpt_step200.pt``, ``model_1000.safetensors``).
Sizes are allocated bytes (``st_blocks``), what a volume really loses.

The forecast: the checkpoint bytes grow by about ``growth`` per save (the size of the last
complete checkpoint while none was ever deleted; the measured growth of all checkpoints per
step once rotation deletes some, so an honoured ``save_total_limit`` forecasts nothing),
saves come every ``cadence`` steps, so with ``free`` bytes left the save at step
``last_save + (free // growth + 1) * cadence`` is the one that does not fit.
"""

from __future__ import annotations

import itertools
import os
import re
import stat
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from autopsy.parsers.checkpoints import _step_from_name

MAX_DEPTH = 4
MAX_FILES = 200_000
_CKPT_DIR = re.compile(r"(?i)^(?:checkpoint[-_]?\d+|global_step\d+|(?:step|iter|epoch|ckpt)[-_=]?\d+)$")
_DIR_STEP = re.compile(r"(\d+)$")
_CKPT_SUFFIX = (".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".h5", ".keras", ".distcp")


@dataclass(frozen=True)
class SeenCheckpoint:
    path: str  # relative to the run
    step: int | None
    bytes: int  # allocated
    n_files: int
    mtime: float


def _alloc(st: os.stat_result) -> int:
    blocks = getattr(st, "st_blocks", None)
    return int(blocks) * 512 if blocks is not None else int(st.st_size)


def _dir_bytes(path: str, depth: int = 0) -> tuple[int, int, float]:
    total = n = 0
    newest = 0.0
    try:
        with os.scandir(path) as it:
            for e in it:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode) and depth < 2:
                    b, k, m = _dir_bytes(e.path, depth + 1)
                    total, n, newest = total + b, n + k, max(newest, m)
                elif stat.S_ISREG(st.st_mode):
                    total += _alloc(st)
                    n += 1
                    newest = max(newest, st.st_mtime)
    except OSError:
        pass
    return total, n, newest


def list_checkpoints(root: Path) -> list[SeenCheckpoint]:
    """Checkpoint directories and files under ``root``, by step then path (see the module docstring)."""
    out: list[SeenCheckpoint] = []
    budget = [MAX_FILES]

    def walk(d: str, rel: str, depth: int) -> None:
        try:
            entries = list(os.scandir(d))
        except OSError:
            return
        for e in entries:
            budget[0] -= 1
            if budget[0] < 0 or e.name.startswith("."):
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            r = f"{rel}/{e.name}" if rel else e.name
            if stat.S_ISDIR(st.st_mode):
                if _CKPT_DIR.match(e.name):
                    b, n, m = _dir_bytes(e.path)
                    if n:
                        ds = _DIR_STEP.search(e.name)
                        out.append(SeenCheckpoint(r, int(ds.group(1)) if ds else None, b, n, max(m, st.st_mtime)))
                elif depth < MAX_DEPTH:
                    walk(e.path, r, depth + 1)
            elif stat.S_ISREG(st.st_mode) and e.name.lower().endswith(_CKPT_SUFFIX):
                step = _step_from_name(e.name)
                if step is not None:
                    out.append(SeenCheckpoint(r, step, _alloc(st), 1, st.st_mtime))

    walk(os.fspath(root), "", 0)
    return sorted(out, key=lambda c: (c.step if c.step is not None else -1, c.path))


@dataclass(frozen=True)
class Forecast:
    """When the checkpoints' volume fills at the current cadence."""

    volume_path: str  # the directory whose volume was measured (relative to the run, "." for the run)
    total_bytes: int
    free_bytes: int
    growth_per_save: int
    cadence_steps: float
    last_save_step: int
    saves_that_fit: int
    fill_step: int
    basis: str  # how growth_per_save was measured


@dataclass
class CheckpointWatch:
    """The checkpoints seen so far and what each poll adds or removes."""

    root: Path
    known: dict[str, SeenCheckpoint] = field(default_factory=dict)
    deleted: int = 0
    history: list[tuple[int, int]] = field(default_factory=list)  # (newest step, bytes of all but the newest)
    rotating_from: int = 0  # index in history of the first save seen after a deletion

    def poll(self) -> tuple[list[SeenCheckpoint], list[str]]:
        """(new checkpoints, paths deleted since the last poll)."""
        now = {c.path: c for c in list_checkpoints(self.root)}
        new = [c for p, c in now.items() if p not in self.known]
        gone = [p for p in self.known if p not in now]
        self.deleted += len(gone)
        if gone:
            self.rotating_from = len(self.history)  # growth is measured from here on: the rotation regime
        self.known = now
        cur = self.current()
        if new and cur and cur[-1].step is not None:
            self.history.append((cur[-1].step, sum(c.bytes for c in cur[:-1])))
        return sorted(new, key=lambda c: (c.step if c.step is not None else -1, c.path)), gone

    def current(self) -> list[SeenCheckpoint]:
        return sorted(self.known.values(), key=lambda c: (c.step if c.step is not None else -1, c.path))

    def cadence(self) -> float | None:
        steps = sorted({c.step for c in self.known.values() if c.step is not None})
        diffs = [b - a for a, b in itertools.pairwise(steps) if b > a]
        return float(statistics.median(diffs[-8:])) if diffs else None

    def volume_dir(self) -> Path:
        """The directory that holds the checkpoints (its volume is the one that fills)."""
        cur = self.current()
        if not cur:
            return self.root
        parent = (self.root / cur[-1].path).parent
        return parent if parent.is_dir() else self.root

    def forecast(self, total: int, free: int) -> Forecast | None:
        cur = self.current()
        cadence = self.cadence()
        if len(cur) < 2 or cadence is None or cur[-1].step is None:
            return None
        if self.deleted == 0:
            growth = cur[-2].bytes  # the newest may still be being written
            basis = "size of the last complete checkpoint (none was deleted so far)"
        else:
            pts = self.history[self.rotating_from:][-8:]
            if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
                return None
            per_step = (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])
            growth = int(per_step * cadence)
            basis = "growth of all checkpoints per save, with old ones being deleted"
        if growth <= 0:
            return None
        fit = max(0, free // growth)
        last = cur[-1].step
        rel = os.path.relpath(self.volume_dir(), self.root)
        return Forecast(rel, total, free, growth, cadence, last, fit, int(last + (fit + 1) * cadence), basis)
