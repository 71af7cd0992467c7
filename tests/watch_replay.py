"""Replay a recorded fixture run into a temporary directory, in the order its files were written.

``fixtures/mtimes.json`` holds every file's recorded mtime. The replay is a list of
:class:`Write` actions in time order; applying one writes it (and sets its mtime to the
replay time), and :attr:`Replayer.now` is the clock a test hands the watcher, so the
watcher sees the run's own (compressed) pace and the test drives polls between writes.

* files that are not logs and not inside a checkpoint are written whole at their mtime;
* a checkpoint directory (``checkpoint-N``) is copied whole at its directory's mtime, right
  after the log line that first shows step N (a tqdm bar ``N/M [`` or ``step N``);
* a log is written in chunks of ``chunk_lines`` lines, their times spread between the run's
  first write and the log's mtime, with each checkpoint pinning the time of its line.

``volume(total)`` models the volume of the checkpoints' directory: its free space is
``total`` minus what the replayed checkpoints allocate, the way the fixture's tmpfs was.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
_LOG_SUFFIXES = (".log", ".out", ".err")
_CKPT_DIR = re.compile(r"^checkpoint[-_](\d+)$")
_STEP = re.compile(rb"(?:\b(\d+)/\d+ \[|\bstep[ =:]+(\d+))")


@dataclass
class Write:
    time: float
    rel: str
    kind: str  # "file" | "checkpoint" | "log"
    data: bytes = b""  # log chunk, or the file's content


class Replayer:
    def __init__(self, name: str, dst: Path, *, chunk_lines: int = 4) -> None:
        self.src = FIXTURES / "runs" / name
        self.dst = dst
        self.mtimes: dict[str, float] = json.loads((FIXTURES / "mtimes.json").read_text())[name]
        self.chunk_lines = chunk_lines
        self.writes = self._plan()
        self.now = self.writes[0].time if self.writes else 0.0
        self.done: list[Write] = []

    # ------------------------------------------------------------------ plan

    def _plan(self) -> list[Write]:
        out: list[Write] = []
        ckpts: dict[int, tuple[str, float]] = {}
        logs: list[str] = []
        dirs: list[float] = []
        for rel, t in self.mtimes.items():
            p = self.src / rel
            parts = rel.split("/")
            if p.is_dir():
                m = _CKPT_DIR.match(parts[-1])
                if m:
                    ckpts[int(m.group(1))] = (rel, t)
                else:
                    dirs.append(t)  # a directory the run created (tb/): when it started writing
                continue
            if any(_CKPT_DIR.match(x) for x in parts[:-1]):
                continue  # copied with its checkpoint directory
            if rel.endswith(_LOG_SUFFIXES) and p.stat().st_size > 0:
                logs.append(rel)
            else:
                out.append(Write(t, rel, "file", p.read_bytes()))
        run_start = min([w.time for w in out if not w.rel.endswith((".py", ".sh", ".yaml", ".json"))]
                        + [t for _, t in ckpts.values()] + [self.mtimes[r] for r in logs] + dirs, default=0.0)
        for rel in logs:
            out.extend(self._log_writes(rel, run_start, ckpts))
        if not logs:
            out.extend(Write(t, rel, "checkpoint") for rel, t in ckpts.values())
        return sorted(out, key=lambda w: (w.time, w.kind != "checkpoint"))

    def _log_writes(self, rel: str, start: float, ckpts: dict[int, tuple[str, float]]) -> list[Write]:
        lines = (self.src / rel).read_bytes().splitlines(keepends=True)
        anchors: list[tuple[int, float]] = [(0, start)]
        out: list[Write] = []
        pending = sorted(ckpts)
        for i, line in enumerate(lines):
            steps = [int(a or b) for a, b in _STEP.findall(line)]
            while pending and steps and max(steps) >= pending[0]:
                crel, t = ckpts[pending.pop(0)]
                anchors.append((i + 1, t))
                out.append(Write(t, crel, "checkpoint"))
        for step in pending:  # never reached in the log: written at its own time
            crel, t = ckpts[step]
            out.append(Write(t, crel, "checkpoint"))
        anchors.append((len(lines), self.mtimes[rel]))
        anchors = sorted(set(anchors))

        def time_of(i: int) -> float:
            for (a, ta), (b, tb) in itertools.pairwise(anchors):
                if a <= i <= b:
                    return ta if b == a else ta + (tb - ta) * (i - a) / (b - a)
            return anchors[-1][1]

        cuts = sorted({a for a, _ in anchors} | set(range(0, len(lines), self.chunk_lines)) | {len(lines)})
        for a, b in itertools.pairwise(cuts):
            # a chunk ends on an anchor: it is written just before that checkpoint (same time, sorted first)
            out.append(Write(time_of(b) - 1e-6, rel, "log", b"".join(lines[a:b])))
        return out

    # ------------------------------------------------------------------ replay

    def __iter__(self) -> Iterator[Write]:
        for w in self.writes:
            self.apply(w)
            yield w

    def apply(self, w: Write) -> None:
        self.now = max(self.now, w.time)
        target = self.dst / w.rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if w.kind == "checkpoint":
            shutil.copytree(self.src / w.rel, target)
            for p in [target, *target.rglob("*")]:
                os.utime(p, (self.now, self.now))
        elif w.kind == "log":
            with open(target, "ab") as fh:
                fh.write(w.data)
            os.utime(target, (self.now, self.now))
        else:
            target.write_bytes(w.data)
            os.utime(target, (self.now, self.now))
        self.done.append(w)

    def written(self, rel: str) -> bytes:
        p = self.dst / rel
        return p.read_bytes() if p.exists() else b""

    def volume(self, total: int, under: str = "checkpoints") -> Callable[[Path], tuple[int, int]]:
        """A free-space function: ``total`` minus the bytes allocated under ``dst/under``."""
        base = self.dst / under

        def measure(path: Path) -> tuple[int, int]:
            used = 0
            for p in base.rglob("*"):
                if p.is_file():
                    used += p.stat().st_blocks * 512
            return total, max(0, total - used)

        return measure
