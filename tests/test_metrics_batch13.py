"""Metrics batch13's general causes, from the real texts that showed them (fixtures/staging/RATES.md).

* Chainer's LogReport writes ``result/log`` (ESPnet1: ``exp/*/results/log``): a pretty-printed JSON list of flat
  records with no suffix, named ``main/loss`` / ``validation/main/loss`` by the Reporter's link names. It was read
  as a text log, one value per line, the ``iteration`` lost and ``main/loss`` never the loss.
* A rate unit printed after its value is that value's unit, not the first word of the next key: Sockeye's
  ``6.25 updates/sec perplexity=355.576054`` read a series ``updates/sec perplexity``.
* A regression error (XGBoost ``train-rmse``, Keras ``val_mae``, CNTK ``mse``) is the loss a regression objective
  is judged by; its NaN was not loss-like, so XGBoost's ``[0] eval-rmse:-nan  train-rmse:-nan`` fired nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autopsy.api import analyze
from autopsy.checks.nonfinite import is_loss_like
from autopsy.discover import discover
from autopsy.metrics import canonical_metric, split_of
from autopsy.parsers.metric_values import pairs
from autopsy.run import load_run

# bitoku/fx_ai result/log@1479076c, the first three of its ten records as Chainer writes them (indent 4)
CHAINER_LOG = [
    {"iteration": 10, "main/loss": 0.0004176137153990567, "elapsed_time": 16.412459795014, "epoch": 1,
     "validation/main/loss": 0.00038619429687969387},
    {"iteration": 20, "main/loss": 0.00038390691042877734, "elapsed_time": 32.05167036294006, "epoch": 2,
     "validation/main/loss": 0.00038479900103993714},
    {"iteration": 30, "main/loss": 0.00038311438402161, "elapsed_time": 47.430398651980795, "epoch": 3,
     "validation/main/loss": 0.00038445720565505326},
]


def _kinds(root: Path) -> dict[str, tuple[str, str | None]]:
    return {a.path: (a.kind.value, a.detail) for a in discover(root).artifacts}


def test_chainer_logreport_list_is_a_metric_table(tmp_path: Path) -> None:
    (tmp_path / "result").mkdir()
    (tmp_path / "result" / "log").write_text(json.dumps(CHAINER_LOG, indent=4))
    assert _kinds(tmp_path)["result/log"] == ("metrics", "json")
    df = load_run(tmp_path).scalars
    loss = df[df["tag"] == "main/loss"]
    assert list(loss["step"]) == [10, 20, 30]  # the record's iteration, not the line number
    assert set(loss["metric"]) == {"loss"} and set(loss["split"]) == {"train"}
    val = df[df["tag"] == "validation/main/loss"]
    assert set(val["metric"]) == {"eval_loss"} and set(val["split"]) == {"val"}


@pytest.mark.parametrize("name,text", [
    # a text log whose lines open with a bracket (Sockeye, awslabs/sockeye#706 and #664)
    ("train.log", "[INFO:sockeye.training] Epoch[0] Batch [2700]   Speed: 1293.60 samples/sec perplexity=355.576054\n"),
    ("log", "[2019-03-17:14:36:36:INFO:sockeye.training:__call__] Epoch[0] Batch [3150]\tperplexity=29.694005\n"),
    # a JSON list of structured log events, not of metrics
    ("log", json.dumps([{"level": "info", "message": "started", "pid": 3}], indent=4)),
    # a JSON list of strings
    ("log", json.dumps(["epoch 1 done", "epoch 2 done"], indent=4)),
    # a log that opens with its hyper-parameters as a JSON list of numbers, then trains and crashes (a reviewer's
    # case: read as a table, it failed to parse and the CUDA error below was never scanned)
    ("train.log", '[{"lr": 0.001, "momentum": 0.9, "weight_decay": 0.0001}]\n'
     + "".join(f"step {i} | loss {2.0 - i / 100:.3f}\n" for i in range(50))
     + "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
     "RuntimeError: CUDA error: an illegal memory access was encountered\n"),
])
def test_bracketed_text_and_event_lists_stay_logs(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / name).write_text(text)
    assert _kinds(tmp_path)[name][0] == "log"


@pytest.mark.parametrize("tag,metric,split", [
    ("main/loss", "loss", ""),  # the split comes from the table's validation/ twin (column_splits)
    ("validation/main/loss", "eval_loss", "val"),
    ("main/accuracy", None, ""),
    ("validation/main/acc", None, "val"),
    ("main/loss_ctc", None, ""),  # ESPnet1's CTC branch: a component, not the loss
    # not Chainer's link prefix: another word ending in "main", or "main" glued by an underscore
    ("domain/loss", None, ""),
    ("main_loss", None, ""),
    ("gen/loss", None, ""),
])
def test_chainer_link_prefix(tag: str, metric: str | None, split: str) -> None:
    assert canonical_metric(tag) == metric
    assert split_of(tag) == split


@pytest.mark.parametrize("tag,like", [
    ("train-rmse", True), ("eval-rmse", True),  # XGBoost watchlist (dmlc/xgboost#88)
    ("val_mae", True), ("mse", True), ("[Training] mse", True),  # Keras metric, CNTK criterion
    ("val_mape", False),  # infinite by definition on a zero target
    ("rmse_weight", False), ("eta_msec", False), ("maes", False), ("msec", False),
])
def test_regression_errors_are_loss_like(tag: str, like: bool) -> None:
    assert is_loss_like(tag, None) is like


def test_xgboost_rmse_nan_is_a_nonfinite_loss(tmp_path: Path) -> None:
    (tmp_path / "output.txt").write_text(
        "[0] eval-rmse:-nan  train-rmse:-nan\n[1] eval-rmse:nan   train-rmse:nan\n[2] eval-rmse:nan   train-rmse:nan\n")
    report = analyze(tmp_path)
    assert report.primary is not None and report.primary.rule == "loss.nonfinite"


def test_a_finite_rmse_series_fires_nothing(tmp_path: Path) -> None:
    # the same printing with finite, falling errors (xgboost's demo output)
    (tmp_path / "output.txt").write_text("".join(
        f"[{i}]\teval-rmse:{0.9 - 0.05 * i:.6f}\ttrain-rmse:{0.85 - 0.05 * i:.6f}\n" for i in range(8)))
    report = analyze(tmp_path)
    assert report.primary is None


@pytest.mark.parametrize("text,want", [
    # awslabs/sockeye#706: the unit of 6.25 is not part of the perplexity's key
    ("[INFO:sockeye.training] Epoch[0] Batch [2700]   Speed: 1293.60 samples/sec 36902.07 tokens/sec 6.25 "
     "updates/sec perplexity=355.576054   accuracy=0.209457", {"perplexity": 355.576054, "accuracy": 0.209457}),
    # a rate that is itself the key keeps its name
    ("tokens/sec 200 loss 2.0", {"tokens/sec": 200.0, "loss": 2.0}),
    ("throughput samples/sec: 38246.62", {"throughput samples/sec": 38246.62}),
])
def test_a_rate_unit_after_its_value_is_no_key_word(text: str, want: dict[str, float]) -> None:
    got = dict(pairs(text))
    for key, value in want.items():
        assert got.get(key) == value
    assert not any(k.startswith("updates/sec ") for k in got)
