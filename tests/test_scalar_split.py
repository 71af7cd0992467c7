"""The ``split`` column of ``run.scalars``: which data split each series is measured on."""

from __future__ import annotations

from pathlib import Path

import pytest

from autopsy.metrics import SPLITS, split_of
from autopsy.run import load_run
from autopsy.run_frames import SCALAR_COLUMNS

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "runs"


@pytest.mark.parametrize(("tag", "split"), [
    ("eval_loss", "eval"), ("eval/loss", "eval"), ("eval_runtime", "eval"),  # HF Trainer, its TB tags
    ("val_loss", "val"), ("val/acc", "val"), ("valid_nll", "val"), ("validation_loss", "val"),
    ("loss/val", "val"), ("metrics/val_acc", "val"), ("val_loss_epoch", "val"),  # Lightning, Keras
    ("test_loss", "test"), ("test/accuracy", "test"),
    ("train_loss", "train"), ("train/loss", "train"), ("train_loss_step", "train"),
    ("loss", ""), ("learning_rate", ""), ("grad_norm", ""), ("interval", ""), ("latest_loss", ""),
    ("retest", ""), ("", ""),
])
def test_split_of_tag(tag: str, split: str) -> None:
    assert split_of(tag) == split
    assert split in (*SPLITS, "")


def test_scalars_have_split_after_metric() -> None:
    run = load_run(FIXTURES / "retention")
    df = run.scalars
    assert tuple(df.columns) == SCALAR_COLUMNS
    assert list(df.columns).index("split") == list(df.columns).index("metric") + 1
    ts = df[df["source"] == "trainer_state"]
    assert not ts.empty
    # HF prefixes only eval/test keys: the unprefixed train keys are "train", epoch says nothing
    assert set(ts.loc[ts["tag"] == "loss", "split"]) == {"train"}
    assert set(ts.loc[ts["tag"] == "epoch", "split"]) == {""}
    assert set(ts.loc[ts["tag"] == "eval_loss", "split"]) == {"eval"}
    assert set(df["split"]) <= {*SPLITS, ""}


def test_empty_scalars_have_split(tmp_path: Path) -> None:
    assert tuple(load_run(tmp_path).scalars.columns) == SCALAR_COLUMNS
