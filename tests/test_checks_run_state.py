"""Unit tests of the checkpoint.*, log.empty and run.* checks on fake runs (see fake_runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_runs import GB, NOW, check, ckpt, fake_run, log_scan

from autopsy.model import Artifact, ArtifactKind, Severity
from autopsy.parsers.types import Checkpoint, DiskUsage, Hit, SeriesPoint

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


def test_incomplete_time_limit_mid_save_names_the_checkpoint_it_cut(tmp_path: Path) -> None:
    """A recorded stop whose run's newest checkpoint is half-written: it cut that save (error, not warning)."""
    tb = {"loss": [(s, 2.0, NOW - 90000 + s) for s in range(0, 4001, 100)]}
    line = "timeout: sending signal TERM to command \u2018python\u2019"
    scan = log_scan("train.log", lines=[line])
    cut = [ckpt(3000), ckpt(4000, missing=["optimizer.pt", "trainer_state.json"])]
    run = fake_run(tmp_path, tb=tb, logs=[scan], checkpoints=cut, trainer_max_steps=10000)
    [f] = check("run.incomplete", run, {"timeout_124": [_hit("timeout_124", line)]})
    assert f.severity is Severity.ERROR and f.facts["interrupted_checkpoint"] == "checkpoint-4000"
    assert f.facts["latest_valid_checkpoint"] == "checkpoint-3000"
    assert "in the middle of saving checkpoint-4000" in f.message
    # Killed after a complete save: the stop cost no checkpoint, it stays a warning.
    whole = fake_run(tmp_path, tb=tb, logs=[scan], checkpoints=[ckpt(3000), ckpt(4000)], trainer_max_steps=10000)
    [g] = check("run.incomplete", whole, {"timeout_124": [_hit("timeout_124", line)]})
    assert g.severity is Severity.WARNING and "interrupted_checkpoint" not in g.facts
    # An older broken checkpoint with a complete newer one was not cut by this stop.
    old = fake_run(tmp_path, tb=tb, logs=[scan], checkpoints=[ckpt(3000, missing=["optimizer.pt"]), ckpt(4000)],
                   trainer_max_steps=10000)
    [h] = check("run.incomplete", old, {"timeout_124": [_hit("timeout_124", line)]})
    assert h.severity is Severity.WARNING
    # Nothing recorded the stop: the log just stops, and the partial checkpoint is left to checkpoint.corrupt.
    silent = fake_run(tmp_path, tb=tb, checkpoints=cut, trainer_max_steps=10000)
    [s] = check("run.incomplete", silent)
    assert s.severity is Severity.WARNING and "interrupted_checkpoint" not in s.facts


def _acc_ckpt(i: int, *, missing: tuple[str, ...] = ()) -> Checkpoint:
    return Checkpoint(f"checkpoints/checkpoint_{i}", "accelerate", None, (), 1000, NOW - 5000, missing)


def test_log_empty_with_a_save_cut_short_is_buffering_not_a_hang(tmp_path: Path) -> None:
    """The newest of a numbered series (accelerate checkpoint_<i>, no step inside) is half-written: the
    process ran as far as a save, so an empty log is buffered output (warning), not a hang before any print."""
    arts = [Artifact("train.log", ArtifactKind.LOG, 0, NOW - 5000)]
    cut = [_acc_ckpt(0), _acc_ckpt(1, missing=("random_states_0.pkl",))]
    run = fake_run(tmp_path, logs=[log_scan("train.log", size=0)], artifacts=arts, checkpoints=cut)
    [f] = check("log.empty", run)
    assert f.severity is Severity.WARNING and f.facts["partial_checkpoint"] == "checkpoints/checkpoint_1"
    assert f.facts["buffering_suspected"] is True and "saving checkpoints/checkpoint_1" in f.message
    # The series complete, or its broken member an older one: nothing says this process ever got going.
    for cps in ([_acc_ckpt(0), _acc_ckpt(1)], [_acc_ckpt(0, missing=("model.safetensors",)), _acc_ckpt(1)],
                [_acc_ckpt(0), Checkpoint("best.pt", "loose", None, (), 10, NOW - 5000, ("zip",))]):
        run = fake_run(tmp_path, logs=[log_scan("train.log", size=0)], artifacts=arts, checkpoints=cps)
        [g] = check("log.empty", run)
        assert g.severity is Severity.ERROR and "partial_checkpoint" not in g.facts, cps
