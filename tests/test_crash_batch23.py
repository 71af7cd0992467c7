"""Crash shapes of crash batch23 (issue 11): a tensor of the wrong rank given to a matrix product or a
convolution ("mat2 must be a matrix, got 1-D tensor", "Expected 3D (unbatched) or 4D (batched) input to
conv2d"), and a tqdm bar whose 0% redraw opens the log's last line while later redraws on that same line show
it moving: the loop got its batches, no stall at setup.

Each log is quoted from a crash/batch23 corpus entry (named beside it) or another real message.
"""

from __future__ import annotations

import pytest
from builders import analyze_text, rules_of

# longlive: Wan2.1's time embedding (F.linear) given a 1-D weight on every torchrun rank
_MAT2_NOT_MATRIX = (
    "[rank3]: Traceback (most recent call last):\n"
    '[rank3]:   File "/z_data/ljz/longlive_modify/train_opens2v.py", line 107, in <module>\n'
    "[rank3]:     main()\n"
    '[rank3]:   File "/z_data/ljz/longlive_modify/wan/modules/causal_model.py", line 1286, in _forward_train\n'
    "[rank3]:     e = self.time_embedding(\n"
    '[rank3]:   File "/z_data/conda_envs_amd/ljz_longlive/lib/python3.10/site-packages/torch/nn/modules/linear.py", '
    "line 125, in forward\n"
    "[rank3]:     return F.linear(input, self.weight, self.bias)\n"
    "[rank3]: RuntimeError: mat2 must be a matrix, got 1-D tensor\n")
# torch's conv2d on a 5-D batch (an extra unsqueeze), as users post it
_CONV_RANK = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 41, in <module>\n'
    "    output = model(images)\n"
    '  File "/usr/lib/python3/dist-packages/torch/nn/modules/conv.py", line 456, in _conv_forward\n'
    "    return F.conv2d(input, weight, bias, self.stride,\n"
    "RuntimeError: Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: "
    "[64, 1, 1, 28, 28]\n")
# a dtype error is no shape error
_DTYPE = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 41, in <module>\n'
    "    output = model(images)\n"
    "RuntimeError: expected scalar type Float but found Half\n")


@pytest.mark.parametrize("text", [_MAT2_NOT_MATRIX, _CONV_RANK])
def test_tensor_of_the_wrong_rank_is_code_shape(tmp_path, text: str) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, text, "train_output.log")
    assert report.primary is not None and report.primary.rule == "code.shape"


def test_dtype_error_is_not_code_shape(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _DTYPE, "train_output.log")
    assert "code.shape" not in rules_of(report)


# rcnn_oct: one physical line of tqdm redraws (carriage returns), from 0/5049 to 85/5049, cut by the commit
_HEAD = ("Using device: cuda\nBuilding model...\n\nStarting training for 1 epochs...\n\n")
_BAR_MOVED = (_HEAD + "\rEpoch 1:   0%|          | 0/5049 [00:00<?, ?it/s]"
              "\rEpoch 1:   0%|          | 0/5049 [00:01<?, ?it/s, loss=1.3088]"
              "\rEpoch 1:   0%|          | 1/5049 [00:01<2:16:49,  1.63s/it, loss=1.3088]"
              "\rEpoch 1:   0%|          | 2/5049 [00:02<1:27:23,  1.04s/it, loss=0.1358]"
              "\rEpoch 1:   0%|          | 3/5049 [00:02<1:05:12,  1.29it/s, loss=0.1290]")
# the same bar that never left 0/5049: the loop never got its first batch
_BAR_AT_ZERO = _HEAD + "\rEpoch 1:   0%|          | 0/5049 [00:00<?, ?it/s]"


def test_bar_moving_on_the_setup_line_is_no_stall(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _BAR_MOVED, "train_output.log")
    assert "run.stalled" not in rules_of(report)


def test_bar_left_at_zero_is_still_a_setup_stall(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _BAR_AT_ZERO, "train_output.log")
    assert "run.stalled" in rules_of(report)


# sslvit_video: a video SSL run's step lines name the total loss "L" beside its parts (mfm, top)
_L_STEP_LINES = "".join(
    f"[INFO] ep=15 step={s}/193 LR=4.97e-04 L={v} mfm={m}(w=1.00,mask=0.75,ema=0.996) top=1.2139(w=1.00,shuf=0.50)"
    f" top_acc=0.5417\n"
    for s, v, m in [(20, "1.2165", "0.0026"), (40, "1.2261", "0.0019"), (60, "1.3373", "0.0017"),
                    (80, "1.2375", "0.0016"), (100, "1.1614", "0.0021"), (120, "nan", "nan"),
                    (140, "nan", "nan"), (160, "nan", "nan")])


def test_one_letter_L_of_a_step_line_is_the_loss(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _L_STEP_LINES, "train_ssl.log")
    assert report.primary is not None and report.primary.rule == "loss.nonfinite"


def test_L_beside_a_named_loss_is_not_the_loss() -> None:
    from autopsy.parsers.log_series import parse_step_line

    # a step line that names its loss keeps "L" as whatever it is (here a sequence length)
    sl = parse_step_line("step 100 | loss 2.31 | L 512 | lr 3e-4")
    assert sl is not None
    assert dict(sl.values)["loss"] == 2.31 and dict(sl.values)["L"] == 512


# tnnform: nanoGPT's W&B run summary at the end of the log holds the model's size beside its losses
_WANDB_SUMMARY = (b"wandb: Run summary:\n"
                  b"wandb: attention_order 3\n"
                  b"wandb:            iter 3000\n"
                  b"wandb:              lr 0.0001\n"
                  b"wandb:        n_params 24627840\n"
                  b"wandb:      train/loss 0.02522\n"
                  b"wandb:        val/loss 0.85618\n"
                  b"wandb: \n")


def test_wandb_summary_reads_losses_not_the_parameter_count() -> None:
    from autopsy.parsers import log_text as lt
    from autopsy.parsers.metric_reader import MetricReader

    reader = MetricReader()
    reader.learn(_WANDB_SUMMARY, whole=True)
    tags = set()
    for raw in _WANDB_SUMMARY.split(b"\n"):
        text, _ = lt.clean(raw)
        r = reader.read(text)
        if r is not None:
            tags.update(t for t, _ in r.values)
    assert "n_params" not in tags
    assert {"train/loss", "val/loss"} <= tags
