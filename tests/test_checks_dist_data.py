"""Unit tests of the dist.* and data.stall checks on fake runs (see fake_runs)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from fake_runs import check, fake_run, log_scan, rows

from autopsy.engine.types import NotEvaluated
from autopsy.parsers.types import LogScan, SeriesPoint

# ----------------------------------------------------------------------------- dist / data


def _rank_scan(rank: int, metric: str, values: Sequence[float]) -> LogScan:
    pts = [SeriesPoint(metric, i + 1, v, i + 1, rank=rank) for i, v in enumerate(values)]
    return log_scan(f"rank{rank}.log", series=pts, rank=rank)


def test_straggler(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    logs = [_rank_scan(r, "step_time", list((0.5 if r != 3 else 0.9) + 0.02 * rng.random(40))) for r in range(4)]
    [f] = check("dist.straggler", fake_run(tmp_path, logs=logs))
    assert f.facts["slow_rank"] == 3 and f.facts["ratio"] > 1.6


def test_straggler_balanced_is_quiet(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    logs = [_rank_scan(r, "step_time", list(0.5 + 0.05 * rng.random(40))) for r in range(4)]
    assert check("dist.straggler", fake_run(tmp_path, logs=logs)) == []


def test_divergence(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    base = [3.0 - 0.01 * i for i in range(100)]
    logs = []
    for r in range(4):
        drift = [0.0 if r != 2 else 0.02 * max(0, i - 40) for i in range(100)]
        vals = [b + d + 0.03 * rng.standard_normal() for b, d in zip(base, drift, strict=True)]
        logs.append(_rank_scan(r, "loss", vals))
    [f] = check("dist.divergence", fake_run(tmp_path, logs=logs))
    assert f.facts["divergent_rank"] == 2


def test_divergence_noise_is_quiet(tmp_path: Path) -> None:
    rng = np.random.default_rng(10)
    logs = [_rank_scan(r, "loss", [3.0 - 0.01 * i + 0.1 * rng.standard_normal() for i in range(100)]) for r in range(4)]
    assert check("dist.divergence", fake_run(tmp_path, logs=logs)) == []


def test_data_stall_data_time(tmp_path: Path) -> None:
    steps = list(range(1, 61))
    run = fake_run(tmp_path, tb={"data_time": rows(steps, [0.8] * 60), "step_time": rows(steps, [1.0] * 60)})
    [f] = check("data.stall", run)
    assert f.facts["data_share"] == pytest.approx(0.8)


def test_data_stall_throughput_collapse_and_steady(tmp_path: Path) -> None:
    steps = list(range(1, 101))
    thr = [1000.0] * 60 + [300.0] * 40
    [f] = check("data.stall", fake_run(tmp_path, tb={"train_samples_per_second": rows(steps, thr)}))
    assert f.facts["ratio"] == pytest.approx(0.3)
    steady = fake_run(tmp_path, tb={"train_samples_per_second": rows(steps, [1000.0] * 100)})
    assert check("data.stall", steady) == []


def test_data_stall_not_evaluated(tmp_path: Path) -> None:
    with pytest.raises(NotEvaluated):
        check("data.stall", fake_run(tmp_path))
