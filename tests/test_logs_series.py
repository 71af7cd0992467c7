"""Log scanner: series extraction, steps, bars, timestamps, rank prefixes (real-world lines)."""

from __future__ import annotations

import math

import pytest

from autopsy.parsers.log_series import parse_bar, parse_dict_line, parse_step_line
from autopsy.parsers.logs import scan_text


def _series(scan, tag):
    return [(p.step, p.value) for p in scan.series if p.tag == tag]


def test_hf_dict_lines_with_tqdm_redraws_take_step_from_bar():
    # HF Trainer writes the dict through tqdm.write: bar redraws with \r, then the dict
    log = ("\r  0%|          | 0/100 [00:00<?, ?it/s]"
           "\r  5%|▌         | 5/100 [00:02<00:40,  2.35it/s]"
           "\r 10%|█         | 10/100 [00:04<00:38,  2.36it/s]\r                    \r"
           "{'loss': 2.3412, 'grad_norm': 1.2, 'learning_rate': 1.9e-05, 'epoch': 0.01}\n"
           "\r 20%|██        | 20/100 [00:08<00:34,  2.36it/s]"
           "{'loss': nan, 'grad_norm': inf, 'learning_rate': 1.8e-05, 'epoch': 0.02}\n")
    scan = scan_text(log)
    loss = _series(scan, "loss")
    assert loss[0] == (10, 2.3412)
    assert loss[1][0] == 20 and math.isnan(loss[1][1])
    assert _series(scan, "grad_norm")[1] == (20, math.inf)
    assert _series(scan, "learning_rate") == [(10, 1.9e-05), (20, 1.8e-05)]
    assert scan.max_steps_seen == 100
    assert scan.last_step == 20
    assert {p.tag for p in scan.series} >= {"it/s", "epoch"}
    assert all(p.lineno in (1, 2) for p in scan.series)


def test_eval_dict_does_not_take_the_eval_bar_step():
    log = ("\r 50%|█████     | 50/100 [00:20<00:20,  2.50it/s]\n"
           "\r  0%|          | 0/8 [00:00<?, ?it/s]\r100%|██████████| 8/8 [00:01<00:00,  6.12it/s]\n"
           "{'eval_loss': 2.1, 'eval_runtime': 1.3, 'eval_samples_per_second': 48.1, 'epoch': 0.5}\n")
    scan = scan_text(log)
    assert _series(scan, "eval_loss") == [(50, 2.1)]


def test_json_dict_variant_and_no_bar_falls_back_to_count():
    log = ('{"loss": 3.5, "learning_rate": 0.0001, "epoch": 0.1}\n'
           '{"loss": NaN, "learning_rate": 0.0001, "epoch": 0.2}\n'
           "{'max_length': 20, 'do_sample': True}\n")  # a generation config: not metrics
    scan = scan_text(log)
    loss = _series(scan, "loss")
    assert [s for s, _ in loss] == [1, 2] and math.isnan(loss[1][1])
    assert "max_length" not in {p.tag for p in scan.series}


def test_parse_dict_line_rejects_non_metrics_and_keeps_numbers_only():
    assert parse_dict_line("{'a': 1}") is None
    keys, vals = parse_dict_line("{'train_runtime': 123.4, 'train_loss': 2.1, 'epoch': 3.0, 'note': 'x'}")
    assert keys == ["train_runtime", "train_loss", "epoch"] and vals == [123.4, 2.1, 3.0]


@pytest.mark.parametrize(("line", "step", "total", "values"), [
    # nanochat base_train.py
    ("step 00250/03520 (7.10%) | loss: 3.210000 | lrm: 1.00 | dt: 120.21ms | tok/sec: 4,361 | mfu: 12.30",
     250, 3520, {"loss": 3.21, "lrm": 1.0, "dt": 0.12021, "tok/sec": 4361.0, "mfu": 12.3}),
    ("step 100 | loss 2.3 | lr 1e-4", 100, None, {"loss": 2.3, "lr": 1e-4}),
    ("Step 100: loss=2.3", 100, None, {"loss": 2.3}),
    # nanoGPT train.py
    ("iter 100: loss 2.3456, time 12.34ms, mfu 12.34%", 100, None, {"loss": 2.3456, "time": 0.01234, "mfu": 12.34}),
    ("step 250: train loss 4.2123, val loss 4.3456", 250, None, {"train loss": 4.2123, "val loss": 4.3456}),
    ("[step 100/1000] loss: 2.3", 100, 1000, {"loss": 2.3}),
])
def test_step_line_formats(line, step, total, values):
    sl = parse_step_line(line)
    assert sl is not None and sl.step == step and sl.total == total
    got = dict(sl.values)
    for k, v in values.items():
        assert got[k] == pytest.approx(v)


@pytest.mark.parametrize("line", [
    "  warmup_steps: 100", "max_steps is given, it will override any value given in num_train_epochs",
    "Total optimization steps = 1,000", "Saving model checkpoint to out/checkpoint-500",
])
def test_not_step_lines(line):
    assert parse_step_line(line) is None


def test_nanochat_log_sets_steps():
    log = "".join(f"step {s:05d}/03520 ({s / 35.2:.2f}%) | loss: {4 - s / 1000:.6f} | lrm: 1.00 | dt: 120.21ms\n"
                  for s in range(0, 300, 50))
    scan = scan_text(log)
    assert scan.last_step == 250 and scan.max_steps_seen == 3520
    assert _series(scan, "loss")[-1] == (250, pytest.approx(3.75))


def test_lightning_and_accelerate_bars():
    bar = parse_bar("Epoch 2:  45%|████▌     | 45/100 [00:10<00:12,  4.50it/s, v_num=0, train_loss=2.300]")
    assert bar is not None and bar.epoch == 2 and bar.n == 45 and bar.step == 245
    assert bar.rate == 4.5 and bar.unit == "it/s" and dict(bar.postfix) == {"train_loss": 2.3}
    slow = parse_bar(" 12%|█▏        | 120/1000 [10:00<1:13:20,  5.00s/it]")
    assert slow is not None and slow.unit == "s/it" and slow.rate == 5.0
    load = parse_bar("Loading checkpoint shards: 100%|██████████| 2/2 [00:01<00:00,  1.50it/s]")
    assert load is not None and not load.training
    log = "".join(f"\rEpoch 0:  {i}%|#   | {i}/100 [00:10<00:12,  4.50it/s, v_num=0, train_loss={3 - i / 100:.3f}]"
                  for i in range(1, 30))
    scan = scan_text(log + "\n")
    assert (29, pytest.approx(2.71)) in _series(scan, "train_loss")
    assert any(p.tag == "it/s" for p in scan.series)


def test_timestamps_and_wall_times():
    log = ("[2024-05-01 12:00:00,500] INFO start\n"
           "some line\n"
           "2024-05-01T12:00:10Z step 5 | loss 2.0\n"
           "I0501 12:00:20.250000  4242 ProcessGroupNCCL.cpp:1234] NCCL something\n")
    scan = scan_text(log)
    base = 1714564800.0  # 2024-05-01 12:00:00 UTC
    assert scan.first_wall_time == pytest.approx(base + 0.5)
    assert scan.series[0].wall_time == pytest.approx(base + 10)
    # glog lines carry no year: the file's modification year is assumed
    assert scan.last_wall_time is not None


def test_rank_prefixes_are_stripped_and_recorded():
    from autopsy.parsers.logs import compile_patterns
    from autopsy.parsers.types import PatternSpec

    pats = compile_patterns([PatternSpec("x/oom", r"^torch\.OutOfMemoryError: CUDA out of memory", ("CUDA out",))])
    log = ("[default3]:[rank3]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB\n"
           "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB\n"
           "stderr: [RANK 5] torch.OutOfMemoryError: CUDA out of memory.\n")
    scan = scan_text(log, pats)
    hits = scan.hits["x/oom"].all_kept()
    assert [h.rank for h in hits] == [3, 1, 5]
    assert hits[0].text.startswith("torch.OutOfMemoryError")
    assert scan.ranks_seen == (1, 3, 5)


def test_srun_labels():
    log = "".join(f"{r}: step {s} | loss {2 - s / 100}\n" for s in range(3) for r in (0, 1))
    scan = scan_text(log)
    assert scan.ranks_seen == (0, 1)
    assert {p.rank for p in scan.series} == {0, 1}


def test_single_rank_file_gets_the_rank():
    scan = scan_text("[rank2]: hello\n[rank2]: world\n")
    assert scan.rank == 2


def test_head_and_tail():
    log = "".join(f"line {i}\n" for i in range(1, 201))
    scan = scan_text(log)
    assert scan.head[:2] == ["line 1", "line 2"] and len(scan.head) == 20
    assert scan.tail[-1] == (200, "line 200") and len(scan.tail) == 50 and scan.tail[0] == (151, "line 151")
    assert scan.n_lines == 200
