"""RunSummary: progress, times from artifacts, latest valid checkpoint, work lost, resume hint."""

from __future__ import annotations

from typing import Any

import pandas as pd
from engine_helpers import FakeDiscovery, FakeRun

from autopsy.model import Artifact, ArtifactKind, Confidence, Finding, Severity
from autopsy.parsers.types import Checkpoint, LogScan
from autopsy.summary import summarize


def ckpt(path: str, step: int | None, layout: str = "hf", mtime: float = 5000.0) -> Checkpoint:
    return Checkpoint(path=path, layout=layout, step=step, files=(), bytes=10, mtime=mtime)


def oom(wall_time: float | None) -> Finding:
    return Finding(rule="oom.cuda", severity=Severity.CRITICAL, confidence=Confidence.HIGH, title="t", message="m",
                   primary=True, wall_time=wall_time)


def scalars(rows: list[tuple[int, float]]) -> pd.DataFrame:
    return pd.DataFrame({"step": pd.array([r[0] for r in rows], dtype="Int64"),
                         "wall_time": [r[1] for r in rows], "value": [1.0] * len(rows)})


def test_hf_run_with_checkpoint_and_failure_time() -> None:
    log = LogScan(path="train.log", size=1, bytes_read=1, n_lines=1, first_wall_time=1000.0, last_wall_time=1900.0)
    tf = pd.DataFrame({"tag": ["loss"] * 2, "step": [1, 9000], "wall_time": [990.0, 1950.0], "value": [1.0, 2.0]})
    run = FakeRun(logs=[log], tfevents=[("tb/ev", tf)], last_step=9000, max_steps=20000,
                  latest_valid_checkpoint=ckpt("checkpoint-8000", 8000),
                  scalars=scalars([(7990, 1700.0), (8000, 1800.0), (9000, 1950.0)]))
    s = summarize(run, oom(1960.0), display_path="runs/exp42")
    assert (s.path, s.last_step, s.max_steps) == ("runs/exp42", 9000, 20000)
    assert (s.started, s.ended) == (990.0, 1950.0)
    assert (s.latest_valid_checkpoint, s.latest_valid_step) == ("checkpoint-8000", 8000)
    assert s.steps_lost == 1000
    assert s.seconds_lost == 160.0  # failure at 1960, step 8000 reached at 1800 (from the series, not mtime)
    assert s.resume_hint is None  # no training script to read: no flag is invented
    assert s.failure_time == 1960.0


def test_checkpoint_mtime_used_when_series_has_no_times() -> None:
    run = FakeRun(last_step=300, latest_valid_checkpoint=ckpt("ckpt/model_000250.pt", 250, "nanochat", mtime=4000.0),
                  logs=[LogScan(path="a.log", size=1, bytes_read=1, n_lines=1, first_wall_time=3000.0,
                                last_wall_time=4500.0)])
    s = summarize(run, None)
    assert s.steps_lost == 50 and s.seconds_lost == 500.0
    assert s.resume_hint is None
    assert s.failure_time is None


def test_no_checkpoint_loses_everything() -> None:
    run = FakeRun(last_step=120, logs=[LogScan(path="a.log", size=1, bytes_read=1, n_lines=1, first_wall_time=100.0,
                                               last_wall_time=700.0)])
    s = summarize(run, None)
    assert s.latest_valid_checkpoint is None and s.resume_hint is None
    assert s.steps_lost == 120 and s.seconds_lost == 600.0


def test_mtimes_are_the_fallback_for_times() -> None:
    arts = (Artifact("train.log", ArtifactKind.LOG, 10, 200.0), Artifact("cfg.yaml", ArtifactKind.CONFIG, 10, 50.0),
            Artifact("checkpoint-1/model.safetensors", ArtifactKind.CHECKPOINT_FILE, 10, 150.0))
    s = summarize(FakeRun(discovery=FakeDiscovery(artifacts=arts)), None)
    assert (s.started, s.ended) == (150.0, 200.0)  # configs are written before training: not a run time
    assert s.steps_lost is None and s.seconds_lost is None


def test_broken_view_is_a_problem_not_a_crash() -> None:
    class Broken(FakeRun):
        @property
        def latest_valid_checkpoint(self) -> Any:  # type: ignore[override]
            raise RuntimeError("checkpoint parser bug")

        @latest_valid_checkpoint.setter
        def latest_valid_checkpoint(self, value: Any) -> None:
            pass

    problems: list[str] = []
    s = summarize(Broken(last_step=5), None, problems=problems)
    assert s.last_step == 5 and s.latest_valid_checkpoint is None
    assert problems == ["run summary: checkpoints: RuntimeError: checkpoint parser bug"]
