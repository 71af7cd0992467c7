"""``run.scalars`` on the generated runs of other frameworks (fixtures/gen/fixtures_frameworks.py):
each framework's own metric source gives rows, with the ``source`` it came from and the
``split`` its names or its file say. One row per (run, source, path, tag): the metric,
the split and the steps expected, read off the files the framework wrote.

Steps: Lightning's ``step`` column is the global step after the update; Keras' CSVLogger numbers
epochs from 0 and is read as epochs done (1..N, as the console prints them); MLflow and W&B
keep the step the loop passed (``range(max_steps)``: from 0).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from conftest import RUNS

# run, source, part of the path, tag, canonical metric (None: none), split, first step, last step, points
EXPECTED: list[tuple[str, str, str, str, str | None, str, int, int, int]] = [
    # Lightning CSVLogger (metrics.csv: train rows and val rows interleaved) and TensorBoardLogger
    ("lightning_clean", "csv", "logs/csv/version_0/metrics.csv", "train_loss_step", "loss", "train", 1, 49, 25),
    ("lightning_clean", "csv", "logs/csv/version_0/metrics.csv", "train_loss_epoch", "loss", "train", 9, 49, 5),
    ("lightning_clean", "csv", "logs/csv/version_0/metrics.csv", "val_loss", "eval_loss", "val", 9, 49, 5),
    ("lightning_clean", "csv", "logs/csv/version_0/metrics.csv", "val_acc", None, "val", 9, 49, 5),
    ("lightning_clean", "tensorboard", "logs/tb/version_0/events.out", "val_loss", "eval_loss", "val", 9, 49, 5),
    ("lightning_nan", "csv", "logs/csv/version_0/metrics.csv", "train_loss_step", "loss", "train", 1, 29, 15),
    ("lightning_nan", "csv", "logs/csv/version_0/metrics.csv", "val_loss", "eval_loss", "val", 9, 29, 3),
    # Lightning's TQDM bar in the log (postfix, each step drawn twice; the loggers' files removed):
    # bar steps are n (epoch x 10 + n), the epoch mean appears from the epoch's last bar on
    ("lightning_bar_nan", "log", "train.log", "train_loss_step", "loss", "train", 1, 30, 30),
    ("lightning_bar_nan", "log", "train.log", "train_loss_epoch", "loss", "train", 10, 30, 21),
    # Lightning's Rich bar: one last frame, its metrics wrapped under it; step = epoch x 10 + n
    ("lightning_rich_nan", "log", "train.log", "train_loss_step", "loss", "train", 30, 30, 1),
    # Keras CSVLogger ("training.log") and the fit() console lines (verbose=2)
    ("keras_clean", "csv", "training.log", "loss", "loss", "train", 1, 5, 5),
    ("keras_clean", "csv", "training.log", "val_loss", "eval_loss", "val", 1, 5, 5),
    ("keras_clean", "csv", "training.log", "val_mae", None, "val", 1, 5, 5),
    ("keras_clean", "log", "console.log", "loss", "loss", "train", 1, 5, 5),
    ("keras_clean", "log", "console.log", "val_loss", "eval_loss", "val", 1, 5, 5),
    ("keras_nan", "csv", "training.log", "val_loss", "eval_loss", "val", 1, 1, 1),
    # Keras 3's Progbar (verbose=1, backspaces and ANSI): the epoch's last redraw and its summary
    ("keras_progbar_nan", "log", "console.log", "val_loss", "eval_loss", "val", 1, 1, 1),
    # MLflow file store: mlruns/<experiment>/<run>/metrics/<name>
    ("mlflow_clean", "mlflow", "/metrics/train_loss", "train_loss", "loss", "train", 0, 79, 80),
    ("mlflow_clean", "mlflow", "/metrics/val_loss", "val_loss", "eval_loss", "val", 19, 79, 4),
    ("mlflow_clean", "mlflow", "/metrics/grad_norm", "grad_norm", "grad_norm", "", 0, 79, 80),
    ("mlflow_nan", "mlflow", "/metrics/val_loss", "val_loss", "eval_loss", "val", 19, 79, 4),
    # W&B offline: the history records of run-<id>.wandb, read without the SDK
    ("wandb_clean", "wandb", ".wandb", "train/loss", "loss", "train", 0, 59, 60),
    ("wandb_clean", "wandb", ".wandb", "train/lr", "lr", "train", 0, 59, 60),
    ("wandb_clean", "wandb", ".wandb", "eval/loss", "eval_loss", "eval", 19, 59, 3),
    ("wandb_eval_crash", "wandb", ".wandb", "train/loss", "loss", "train", 0, 19, 20),
    # accelerate and nanoGPT write no metric file: their own source is the printed log
    ("accelerate_clean", "log", "train.log", "loss", "loss", "", 5, 60, 12),
    ("accelerate_clean", "log", "train.log", "lr", "lr", "", 5, 60, 12),
    ("nanogpt_clean", "log", "train.log", "loss", "loss", "train", 0, 95, 20),
    ("nanogpt_clean", "log", "train.log", "val loss", "eval_loss", "val", 0, 100, 5),
    ("nanogpt_killed_mid_save", "log", "train.log", "val loss", "eval_loss", "val", 0, 50, 3),
]


@cache
def _scalars(name: str) -> Any:
    from autopsy.run import load_run

    return load_run(RUNS / name).scalars


@pytest.mark.parametrize("run,source,suffix,tag,metric,split,first,last,n", EXPECTED,
                         ids=[f"{e[0]}:{e[1]}:{e[3]}" for e in EXPECTED])
def test_framework_series_in_run_scalars(run: str, source: str, suffix: str, tag: str, metric: str | None,
                                         split: str, first: int, last: int, n: int) -> None:
    if not (RUNS / run).is_dir():
        pytest.fail(f"fixture run {run} missing: python fixtures/generate.py --only {run}")
    df = _scalars(run)
    rows = df[(df["source"].astype(str) == source) & (df["tag"] == tag)
              & df["path"].astype(str).str.contains(suffix, regex=False)]
    assert len(rows) == n, f"{run}: {len(rows)} rows of {source} {tag!r} ({suffix}), expected {n}"
    got_metric = rows["metric"].iloc[0]
    assert (got_metric if isinstance(got_metric, str) else None) == metric
    assert set(rows["split"]) == {split}
    assert (int(rows["step"].min()), int(rows["step"].max())) == (first, last)


@pytest.mark.parametrize("run", sorted({e[0] for e in EXPECTED}))
def test_every_row_of_a_framework_run_has_a_known_split(run: str) -> None:
    df = _scalars(run)
    assert set(df["split"]) <= {"train", "eval", "val", "test", ""}
    # an unprefixed series whose val/eval twin sits in the same file is the train split
    for path, grp in df.groupby(df["path"].astype(str)):
        tags = set(grp["tag"])
        for t in tags:
            if not any(t.startswith(p) for p in ("val_", "eval_", "val/", "eval/", "val ")):
                continue
            base = t.split("_", 1)[-1] if "_" in t else t.split("/", 1)[-1] if "/" in t else t.split(" ", 1)[-1]
            if base in tags:
                assert set(grp.loc[grp["tag"] == base, "split"]) == {"train"}, (path, base)


def test_a_config_dict_in_wandb_debug_log_is_not_a_series() -> None:
    df = _scalars("wandb_clean")
    debug = df[df["path"].astype(str).str.endswith("debug.log")]
    assert debug.empty, sorted(set(debug["tag"]))


# Each generated run's checkpoints, identified as the layout their framework writes (the layout tests in
# test_checkpoint_layouts.py use hand-built files; these are what the frameworks really wrote):
# run, checkpoint path, layout, step (None: the layout records none), valid
CHECKPOINTS: list[tuple[str, str, str, int | None, bool]] = [
    ("lightning_clean", "checkpoints/epoch=3-step=40.ckpt", "lightning", 40, True),
    ("lightning_clean", "checkpoints/epoch=4-step=50.ckpt", "lightning", 50, True),
    ("lightning_clean", "checkpoints/last.ckpt", "lightning", 50, True),  # global_step from the pickle's opcodes
    ("lightning_nan", "checkpoints/last.ckpt", "lightning", 20, True),
    ("keras_clean", "checkpoints/model_05.keras", "keras", 5, True),
    ("keras_clean", "checkpoints/best.weights.h5", "keras", None, True),
    ("keras_nan", "checkpoints/model_01.keras", "keras", 1, True),
    ("accelerate_clean", "checkpoints/checkpoint_0", "accelerate", None, True),  # save order, not a step
    ("accelerate_clean", "checkpoints/checkpoint_2", "accelerate", None, True),
    ("accelerate_killed_mid_save", "checkpoints/checkpoint_0", "accelerate", None, True),
    ("accelerate_killed_mid_save", "checkpoints/checkpoint_1", "accelerate", None, False),  # no random_states_0.pkl
    ("nanogpt_clean", "out/ckpt.pt", "nanogpt", 100, True),  # iter_num from the pickle's opcodes
    # cut mid-write: no central directory, so nothing inside can be read to tell its layout
    ("nanogpt_killed_mid_save", "out/ckpt.pt", "loose", None, False),
]


@pytest.mark.parametrize("run,path,layout,step,valid", CHECKPOINTS, ids=[f"{c[0]}:{c[1]}" for c in CHECKPOINTS])
def test_framework_checkpoints_are_judged_by_their_own_layout(run: str, path: str, layout: str, step: int | None,
                                                              valid: bool) -> None:
    from autopsy.run import load_run

    cps = {c.path: c for c in load_run(RUNS / run).checkpoint_list}
    cp = cps.get(path)
    assert cp is not None, f"{run}: {path} not found among {sorted(cps)}"
    assert (cp.layout, cp.step, cp.valid) == (layout, step, valid), (cp.missing, cp.problems)


@pytest.mark.parametrize("run", ["lightning_clean", "keras_clean", "accelerate_clean", "nanogpt_clean"])
def test_no_checkpoint_of_a_clean_framework_run_is_unknown_or_invalid(run: str) -> None:
    from autopsy.run import load_run

    cps = load_run(RUNS / run).checkpoint_list
    assert cps and all(c.valid and c.layout not in ("unknown", "loose", "hf") for c in cps), \
        [(c.path, c.layout, c.valid) for c in cps]
