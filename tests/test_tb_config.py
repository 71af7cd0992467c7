"""TensorBoard text and hparams summaries read as config entries and land in run.config (HF's
TrainingArguments text, Lightning's hyperparameters). The summaries are built by TensorBoard's own
summary APIs; the generated runs (fixtures/runs/lightning_clean, lr_mismatch) are checked end to end."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from autopsy.parsers.tb_config import read_tb_config
from autopsy.run import load_run

RUNS = Path(__file__).resolve().parent.parent / "fixtures" / "runs"


def _write(path: Path, summaries: list[object]) -> None:
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        writer = RecordWriter(fh)
        writer.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
        for s in summaries:
            writer.write(event_pb2.Event(wall_time=time.time(), step=0, summary=s).SerializeToString())


def test_hf_args_text_summary(tmp_path: Path) -> None:
    from tensorboard.plugins.text.summary_v2 import text_pb

    args = {"learning_rate": 5e-3, "max_steps": 200, "lr_scheduler_type": "cosine", "save_total_limit": 2,
            "report_to": ["tensorboard"]}
    _write(tmp_path / "runs" / "events.out.tfevents.1.host", [text_pb("args", json.dumps(args, indent=2)),
                                                              text_pb("notes", "free text, not JSON")])
    got = {e.key: e for e in read_tb_config(tmp_path / "runs" / "events.out.tfevents.1.host", "x")}
    lr = got["learning_rate"]
    assert lr.value == 5e-3 and lr.source == "tensorboard" and lr.raw_key == "args.learning_rate"
    assert got["max_steps"].value == 200 and got["save_total_limit"].value == 2
    assert "notes" not in {e.raw_key for e in got.values()}


def test_hparams_summary(tmp_path: Path) -> None:
    from tensorboard.plugins.hparams.summary_v2 import hparams_pb

    ssi = hparams_pb({"lr": 0.05, "hidden": 16, "optimizer": "sgd", "amp": False})
    path = tmp_path / "tb" / "version_0" / "events.out.tfevents.2.host"
    _write(path, [ssi])
    got = {e.raw_key: (e.key, e.value) for e in read_tb_config(path, "x")}
    assert got == {"lr": ("learning_rate", 0.05), "hidden": ("hidden", 16.0), "optimizer": ("optimizer", "sgd"),
                   "amp": ("amp", False)}


@pytest.mark.parametrize("junk", [b"", b"\x00" * 40, b"hparams" * 10])
def test_junk_event_files_give_nothing(tmp_path: Path, junk: bytes) -> None:
    p = tmp_path / "events.out.tfevents.3.host"
    p.write_bytes(junk)
    assert read_tb_config(p, "x") == []


def test_text_summary_lands_in_run_config_below_the_users_files(tmp_path: Path) -> None:
    from tensorboard.plugins.text.summary_v2 import text_pb

    args = {"learning_rate": 5e-3, "max_steps": 200, "warmup_steps": 50}
    _write(tmp_path / "runs" / "events.out.tfevents.1.host", [text_pb("args", json.dumps(args))])
    run = load_run(tmp_path)
    lr = run.config_value("learning_rate")
    assert lr is not None and lr.value == 5e-3 and lr.source == "tensorboard" and lr.raw_key == "args.learning_rate"
    assert run.config_value("warmup_steps").value == 50
    # a value the user wrote in a config file is preferred over the framework's record of it
    (tmp_path / "config.yaml").write_text("learning_rate: 0.001\n")
    assert load_run(tmp_path).config_value("learning_rate").source == "yaml"


def test_lightning_hparams_of_the_generated_run_in_run_config() -> None:
    # pytorch-lightning 2.6.6's TensorBoardLogger wrote save_hyperparameters() (lr=0.05, hidden=16,
    # num_classes=2) as an hparams summary; hparams.yaml says the same and outranks it
    run = load_run(RUNS / "lightning_clean")
    tb = {e.raw_key: e.value for e in run.config_entries if e.source == "tensorboard"}
    assert tb == {"lr": 0.05, "hidden": 16.0, "num_classes": 2.0}
    assert run.config_value("num_classes").value == 2


def test_hf_training_arguments_of_the_generated_run_in_run_config() -> None:
    # lr_mismatch: HF Trainer's TrainingArguments text summary holds the effective warmup_steps
    # (200000, computed by train.py from warmup_tokens), which no config file of the run states
    run = load_run(RUNS / "lr_mismatch")
    warm = run.config_value("warmup_steps")
    assert warm is not None and warm.value == 200000 and warm.source == "tensorboard"
    assert run.config_value("learning_rate").source == "yaml"  # configs/train.yaml:13 stays the cited one
