"""Log formats found in review: quoted HF dicts (transformers 5), mmengine, nanoGPT/nanochat
rates, configuration printed in logs, IPython and flattened tracebacks, per-epoch bars,
and head+tail reading under ``--max-bytes-per-file``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from autopsy.metrics import canonical_metric
from autopsy.model import ParseStatus
from autopsy.parsers.log_series import parse_bar, parse_dict_record, parse_step_line
from autopsy.parsers.logs import compile_patterns, scan_log, scan_text
from autopsy.parsers.types import PatternSpec

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "runs"


def _series(scan, tag):
    return [(p.step, p.value) for p in scan.series if p.tag == tag]


def _config(scan):
    return {e.key: e for e in scan.config}


# --------------------------------------------------------------------- HF dicts


def test_transformers5_quoted_values_with_nan_and_inf():
    log = ("{'loss': '4.963', 'grad_norm': '0.7989', 'learning_rate': '0.0002', 'epoch': '0.5'}\n"
           "{'loss': 'nan', 'grad_norm': 'inf', 'learning_rate': '-inf', 'epoch': '1'}\n")
    scan = scan_text(log)
    loss = _series(scan, "loss")
    assert loss[0] == (1, 4.963) and loss[1][0] == 2 and math.isnan(loss[1][1])
    assert _series(scan, "grad_norm") == [(1, 0.7989), (2, math.inf)]
    assert _series(scan, "learning_rate") == [(1, 0.0002), (2, -math.inf)]


def test_quoted_non_numbers_are_not_values():
    rec = parse_dict_record("{'loss': '2.5', 'run_name': 'exp-1', 'note': '3 apples'}")
    assert rec is not None
    keys, values, step = rec
    assert keys == ["loss"] and values == [2.5] and step is None


# W&B's logs/debug.log (wandb 0.31, generated: fixtures/runs/wandb_clean) prints the run's config
# as a dict; a settings dict introduced as such is not a logged step, whatever its keys.
@pytest.mark.parametrize("line", [
    "config: {'learning_rate': 0.05, 'max_steps': 60, 'batch_size': 32, 'optimizer': 'adamw', '_wandb': {}}",
    "hparams = {'lr': 0.001, 'loss_weight': 0.5}",
    "INFO:root:args: {'learning_rate': 3e-4, 'epochs': 10}",
])
def test_a_dict_introduced_as_configuration_is_not_metrics(line: str) -> None:
    assert parse_dict_record(line) is None
    assert not scan_text(line + "\n" + line + "\n").series


@pytest.mark.parametrize("line", [
    "{'loss': 2.0491, 'learning_rate': 0.0001961913563176343, 'epoch': 0.28}",
    "[2024-01-02 10:00:00] train metrics: {'loss': 1.5, 'lr': 0.01}",
    "my_config_run step 5 {'loss': 1.5}",
])
def test_a_metrics_dict_after_other_words_is_still_read(line: str) -> None:
    rec = parse_dict_record(line)
    assert rec is not None and rec[0][0] == "loss"


@pytest.mark.parametrize("line", [
    "{'loss': 2.3, 'step': 400, 'learning_rate': 1e-4}",
    '{"loss": 2.3, "step": 400, "learning_rate": 1e-4}',
    "{'loss': '2.3', 'step': '400', 'learning_rate': '0.0001'}",
    '{"step": 400, "train/loss": 2.3}',
])
def test_explicit_step_key_wins_and_is_not_a_metric(line):
    # a bar says 17: the dict's own step is the truth
    scan = scan_text(" 17%|█▋        | 17/100 [00:05<00:25,  3.30it/s]\n" + line + "\n")
    tags = {p.tag for p in scan.series}
    assert "step" not in tags
    loss_tag = "train/loss" if "train/loss" in tags else "loss"
    assert _series(scan, loss_tag) == [(400, 2.3)]
    assert scan.last_step == 400


def test_fixture_disk_full_log_yields_a_loss_series():
    p = FIXTURES / "disk_full" / "train.log"
    scan = scan_log(p, "train.log", compile_patterns(()), max_bytes=1 << 30, rank=None)
    loss = _series(scan, "loss")
    assert len(loss) >= 4
    assert loss[0][1] == pytest.approx(5.096)
    assert all(s is not None for s, _ in loss)


# --------------------------------------------------------------------- mmengine


MM_ITER = ("2023/05/01 12:00:00 - mmengine - INFO - Iter(train) [  10/5000]  lr: 1.0000e-04  eta: 1:23:45  "
           "time: 0.5000  data_time: 0.0100  memory: 1234  grad_norm: 3.2100  loss: 2.3456")


def test_mmengine_iter_line():
    sl = parse_step_line(MM_ITER)
    assert sl is not None and sl.step == 10 and sl.total == 5000
    got = dict(sl.values)
    assert got["lr"] == 1e-4 and got["time"] == 0.5 and got["data_time"] == 0.01
    assert got["loss"] == 2.3456 and got["grad_norm"] == 3.21
    assert "eta" not in got


def test_mmengine_series_and_max_steps():
    scan = scan_text(MM_ITER + "\n" + MM_ITER.replace("[  10/5000]", "[  20/5000]").replace("2.3456", "2.1") + "\n")
    assert _series(scan, "loss") == [(10, 2.3456), (20, 2.1)]
    assert _series(scan, "data_time") == [(10, 0.01), (20, 0.01)]
    assert scan.max_steps_seen == 5000 and scan.last_step == 20
    assert canonical_metric("time") == "step_time" and canonical_metric("data_time") == "data_time"


@pytest.mark.parametrize(("line", "step"), [
    # mmengine EpochBasedTrainLoop: epochs count from 1
    ("2023/05/01 12:00:00 - mmengine - INFO - Epoch(train)  [2][ 50/500]  lr: 2.0000e-02  eta: 0:10:00  "
     "time: 0.3000  data_time: 0.0050  memory: 3000  loss: 1.5000", 550),
    # mmcv 1.x runner
    ("2021-07-01 12:00:00,000 - mmdet - INFO - Epoch [1][50/7330]\tlr: 1.000e-02, eta: 1 day, 2:00:00, "
     "time: 0.512, data_time: 0.050, memory: 3000, loss_cls: 0.5, loss: 1.5, grad_norm: 10.0", 50),
])
def test_mmengine_epoch_forms(line, step):
    sl = parse_step_line(line)
    assert sl is not None and sl.step == step and sl.total is None
    got = dict(sl.values)
    assert got["loss"] == 1.5 and got["time"] in (0.3, 0.512)


def test_mmengine_val_lines_are_not_training_steps():
    assert parse_step_line("2023/05/01 - mmengine - INFO - Iter(val) [ 50/500]  eta: 0:01:00  time: 0.1") is None


# ------------------------------------------------------------- nanoGPT / nanochat


def test_nanochat_tok_per_sec_is_throughput_and_nanogpt_time_is_seconds():
    assert canonical_metric("tok/sec") == "throughput"
    scan = scan_text("iter 100: loss 2.3000, time 12.30ms, mfu 12.30%\n")
    assert _series(scan, "time") == [(100, pytest.approx(0.0123))]
    assert canonical_metric("time") == "step_time"


# --------------------------------------------------------------------- config


NANOGPT_HEAD = """\
Overriding config with config/train_shakespeare_char.py:
# train a miniature character-level shakespeare model
out_dir = 'out-shakespeare-char'
eval_interval = 250 # keep frequent because we'll overfit

learning_rate = 1e-3 # with baby networks can afford to go a bit higher
max_iters = 5000
min_lr = 1e-4 # learning_rate / 10 usually
batch_size = 64
Overriding: learning_rate = 0.002
Overriding: compile = False
tokens per iteration will be: 16,384
found vocab_size = 65 (inside data/shakespeare_char/meta.pkl)
Initializing a new model from scratch
iter 0: loss 4.2874, time 1234.56ms, mfu -100.00%
"""


def test_nanogpt_configurator_and_meta():
    scan = scan_text(NANOGPT_HEAD)
    cfg = _config(scan)
    assert cfg["vocab_size"].value == 65 and cfg["vocab_size"].line == 13
    assert cfg["min_lr"].value == 1e-4 and cfg["min_lr"].line == 8
    assert cfg["max_steps"].value == 5000 and cfg["max_steps"].raw_key == "max_iters"
    assert cfg["per_device_train_batch_size"].value == 64
    assert cfg["output_dir"].value == "out-shakespeare-char"
    assert all(e.source == "log" and e.path == "test.log" for e in scan.config)
    # the command-line override printed later is what the program really used
    lrs = [e for e in scan.config if e.key == "learning_rate"]
    assert [(e.value, e.line) for e in lrs] == [(1e-3, 6), (0.002, 10)]
    assert any(e.key == "compile" and e.value is False for e in scan.config)
    assert _series(scan, "loss") == [(0, 4.2874)]


HF_BLOCK = """\
[INFO|trainer.py:2128] 2024-05-01 12:00:00,000 >> ***** Running training *****
[INFO|trainer.py:2129] 2024-05-01 12:00:00,000 >>   Num examples = 1,000
[INFO|trainer.py:2130] 2024-05-01 12:00:00,000 >>   Num Epochs = 3
[INFO|trainer.py:2131] 2024-05-01 12:00:00,000 >>   Instantaneous batch size per device = 8
[INFO|trainer.py:2134] 2024-05-01 12:00:00 >>   Total train batch size (w. parallel, distributed & accumulation) = 32
[INFO|trainer.py:2135] 2024-05-01 12:00:00,000 >>   Gradient Accumulation steps = 4
[INFO|trainer.py:2136] 2024-05-01 12:00:00,000 >>   Total optimization steps = 500
[INFO|trainer.py:2137] 2024-05-01 12:00:00,000 >>   Number of trainable parameters = 124,439,808
"""


def test_hf_running_training_block():
    cfg = _config(scan_text(HF_BLOCK))
    assert cfg["num_examples"].value == 1000
    assert cfg["num_train_epochs"].value == 3
    assert cfg["per_device_train_batch_size"].value == 8
    assert cfg["total_train_batch_size"].value == 32
    assert cfg["gradient_accumulation_steps"].value == 4
    assert cfg["max_steps"].value == 500 and cfg["max_steps"].line == 7
    assert cfg["num_trainable_parameters"].value == 124_439_808
    assert cfg["max_steps"].raw_key == "Total optimization steps"


def test_hf_evaluation_block_is_not_training_config():
    log = HF_BLOCK + "***** Running Evaluation *****\n  Num examples = 200\n  Batch size = 16\n"
    entries = [e for e in scan_text(log).config if e.key == "num_examples"]
    assert [e.value for e in entries] == [1000]


def test_plain_text_mentioning_words_is_not_config():
    scan = scan_text("we are Overriding nothing here\nthe Num Epochs line was missing = bad\n")
    assert scan.config == []


def test_run_config_value_uses_log_entries(tmp_path):
    from autopsy.run import LoadOptions, load_run

    (tmp_path / "train.log").write_text(HF_BLOCK)
    (tmp_path / "config.yaml").write_text("max_steps: 100\nlearning_rate: 0.1\n")
    run = load_run(tmp_path, LoadOptions())
    assert run.config_value("num_train_epochs").source == "log"
    # the log prints what the program used: above a yaml config, below launch flags / args dumps
    assert run.config_value("max_steps").value == 500
    assert run.config_value("learning_rate").value == 0.1
    assert "log" in set(run.config["source"])


# --------------------------------------------------------------------- tracebacks


IPYTHON = """\
---------------------------------------------------------------------------
OutOfMemoryError                          Traceback (most recent call last)
Cell In[5], line 3
      1 x = torch.randn(1 << 30, device="cuda")
      2 # the forward pass
----> 3 model(x)

File /usr/lib/python3/site-packages/torch/nn/modules/module.py:1501, in Module._call_impl(self, *args, **kwargs)
   1497 # If we don't have any hooks, we want to skip the rest of the logic in
   1498 # this function, and just call forward.
-> 1501     return forward_call(*args, **kwargs)

OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)
"""


def test_ipython_traceback():
    scan = scan_text(IPYTHON)
    assert len(scan.tracebacks) == 1
    tb = scan.tracebacks[0]
    assert tb.exc_type == "OutOfMemoryError"
    assert tb.message.startswith("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert [(f.file, f.line) for f in tb.frames] == [
        ("Cell In[5]", 3), ("/usr/lib/python3/site-packages/torch/nn/modules/module.py", 1501)]
    assert tb.frames[0].code == "model(x)"
    assert tb.frames[1].function == "Module._call_impl"
    assert tb.frames[1].code == "return forward_call(*args, **kwargs)"
    assert tb.line_start == 2 and tb.line_end == 13


def test_old_ipython_traceback():
    log = ("---------------------------------------------------------------------------\n"
           "KeyError                                  Traceback (most recent call last)\n"
           "<ipython-input-3-0f2b8a> in <module>\n"
           "----> 1 d['x']\n"
           "\n"
           "/home/u/lib.py in get(self, k)\n"
           "     10     def get(self, k):\n"
           "---> 11         return self.d[k]\n"
           "\n"
           "KeyError: 'x'\n")
    tb = scan_text(log).tracebacks[0]
    assert tb.exc_type == "KeyError" and tb.message == "'x'"
    assert [(f.file, f.line, f.function) for f in tb.frames] == [
        ("<ipython-input-3-0f2b8a>", 1, "<module>"), ("/home/u/lib.py", 11, "get")]


def test_traceback_with_literal_backslash_n():
    line = ('2024-05-01 12:00:00 ERROR worker crashed: Traceback (most recent call last):\\n'
            '  File \\"/w/train.py\\", line 10, in main\\n    loss.backward()\\n'
            'RuntimeError: CUDA error: device-side assert triggered\\n')
    scan = scan_text("before\n" + line + "\nafter\n")
    assert len(scan.tracebacks) == 1
    tb = scan.tracebacks[0]
    assert tb.exc_type == "RuntimeError" and tb.message == "CUDA error: device-side assert triggered"
    assert [(f.file, f.line, f.function, f.code) for f in tb.frames] == [("/w/train.py", 10, "main", "loss.backward()")]
    assert tb.line_start == tb.line_end == 2


def test_traceback_flattened_with_spaces():
    line = ('job 7 failed: Traceback (most recent call last): File "/w/train.py", line 10, in main '
            'loss.backward() File "/t/autograd.py", line 200, in backward _engine_run() '
            'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB')
    tb = scan_text(line + "\n").tracebacks[0]
    assert tb.exc_type == "torch.OutOfMemoryError"
    assert tb.message == "CUDA out of memory. Tried to allocate 20.00 MiB"
    assert [(f.file, f.line) for f in tb.frames] == [("/w/train.py", 10), ("/t/autograd.py", 200)]


def test_prefixed_header_on_its_own_line_opens_a_traceback():
    log = ("2024-05-01 12:00:00 ERROR Traceback (most recent call last):\n"
           '  File "a.py", line 3, in f\n'
           "    g()\n"
           "ValueError: bad\n")
    tb = scan_text(log).tracebacks[0]
    assert tb.exc_type == "ValueError" and len(tb.frames) == 1


# --------------------------------------------------------------------- per-epoch steps


def test_per_epoch_bar_counter_is_not_the_global_step():
    bar = parse_bar("[Info: Device_0: train_Ep_11: loss: 4.38811e+02; avg_loss: 4.53619e+02]:  20%|| 11/56 "
                    "[00:02<00:08,  5.02it/s]")
    assert bar is not None and bar.n == 11 and bar.step is None
    lightning = parse_bar("Epoch 3:  45%|████▌     | 45/100 [00:10<00:12,  4.50it/s, v_num=0, train_loss=2.3]")
    assert lightning is not None and lightning.step == 345


def test_hit_in_per_epoch_log_gets_no_step():
    specs = compile_patterns([PatternSpec("crash/segv", r"Segmentation fault", ("Segmentation fault",))])
    log = ("[Info: Device_0: train_Ep_11: loss: 4.38811e+02; avg_loss: 4.53619e+02]:  20%|| 11/56 "
           "[00:02<00:08,  5.02it/s]Segmentation fault (core dumped)\n")
    scan = scan_text(log, specs)
    hit = scan.hits["crash/segv"].first[0]
    assert hit.step is None


def test_step_lines_that_restart_every_epoch_lose_their_step():
    lines = [f"epoch {e} | step {s}/3 | loss {2.0 - e * 0.1:.2f}" for e in (1, 2) for s in (1, 2, 3)]
    specs = compile_patterns([PatternSpec("x/boom", r"boom", ("boom",))])
    scan = scan_text("\n".join(lines) + "\nboom\n", specs)
    assert scan.hits["x/boom"].first[0].step is None


# --------------------------------------------------------------------- head + tail


TB_END = ('Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n    main()\n'
          "RuntimeError: NCCL error: unhandled system error\n")


def _big_log(tmp_path: Path, lines: int) -> tuple[Path, bytes]:
    body = b"".join(b"step %d | loss 2.5\n" % i for i in range(lines))
    data = body + TB_END.encode()
    p = tmp_path / "train.log"
    p.write_bytes(data)
    return p, data


def test_max_bytes_reads_head_and_tail_with_exact_line_numbers(tmp_path):
    p, data = _big_log(tmp_path, 2000)
    budget = 4096
    scan = scan_log(p, "train.log", compile_patterns(()), max_bytes=budget, rank=None)
    assert scan.status is ParseStatus.TRUNCATED
    assert scan.bytes_read <= budget
    tb = scan.tracebacks[0]
    assert tb.exc_type == "RuntimeError"
    assert tb.line_start == 2001  # the middle's newlines were counted
    assert scan.n_lines == data.count(b"\n")
    assert "byte ranges 0-" in scan.note and f"of {len(data):,}" in scan.note
    assert scan.approx_lines_from is None
    steps = [s for s, _ in _series(scan, "loss")]
    assert steps[0] == 0 and steps[-1] == 1999 and 1000 not in steps
    assert scan.tail[-1] == (data.count(b"\n"), "RuntimeError: NCCL error: unhandled system error")


def test_max_bytes_estimates_line_numbers_when_the_middle_is_huge(tmp_path, monkeypatch):
    from autopsy.parsers import log_window

    monkeypatch.setattr(log_window, "COUNT_MIDDLE_MAX", 1000)
    p, _ = _big_log(tmp_path, 20000)
    scan = scan_log(p, "train.log", compile_patterns(()), max_bytes=4096, rank=None)
    tb = scan.tracebacks[0]
    assert abs(tb.line_start - 20001) < 2000  # an estimate: the lines of the middle are longer
    assert scan.approx_lines_from is not None and scan.approx_lines_from <= tb.line_start
    assert "line numbers" in scan.note and "~" in scan.note


def test_max_bytes_head_and_tail_keep_hits_of_both_ends(tmp_path):
    specs = compile_patterns([PatternSpec("x/nccl", r"NCCL error", ("NCCL error",))])
    p, _ = _big_log(tmp_path, 3000)
    scan = scan_log(p, "train.log", specs, max_bytes=2000, rank=None)
    hl = scan.hits["x/nccl"]
    assert hl.count == 1 and hl.first[0].lineno == 3004
    assert hl.first[0].offset == p.read_bytes().index(b"RuntimeError: NCCL")


# ------------------------------------------------------------- PaddleDetection 1.x quoted losses

@pytest.mark.parametrize(("line", "step", "want"), [
    # PaddlePaddle/PaddleDetection#5337: the loss printed as a dict repr's quoted string, 'nan' from iteration 20
    ("2022-03-09 15:20:50,962-INFO: iter: 20, lr: 0.000085, 'loss': 'nan', eta: 5 days, 18:42:12, batch_cost: 1.24839 "
     "sec, ips: 1.60206 images/sec", 20, {"lr": 8.5e-05, "loss": math.nan, "batch_cost": 1.24839, "ips": 1.60206}),
    # PaddlePaddle/PaddleDetection#1946: component losses quoted too
    ("2020-12-22 08:05:25,238-INFO: iter: 1240, lr: 0.019992, 'loss_cls': '0.736654', 'loss_bbox': '0.011202', "
     "'loss': '1.263390', eta: 10:52:43, batch_cost: 0.39655 sec, ips: 5.04344 images/sec", 1240,
     {"lr": 0.019992, "loss_cls": 0.736654, "loss_bbox": 0.011202, "loss": 1.26339, "batch_cost": 0.39655,
      "ips": 5.04344}),
])
def test_quoted_keys_and_values_on_a_step_line(line: str, step: int, want: dict[str, float]) -> None:
    sl = parse_step_line(line)
    assert sl is not None and sl.step == step
    got = dict(sl.values)
    assert got.keys() == want.keys()  # not: the eta ("5 days, 18:42:12", "10:52:43")
    assert all(math.isnan(v) if math.isnan(want[k]) else v == want[k] for k, v in got.items())
