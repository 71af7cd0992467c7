"""Metrics batch14's general causes, from the real files that showed them (fixtures/staging/RATES.md).

* OpenMMLab's dumped config (mmengine ``vis_data/config.py``: only assignments,
  ``train_cfg = dict(by_epoch=True, max_epochs=100, val_interval=1)``) is a config: the run's plan was
  in it and unread. A training script (imports, defs) is not one.
* mmengine's ``vis_data/scalars.json`` is a metric table (JSON lines), and an mmengine step line's epoch
  counter (``Epoch(train) [132][3/6]``) is how far the run got.
* A metric table's mtime dates the last logged step as a tfevents file's does: committed Lightning
  ``metrics.csv`` / ultralytics ``results.csv`` / mmengine ``scalars.json`` runs stopped short were
  "may still be running" for want of a clock.
* With that, a run stopped by its early-stopping callback must not read as stopped short: ``patience``
  configured and the best validation value ``patience`` evaluations before the last.
* A training loss that takes both signs (SB3 PPO's ``train/loss``) has no floor at 0: no "never improved"
  from a drop relative to its size.
* An HF ``checkpoint-N/`` holding ``trainer_state.json`` and none of the files the Trainer writes before
  it is a copy without its payload, not a corrupt save.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autopsy.api import analyze
from autopsy.discover import discover
from autopsy.parsers.log_series import parse_step_line
from autopsy.parsers.py_config import looks_like_py_dump, read_py_dump
from autopsy.run import LoadOptions, load_run

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"

# duanbo320/openmmlab_camp vis_data/config.py@a44bd373, lines 84-88
MMENGINE_DUMP = """optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.02, momentum=0.9, weight_decay=0.0001))
param_scheduler = dict(
    type='MultiStepLR', by_epoch=True, milestones=[30, 60, 90], gamma=0.1)
train_cfg = dict(by_epoch=True, max_epochs=100, val_interval=1)
"""
# duanbo320/openmmlab_camp 20230605_200941/vis_data/config.py@a44bd373, lines 85, 160, 164-165 (bare numbers)
MMPOSE_DUMP = ("train_cfg = dict(by_epoch=True, max_epochs=300, val_interval=10)\n"
               "max_epochs = 300\nstage2_num_epochs = 0\nbase_lr = 0.004\n")
# a training script that opens with an assignment but imports and defines things
SCRIPT = "EPOCHS = 10\nimport torch\n\ndef main():\n    pass\n"


def _rules(root: Path) -> tuple[str | None, set[str]]:
    now = max(p.stat().st_mtime for p in root.rglob("*") if p.is_file()) + 86400.0  # as scripts/corpus_rate.py
    report = analyze(root, options=LoadOptions(now=now))
    return (report.primary.rule if report.primary else None), {f.rule for f in report.findings}


def test_mmengine_dump_is_a_config_with_its_plan() -> None:
    assert looks_like_py_dump(MMENGINE_DUMP.encode())
    entries = {e.raw_key: e for e in read_py_dump(MMENGINE_DUMP, "vis_data/config.py").value}
    assert entries["train_cfg.max_epochs"].key == "num_train_epochs"
    assert entries["train_cfg.max_epochs"].value == 100 and entries["train_cfg.max_epochs"].text == "100"
    assert entries["train_cfg.max_epochs"].line == 5
    assert entries["optim_wrapper.optimizer.lr"].value == 0.02
    assert entries["param_scheduler.milestones"].value == [30, 60, 90]
    top = {e.raw_key: e.value for e in read_py_dump(MMPOSE_DUMP, "config.py").value}
    assert top["max_epochs"] == 300 and top["train_cfg.max_epochs"] == 300


@pytest.mark.parametrize("text", [SCRIPT, "import os\nx = 1\n", "from a import b\nx = 1\n", "def f():\n    x = 1\n",
                                  "print('hi')\n", "", "# only a comment\n", "x == 1\n"])
def test_scripts_are_not_dumped_configs(text: str) -> None:
    assert not looks_like_py_dump(text.encode())


def test_dump_discovered_as_config_script_not(tmp_path: Path) -> None:
    (tmp_path / "vis_data").mkdir()
    (tmp_path / "vis_data" / "config.py").write_text(MMENGINE_DUMP)
    (tmp_path / "train.py").write_text(SCRIPT)
    kinds = {a.path: (a.kind.value, a.detail) for a in discover(tmp_path).artifacts}
    assert kinds["vis_data/config.py"] == ("config", "py_dump")
    assert kinds["train.py"][0] != "config"
    entry = load_run(tmp_path).config_value("num_train_epochs")
    assert entry is not None and entry.value == 100 and entry.path == "vis_data/config.py"


def test_unparsable_dump_is_unreadable_not_an_error() -> None:
    parsed = read_py_dump("x = dict(\n", "config.py")
    assert parsed.value == [] and parsed.note and "not valid Python" in parsed.note


def test_mmengine_step_line_carries_its_epoch() -> None:
    # duanbo320/openmmlab_camp 20230605_200941.log, its last line
    line = ("2023/06/05 21:51:40 - mmengine - INFO - Epoch(train) [132][3/6]  lr: 4.000000e-03  eta: 2:04:27  "
            "time: 7.476109  data_time: 6.900388  loss: 0.081515  loss_kpt: 0.081515  acc_pose: 0.962798")
    sl = parse_step_line(line)
    assert sl is not None and sl.epoch == 132 and sl.step == 131 * 6 + 3
    # an iteration-based loop has no epoch counter
    it = parse_step_line("08/18 11:56:34 - mmengine - INFO - Iter(train) [  10/5000]  lr: 3.3e-04  loss: 3.8766")
    assert it is not None and it.epoch is None


def test_scalars_json_read_and_stopped_run_judged() -> None:
    root = CORPUS / "openmmlab_camp_mmpretrain_scalars_json_stopped_epoch59_of_100"
    kinds = {a.path: (a.kind.value, a.detail) for a in discover(root).artifacts}
    assert kinds["vis_data/scalars.json"] == ("metrics", "json")
    assert _rules(root)[0] == "run.incomplete"


@pytest.mark.parametrize("entry", [
    "slm_lightning_v5_resume_stopped_13of20",  # Lightning metrics.csv, 13 of 20 epochs
    "yolov8_27hrs_stopped_107of600",  # ultralytics results.csv, best epoch 104 of 107, patience 100
    "license_plates_yolov8_75of600",
])
def test_metric_table_dates_its_last_step(entry: str) -> None:
    assert "run.incomplete" in _rules(CORPUS / entry)[1]


@pytest.mark.parametrize("entry", [
    "dental_yolov8_early_stop_55of120",  # patience 20, best mAP50-95 at epoch 35, last 55
    "wheat_weed_yolov8_early_stop_102of150",  # patience 100, best at epoch 2, last 102
    "yolov8_27hrs_early_stop_474of600",
    "yolov8_27hrs_early_stop_704of1000",
])
def test_early_stopping_is_no_short_run(entry: str) -> None:
    assert "run.incomplete" not in _rules(CORPUS / entry)[1]


def test_early_stop_needs_patience_reached(tmp_path: Path) -> None:
    """ultralytics' table with the best mAP 3 epochs before the last of 10 and patience 5: stopped short."""
    d = tmp_path / "runs" / "detect" / "train"
    d.mkdir(parents=True)
    (d / "args.yaml").write_text("epochs: 100\npatience: 5\n")
    rows = ["epoch,train/box_loss,metrics/mAP50(B),metrics/mAP50-95(B),val/box_loss"]
    maps = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.65, 0.66, 0.64]
    rows += [f"{i + 1},{2.0 - 0.1 * i:.2f},{m + 0.2:.2f},{m:.2f},{2.1 - 0.1 * i:.2f}" for i, m in enumerate(maps)]
    (d / "results.csv").write_text("\n".join(rows) + "\n")
    past = 1_600_000_000
    for p in (d / "args.yaml", d / "results.csv"):
        os.utime(p, (past, past + (1 if p.name == "results.csv" else 0)))
    assert "run.incomplete" in _rules(tmp_path)[1]
    (d / "args.yaml").write_text("epochs: 100\npatience: 3\n")  # best at epoch 7, last 10: patience 3 reached
    os.utime(d / "args.yaml", (past, past))
    assert "run.incomplete" not in _rules(tmp_path)[1]


def test_signed_ppo_loss_not_judged_frozen_loss_still_is() -> None:
    assert _rules(CORPUS / "acrobot_mujoco_sb3_ppo_progress_csv_negative_loss_eval_rows_healthy") == (None, set())
    # a positive loss frozen at 15.9045 for 96 epochs still is a plateau
    assert _rules(CORPUS / "contact_point_lightning_2020_metrics_csv_train_loss_frozen_15p9045")[0] == "loss.plateau"
    # a loss that never improves from its first point, all positive
    assert _rules(CORPUS / "nlp2_probing_lightning_metrics_csv_train_loss_never_improves")[0] == "loss.plateau"


def test_state_only_hf_checkpoint_is_no_checkpoint(tmp_path: Path) -> None:
    src = CORPUS / "bert_project2_hf_ckpt2400_of_2400_eval_loss_falling_healthy"
    assert "checkpoint.corrupt" not in _rules(src)[1]
    assert not load_run(src).checkpoint_list
    # beside the state, an optimizer file and no weights: a save that lost its weights, still corrupt
    ck = tmp_path / "checkpoint-2400"
    ck.mkdir()
    (ck / "trainer_state.json").write_text((src / "checkpoint-2400" / "trainer_state.json").read_text())
    (ck / "optimizer.pt").write_bytes(b"PK\x03\x04" + b"\0" * 64)
    cps = load_run(tmp_path).checkpoint_list
    assert len(cps) == 1 and not cps[0].valid
