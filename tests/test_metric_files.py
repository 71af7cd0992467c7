"""Metric files of the frameworks people use: discovery kind, rows in run.scalars, config.

The texts are the formats as each framework writes them (headers and line shapes copied from
real files: Lightning CSVLogger, Keras CSVLogger, ultralytics results.csv, detectron2
metrics.json, MLflow's file store, W&B's run directory). The generated runs in
fixtures/runs/ cover the same formats end to end.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from autopsy.discover import discover
from autopsy.model import ArtifactKind, ParseStatus
from autopsy.parsers.metric_tables import column_splits, split_of, to_float
from autopsy.run import LoadOptions, load_run

LIGHTNING_CSV = """epoch,step,train_loss_step,val_loss,val_acc,train_loss_epoch
0,9,0.91,,,
0,19,0.85,,,
0,19,,0.80,0.61,
0,19,,,,0.88
1,29,nan,,,
1,39,nan,,,
1,39,,nan,0.1,
"""
KERAS_CSV = "epoch,accuracy,loss,val_accuracy,val_loss\n0,0.52,0.69,0.50,0.70\n1,0.61,0.65,0.55,0.68\n"
ULTRALYTICS = ("                  epoch,         train/box_loss,         train/cls_loss,   metrics/mAP50(B),"
               "           val/box_loss,                 lr/pg0\n"
               "                      1,                 1.2345,                  2.3456,            0.1234,"
               "                 1.1111,                0.00333\n")


def _kinds(root: Path) -> dict[str, tuple[str, str | None, str]]:
    return {a.path: (a.kind.value, a.detail, a.status.value) for a in discover(root).artifacts}


def _rows(run_dir: Path, path: str) -> list[tuple[str, int | None, float, str, str | None]]:
    df = load_run(run_dir).scalars
    df = df[df["path"] == path]
    return [(r.tag, None if r.step is None or str(r.step) == "<NA>" else int(r.step), r.value, r.split,
             r.metric if isinstance(r.metric, str) else None) for r in df.itertuples()]


def test_split_from_names() -> None:
    assert [split_of(t) for t in ("val_loss", "train/box_loss", "eval_accuracy", "test_acc", "loss", "lr/pg0",
                                  "validation_loss", "loss_val")] == ["val", "train", "eval", "test", "", "", "val",
                                                                      "val"]
    assert column_splits(["loss", "val_loss", "accuracy", "lr"]) == {
        "loss": "train", "val_loss": "val", "accuracy": "", "lr": ""}


@pytest.mark.parametrize("text,value", [("nan", math.nan), ("-nan", math.nan), ("Infinity", math.inf),
                                        ("1.2E+00", 1.2), ("tensor(0.5, device='cuda:0')", 0.5), (" 3 ", 3.0),
                                        ("abc", None), ("", None), (True, None)])
def test_numbers_in_every_spelling(text: object, value: float | None) -> None:
    got = to_float(text)
    if value is None:
        assert got is None
    elif math.isnan(value):
        assert got is not None and math.isnan(got)
    else:
        assert got == value


def test_lightning_metrics_csv_sparse_rows_and_hparams(tmp_path: Path) -> None:
    d = tmp_path / "lightning_logs" / "version_0"
    d.mkdir(parents=True)
    (d / "metrics.csv").write_text(LIGHTNING_CSV)
    (d / "hparams.yaml").write_text("lr: 0.5\nmax_epochs: 2\n")
    assert _kinds(tmp_path)["lightning_logs/version_0/metrics.csv"][:2] == ("metrics", "csv")
    rows = _rows(tmp_path, "lightning_logs/version_0/metrics.csv")
    assert ("train_loss_step", 9, 0.91, "train", "loss") in rows
    assert ("val_loss", 19, 0.80, "val", "eval_loss") in rows
    nan_val = [r for r in rows if r[0] == "val_loss" and r[1] == 39]
    assert len(nan_val) == 1 and math.isnan(nan_val[0][2])
    run = load_run(tmp_path)
    assert run.config_value("learning_rate").value == 0.5
    assert set(run.scalars["source"].astype(str)) == {"csv"}


def test_keras_csvlogger_named_log_is_a_table_not_a_log(tmp_path: Path) -> None:
    (tmp_path / "training.log").write_text(KERAS_CSV)
    assert _kinds(tmp_path)["training.log"][:2] == ("metrics", "csv")
    rows = _rows(tmp_path, "training.log")
    # CSVLogger numbers epochs from 0; a row is read at the epochs done (the console's "Epoch 2/N")
    assert ("loss", 2, 0.65, "train", "loss") in rows
    assert ("val_loss", 1, 0.70, "val", "eval_loss") in rows


def test_ultralytics_padded_headers(tmp_path: Path) -> None:
    (tmp_path / "results.csv").write_text(ULTRALYTICS)
    rows = _rows(tmp_path, "results.csv")
    assert ("train/box_loss", 1, 1.2345, "train", None) in rows
    assert ("val/box_loss", 1, 1.1111, "val", None) in rows
    assert ("lr/pg0", 1, 0.00333, "", "lr") in rows


def test_table_damage_is_reported_not_raised(tmp_path: Path) -> None:
    (tmp_path / "metrics.csv").write_text("step,loss\n1,0.5\n2,0.4,junk\n3,0.3\n4")
    run = load_run(tmp_path, LoadOptions(now=10**10))  # looked at long after: damage, not a write in progress
    rows = _rows(tmp_path, "metrics.csv")
    assert [(r[1], r[2]) for r in rows] == [(1, 0.5), (3, 0.3)]
    art = {a.path: a for a in run.artifact_list}["metrics.csv"]
    assert art.status is ParseStatus.TRUNCATED
    assert "1 row(s) could not be read" in (art.note or "") and "line 3" in (art.note or "")
    assert "cut short" in (art.note or "")


def test_dataset_csv_is_not_read_as_series(tmp_path: Path) -> None:
    (tmp_path / "train.csv").write_text("id,text,label\n1,hello,0\n2,world,1\n")
    run = load_run(tmp_path)
    assert run.scalars.empty
    art = {a.path: a for a in run.artifact_list}["train.csv"]
    assert art.status is ParseStatus.SKIPPED and "without metric columns" in (art.note or "")


def test_jsonl_modes_and_detectron2_metrics_json(tmp_path: Path) -> None:
    (tmp_path / "log.jsonl").write_text(
        '{"mode": "train", "epoch": 1, "iter": 50, "lr": 0.01, "loss": 1.5}\n'
        '{"mode": "val", "epoch": 1, "iter": 50, "loss": 2.5, "accuracy_top-1": 40.0}\n')
    (tmp_path / "metrics.json").write_text(
        '{"iteration": 19, "loss_cls": 0.5, "total_loss": 1.2, "lr": 0.0002, "time": 0.31}\n'
        '{"iteration": 39, "loss_cls": 0.4, "total_loss": NaN, "lr": 0.0004, "time": 0.30}\n')
    assert _kinds(tmp_path)["metrics.json"][:2] == ("metrics", "json")
    rows = _rows(tmp_path, "log.jsonl")
    assert ("loss", 50, 1.5, "train", "loss") in rows
    assert ("loss", 50, 2.5, "val", "eval_loss") in rows  # a val-row "loss" is never the train loss
    d2 = _rows(tmp_path, "metrics.json")
    assert ("total_loss", 19, 1.2, "", "loss") in d2
    assert any(r[0] == "total_loss" and r[1] == 39 and math.isnan(r[2]) for r in d2)


def test_jsonlines_log_txt_vs_structured_text_log(tmp_path: Path) -> None:
    (tmp_path / "log.txt").write_text(json.dumps({"train_lr": 1e-4, "train_loss": 3.2, "test_loss": 3.4,
                                                  "epoch": 0, "n_parameters": 41}) + "\n")
    (tmp_path / "app.log").write_text(json.dumps({"level": "info", "message": "started", "pid": 3}) + "\n")
    kinds = _kinds(tmp_path)
    assert kinds["log.txt"][:2] == ("metrics", "jsonl")
    assert kinds["app.log"][0] == "log"
    assert ("test_loss", 0, 3.4, "test", "eval_loss") in _rows(tmp_path, "log.txt")


def test_keras_history_json_dict_of_lists(tmp_path: Path) -> None:
    (tmp_path / "history.json").write_text(json.dumps({"loss": [0.9, 0.7], "val_loss": [1.0, 0.95]}))
    rows = _rows(tmp_path, "history.json")
    assert ("loss", 1, 0.7, "train", "loss") in rows and ("val_loss", 0, 1.0, "val", "eval_loss") in rows


def _mlflow_run(root: Path, *, status: int = 4) -> Path:
    run = root / "mlruns" / "1" / ("a" * 32)
    (run / "metrics").mkdir(parents=True)
    (run / "params").mkdir()
    (run / "tags").mkdir()
    (run / "metrics" / "loss").write_text("1700000000000 2.5 0\n1700000001000 nan 1\n")
    (run / "metrics" / "val").mkdir()
    (run / "metrics" / "val" / "loss").write_text("1700000002000 3.0 1\n")
    (run / "params" / "lr").write_text("0.5")
    (run / "params" / "epochs").write_text("20")
    (run / "tags" / "mlflow.runName").write_text("bright-owl")
    (run / "meta.yaml").write_text(f"run_id: {'a' * 32}\nstatus: {status}\nstart_time: 1700000000000\n")
    return run


def test_mlflow_file_store(tmp_path: Path) -> None:
    _mlflow_run(tmp_path)
    base = "mlruns/1/" + "a" * 32
    kinds = _kinds(tmp_path)
    assert kinds[f"{base}/metrics/loss"][:2] == ("metrics", "mlflow")
    assert kinds[f"{base}/params/lr"][:2] == ("config", "mlflow_param")
    assert kinds[f"{base}/tags/mlflow.runName"][:3] == ("other", "mlflow_tag", "skipped")
    rows = _rows(tmp_path, f"{base}/metrics/loss")
    assert rows[0] == ("loss", 0, 2.5, "", "loss") and rows[1][1] == 1 and math.isnan(rows[1][2])
    assert _rows(tmp_path, f"{base}/metrics/val/loss") == [("val/loss", 1, 3.0, "val", "eval_loss")]
    df = load_run(tmp_path).scalars
    assert df[df["path"] == f"{base}/metrics/loss"]["wall_time"].tolist() == [1700000000.0, 1700000001.0]
    run = load_run(tmp_path)
    assert run.config_value("learning_rate").value == 0.5
    assert run.config_value("learning_rate").source == "mlflow"
    assert run.config_value("run_status").value == "FAILED"


def test_mlflow_experiment_meta_and_tags_are_bookkeeping(tmp_path: Path) -> None:
    # mlflow 3.17 writes mlruns/<exp>/meta.yaml (ids, creation_time) and mlruns/0/meta.yaml for
    # the Default experiment: not the run's settings (a diff of two runs would list creation_time)
    _mlflow_run(tmp_path)
    (tmp_path / "mlruns" / "1" / "meta.yaml").write_text("artifact_location: file:///x/mlruns/1\n"
                                                         "creation_time: 1700000000000\nname: tiny\n")
    (tmp_path / "mlruns" / "0").mkdir()
    (tmp_path / "mlruns" / "0" / "meta.yaml").write_text("creation_time: 1699999999999\nname: Default\n")
    kinds = _kinds(tmp_path)
    assert kinds["mlruns/1/meta.yaml"][:3] == ("other", "mlflow_experiment", "skipped")
    assert kinds["mlruns/0/meta.yaml"][:3] == ("other", "mlflow_experiment", "skipped")
    assert kinds["mlruns/1/" + "a" * 32 + "/meta.yaml"][:2] == ("config", "mlflow_meta")
    run = load_run(tmp_path)
    assert run.config_value("creation_time") is None and run.config_value("name") is None
    arts = {a.path: a for a in run.artifact_list}
    assert arts["mlruns/1/" + "a" * 32 + "/tags/mlflow.runName"].note is None  # not "left unread"


def test_mlflow_bad_and_cut_lines(tmp_path: Path) -> None:
    run_dir = _mlflow_run(tmp_path)
    (run_dir / "metrics" / "loss").write_text("1700000000000 2.5 0\ngarbage\n1700000001000 2.4 1\n17000000")
    run = load_run(tmp_path, LoadOptions(now=10**10))
    art = {a.path: a for a in run.artifact_list}["mlruns/1/" + "a" * 32 + "/metrics/loss"]
    assert art.status is ParseStatus.TRUNCATED and "line 2" in (art.note or "")


def test_metrics_folder_of_other_files_is_not_mlflow(tmp_path: Path) -> None:
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "notes").write_text("best run so far\n")
    assert _kinds(tmp_path)["metrics/notes"][0] != "metrics"


def test_wandb_run_directory(tmp_path: Path) -> None:
    files = tmp_path / "wandb" / "run-20250101_000000-abc123" / "files"
    files.mkdir(parents=True)
    (files / "wandb-summary.json").write_text(json.dumps({
        "train/loss": 0.42, "eval/loss": float("nan"), "_step": 300, "_timestamp": 1700000000.5, "_runtime": 12,
        "examples": {"_type": "table-file", "size": 100}, "_wandb": {"runtime": 12}}).replace("NaN", "NaN"))
    (files / "config.yaml").write_text("learning_rate:\n  desc: null\n  value: 0.0003\n")
    (files / "output.log").write_text("step 1 loss 2.0\n")
    (files / "wandb-metadata.json").write_text(json.dumps({"program": "train.py", "args": ["--lr", "3e-4"]}))
    kinds = _kinds(tmp_path)
    base = "wandb/run-20250101_000000-abc123/files"
    assert kinds[f"{base}/wandb-summary.json"][:2] == ("metrics", "wandb_summary")
    assert kinds[f"{base}/output.log"][0] == "log"
    rows = _rows(tmp_path, f"{base}/wandb-summary.json")
    assert ("train/loss", 300, 0.42, "train", "loss") in rows
    assert any(r[0] == "eval/loss" and r[3] == "eval" and math.isnan(r[2]) for r in rows)
    assert not any(r[0].startswith("examples") for r in rows)  # a media object is not a number
    run = load_run(tmp_path)
    assert run.config_value("learning_rate").value == 0.0003


def test_scalars_has_split_column_for_every_source(tmp_path: Path) -> None:
    (tmp_path / "training.log").write_text(KERAS_CSV)
    df = load_run(tmp_path).scalars
    assert list(df.columns)[:5] == ["source", "path", "tag", "metric", "split"]
    assert set(df["split"]) <= {"train", "eval", "val", "test", ""}


def test_metric_artifacts_count_as_scalars_inputs(tmp_path: Path) -> None:
    (tmp_path / "metrics.csv").write_text("step,loss\n1,0.5\n")
    arts = discover(tmp_path).artifacts
    assert arts[0].kind is ArtifactKind.METRICS


def test_wandb_metadata_args_are_launch_flags(tmp_path: Path) -> None:
    files = tmp_path / "wandb" / "run-1-x" / "files"
    files.mkdir(parents=True)
    (files / "wandb-metadata.json").write_text(json.dumps(
        {"program": "train.py", "args": ["--learning_rate", "3e-4", "--max_steps=500", "--fp16"]}, indent=2))
    run = load_run(tmp_path)
    lr = run.config_value("learning_rate")
    assert lr is not None and lr.value == 3e-4 and lr.source == "launch_flag" and lr.line == 3
    assert run.config_value("max_steps").value == 500


# timm's train.py summary.csv (utils/summary.py update_summary: epoch, train_*, eval_*, lr), the five rows of a
# real resnet18 run as a public repository quotes them
TIMM_SUMMARY = """epoch,train_loss,eval_loss,eval_top1,eval_top5,lr
0,1.5266704335171952,0.633612437915802,78.36,99.28,0.05
1,1.2209299079373352,0.5740737833976746,81.39,99.24,0.04522542485937369
2,1.1507881676029956,0.5225296738147736,82.71,99.42,0.032725424859373686
3,1.1035562335935414,0.48526961998939516,84.76,99.52,0.017274575140626316
4,1.068778628976936,0.45469011054039,86.0,99.54,0.004774575140626317
"""


@pytest.mark.parametrize(("name", "text", "source"), [
    ("summary.csv", TIMM_SUMMARY, "csv"),
    ("summary.tsv", TIMM_SUMMARY.replace(",", "\t"), "csv"),  # the same table tab-separated: the TSV reader
])
def test_timm_summary_csv(tmp_path: Path, name: str, text: str, source: str) -> None:
    (tmp_path / name).write_text(text)
    assert _kinds(tmp_path)[name][:2] == ("metrics", name.rsplit(".", 1)[1])
    rows = _rows(tmp_path, name)
    # epochs numbered from 0 are read as epochs done (1..5); eval_ columns are the eval split
    assert ("train_loss", 1, 1.5266704335171952, "train", "loss") in rows
    assert ("eval_loss", 5, 0.45469011054039, "eval", "eval_loss") in rows
    assert ("eval_top1", 3, 82.71, "eval", None) in rows
    assert ("lr", 2, 0.04522542485937369, "", "lr") in rows
    assert len([r for r in rows if r[0] == "eval_loss"]) == 5
    df = load_run(tmp_path).scalars
    assert set(df["source"].astype(str)) == {source}
