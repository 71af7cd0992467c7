"""Hand-made Reports and Run-like objects for the HTML report tests.

They mirror what the real parsers and rules produce (the same attribute names and frame
columns as :class:`autopsy.run.Run`) so the renderer is tested without the whole pipeline:
a disk-full run, a NaN run, an LR-floor run, a 4-rank straggler run and a hostile-log run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from autopsy.model import (
    Artifact,
    ArtifactKind,
    Confidence,
    Evidence,
    Finding,
    Outcome,
    OutcomeKind,
    ParseStatus,
    Report,
    ResumePlan,
    RunSummary,
    Severity,
)
from autopsy.parsers.types import Checkpoint, DiskUsage
from autopsy.run_frames import splits_of

XSS = "<script>alert(1)</script>"
TEMPLATE_INJECTION = "{{7*7}}"
GIB = 1024**3


@dataclass
class FakeRun:
    """The attributes of autopsy.run.Run that the HTML renderer reads."""

    root: Path
    scalars: pd.DataFrame
    checkpoint_list: list[Checkpoint] = field(default_factory=list)
    artifact_list: list[Artifact] = field(default_factory=list)
    disk: DiskUsage = field(default_factory=lambda: DiskUsage(10_000, 0, 100 * GIB, 40 * GIB, 60 * GIB))

    @property
    def latest_valid_checkpoint(self) -> Checkpoint | None:
        valid = [c for c in self.checkpoint_list if c.valid]
        return max(valid, key=lambda c: c.step or -1) if valid else None


def frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    """A scalars frame from (source, path, tag, metric, step, wall_time, value, rank) rows."""
    df = pd.DataFrame(rows, columns=["source", "path", "tag", "metric", "step", "wall_time", "value", "rank"])
    df.insert(4, "split", splits_of(df["tag"].astype(str), df["source"].astype(str)))
    df["step"] = df["step"].astype("Int64")
    df["rank"] = pd.to_numeric(df["rank"], errors="coerce").astype("Int64")
    df["wall_time"] = df["wall_time"].astype("float64")
    df["value"] = df["value"].astype("float64")
    df["source"] = df["source"].astype("category")
    return df


def series_rows(source: str, path: str, tag: str, metric: str, steps: Any, values: Any,
                rank: int | None = None, t0: float = 1.7e9, dt: float = 1.0) -> list[tuple[Any, ...]]:
    return [(source, path, tag, metric, int(s), t0 + float(s) * dt, float(v), rank)
            for s, v in zip(steps, values, strict=True)]


def write_log(root: Path, name: str, lines: dict[int, str], n_lines: int) -> None:
    """A log whose line N holds ``lines[N]`` (others are ordinary progress lines)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / name, "w", encoding="utf-8") as fh:
        for no in range(1, n_lines + 1):
            fh.write(lines.get(no, f"{{'loss': {2.0 + 1 / no:.4f}, 'learning_rate': 0.0002, 'epoch': {no / 100:.2f}}}")
                     + "\n")


def _summary(path: str, **kw: Any) -> RunSummary:
    return RunSummary(path=path, **kw)


def _ckpt(step: int, size: int, *, problems: tuple[str, ...] = ()) -> Checkpoint:
    return Checkpoint(path=f"checkpoint-{step}", layout="hf", step=step, files=(), bytes=size,
                      mtime=1.7e9 + step, problems=problems)


# ----------------------------------------------------------------------- disk full


def disk_full(root: Path) -> tuple[Report, FakeRun]:
    write_log(root, "train.log", {
        118: "Saving model checkpoint to out/checkpoint-9000",
        120: "safetensors_rust.SafetensorError: Error while serializing: I/O error: No space left on device "
             "(os error 28)",
    }, 130)
    steps = np.arange(0, 9001, 10)
    loss = 3.0 * np.exp(-steps / 3000) + 1.2
    lr = np.where(steps < 500, steps / 500 * 2e-4, 2e-4 * (0.5 * (1 + np.cos(np.pi * steps / 10000))))
    rows = (series_rows("tensorboard", "runs/events.out.tfevents.1", "train/loss", "loss", steps, loss)
            + series_rows("trainer_state", "checkpoint-8000/trainer_state.json", "loss", "loss", steps[steps <= 8000],
                          loss[steps <= 8000])
            + series_rows("tensorboard", "runs/events.out.tfevents.1", "train/learning_rate", "lr", steps, lr)
            + series_rows("tensorboard", "runs/events.out.tfevents.1", "eval/loss", "eval_loss",
                          steps[::50], loss[::50] + 0.1))
    cps = [_ckpt(s, int(2.9 * GIB)) for s in range(1000, 9000, 1000)]
    cps.append(_ckpt(9000, int(0.4 * GIB), problems=("model.safetensors: header says 2.1 GB of tensors, file has "
                                                     "0.4 GB",)))
    run = FakeRun(root, frame(rows), cps, artifact_list=[
        Artifact("train.log", ArtifactKind.LOG, 12_000, 1.7e9),
        Artifact("runs/events.out.tfevents.1", ArtifactKind.TFEVENTS, 80_000, 1.7e9),
        Artifact("checkpoint-9000/model.safetensors", ArtifactKind.CHECKPOINT_FILE, int(0.4 * GIB), 1.7e9,
                 ParseStatus.TRUNCATED, "header says 2.1 GB, file has 0.4 GB"),
    ])
    findings = (
        Finding("disk.full", Severity.CRITICAL, Confidence.HIGH, "Disk full while saving a checkpoint",
                "The checkpoint save at step 9000 failed with ENOSPC (No space left on device).",
                facts={"errno": 28, "path": "out/checkpoint-9000", "checkpoint_bytes": 23.6 * GIB},
                evidence=(Evidence(path="train.log", line=120, excerpt="safetensors_rust.SafetensorError: Error while "
                                   "serializing: I/O error: No space left on device (os error 28)"),),
                key="disk.full", primary=True, step=9000, wall_time=1.7e9 + 9000),
        Finding("checkpoint.retention", Severity.CRITICAL, Confidence.HIGH, "More checkpoints kept than the limit",
                "9 checkpoints on disk while save_total_limit is 3; the volume fills at step ~9100.",
                facts={"count": 9, "limit": 3, "bytes_per_checkpoint": 2.9 * GIB, "cadence_steps": 1000,
                       "volume_bytes": 30 * GIB, "forecast_fill_step": 9100},
                evidence=(Evidence(path="configs/train.yaml", line=12, excerpt="save_total_limit: 3"),),
                key="retention", explained_by=None),
        Finding("checkpoint.corrupt", Severity.ERROR, Confidence.HIGH, "Checkpoint cannot be resumed from",
                "checkpoint-9000/model.safetensors is truncated; resume from checkpoint-8000 instead.",
                facts={"checkpoint": "checkpoint-9000", "latest_valid": "checkpoint-8000"},
                evidence=(Evidence(path="checkpoint-9000/model.safetensors",
                                   detail="header says 2.1 GB of tensors, file has 0.4 GB"),),
                key="checkpoint-9000", explained_by="disk.full", step=9000),
    )
    summary = _summary(str(root), last_step=9000, max_steps=20000, latest_valid_checkpoint="checkpoint-8000",
                       latest_valid_step=8000, steps_lost=1000, seconds_lost=3720.0,
                       resume_hint="python train.py --resume checkpoint-8000", failure_time=1.7e9 + 9000,
                       resume=ResumePlan(cwd=str(root), checkpoint="checkpoint-8000",
                                         command="python train.py --resume checkpoint-8000", script="train.py",
                                         option="--resume", verified=True, source="train.py"))
    outcomes = (
        *(Outcome(f.rule, OutcomeKind.FIRED, (f,)) for f in findings),
        Outcome("loss.plateau", OutcomeKind.NOT_FIRED),
        Outcome("dist.straggler", OutcomeKind.NOT_EVALUATED, reason="no per-rank logs found"),
    )
    return Report(summary, findings, outcomes, tuple(run.artifact_list), autopsy_version="0.1.0"), run


# ----------------------------------------------------------------------- NaN loss


def nan_loss(root: Path) -> tuple[Report, FakeRun]:
    write_log(root, "train.log", {40: "{'loss': nan, 'grad_norm': nan, 'learning_rate': 0.5, 'epoch': 0.4}"}, 60)
    steps = np.arange(1, 401)
    loss = 4.0 - steps / 200.0
    loss[steps >= 312] = np.nan
    loss[steps == 330] = np.inf
    gn = np.full(len(steps), 1.5)
    gn[steps == 300] = 950.0
    gn[steps >= 312] = np.nan
    rows = (series_rows("tensorboard", "runs/ev", "train/loss", "loss", steps, loss)
            + series_rows("log", "train.log", "grad_norm", "grad_norm", steps, gn))
    run = FakeRun(root, frame(rows), [_ckpt(200, 50_000_000)])
    findings = (
        Finding("loss.nonfinite", Severity.ERROR, Confidence.HIGH, "Loss became NaN",
                "Loss is NaN from step 312 on; grad norm exploded to 950 at step 300 just before.",
                facts={"first_nonfinite_step": 312, "last_finite_loss": 2.445, "metric": "loss"},
                evidence=(Evidence(path="train.log", line=40, excerpt="{'loss': nan, 'grad_norm': nan}"),
                          Evidence(path="runs/ev", tag="train/loss", step=312)),
                key="loss", primary=True, step=312),
        Finding("loss.spike", Severity.WARNING, Confidence.MEDIUM, "Gradient norm spike",
                "Grad norm reached 950 at step 300, 633x its running median of 1.5.",
                facts={"metric": "grad_norm", "value": 950.0, "running_median": 1.5, "ratio_to_median": 633.3},
                evidence=(Evidence(path="train.log", tag="grad_norm", step=300),),
                key="grad_norm", explained_by=None, step=300),
    )
    summary = _summary(str(root), last_step=400, max_steps=1000, latest_valid_checkpoint="checkpoint-200",
                       latest_valid_step=200, steps_lost=200)
    return Report(summary, findings, autopsy_version="0.1.0"), run


# ----------------------------------------------------------------------- LR floor


def lr_floor(root: Path) -> tuple[Report, FakeRun]:
    steps = np.arange(0, 5000, 5)
    peak = 3e-4
    lr = peak * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * np.minimum(steps, 4000) / 4000)))
    loss = 2.5 + 0.8 * np.exp(-steps / 600) + 0.02 * np.sin(steps / 7.0)
    rows = (series_rows("tensorboard", "tb/ev", "lr-AdamW", "lr", steps, lr)
            + series_rows("tensorboard", "tb/ev", "train/loss", "loss", steps, loss)
            + series_rows("log", "train.log", "tok/s", "throughput", steps[::4],
                          52_000 + 900 * np.sin(steps[::4] / 90)))
    run = FakeRun(root, frame(rows))
    findings = (
        Finding("lr.floor", Severity.ERROR, Confidence.HIGH, "LR schedule stops at 10% of its peak",
                "The LR never goes below 3e-05 (10% of peak 3e-04) while the config asks for min_lr 0.",
                facts={"observed_floor": 3e-5, "configured_min": 0.0, "peak_lr": 3e-4, "floor_ratio": 0.1},
                evidence=(Evidence(path="tb/ev", tag="lr-AdamW", step=4000, step_end=4995),
                          Evidence(path="configs/train.yaml", line=7, excerpt="min_lr: 0.0")),
                key="lr", primary=True, step=4000),
        Finding("loss.plateau", Severity.WARNING, Confidence.LOW, "Loss stopped improving",
                "Loss moved less than 0.5% between steps 3000 and 4995.",
                facts={"window_start": 3000, "window_end": 4995, "slope_per_kstep": -0.001},
                key="loss", step=None),
    )
    return Report(_summary(str(root), last_step=4995, max_steps=5000), findings, autopsy_version="0.1.0"), run


# ----------------------------------------------------------------------- ranks


def stragglers(root: Path) -> tuple[Report, FakeRun]:
    rows: list[tuple[Any, ...]] = []
    steps = np.arange(0, 500, 10)
    for rank in range(4):
        slow = 1.9 if rank == 2 else 1.0
        rows += series_rows("log", f"logs/rank{rank}.log", "loss", "loss", steps, 3 - steps / 400, rank=rank,
                            dt=0.5 * slow)
    run = FakeRun(root, frame(rows))
    finding = Finding("dist.straggler", Severity.WARNING, Confidence.MEDIUM, "Rank 2 is a straggler",
                      "Rank 2 takes 1.9x the median step time of the other ranks.",
                      facts={"rank": 2, "ratio_to_median": 1.9}, key="rank2", primary=True)
    return Report(_summary(str(root), last_step=490), (finding,), autopsy_version="0.1.0"), run


# ----------------------------------------------------------------------- hostile text


def hostile(root: Path) -> tuple[Report, FakeRun]:
    """Log text, tags and facts that try to run script or templates in the report."""
    write_log(root, "train.log", {5: f"epoch 1 {XSS} {TEMPLATE_INJECTION} \x1b[31mred\x1b[0m"}, 10)
    steps = np.arange(0, 3000)
    rng = np.random.default_rng(0)
    values = 2 + 0.01 * rng.standard_normal(len(steps))
    rows = series_rows("log", "train.log", f"loss</script>{XSS}", "loss", steps, values)
    run = FakeRun(root, frame(rows), artifact_list=[Artifact(f"weird{XSS}.log", ArtifactKind.LOG, 10, 1.7e9,
                                                             ParseStatus.UNREADABLE, TEMPLATE_INJECTION)])
    finding = Finding("crash.exception", Severity.CRITICAL, Confidence.MEDIUM, f"ValueError {XSS}",
                      f"Raised {TEMPLATE_INJECTION} {XSS}",
                      facts={"exc_type": XSS, "message": TEMPLATE_INJECTION, "nan": math.nan},
                      evidence=(Evidence(path="train.log", line=5, excerpt=f"{XSS} {TEMPLATE_INJECTION}"),
                                Evidence(path="../outside.log", line=1, excerpt=XSS)),
                      key="x", primary=True, step=1500)
    return Report(_summary(str(root), last_step=2999), (finding,), tuple(run.artifact_list),
                  problems=(f"weird{XSS}.log: {TEMPLATE_INJECTION}",), autopsy_version="0.1.0"), run


SAMPLES = {"disk_full": disk_full, "nan_loss": nan_loss, "lr_floor": lr_floor, "stragglers": stragglers,
           "hostile": hostile}
