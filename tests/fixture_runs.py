"""Fixture runs as they were on the day they were generated, on any checkout.

Git keeps no mtimes: after a clone every file of ``fixtures/runs/<name>/`` looks written a
moment ago, so rules that compare file times (a checkpoint "still being written", a log
older than the event files, how long a run has been silent) would judge the clone, not the
run. ``fixtures/mtimes.json`` holds the real mtimes ({run: {relpath: mtime}}, written by
``fixtures/generate.py``); tests analyse a copy with those mtimes restored, at a pinned
analysis time (an hour after the run's last write), so results are identical everywhere.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RUNS = REPO / "fixtures" / "runs"
MTIMES = REPO / "fixtures" / "mtimes.json"
# Analysis happens this long after the run's newest write: a finished run, looked at
# after the fact (the same age the per-rule case files use, casefiles.DEFAULT_AGE_S).
NOW_OFFSET_S = 3600.0


def run_names() -> list[str]:
    return sorted(p.name for p in RUNS.iterdir() if p.is_dir()) if RUNS.is_dir() else []


@functools.lru_cache(maxsize=1)
def recorded_mtimes() -> dict[str, dict[str, float]]:
    if not MTIMES.is_file():
        return {}
    data: Any = json.loads(MTIMES.read_text(encoding="utf-8"))
    return {str(run): {str(k): float(v) for k, v in files.items()} for run, files in data.items()}


def _entries(root: Path) -> list[str]:
    """Every path under ``root`` (files, dirs, links), relative, POSIX separators."""
    out = []
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            out.append(Path(dirpath, n).relative_to(root).as_posix())
    return sorted(out)


def missing_mtimes(name: str) -> list[str]:
    """Files of the run that fixtures/mtimes.json does not record (a regeneration not recorded)."""
    recorded = recorded_mtimes().get(name, {})
    return [rel for rel in _entries(RUNS / name) if rel not in recorded]


def pinned_now(name: str) -> float:
    """The analysis time for a fixture run: its newest recorded mtime + NOW_OFFSET_S."""
    recorded = recorded_mtimes().get(name)
    if not recorded:
        raise KeyError(f"fixtures/mtimes.json has no entry for run {name!r}; regenerate it with fixtures/generate.py")
    return max(recorded.values()) + NOW_OFFSET_S


def restore_mtimes(run_dir: Path, name: str) -> None:
    """Set the recorded mtimes on a copy of run ``name`` at ``run_dir`` (files first, then dirs, deepest first)."""
    recorded = recorded_mtimes().get(name, {})
    missing = [rel for rel in _entries(run_dir) if rel not in recorded]
    if missing:
        raise AssertionError(f"fixtures/mtimes.json lacks {len(missing)} path(s) of run {name!r}, e.g. "
                             f"{missing[:3]}: record them (fixtures/generate.py writes the file)")
    # A directory's mtime changes when entries are created in it, so set directories last,
    # children before parents.
    for rel in sorted(recorded, key=lambda r: (os.path.isdir(run_dir / r), -r.count("/"))):
        p = run_dir / rel
        if os.path.lexists(p):
            t = recorded[rel]
            os.utime(p, (t, t), follow_symlinks=False)
    top = max(recorded.values(), default=None)
    if top is not None:
        os.utime(run_dir, (top, top))


def pinned_copy(name: str, dest_root: Path) -> Path:
    """Copy fixture run ``name`` under ``dest_root`` (keeping its name) with its real mtimes."""
    dest = dest_root / name
    shutil.copytree(RUNS / name, dest, symlinks=True)
    restore_mtimes(dest, name)
    return dest
