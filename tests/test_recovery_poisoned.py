"""Recovery after a non-finite loss: checkpoints saved after the first NaN are poisoned,
and the resume command is the run's own launch command with the resume flag."""

from __future__ import annotations

import json
import math
from pathlib import Path

import autopsy
from autopsy.report.html import render_html
from autopsy.report.markdown import render_markdown
from autopsy.report.terminal import render_terminal
from tests.builders import torch_like_zip_entries, write_safetensors, write_tfevents, write_zip


def _loss_rows(nan_at: int, end: int) -> list[tuple[str, int, float]]:
    return [("train/loss", s, 2.0 - s / 10_000 if s < nan_at else math.nan) for s in range(0, end + 1, 50)]


def _lightning_run(root: Path, ckpt_steps: tuple[int, ...]) -> Path:
    write_tfevents(root / "lightning_logs/version_0/events.out.tfevents.1.host", _loss_rows(1100, 1250))
    for i, step in enumerate(ckpt_steps):
        write_zip(root / f"checkpoints/epoch={i}-step={step}.ckpt", torch_like_zip_entries())
    return root


def test_only_checkpoint_after_nan_is_not_resumable(tmp_path: Path) -> None:
    report = autopsy.analyze(_lightning_run(tmp_path / "run", (1200,)))
    assert report.primary is not None and report.primary.rule == "loss.nonfinite"
    run = report.run
    assert run.latest_valid_checkpoint is None
    assert run.resume_hint is None
    assert run.poisoned_checkpoints == ("checkpoints/epoch=0-step=1200.ckpt",)
    text = render_terminal(report)
    assert "epoch=0-step=1200.ckpt (step 1,200)" not in text.split("Recovery", 1)[1].split("\n")[1]
    assert "no clean checkpoint" in text and "step 1,100" in text
    md = render_markdown(report)
    assert "no clean checkpoint" in md.lower()
    assert "Resume from a checkpoint saved before step" not in md
    assert "no clean checkpoint" in render_html(report)
    data = json.loads(report.to_json())
    assert data["run"]["poisoned_checkpoints"] == ["checkpoints/epoch=0-step=1200.ckpt"]
    assert data["run"]["latest_valid_checkpoint"] is None


def test_clean_checkpoint_before_nan_is_chosen(tmp_path: Path) -> None:
    report = autopsy.analyze(_lightning_run(tmp_path / "run", (1000, 1200)))
    run = report.run
    assert run.latest_valid_checkpoint == "checkpoints/epoch=0-step=1000.ckpt"
    assert run.latest_valid_step == 1000
    assert run.poisoned_checkpoints == ("checkpoints/epoch=1-step=1200.ckpt",)
    assert "no clean checkpoint" not in render_terminal(report)
    assert "epoch=1-step=1200.ckpt" in render_terminal(report)  # named as poisoned


def test_no_nan_keeps_latest_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "run"
    write_tfevents(root / "events.out.tfevents.1.host", [("train/loss", s, 2.0 - s / 1e4) for s in range(0, 1250, 50)])
    write_zip(root / "checkpoints/epoch=0-step=1200.ckpt", torch_like_zip_entries())
    run = autopsy.analyze(root).run
    assert run.latest_valid_step == 1200
    assert run.poisoned_checkpoints == ()


def test_launch_script_gives_full_resume_command(tmp_path: Path) -> None:
    root = tmp_path / "run"
    (root / "out/checkpoint-1500").mkdir(parents=True)
    (root / "out/checkpoint-1500/trainer_state.json").write_text(json.dumps({"global_step": 1500, "log_history": []}))
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        write_zip(root / "out/checkpoint-1500" / name, torch_like_zip_entries())
    write_safetensors(root / "out/checkpoint-1500/model.safetensors", {"w": ["F32", [4, 4]]})
    (root / "run.sh").write_text("#!/bin/bash\ntorchrun --nproc_per_node 8 train.py \\\n  --output_dir out --lr 3e-4\n")
    (root / "train.log").write_text("step 1600\nTraceback (most recent call last):\n"
                                    "  File \"train.py\", line 3, in <module>\n"
                                    "RuntimeError: boom\n")
    # train.py is not in the run directory: its flags are unknown, so none is invented
    report = autopsy.analyze(root)
    assert report.run.resume_hint is None, render_terminal(report)
    (root / "train.py").write_text("import argparse\np = argparse.ArgumentParser()\np.add_argument('--output_dir')\n"
                                   "p.add_argument('--lr', type=float)\np.add_argument('--resume_from_checkpoint')\n"
                                   "a = p.parse_args()\nprint(a.resume_from_checkpoint)\n")
    hint = autopsy.analyze(root).run.resume_hint
    assert hint == ("torchrun --nproc_per_node 8 train.py --output_dir out --lr 3e-4 "
                    "--resume_from_checkpoint out/checkpoint-1500")


def _keras_like_run(root: Path, *, best_after_nan: bool) -> Path:
    """Keras' layout: CSVLogger rows (the last one NaN), a .keras per epoch, a step-less best.weights.h5."""
    import os

    root.mkdir(parents=True)
    (root / "training.log").write_text("epoch,loss,val_loss\n0,0.9,0.8\n1,0.7,0.6\n2,nan,nan\n")
    ck = root / "checkpoints"
    for epoch in (1, 2):
        write_zip(ck / f"model_{epoch:02d}.keras", {"config.json": b"{}", "model.weights.h5": b"\x89HDF\r\n"})
    (ck / "best.weights.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(512))
    t0 = 1_790_000_000.0  # real-looking, spread mtimes: the run's own (epochs a minute apart)
    for i, name in enumerate(("checkpoints/model_01.keras", "checkpoints/model_02.keras", "training.log")):
        os.utime(root / name, (t0 + 60 * i, t0 + 60 * i))
    best = t0 + 200 if best_after_nan else t0 + 30  # after / before the CSV row holding the NaN
    os.utime(ck / "best.weights.h5", (best, best))
    return root


def test_a_step_less_checkpoint_written_after_the_nan_is_poisoned(tmp_path: Path) -> None:
    from autopsy.run import LoadOptions

    run_dir = _keras_like_run(tmp_path / "after", best_after_nan=True)
    report = autopsy.analyze(run_dir, options=LoadOptions(now=1_790_000_000.0 + 7200))
    assert report.primary is not None and report.primary.rule == "loss.nonfinite"
    assert "checkpoints/best.weights.h5" in report.run.poisoned_checkpoints
    before = _keras_like_run(tmp_path / "before", best_after_nan=False)
    report = autopsy.analyze(before, options=LoadOptions(now=1_790_000_000.0 + 7200))
    assert report.run.latest_valid_checkpoint == "checkpoints/best.weights.h5"  # written before any NaN


def test_generated_keras_nan_run_offers_no_checkpoint_saved_after_the_nan(tmp_path: Path) -> None:
    from fixture_runs import pinned_copy, pinned_now

    from autopsy.run import LoadOptions

    run_dir = pinned_copy("keras_nan", tmp_path)
    report = autopsy.analyze(run_dir, options=LoadOptions(now=pinned_now("keras_nan")))
    assert report.run.latest_valid_checkpoint is None
    assert set(report.run.poisoned_checkpoints) == {"checkpoints/model_01.keras", "checkpoints/best.weights.h5"}
