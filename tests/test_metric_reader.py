"""The open-world text metric reader: declared styles, learnt templates, and what it must not read."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from autopsy.parsers import log_text as lt
from autopsy.parsers.logs import scan_text
from autopsy.parsers.metric_reader import MetricReader, metric_like, timing_key
from autopsy.parsers.metric_styles import StyleError, load_styles, styles
from autopsy.parsers.metric_values import is_setting_key, pairs, split_word, step_of
from autopsy.run import load_run

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_builtin_styles_load_and_their_samples_pass() -> None:
    names = {s.name for s in styles()}
    assert {"keras_fit", "hf_metrics_block", "wandb_summary", "caffe", "fairseq", "megatron",
            "pytorch_tutorial", "yolo_table"} <= names


def test_a_style_whose_sample_fails_is_refused() -> None:
    doc = """
- name: bad
  program: nothing real
  anchors: ["loss"]
  match: 'loss (?P<body>.*)'
  samples:
    - lines: ["loss loss 1.5"]
      expect: [{values: {loss: 2.5}}]
"""
    with pytest.raises(StyleError, match="bad: sample 1"):
        load_styles(doc)
    with pytest.raises(StyleError, match="unknown fields"):
        load_styles("- {name: x, program: y, anchors: [a], match: a, samples: [{}], colour: red}")


@pytest.mark.parametrize(("text", "want"), [
    ("loss: nan - acc: -nan", {"loss": math.nan, "acc": math.nan}),
    ("loss=NaN, lr=Infinity, gnorm=-inf", {"loss": math.nan, "lr": math.inf, "gnorm": -math.inf}),
    ("lm loss: 2.345E+00 | loss scale: 1.0", {"lm loss": 2.345, "loss scale": 1.0}),
    ("loss_cls: tensor(0.5, device='cuda:0')  acc: np.float32(0.25)", {"loss_cls": 0.5, "acc": 0.25}),
    ("tokens 4,361 loss .5", {"tokens": 4361.0, "loss": 0.5}),
    ("iter 450: loss 3.12, time 38ms", {"loss": 3.12, "time": 0.038}),  # "450:" is a position (step_of)
    # digits that are not values: versions, paths, dates, clock times, file:line
    ("2024-01-02 10:11:12,345 torch 2.1.0 /data/run_3/ckpt-5.pt solver.cpp:228", {}),
    ("step 6 loss nan grad_norm nan", {"step": 6.0, "loss": math.nan, "grad_norm": math.nan}),
    # a sentence's full stop after a value (tiny-dnn#883, KotlinDL#8); not: a version, an ellipsis
    ("train loss=2.09418. test loss=2.06644, acc=5401/10000", {"train loss": 2.09418, "test loss": 2.06644}),
    ("Training batch 64 ends with loss NaN.", {"Training batch": 64.0, "ends with loss": math.nan}),
    ("torch 2.1.0. loss 0.5... acc=0.9.1", {}),
    # Paddle's stats logger writes '{:x<6f}': "nan" padded with its fill to "nanxxx" (PaddleOCR#7057); a finite
    # value is wider than the field and gets no fill (PaddleOCR#10042)
    ("acc: 0.000000, norm_edit_dis: 0.000000, CTCLoss: nanxxx, SARLoss: nanxxx, loss: nanxxx, "
     "avg_reader_cost: 0.47801 s",
     {"acc": 0.0, "norm_edit_dis": 0.0, "CTCLoss": math.nan, "SARLoss": math.nan, "loss": math.nan,
      "avg_reader_cost": 0.47801}),
    ("lr: 0.000007, acc: 0.913462, norm_edit_dis: 0.980197, loss: 0.485809, avg_samples: 1560.0",
     {"lr": 7e-06, "acc": 0.913462, "norm_edit_dis": 0.980197, "loss": 0.485809, "avg_samples": 1560.0}),
    # MSVC's C runtime spells a quiet NaN "1.#QNAN" (padded: CNTK#406), an indeterminate value "-1.#IND", infinity
    # "1.#INF": not 1.0, as the plain number's "1." once read them
    ("SamplesSeen = 500; TrainLossPerSample =  1.#QNAN000; TotalTime = 2.3504s",
     {"SamplesSeen": 500.0, "TrainLossPerSample": math.nan, "TotalTime": 2.3504}),
    ("loss = -1.#IND00, gnorm = 1.#INF00, lr = 1.5", {"loss": math.nan, "gnorm": math.inf, "lr": 1.5}),
    # CNTK's "value * samples averaged", markdown-escaped as posted (CNTK#638): the value is the one before "*"
    (r"ce = 2.30255688 \* 16000; errTop1 = 0.89431250 \* 16000;", {"ce": 2.30255688, "errTop1": 0.8943125}),
])
def test_pairs_every_spelling(text: str, want: dict[str, float]) -> None:
    got = dict(pairs(text))
    assert set(got) == set(want), got
    for k, v in want.items():
        assert (math.isnan(v) and math.isnan(got[k])) or got[k] == v


@pytest.mark.parametrize(("text", "step", "total", "epoch", "epochs"), [
    ("Epoch [3/10], Step [100/600], Loss: 0.1234", 100, 600, 3, 10),
    ("epoch: 812 loss: nan", None, None, 812, None),
    ("global_step 40 loss 1.0", 40, None, None, None),
    ("Iteration 700, loss = 6.91", 700, None, None, None),
    ("Epoch 3/60", None, None, 3, 60),
    ("Namespace(max_steps=1000, epochs=10)", None, None, None, None),
    # "N of M" (CNTK#3355 "Finished Epoch[1 of 90]:", CNTK#783 "Finished Epoch[ 2 of 15]:")
    ("Finished Epoch[1 of 90]: [Training] loss = 0.682990 * 32, metric = 43.75% * 32", None, None, 1, 90),
    ("Finished Epoch[ 2 of 15]: [Training] mse = 2507.21150000 * 6000;", None, None, 2, 15),
])
def test_step_axis(text: str, step: int | None, total: int | None, epoch: int | None, epochs: int | None) -> None:
    pos = step_of(text)
    assert (pos.step, pos.step_total, pos.epoch, pos.epoch_total) == (step, total, epoch, epochs)


def _series(text: str) -> dict[str, list[tuple[int | None, float]]]:
    scan = scan_text(text)
    out: dict[str, list[tuple[int | None, float]]] = {}
    for p in scan.series:
        out.setdefault(p.tag, []).append((p.step, p.value))
    return out


def test_paddle_fill_padded_nan_on_step_lines() -> None:
    """PaddleOCR 2.x step lines (PaddleOCR#7057, #10042): the NaN losses printed as "nanxxx" are NaN points of
    their series; finite values printed with six decimals are read as they are."""
    nan_lines = (
        "[2023/10/06 13:24:25] ppocr INFO: epoch: [1/500], global_step: 160, lr: 0.000040, acc: 0.000000, "
        "norm_edit_dis: 0.000000, CTCLoss: nanxxx, SARLoss: nanxxx, loss: nanxxx, avg_reader_cost: 0.47801 s, "
        "avg_batch_cost: 1.01583 s, avg_samples: 128.0, ips: 126.00486 samples/s, eta: 5 days, 2:57:03\n"
        "[2023/10/06 13:24:33] ppocr INFO: epoch: [1/500], global_step: 170, lr: 0.000043, acc: 0.000000, "
        "norm_edit_dis: 0.000000, CTCLoss: nanxxx, SARLoss: nanxxx, loss: nanxxx, avg_reader_cost: 0.25367 s, "
        "avg_batch_cost: 0.80017 s, avg_samples: 128.0, ips: 159.96559 samples/s, eta: 5 days, 0:36:35\n")
    series = _series(nan_lines)
    assert [s for s, _ in series["loss"]] == [160, 170] and all(math.isnan(v) for _, v in series["loss"])
    assert all(math.isnan(v) for _, v in series["CTCLoss"])
    ok_line = ("[2023/05/26 21:45:40] ppocr INFO: epoch: [1/2000], global_step: 108, lr: 0.000007, acc: 0.913462, "
               "norm_edit_dis: 0.980197, loss: 0.485809, avg_reader_cost: 0.00867 s, avg_batch_cost: 0.89077 s, "
               "avg_samples: 1560.0, ips: 1751.29344 samples/s, eta: 23 days, 10:11:45")
    series = _series(ok_line + "\n")
    assert series["loss"] == [(108, 0.485809)] and series["lr"] == [(108, 7e-06)]


def test_keras_log_read_per_epoch_with_planned_epochs() -> None:
    log = "".join(f"Epoch {e}/60\n100/100 [====] - 2s 20ms/step - loss: {1.0 / e:.4f} - val_loss: "
                  f"{'nan' if e == 3 else '0.5'}\n" for e in (1, 2, 3))
    s = _series(log)
    assert [st for st, _ in s["loss"]] == [1, 2, 3]
    assert math.isnan(s["val_loss"][2][1])
    assert scan_text(log).max_epochs_seen == 60


def test_blocks_and_tables() -> None:
    s = _series("done\n***** eval metrics *****\n  epoch = 3.0\n  eval_loss = nan\n  eval_runtime = 0:00:01.00\n"
                "wandb: Run summary:\nwandb:   train loss nan\nwandb:   val/acc 0.51\nwandb: Synced 3 files\n")
    assert math.isnan(s["eval_loss"][0][1]) and math.isnan(s["train loss"][0][1]) and s["val/acc"][0][1] == 0.51
    assert "epoch" not in s
    yolo = ("      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size\n"
            + "".join(f"      {e}/100      2.1G      {2 - e / 10:.3f}      1.5      1.1         64        640: "
                      "100%|##########| 10/10 [00:02<00:00,  4.5it/s]\n" for e in (1, 2, 3)))
    assert [st for st, _ in _series(yolo)["box_loss"]] == [1, 2, 3]


def test_a_style_nobody_listed_is_read_from_its_template() -> None:
    """No step word, no known trigger: the file's recurring template makes it a series family."""
    log = "loading data\n" + "".join(f"<{e:03d}> trn_nll={3 - e / 10:.3f} dev_acc={50 + e}%\n" for e in range(8))
    s = _series(log)
    assert [round(v, 3) for _, v in s["trn_nll"]] == [round(3 - e / 10, 3) for e in range(8)]
    assert "dev_acc" in s


def test_split_from_the_line_lands_in_the_split_column(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text("".join(
        f"Epoch {e}: train loss {2 - e / 10:.2f}\nValidation: loss {1.5:.2f} acc 0.4\n" for e in range(1, 6)))
    df = load_run(tmp_path).scalars
    val = df[df["tag"] == "val_loss"]
    assert len(val) == 5 and set(val["split"]) == {"val"} and set(val["metric"]) == {"eval_loss"}
    assert set(df.loc[df["tag"] == "train loss", "split"]) == {"train"}


@pytest.mark.parametrize("line", [
    "Namespace(lr=0.001, clip_grad_norm=1.0, model='gpt2')",
    "[train] params=6848 vocab=189 lr=0.003 min_lr=0.0 schedule=cosine max_steps=300",
    "Testing:  50% 1/2",
    "Gradient overflow. Skipping step. Attempted loss scale: 65536, reducing to 32768",
    "torch 2.1.0+cu121, python 3.10.12, cuda 12.1",
    "learning_rate: 0.001",  # a config value printed once
])
def test_not_metrics(line: str) -> None:
    assert not _series(line + "\n")


# Words that never name a metric: a tag holding one is a configuration value, a counter, a clock
# or a version the reader mistook for a series.
_JUNK = re.compile(r"(?i)version|seed|port|pid|year|date|path|file|cuda|torch|python|world|worker|vocab|"
                   r"max_|min_|num_|warmup|batch_size|params|^(?:Testing|Training|Validat\w*)$")


def _logs() -> list[Path]:
    out = []
    for root in ("corpus", "realdata", "runs"):
        for p in sorted((FIXTURES / root).rglob("*")):
            if (p.is_file() and p.stat().st_size < 4_000_000 and p.suffix in ("", ".log", ".out", ".txt", ".err")
                    and "tfevents" not in p.name and not p.name.startswith(("DONE", "latest"))):
                out.append(p)
    return out


def test_no_junk_series_over_the_fixture_logs() -> None:
    """Every line of every fixture log through the reader: nothing read is a config value, a
    version, a clock or a progress counter, and generic reads carry metric-like keys only."""
    read = 0
    for path in _logs():
        data = path.read_bytes()
        if b"\x00" in data[:4096]:
            continue
        reader = MetricReader()
        reader.learn(data, whole=True)
        for raw in data.split(b"\n"):
            text, _ = lt.clean(raw.rsplit(b"\r", 1)[-1])
            r = reader.read(text)
            if r is None:
                continue
            for tag, _ in r.values:
                read += 1
                assert not _JUNK.search(tag), f"{path}: {tag!r} read from {text!r}"
                if r.style in ("generic", "template"):
                    assert metric_like(tag), f"{path}: {tag!r} read from {text!r}"
    assert read > 1000  # the fixture logs hold thousands of metric values: the reader reads them


# --------------------------------------------------------------------------- epoch-relative counters

_FASTSCNN = [  # Cuber-Wei/Fast-SCNN-pytorch-for-Silicon-M logs/train.log (mmcv-like, epochs 0-199)
    "2025-06-13 18:22:39,266 - INFO - Epoch: [198/200] Iter [1484/1487] || Time: 103889.9910 sec || lr: 0.00008509"
    " || Loss: 3.4065",
    "2025-06-13 18:22:42,974 - INFO - Epoch: [199/200] Iter [   7/1487] || Time: 103893.6990 sec || lr: 0.00008457"
    " || Loss: 1.0561",
    "2025-06-13 18:31:46,139 - INFO - Epoch: [199/200] Iter [1487/1487] || Time: 104436.8641 sec || lr: 0.00000000"
    " || Loss: 1.1492",
]


def test_an_iteration_counted_within_its_epoch_becomes_a_global_step() -> None:
    reader = MetricReader()
    got = [reader.read(line) for line in _FASTSCNN]
    assert [r.step for r in got if r] == [198 * 1487 + 1484, 199 * 1487 + 7, 199 * 1487 + 1487]
    assert all(r is not None and r.step_total is None and r.epoch_total == 200 for r in got)  # 1487 is no plan
    assert reader.last_epoch == 199 and not reader.epoch_unfinished
    # YOLOv4-pytorch (argusswift/YOLOv4-pytorch#91): "step" is the batch of epoch 26, not the run's 42640th step
    r = MetricReader().read("[2020-11-17 12:49:56,134]-[train.py line:223]:  === Epoch:[ 26/50],step:[42640/44640],"
                            "img_size:[416],total_loss:50.3763|loss_ciou:11.0461|loss_conf:15.9487|"
                            "loss_cls:23.3814|lr:0.0000 ")
    assert r is not None and r.step == 26 * 44640 + 42640 and r.step_total is None


def test_a_global_step_beside_its_epoch_stays_global() -> None:
    """A step whose share of its total sits where the epoch does in the run is the run's own count: the
    RoBERTa fine-tuning tutorial's ``print('Epoch [{}/{}], global step [{}/{}], Train Loss: {:.4f}, Valid
    Loss: {:.4f}'.format(epoch+1, num_epochs, global_step, num_epochs*len(train_iter), ...))`` at the end
    of each epoch (here 52 batches an epoch)."""
    reader = MetricReader()
    got = [reader.read(f"Epoch [{e}/12], global step [{52 * e}/624], Train Loss: 0.6931, Valid Loss: 0.6929")
           for e in (3, 12)]
    assert [(r.step, r.step_total) for r in got if r] == [(156, 624), (624, 624)]


def test_a_log_cut_inside_its_last_epoch_is_unfinished() -> None:
    """Windere/ASGL-SNN's per-epoch counter printed every 100 batches of 390: 300 is that epoch's last
    print, 200 is not."""
    lines = ["Epoch [299/300], Step [100/390], Loss: 0.00428", "Epoch [299/300], Step [200/390], Loss: 0.00585",
             "Epoch [299/300], Step [300/390], Loss: 0.00606"]
    done, cut = MetricReader(), MetricReader()
    for line in lines:
        done.read(line)
    for line in lines[:2]:
        cut.read(line)
    assert not done.epoch_unfinished and cut.epoch_unfinished


def test_digits_after_a_decimal_point_are_no_hash() -> None:
    # hyjwpk/AlphaZero_Gobang log/train.log: a float printed with 16 decimals after "loss:"
    got = dict(pairs("kl:0.02040,lr_multiplier:0.444,loss:2.4166030883789062,entropy:2.0733401775360107"))
    assert got["loss"] == 2.4166030883789062 and got["entropy"] == 2.0733401775360107
    # a hex hash is still masked (a W&B run id in a path-less line)
    assert dict(pairs("run id 9cffb2d803c5d3afb1 loss: 0.5")) == {"loss": 0.5}


# --------------------------------------------------------------------------- other toolkits (metrics/batch06)

@pytest.mark.parametrize(("tag", "metric", "split"), [
    ("train-logloss", "loss", "train"),  # XGBoost (dmlc/xgboost#213)
    ("eval-logloss", "eval_loss", "eval"),  # XGBoost (dmlc/xgboost#2777)
    ("cv-test-logloss", "eval_loss", "test"),  # xgb.cv (dmlc/xgboost#90)
    ("valid_0's binary_logloss", "eval_loss", "val"),  # LightGBM (LightGBM#5940)
    ("training's multi_logloss", "loss", "train"),  # LightGBM (scikit-learn-intelex#295)
    ("training's log loss", "loss", "train"),  # LightGBM's old CLI (LightGBM#39)
    ("xent", "loss", ""),  # OpenNMT-py (OpenNMT-py#1072)
    ("val_cross-entropy", "eval_loss", "val"),  # Marian "[valid] ... cross-entropy" (marian#376)
    ("Tr.Loss", "loss", "train"), ("Val.Loss", "eval_loss", "val"),  # deep_avsr#6
    ("Training loss", "loss", "train"),  # DeepSpeech#238
    # not losses
    ("train-auc", None, "train"), ("valid_0's auc", None, "val"), ("ppl", None, ""), ("loss_scale", "loss_scale", ""),
    ("Validation perplexity", None, "val"),
    ("ce", "loss", ""),  # CNTK BrainScript's cross-entropy criterion (CNTK#638)
    ("force", None, ""), ("pce", None, ""),
])
def test_loss_names_of_other_toolkits(tag: str, metric: str | None, split: str) -> None:
    from autopsy.metrics import canonical_metric, split_of

    assert (canonical_metric(tag), split_of(tag)) == (metric, split)


@pytest.mark.parametrize(("text", "want"), [
    ("[43]\ttrain-logloss:-nan\ttrain-auc:0.874943\tvalid-logloss:0.332257",  # dmlc/xgboost#213
     {"train-logloss": math.nan, "train-auc": 0.874943, "valid-logloss": 0.332257}),
    ("[180]   cv-test-logloss:nan+nan cv-train-logloss:nan+nan",  # dmlc/xgboost#90: no key "nan cv-train-logloss"
     {"cv-test-logloss": math.nan, "cv-train-logloss": math.nan}),
    ("13129.7s | 202 | [365]\tvalid_0's auc: 0.610046\tvalid_0's binary_logloss: 0.180457",  # LightGBM#5940
     {"valid_0's auc": 0.610046, "valid_0's binary_logloss": 0.180457}),
])
def test_pairs_possessive_keys_and_mean_std(text: str, want: dict[str, float]) -> None:
    got = dict(pairs(text))
    assert set(got) == set(want), got
    assert all((math.isnan(v) and math.isnan(got[k])) or got[k] == v for k, v in want.items())


@pytest.mark.parametrize(("text", "step"), [
    ("[43]\ttrain-logloss:-nan\ttrain-auc:0.874943", 43),  # XGBoost
    ("[500]\teval-logloss:0.41906\ttrain-logloss:0.160439", 500),
    ("13129.7s | 202 | [365]\tvalid_0's auc: 0.610046", 365),  # LightGBM in a Kaggle log's cells
    ("> [1]\ttraining's multi_logloss: 1.1164", 1),  # quoted in a PR comment
    ("[400] steps_per_second=4.262, train_loss=6.9", 400),  # CLU logging_writer (google/flax#3364)
    # not a round: a fraction, a bracket inside the line, a timestamp
    ("[1/10] loss 3", None), ("x [3]\tloss 2", None), ("[2024-01-02 10:11:12] loss 3.0", None),
])
def test_a_leading_bracketed_round_is_the_step(text: str, step: int | None) -> None:
    assert step_of(text).step == step


@pytest.mark.parametrize(("lines", "mode"), [
    # CatBoost (catboost#274) and WaveGlow (waveglow#38): "N:" counts iterations, it is no rank label
    ([b"61:     learn 0.1211191019passed: 17.7 sec", b"62:     learn 0.1206035018passed: 17.7 sec",
      b"63:     learn 0.1198204937passed: 17.6 sec"], lt.LABEL_NONE),
    ([b"123873: -5.480178833", b"123874: -5.352289200", b"123875: -5.298225403"], lt.LABEL_NONE),
    # srun --label: ranks repeat, or one rank, or each rank once in rank order
    ([b"0: step 1", b"1: step 1", b"0: step 2", b"1: step 2"], lt.LABEL_SRUN),
    ([b"0: loss 1.0"] * 5, lt.LABEL_SRUN),
    ([b"0: start", b"1: start", b"2: start"], lt.LABEL_SRUN),
    ([b"[0] a", b"[1] b", b"[0] c"], lt.LABEL_BRACKET),
])
def test_an_iteration_counter_is_not_a_rank_label(lines: list[bytes], mode: int) -> None:
    assert lt.detect_label_mode(lines) == mode


def test_catboost_and_darknet_lines_through_the_scanner() -> None:
    catboost = "".join(f"{i}:     learn {v}passed: 17.7 sec      total: 20m 56s  remaining: 12m 50s\n"
                       for i, v in ((61, "0.1211191019"), (62, "0.1206035018"), (65, "nan")))
    s = _series(catboost)
    assert [st for st, _ in s["loss"]] == [61, 62, 65] and math.isnan(s["loss"][2][1])
    darknet = (" 74: -nan, -nan avg loss, 0.000100 rate, 39.074849 seconds, 1776 images\n"
               "Loaded: 0.000095 seconds\n"
               "Region Avg IOU: nan, Class: nan, Obj: nan, No Obj: nan, Avg Recall: 0.000000,  count: 2\n"
               " 75: -nan, -nan avg loss, 0.000100 rate, 40.009583 seconds, 1800 images\n")
    s = _series(darknet)
    assert [st for st, _ in s["loss"]] == [74, 75] and all(math.isnan(v) for _, v in s["avg_loss"])
    assert s["lr"][0][1] == 0.0001


def test_vse_logcollector_lines_are_left_to_their_style() -> None:
    # CrossmodalGroup/GSMN#10 (VSE++'s LogCollector): "Le" is the hinge loss and "Eit" the iteration; the
    # step-line parser would read them as two unnamed series at the epoch's batch index
    gsmn = ("2020-09-15 21:06:52,140 Epoch: [5][1169/2266]\tEit 12500  lr 0.0002  Le 25.60001564025879\tTime 0.898 "
            "(0.000)\tData 0.038 (0.000)\t\n"
            "2020-09-15 21:08:22,427 Epoch: [5][1269/2266]\tEit 12600  lr 0.0002  Le 25.600017547607422\tTime 0.895 "
            "(0.000)\tData 0.038 (0.000)\t\n")
    s = _series(gsmn)
    assert s["loss"] == [(12500, 25.60001564025879), (12600, 25.600017547607422)]
    assert "Le" not in s and "Eit" not in s
    # not: an "Epoch: [e][i/n]" line without Eit/Le stays the step-line parser's (maudzung/RTM3D#4)
    rtm = ("Train - Epoch: [127/300][ 35/464]\tTime  0.738 ( 0.738)\tData  0.000 ( 0.014)\t"
           "Loss 2.1274e+00 (1.5406e+00)\n"
           "Train - Epoch: [127/300][ 85/464]\tTime  0.730 ( 0.730)\tData  0.000 ( 0.006)\t"
           "Loss 1.2996e+00 (1.5485e+00)\n")
    reader = MetricReader()
    assert not any(reader.claims(line) for line in rtm.splitlines())
    assert [v for _, v in _series(rtm)["Loss"]] == [2.1274, 1.2996]


def test_a_loss_named_with_a_timing_word_is_read() -> None:
    # ufal/neuralmonkey#172: the runtime decoder's cross-entropy ("runtime_xent") is a loss, not a clock
    log = ("2016-12-02 02:01:49: target/runtime_xent: 7.31    target/train_xent: 7.31    target/BLEU-4: 0.08\n"
           "2016-12-02 02:02:20: target/runtime_xent: 7.15    target/train_xent: 7.15    target/BLEU-4: 0.08\n"
           "2016-12-02 02:02:50: target/runtime_xent: 7.17    target/train_xent: 7.17    target/BLEU-4: 0.07\n")
    s = _series(log)
    assert [v for _, v in s["target/runtime_xent"]] == [7.31, 7.15, 7.17]
    assert [v for _, v in s["target/train_xent"]] == [7.31, 7.15, 7.17]
    # not: clocks (HF's eval_runtime, a step's time) stay out of the generic reading
    assert timing_key("eval_runtime") and timing_key("iter_time") and not timing_key("target/runtime_xent")
    # and the loss rules judge it as a loss (a NaN there is loss.nonfinite's), the BLEU score not
    from autopsy.checks.nonfinite import is_loss_like
    assert is_loss_like("target/train_xent", None) and not is_loss_like("target/BLEU-4", None)


def test_a_megatron_loss_that_vanishes_from_its_line_is_nan() -> None:
    # epfLLM/Megatron-LLM#33: training_log prints a loss only `if avg > 0.0`, so a NaN "lm loss" leaves the line
    meg = ("iteration     3384/    8000 | consumed samples:       216576 | elapsed time per iteration (ms): 7845.5 | "
           "learning rate: 6.678E-06 | global batch size:    64 | lm loss: 7.072597E-01 | loss scale: 1.0 | grad norm: "
           "0.741 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
           "iteration     3385/    8000 | consumed samples:       216640 | elapsed time per iteration (ms): 7624.3 | "
           "learning rate: 6.676E-06 | global batch size:    64 | loss scale: 1.0 | gr\n")
    got = _series(meg)["lm loss"]
    assert got[0] == (3384, 0.7072597) and got[1][0] == 3385 and math.isnan(got[1][1])
    # not: an interval whose iterations the fp16 scaler all skipped has no loss to average (Megatron-LM GPT-345M
    # fp16 tutorial log): no NaN is made up, the loss-scale streak is loss.nonfinite's own test
    fp16 = ("[2024-09-14 19:44:24] iteration      400/  500000 | consumed samples:         6400 | elapsed time per "
            "iteration (ms): 457.6 | learning rate: 1.171875E-05 | global batch size:    16 | lm loss: 6.105231E+00 | "
            "loss scale: 4.0 | grad norm: 3.668 | number of skipped iterations:   2 | number of nan iterations:   0 |\n"
            "[2024-09-14 19:44:29] iteration      410/  500000 | consumed samples:         6560 | elapsed time per "
            "iteration (ms): 464.2 | learning rate: 1.171875E-05 | global batch size:    16 | loss scale: 1.0 | number "
            "of skipped iterations:  10 | number of nan iterations:  10 |\n")
    assert _series(fp16)["lm loss"] == [(400, 6.105231)]


def test_a_line_naming_a_splits_loss_is_read_without_a_step() -> None:
    # mozilla/DeepSpeech#238: one report line per epoch, no step on it
    s = _series("2016-11-25 17:41:55 STARTING Epoch 0009\n2016-11-25 18:29:38 Training loss=inf avg_cer=0.377731130 "
                "WER: 0.828431\n")
    assert math.isinf(s["Training loss"][0][1])
    # not: a loaded checkpoint's metadata (history), a dict line (fairseq's JSON epoch stats are the dict readers')
    assert not _series("2026-05-09 11:39:17 | INFO | [Checkpoint] Loaded <- C:\\Users\\x\\vgg16_best_model.pth  "
                       "(epoch=20, val_loss=1.0521)\n")
    reader = MetricReader()
    assert reader.read('2021-01-05 21:54:56 | INFO | train | {"epoch": 21, "train_loss": "816.933", '
                       '"train_num_updates": "643"}') is None



@pytest.mark.parametrize("line, setting", [
    # NeMo's Megatron trainer (bionemo#740's log): the batch size is repeated on every iteration line
    ("Training epoch 0, iteration 120/149 | lr: 3e-05 | consumed_samples: 121 | global_batch_size: 1 | "
     "global_step: 120 | reduced_train_loss: 1.233 | val_loss: 4.106", "global_batch_size"),
    (" iteration      100/    1000 | consumed samples:        12800 | global batch size:    32 | "
     "lm loss: 2.345E+00 |", "global batch size"),
])
def test_a_setting_repeated_on_a_metric_line_is_not_read(line: str, setting: str) -> None:
    r = MetricReader().read(line)
    assert r is not None and any("loss" in k for k, _ in r.values)
    assert setting not in dict(r.values)


@pytest.mark.parametrize("key, setting", [
    ("global_batch_size", True), ("micro batch size", True), ("seed", True), ("world_size", True),
    ("seq_length", True), ("bsz", False), ("loss", False), ("batch_loss", False), ("seed_loss", False),
])
def test_setting_keys(key: str, setting: bool) -> None:
    assert is_setting_key(key) is setting


def test_a_split_word_after_a_timestamp_with_its_set_index() -> None:
    # e2e ASR (fixtures/corpus/e2e_asr_39_caps_train_loss_cer_epochs_20_21): the logger's timestamp precedes the split
    # word, and the set's index 0 is no metric: the validation loss lands in the val split
    s = _series("2020-11-13 09:32:47,406 - (Epoch 20) TRAIN LOSS:0.1903 CER:6.53% LR:0.0000167\n"
                "2020-11-13 09:33:31,062 - VALID SET 0 LOSS:0.1780 CER:5.78%\n"
                "2020-11-13 13:55:36,838 - (Epoch 21) TRAIN LOSS:0.1832 CER:6.25% LR:0.0000163\n"
                "2020-11-13 13:56:31,427 - VALID SET 0 LOSS:0.1735 CER:5.59%\n")
    assert [v for _, v in s["val_LOSS"]] == [0.178, 0.1735]
    assert "VALID SET" not in s and "LOSS" not in s
    assert split_word("2020-11-13 09:33:31,062 - VALID SET 0 LOSS:0.1780 CER:5.78%") == "val"
    # not: a split word in prose after a timestamp, nor the bare section marker of the same log
    assert split_word("2020-11-13 09:32:47,461 - VALID") == ""
    assert split_word("2021-01-01 10:00:00 - Training started on 4 GPUs") == ""


def test_a_mean_over_the_epoch_names_the_same_loss() -> None:
    # radar detector (fixtures/corpus/radar_detector_3_mean_training_loss_nan): one report per epoch, no step
    s = _series("Training time for one epoch: 42.798298835754395 seconds\nMean Training loss : nan\n"
                "mean MSE : 778027.0 mean focal : 2242658.0 mean center loss : 2638.1787109375\n")
    assert math.isnan(s["Mean Training loss"][0][1])
    from autopsy.metrics import canonical_metric

    assert canonical_metric("Mean Training loss") == "loss" and canonical_metric("average loss") == "loss"
    # not: a mean of another quantity, or of a component loss the metric names do not list
    assert canonical_metric("mean MSE") is None and canonical_metric("mean center loss") is None


# --------------------------------------------------------------------------- metrics/batch12

def test_a_number_with_a_unit_is_masked_in_a_template() -> None:
    """CNTK#783's epoch summaries differ only in their numbers, one printed with a unit ("epochTime=24.2631s"): one
    template, learnt from its repeats (each line once had its own, so no template was learnt and the mse not read);
    a name with digits in it stays ("resnet50" keeps its "5")."""
    from autopsy.parsers.metric_reader import template

    a = template("Finished Epoch[ 1 of 15]: [Training] mse = 2975.58366667 * 6000; epochTime=24.2631s")
    b = template("Finished Epoch[ 2 of 15]: [Training] mse = 2507.21150000 * 6000; epochTime=21.0733s")
    assert a == b and "24" not in a
    assert template("model resnet50 step 3") == "model resnet5# step #"


def test_cntk_lines_through_the_scanner() -> None:
    """CNTK's minibatch lines (CNTK#638) are placed within their epoch from the percent done (1875 minibatches in
    the epoch: 1*1875 + 500, ...), its epoch summary at the epoch's end; the NaN spelled 1.#QNAN000 (CNTK#406) is a
    NaN point; an epoch summary alone (CNTK#783) is read at its epoch."""
    got = _series(
        " Epoch[ 1 of 30]-Minibatch[   1- 500, 26.67%]: ce = 2.30255688 \\* 16000; errTop1 = 0.89431250 \\* 16000;"
        " err = 0.89431250 \\* 16000; time = 1.9488s; samplesPerSecond = 8210.3\n"
        " Epoch[ 1 of 30]-Minibatch[ 501-1000, 53.33%]: ce = 2.30221021 \\* 16000; errTop1 = 0.89225000 \\* 16000;"
        " err = 0.89225000 \\* 16000; time = 0.6881s; samplesPerSecond = 23252.3\n"
        "Finished Epoch[ 1 of 30]: [Training] ce = 2.30196224 * 60000; errTop1 = 0.89016667 * 60000;\n")
    assert got["ce"] == [(2375, 2.30255688), (2875, 2.30221021), (3750, 2.30196224)]
    got = _series(" Epoch[ 1 of 1]-Minibatch[   1- 500]: SamplesSeen = 500; TrainLossPerSample =  5.87155566;\n"
                  " Epoch[ 1 of 1]-Minibatch[ 501-1000]: SamplesSeen = 500; TrainLossPerSample =  1.#QNAN000;\n")
    assert got["TrainLossPerSample"][0] == (500, 5.87155566) and math.isnan(got["TrainLossPerSample"][1][1])
    got = _series("".join(f"Finished Epoch[ {e} of 15]: [Training] mse = {v} * 6000; totalSamplesSeen = {6000 * e}; "
                          f"learningRatePerSample = 0.00024999998; epochTime={t}s\n"
                          for e, v, t in ((1, "2975.58366667", "24.2631"), (2, "2507.21150000", "21.0733"))))
    assert got["mse"] == [(1, 2975.58366667), (2, 2507.2115)]


def test_fastai_tables_and_progress_bar() -> None:
    """fastai's results table, its early two-word header (fastai#941 "epoch train loss valid loss accuracy_thresh
    f2_opt", one column per loss) and fastprogress's bar, whose last value is the smoothed training loss."""
    got = _series("epoch train loss valid loss accuracy_thresh f2_opt\n0 nan nan 0.997788 0.000000\n\n"
                  "71.39% [6930/9707 3:56:27<1:34:45 nan]\n")
    assert math.isnan(got["train_loss"][0][1]) and math.isnan(got["valid_loss"][0][1])
    assert got["accuracy_thresh"] == [(0, 0.997788)] and math.isnan(got["loss"][0][1])
    got = _series("epoch     train_loss  valid_loss  error_rate  time    \n"
                  "0         0.153826    0.034402    0.010149    00:12     \n"
                  "1         0.061225    0.021187    0.007442    00:12     \n")
    assert got["train_loss"] == [(0, 0.153826), (1, 0.061225)] and "time" not in got


@pytest.mark.parametrize(("tag", "loss_like"), [
    ("TrainLossPerSample", True), ("TrainLoss", True), ("CrossEntropy loss", True),  # CNTK, MXNet
    ("LossScale", False), ("lossless", False), ("SamplesSeen", False),
])
def test_camel_case_loss_tags(tag: str, loss_like: bool) -> None:
    from autopsy.checks.nonfinite import is_loss_like

    assert is_loss_like(tag, None) is loss_like


# mmaction2's TextLoggerHook JSON log line (quoted in a public repository's plotting script) and the
# official mmdetection ssd300_coco log.json's validation line; torchaudio's wav2letter MetricLogger
# (fixtures/corpus/torchaudio_632_wav2letter_validation_json); a kubeflow operator event's object name.
MMCV_TRAIN = ('{"mode": "train", "epoch": 1, "iter": 20, "lr": 0.05, "memory": 5082, "data_time": 0.48623, '
              '"top1_acc": 0.0, "top5_acc": 0.0, "loss_cls": 5.7752, "loss": 5.7752, "grad_norm": 2.36381, '
              '"time": 0.84397}')
MMDET_VAL = ('{"mode": "val", "epoch": 24, "iter": 9162, "lr": 2e-05, "bbox_mAP": 0.256, "bbox_mAP_50": 0.438, '
             '"bbox_mAP_75": 0.263, "bbox_mAP_s": 0.068, "bbox_mAP_m": 0.278, "bbox_mAP_l": 0.422, '
             '"bbox_mAP_copypaste": "0.256 0.438 0.263 0.068 0.278 0.422"}')
TORCHAUDIO_VAL = FIXTURES / "corpus" / "torchaudio_632_wav2letter_validation_json" / "train.log"


def test_a_dict_field_naming_its_split() -> None:
    from autopsy.parsers.metric_values import dict_split

    assert dict_split(MMDET_VAL) == "val" and dict_split(MMCV_TRAIN) == "train"
    assert split_word(MMDET_VAL) == "val"
    assert dict_split(TORCHAUDIO_VAL.read_text().splitlines()[0]) == "val"  # {"name": "validation", ...}
    # a name that is no split word, and a split word that is a value of another key, state none
    assert dict_split('Pod: default.kfto-01-master-0 exited with code 1\t{"type": "Normal", "object": '
                      '{"kind":"PyTorchJob","namespace":"default","name":"kfto-01"}}') == ""
    assert dict_split('{"dataset": "val", "loss": 0.5}') == ""


def test_a_dicts_split_field_sets_the_split_in_a_text_log(tmp_path: Path) -> None:
    # mmcv's JSON lines printed to a text log among other lines: the val record's metrics are the val split,
    # the train record's loss stays the training loss
    (tmp_path / "train.log").write_text("2021-03-01 10:00:00,000 - mmdet - INFO - workflow: [('train', 1)]\n"
                                        f"{MMCV_TRAIN}\n{MMDET_VAL}\n")
    df = load_run(tmp_path).scalars
    by_tag = {t: (set(g["split"]), set(g["metric"].dropna())) for t, g in df.groupby(df["tag"].astype(str))}
    assert by_tag["val_bbox_mAP"][0] == {"val"} and "bbox_mAP" not in by_tag
    assert by_tag["loss"][1] == {"loss"} and by_tag["loss"][0] <= {"", "train"} and "val_loss" not in by_tag
    # the position and the LR the val record repeats are no measurement on the val data
    assert by_tag["lr"][1] == {"lr"} and "val_lr" not in by_tag and "val_epoch" not in by_tag


def test_a_validation_records_average_loss_is_the_eval_loss(tmp_path: Path) -> None:
    # torchaudio's validation records, as a JSON-lines file and as lines of a text log: "average loss" is the
    # validation loss (split val, metric eval_loss), never the training loss
    lines = TORCHAUDIO_VAL.read_text()
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "train.log").write_text(lines)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "train.log").write_text("Namespace(arch='wav2letter', batch_size=128, epochs=30)\n" + lines)
    for sub, source in (("a", "jsonl"), ("b", "log")):
        df = load_run(tmp_path / sub).scalars
        loss = df[df["tag"].astype(str).str.endswith("average loss")]
        assert set(df["source"].astype(str)) == {source}
        assert len(loss) == 2 and set(loss["split"]) == {"val"} and set(loss["metric"]) == {"eval_loss"}, sub
        assert not (df["metric"] == "loss").any(), sub


@pytest.mark.parametrize(("tag", "metric"), [
    ("val_average loss", "eval_loss"), ("validation mean loss", "eval_loss"), ("average loss", "loss"),
    ("val_average_accuracy", None), ("val_averageloss", None),
])
def test_an_aggregate_word_after_the_split(tag: str, metric: str | None) -> None:
    from autopsy.metrics import canonical_metric

    assert canonical_metric(tag) == metric


# TCompoundE#3: tqdm(unit="ex") with a postfix, the script's own print glued after the bar.
TCOMPOUNDE = ("train loss:  82%|████████▏ | 606000/737924 [00:25<00:05, 24700.60ex/s, cont=nan, loss=nan, reg=nan]\n"
              "train loss:  83%|████████▎ | 612000/737924 [00:25<00:05, 24246.24ex/s, cont=nan, loss=nan, reg=nan]"
              "loss=nan,reg=nan,cont=nan\n\n")


def test_a_bar_counted_in_its_own_unit_is_read_from_its_postfix() -> None:
    s = _series(TCOMPOUNDE)
    assert [st for st, _ in s["loss"]] == [606000, 612000] and all(math.isnan(v) for _, v in s["loss"])
    assert set(s) == {"loss", "cont", "reg"}  # not the bar's percentage as a "train loss" of 82, 83
    # a datasets map bar in examples/s (deepseek_lsf_stderr_interleaved_syntaxerror) is no training bar
    assert _series("Map:   0%|          | 1/232 [00:00<00:29,  7.93 examples/s]\n"
                   "Map: 100%|██████████| 232/232 [00:00<00:00, 823.40 examples/s]\n") == {}
