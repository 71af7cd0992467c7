"""Small fake runs for unit tests of the series/structure checks (no parsers needed).

A real :class:`Run` is opened on an empty tmp dir and its parsed views (logs, event
frames, config entries, checkpoints, disk, exit codes, discovery) are replaced by hand:
``Run`` caches them with ``cached_property``, so setting the instance attribute is
exactly what a parser would have produced. The cards are the real ones in ``rules/``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from autopsy.discover import Discovery
from autopsy.engine.loader import finish_card, load_card_file
from autopsy.engine.runner import resolve_check
from autopsy.engine.types import CheckContext
from autopsy.model import Artifact, ArtifactKind, Finding
from autopsy.parsers.types import Checkpoint, ConfigEntry, DiskUsage, FileCheck, Hit, LogScan, SeriesPoint
from autopsy.run import LoadOptions, Run

RULES = Path(__file__).resolve().parent.parent / "rules"
NOW = 1_720_000_000.0
GB = 10**9


def card(rule_id: str):
    family, name = rule_id.split(".")
    return finish_card(load_card_file(RULES / family / f"{name}.yaml"))


def fake_run(tmp_path: Path, *, tb: dict[str, Sequence[Sequence[float]]] | None = None,
             logs: Sequence[LogScan] = (), config: dict[str, Any] | None = None,
             checkpoints: Sequence[Checkpoint] = (), disk: DiskUsage | None = None,
             exit_codes: Sequence[tuple[str, int]] = (), artifacts: Sequence[Artifact] = (),
             trainer_max_steps: int | None = None, now: float = NOW) -> Run:
    """A Run whose parsed views are given: tb maps tag -> rows of (step, value[, wall_time])."""
    run = Run(tmp_path, LoadOptions(now=now))
    frames = []
    if tb:
        for tag, rows in tb.items():
            frames.append(pd.DataFrame({
                "tag": tag, "step": [int(r[0]) for r in rows], "value": [float(r[1]) for r in rows],
                "wall_time": [float(r[2]) if len(r) > 2 else math.nan for r in rows],
            }))
    arts = list(artifacts)
    if frames:
        # An event file's mtime is its last write: at its newest wall time when the rows give one.
        walls = [float(r[2]) for rows in tb.values() for r in rows if len(r) > 2]  # type: ignore[union-attr]
        ev_mtime = max(walls) if walls else now - 10_000
        arts.append(Artifact("runs/events.out.tfevents.1.host", ArtifactKind.TFEVENTS, 1000, ev_mtime))
    ev_path = "runs/events.out.tfevents.1.host"
    run.__dict__["tfevents"] = [(ev_path, pd.concat(frames, ignore_index=True))] if frames else []
    run.__dict__["logs"] = list(logs)
    run.__dict__["trainer_states"] = []
    entries = []
    for i, (key, value) in enumerate((config or {}).items(), start=1):
        entries.append(ConfigEntry(key, key, value, str(value), "configs/train.yaml", i, "yaml"))
    if trainer_max_steps is not None:
        entries.append(ConfigEntry("max_steps", "max_steps", trainer_max_steps, str(trainer_max_steps),
                                   "configs/train.yaml", 99, "yaml"))
    run.__dict__["config_entries"] = entries
    run.__dict__["checkpoint_list"] = sorted(checkpoints, key=lambda c: (c.step or -1, c.path))
    run.__dict__["disk"] = disk or DiskUsage(0, 0, None, None, None)
    run.__dict__["exit_codes"] = list(exit_codes)
    run.__dict__["discovery"] = Discovery(tuple(arts), (), False)
    return run


def check(rule_id: str, run: Run, hits: dict[str, list[Hit]] | None = None) -> list[Finding]:
    c = card(rule_id)
    assert c.check is not None
    ctx = CheckContext(run=run, card=c, params=c.params, hits=hits or {})
    return list(resolve_check(c.check)(ctx))


def log_scan(path: str, *, size: int = 100, lines: Sequence[str] = (), series: Sequence[SeriesPoint] = (),
             last_wall_time: float | None = None, rank: int | None = None) -> LogScan:
    tail = [(i + 1, line) for i, line in enumerate(lines)][-50:]
    steps = [p.step for p in series if p.step is not None]
    return LogScan(path=path, size=size, bytes_read=size, n_lines=len(lines), rank=rank, series=list(series),
                   head=list(lines[:20]), tail=tail, last_wall_time=last_wall_time,
                   last_step=max(steps) if steps else None)


def ckpt(step: int, size: int = 3 * GB, *, ok: bool = True, problem: str | None = None, mtime: float = NOW - 5000,
         missing: Sequence[str] = ()) -> Checkpoint:
    f = FileCheck(f"checkpoint-{step}/model.safetensors", size, "safetensors", ok, problem)
    problems = (problem,) if problem else ()
    return Checkpoint(f"checkpoint-{step}", "hf", step, (f,), size, mtime, tuple(missing), problems)


def rows(steps: Iterable[int], values: Iterable[float]) -> list[tuple[int, float]]:
    return list(zip(steps, values, strict=True))
