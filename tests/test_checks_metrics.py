"""Unit tests of the series/structure checks against small fake runs (no parsers needed).

A real :class:`Run` is opened on an empty tmp dir and its parsed views (logs, event
frames, config entries, checkpoints, disk, exit codes, discovery) are replaced by hand:
``Run`` caches them with ``cached_property``, so setting the instance attribute is
exactly what a parser would have produced. The cards are the real ones in ``rules/``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from autopsy.discover import Discovery
from autopsy.engine.loader import finish_card, load_card_file
from autopsy.engine.runner import resolve_check
from autopsy.engine.types import CheckContext, NotEvaluated
from autopsy.model import Artifact, ArtifactKind, Finding, Severity
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


# ----------------------------------------------------------------------------- loss.nonfinite


def test_nonfinite_reports_first_bad_step_and_values_before(tmp_path: Path) -> None:
    steps = list(range(10, 310, 10))
    vals = [2.0 - 0.01 * i for i in range(25)] + [5.0, 40.0, float("nan"), float("nan"), float("nan")]
    run = fake_run(tmp_path, tb={"train/loss": rows(steps, vals)})
    [f] = check("loss.nonfinite", run)
    assert f.facts["first_step"] == 280 and f.facts["first_value"] == "nan"
    assert f.facts["values_before"][-1] == [270, 40.0]
    assert f.facts["recovered"] is False and f.severity is Severity.ERROR
    assert "rising from" in f.message


def test_nonfinite_ignores_fp16_grad_norm_skips(tmp_path: Path) -> None:
    steps = list(range(1, 101))
    loss = [3.0 - 0.01 * i for i in range(100)]
    gn = [float("inf") if s in (2, 3) else 1.0 for s in steps]
    run = fake_run(tmp_path, tb={"loss": rows(steps, loss), "grad_norm": rows(steps, gn)})
    assert check("loss.nonfinite", run) == []


def test_nonfinite_grad_norm_reported_per_source(tmp_path: Path) -> None:
    steps = list(range(1, 101))
    loss = [3.0 - 0.01 * i for i in range(90)] + [float("nan")] * 10
    gn = [1.0] * 85 + [float("inf")] * 15
    run = fake_run(tmp_path, tb={"loss": rows(steps, loss), "grad_norm": rows(steps, gn)})
    found = {f.facts["metric"]: f for f in check("loss.nonfinite", run)}
    assert set(found) == {"loss", "grad_norm"}
    assert found["grad_norm"].facts["first_step"] == 86 and found["loss"].facts["first_step"] == 91


def test_nonfinite_not_evaluated_without_series(tmp_path: Path) -> None:
    with pytest.raises(NotEvaluated):
        check("loss.nonfinite", fake_run(tmp_path))


# ----------------------------------------------------------------------------- loss.spike


def test_spike_unrecovered(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    steps = list(range(1, 401))
    gn = list(1.0 + 0.1 * rng.random(400))
    gn[200] = 80.0
    loss = [3.0 - 0.002 * i + 0.02 * rng.random() for i in range(200)] + [4.5 + 0.02 * rng.random() for _ in range(200)]
    run = fake_run(tmp_path, tb={"loss": rows(steps, loss), "grad_norm": rows(steps, gn)})
    [f] = check("loss.spike", run)
    assert f.facts["step"] == 201 and f.facts["ratio"] > 50
    assert f.facts["recovered"] is False and f.facts["n_unrecovered"] == 1


def test_spike_isolated_recovered_is_quiet(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    steps = list(range(1, 401))
    gn = list(1.0 + 0.1 * rng.random(400))
    gn[200] = 80.0
    loss = [3.0 - 0.002 * i + 0.02 * rng.random() for i in range(400)]
    run = fake_run(tmp_path, tb={"loss": rows(steps, loss), "grad_norm": rows(steps, gn)})
    assert check("loss.spike", run) == []


def test_spike_noisy_grad_norm_is_quiet(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    steps = list(range(1, 501))
    gn = list(np.exp(rng.normal(0, 0.5, 500)))  # heavy but ordinary noise: max ~ 5x median
    loss = [3.0 - 0.002 * i + 0.1 * rng.random() for i in range(500)]
    run = fake_run(tmp_path, tb={"loss": rows(steps, loss), "grad_norm": rows(steps, gn)})
    assert check("loss.spike", run) == []


# ----------------------------------------------------------------------------- loss.plateau


def _plateau_run(tmp_path: Path, values: Sequence[float], config: dict[str, Any] | None = None) -> Run:
    steps = [10 * (i + 1) for i in range(len(values))]
    return fake_run(tmp_path, tb={"train/loss": rows(steps, values)}, config=config)


def test_plateau_chance_level(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    lnv = math.log(50257)
    vals = [lnv + 0.05 * rng.standard_normal() for _ in range(200)]
    [f] = check("loss.plateau", _plateau_run(tmp_path, vals, {"vocab_size": 50257}))
    assert f.facts["mode"] == "chance" and f.facts["ln_vocab"] == pytest.approx(lnv, rel=1e-4)
    assert f.facts["vocab_source"] == "configs/train.yaml:1"


def test_plateau_stuck_without_vocab(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    vals = [2.3 + 0.1 * rng.standard_normal() for _ in range(200)]
    [f] = check("loss.plateau", _plateau_run(tmp_path, vals))
    assert f.facts["mode"] == "stuck"


def test_plateau_converged_run_is_quiet(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    vals = [10.8 * math.exp(-i / 15) + 2.0 + 0.05 * rng.standard_normal() for i in range(300)]
    assert check("loss.plateau", _plateau_run(tmp_path, vals, {"vocab_size": 50257})) == []
    assert check("loss.plateau", _plateau_run(tmp_path, vals)) == []


def test_plateau_noisy_but_improving_is_quiet(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    vals = [3.0 - 0.003 * i + 0.4 * rng.standard_normal() for i in range(300)]
    assert check("loss.plateau", _plateau_run(tmp_path, vals)) == []


def test_plateau_too_short_not_evaluated(tmp_path: Path) -> None:
    with pytest.raises(NotEvaluated):
        check("loss.plateau", _plateau_run(tmp_path, [3.0] * 5))


# ----------------------------------------------------------------------------- lr.floor


def _cosine(n: int, peak: float, floor: float, warm: int = 10) -> list[float]:
    out = []
    for i in range(n):
        if i < warm:
            out.append(peak * (i + 1) / warm)
        else:
            p = (i - warm) / max(1, n - 1 - warm)
            out.append(peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p))))
    return out


def test_lr_floor_cosine_with_floor(tmp_path: Path) -> None:
    steps = [10 * (i + 1) for i in range(100)]
    lr = _cosine(100, 2e-4, 0.1)
    run = fake_run(tmp_path, tb={"learning_rate": rows(steps, lr)},
                   config={"learning_rate": 2e-4, "lr_scheduler_type": "cosine", "min_lr": 0.0},
                   trainer_max_steps=1000)
    [f] = check("lr.floor", run)
    assert f.facts["ratio"] == pytest.approx(0.1, rel=0.05)
    assert f.facts["configured_min_source"] == "configs/train.yaml:3"


def test_lr_floor_scheduler_default_zero(tmp_path: Path) -> None:
    steps = [10 * (i + 1) for i in range(100)]
    run = fake_run(tmp_path, tb={"lr": rows(steps, _cosine(100, 1e-3, 0.1))},
                   config={"lr_scheduler_type": "cosine"}, trainer_max_steps=1000)
    [f] = check("lr.floor", run)
    assert f.facts["configured_min_ratio"] == 0.0 and f.facts["schedule_type"] == "cosine"


def test_lr_floor_intended_min_is_quiet(tmp_path: Path) -> None:
    steps = [10 * (i + 1) for i in range(100)]
    run = fake_run(tmp_path, tb={"lr": rows(steps, _cosine(100, 1e-3, 0.1))},
                   config={"learning_rate": 1e-3, "min_lr": 1e-4, "lr_scheduler_type": "cosine"},
                   trainer_max_steps=1000)
    assert check("lr.floor", run) == []


def test_lr_floor_decay_to_zero_is_quiet(tmp_path: Path) -> None:
    steps = [10 * (i + 1) for i in range(100)]
    run = fake_run(tmp_path, tb={"lr": rows(steps, _cosine(100, 1e-3, 0.0))},
                   config={"lr_scheduler_type": "cosine"}, trainer_max_steps=1000)
    assert check("lr.floor", run) == []


def test_lr_floor_nanochat_lrm(tmp_path: Path) -> None:
    steps = list(range(0, 1000, 10))
    lrm = [1.0 if s < 600 else max(0.1, 1.0 - (s - 600) / 300) for s in steps]
    run = fake_run(tmp_path, tb={"lrm": rows(steps, lrm)}, config={"final_lr_frac": 0.0}, trainer_max_steps=1000)
    [f] = check("lr.floor", run)
    assert f.facts["metric"] == "lr_multiplier" and f.facts["observed_floor"] == pytest.approx(0.1)


def test_lr_floor_unknown_end_not_evaluated(tmp_path: Path) -> None:
    steps = [10 * (i + 1) for i in range(50)]
    run = fake_run(tmp_path, tb={"lr": rows(steps, _cosine(100, 1e-3, 0.0)[:50])})
    with pytest.raises(NotEvaluated):
        check("lr.floor", run)


# ----------------------------------------------------------------------------- lr.mismatch


def test_lr_mismatch_warmup_longer_than_run(tmp_path: Path) -> None:
    steps = list(range(1, 201))
    lr = [2e-4 * s / 400_000 for s in steps]  # warmup of 400k steps: 1e-7 at step 200
    run = fake_run(tmp_path, tb={"train/learning_rate": rows(steps, lr)},
                   config={"learning_rate": 2e-4, "warmup_steps": 400_000}, trainer_max_steps=50_000)
    [f] = check("lr.mismatch", run)
    assert f.facts["configured"] == 2e-4 and f.facts["observed_max"] == pytest.approx(1e-7)
    assert f.facts["warmup_longer_than_run"] is True
    assert f.facts["configured_source"] == "configs/train.yaml:1"


def test_lr_mismatch_scale(tmp_path: Path) -> None:
    steps = list(range(1, 201))
    run = fake_run(tmp_path, tb={"lr": rows(steps, [3e-6] * 200)}, config={"learning_rate": 3e-4},
                   trainer_max_steps=200)
    [f] = check("lr.mismatch", run)
    assert f.facts["ratio"] == pytest.approx(0.01)
    assert "warmup_longer_than_run" not in f.facts


def test_lr_mismatch_matching_lr_is_quiet(tmp_path: Path) -> None:
    steps = list(range(1, 201))
    run = fake_run(tmp_path, tb={"lr": rows(steps, _cosine(200, 3e-4, 0.0))},
                   config={"learning_rate": 3e-4, "warmup_steps": 10}, trainer_max_steps=200)
    assert check("lr.mismatch", run) == []


def test_lr_mismatch_without_config_not_evaluated(tmp_path: Path) -> None:
    run = fake_run(tmp_path, tb={"lr": rows(range(1, 20), [1e-4] * 19)})
    with pytest.raises(NotEvaluated):
        check("lr.mismatch", run)


# ----------------------------------------------------------------------------- checkpoints


def test_retention_over_limit_with_enospc_is_critical(tmp_path: Path) -> None:
    cps = [ckpt(s) for s in range(1000, 10000, 1000)]
    scan = log_scan("train.log", lines=["SafetensorError: Error while serializing: I/O error: No space left on device "
                                        "(os error 28)"])
    disk = DiskUsage(28 * GB, 27 * GB, 100 * GB, 1 * GB, 99 * GB)
    run = fake_run(tmp_path, logs=[scan], checkpoints=cps, disk=disk,
                   config={"save_total_limit": 3, "save_steps": 1000}, trainer_max_steps=28000)
    [f] = check("checkpoint.retention", run)
    assert f.severity is Severity.CRITICAL
    assert f.facts["count"] == 9 and f.facts["limit"] == 3 and f.facts["limit_source"] == "configs/train.yaml:1"
    assert f.facts["bytes_per_checkpoint"] == 3 * GB and f.facts["disk_full_seen"] is True
    # 100 GB volume, 72 GB used by other files: 28 GB of room = 9 saves of 3 GB -> the 10th save fails.
    assert f.facts["forecast_fill_step"] == 10000


def test_retention_forecast_warning(tmp_path: Path) -> None:
    cps = [ckpt(s, 2_900_000_000) for s in (1000, 2000)]
    disk = DiskUsage(6 * GB, int(5.8 * GB), 100 * GB, int(74.2 * GB), int(25.8 * GB))
    run = fake_run(tmp_path, checkpoints=cps, disk=disk, config={"save_steps": 1000}, trainer_max_steps=50000)
    [f] = check("checkpoint.retention", run)
    assert f.severity is Severity.WARNING and f.facts["limit"] is None
    assert f.facts["forecast_fill_step"] == 1000 + int((100 - 20) * GB // 2_900_000_000) * 1000


def test_retention_within_limit_is_quiet(tmp_path: Path) -> None:
    cps = [ckpt(s, 1 * GB) for s in (8000, 9000)]
    disk = DiskUsage(2 * GB, 2 * GB, 1000 * GB, 900 * GB, 100 * GB)
    run = fake_run(tmp_path, checkpoints=cps, disk=disk, config={"save_total_limit": 2}, trainer_max_steps=10000)
    assert check("checkpoint.retention", run) == []


def test_corrupt_points_to_latest_valid(tmp_path: Path) -> None:
    cps = [ckpt(8000), ckpt(9000, ok=False, problem="header says 2.1 GB of tensors, file has 0.4 GB")]
    run = fake_run(tmp_path, checkpoints=cps)
    [f] = check("checkpoint.corrupt", run)
    assert f.facts["latest_valid_checkpoint"] == "checkpoint-8000" and f.severity is Severity.ERROR
    assert f.evidence[0].detail == "header says 2.1 GB of tensors, file has 0.4 GB"


def test_corrupt_skips_in_progress(tmp_path: Path) -> None:
    bad = Checkpoint("checkpoint-9000", "hf", 9000, (), 10, NOW, (), ("truncated",), in_progress=True)
    run = fake_run(tmp_path, checkpoints=[ckpt(8000), bad])
    assert check("checkpoint.corrupt", run) == []


def test_gap_after_crash(tmp_path: Path) -> None:
    steps = list(range(0, 9001, 100))
    tb = {"loss": [(s, 2.0, 1_700_000_000 + 3.6 * s) for s in steps]}
    scan = log_scan("train.log", lines=["Traceback (most recent call last):", "RuntimeError: boom"])
    run = fake_run(tmp_path, tb=tb, logs=[scan], checkpoints=[ckpt(6000)], config={"save_steps": 1000},
                   trainer_max_steps=28000)
    [f] = check("checkpoint.gap", run)
    assert f.facts["steps_lost"] == 3000 and f.facts["seconds_lost"] == pytest.approx(10800, rel=1e-3)
    assert f.facts["missed_saves"] == 3


def test_gap_quiet_for_finished_run(tmp_path: Path) -> None:
    tb = {"loss": [(s, 2.0, 1_700_000_000 + s) for s in range(0, 10001, 100)]}
    run = fake_run(tmp_path, tb=tb, checkpoints=[ckpt(5000)], trainer_max_steps=10000)
    assert check("checkpoint.gap", run) == []


# ----------------------------------------------------------------------------- log / run state


def test_log_empty_hang_with_older_artifacts(tmp_path: Path) -> None:
    arts = [Artifact("training_clean_final.log", ArtifactKind.LOG, 0, NOW - 600),
            Artifact("training_fixed.log", ArtifactKind.LOG, 184, NOW - 6000),
            Artifact("tb/events.out.tfevents.1.host", ArtifactKind.TFEVENTS, 1000, NOW - 20000)]
    logs = [log_scan("training_clean_final.log", size=0),
            log_scan("training_fixed.log", size=184, lines=[
                "Token indices sequence length is longer than the specified maximum sequence length for this model "
                "(1249 > 1024). Running this sequence through the model will result in indexing errors"])]
    run = fake_run(tmp_path, logs=logs, artifacts=arts,
                   config={"launch_uses_nohup": True, "python_unbuffered": False})
    [f] = check("log.empty", run)  # one finding: the newest log; earlier attempts are listed
    assert f.facts["path"] == "training_clean_final.log"
    assert f.facts["other_contentless_logs"] == ["training_fixed.log"]
    assert f.facts["size_bytes"] == 0 and f.facts["buffering_suspected"] is True
    assert "older than the log" in f.message and f.severity is Severity.ERROR


def test_log_empty_quiet_when_other_log_has_steps(tmp_path: Path) -> None:
    arts = [Artifact("attempt_0/0/stderr.log", ArtifactKind.LOG, 0, NOW - 100),
            Artifact("attempt_0/0/stdout.log", ArtifactKind.LOG, 5000, NOW - 100)]
    logs = [log_scan("attempt_0/0/stderr.log", size=0),
            log_scan("attempt_0/0/stdout.log", size=5000, lines=["step 10 | loss 2.3"],
                     series=[SeriesPoint("loss", 10, 2.3, 1)])]
    assert check("log.empty", fake_run(tmp_path, logs=logs, artifacts=arts)) == []


def test_stalled_log_newer_than_progress(tmp_path: Path) -> None:
    tb = {"loss": [(s, 2.0, NOW - 20000 + s) for s in range(0, 201, 10)]}
    arts = [Artifact("train.log", ArtifactKind.LOG, 0, NOW - 600)]
    run = fake_run(tmp_path, tb=tb, logs=[log_scan("train.log", size=0)], artifacts=arts, trainer_max_steps=50000)
    [f] = check("run.stalled", run)
    assert f.facts["last_step"] == 200 and f.facts["steps_remaining"] == 49800


def test_stalled_quiet_when_crashed_or_recent(tmp_path: Path) -> None:
    tb = {"loss": [(s, 2.0, NOW - 60 + s / 10) for s in range(0, 201, 10)]}
    assert check("run.stalled", fake_run(tmp_path, tb=tb, trainer_max_steps=1000)) == []
    old = {"loss": [(s, 2.0, NOW - 90000 + s) for s in range(0, 201, 10)]}
    scan = log_scan("train.log", lines=["Traceback (most recent call last):", "ValueError: bad"])
    assert check("run.stalled", fake_run(tmp_path, tb=old, logs=[scan], trainer_max_steps=1000)) == []


def _hit(name: str, text: str, line: int = 5) -> Hit:
    return Hit(f"run.incomplete/{name}", "slurm-1.out", line, 0, text, {})


def test_incomplete_slurm_time_limit(tmp_path: Path) -> None:
    tb = {"loss": [(s, 2.0, NOW - 90000 + s) for s in range(0, 4001, 100)]}
    line = "slurmstepd: error: *** JOB 42 ON gpu1 CANCELLED AT 2024-03-02T11:22:33 DUE TO TIME LIMIT ***"
    scan = log_scan("slurm-1.out", lines=[line])
    run = fake_run(tmp_path, tb=tb, logs=[scan], trainer_max_steps=10000)
    [f] = check("run.incomplete", run, {"slurm_time_limit": [_hit("slurm_time_limit", line)]})
    assert f.facts["termination"] == "scheduler time limit" and f.facts["fraction_done"] == 0.4


def test_incomplete_quiet_on_error_or_finished(tmp_path: Path) -> None:
    tb = {"loss": [(s, 2.0, NOW - 90000 + s) for s in range(0, 4001, 100)]}
    scan = log_scan("train.log", lines=["Traceback (most recent call last):", "torch.OutOfMemoryError: CUDA out"])
    assert check("run.incomplete", fake_run(tmp_path, tb=tb, logs=[scan], trainer_max_steps=10000)) == []
    assert check("run.incomplete", fake_run(tmp_path, tb=tb, trainer_max_steps=4000)) == []


def test_incomplete_exit_143(tmp_path: Path) -> None:
    tb = {"loss": [(s, 2.0, NOW - 100 + s / 100) for s in range(0, 4001, 100)]}
    run = fake_run(tmp_path, tb=tb, exit_codes=[("exit_code", 143)], trainer_max_steps=10000)
    [f] = check("run.incomplete", run)
    assert f.facts["exit_code"] == 143 and f.facts["termination"] == "SIGTERM"


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


def test_all_my_cards_load_and_resolve() -> None:
    for rid in ("loss.nonfinite", "loss.spike", "loss.plateau", "lr.floor", "lr.mismatch", "checkpoint.retention",
                "checkpoint.corrupt", "checkpoint.gap", "log.empty", "run.stalled", "run.incomplete",
                "dist.straggler", "dist.divergence", "data.stall"):
        c = card(rid)
        assert c.id == rid and callable(resolve_check(c.check or ""))
    assert time.time() > 0


@pytest.mark.parametrize(("tag", "metric"), [
    ("lr_mult", "lr_multiplier"), ("lr_scale", "lr_multiplier"), ("lrm", "lr_multiplier"),
    ("train/lr_multiplier", "lr_multiplier"), ("lr", "lr"), ("lr_group0", "lr"), ("lr-AdamW", "lr"),
    ("train/learning_rate", "lr"), ("time", "step_time"), ("data_time", "data_time"), ("total_time", None),
])
def test_canonical_metric_multiplier_and_mmengine_time(tag: str, metric: str | None) -> None:
    from autopsy.metrics import canonical_metric

    assert canonical_metric(tag) == metric
