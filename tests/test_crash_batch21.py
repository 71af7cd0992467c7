"""Crash shapes of crash batch21 (issue 11), from log files committed to public repositories: XLA refusing an
operation the installed CUDA is too old for, argparse's refusal below a usage block wrapped over many lines
(HfArgumentParser), an outside SIGTERM that surfaces as DataLoader workers "killed by signal: Terminated",
a rank's traceback followed only by its progress bar's last redraw, hydra's short report of a failed job, an
exception saying a directory does not exist, a loss printed as nan before the first update, and a few-shot
loss at zero.

Each log is quoted from a crash/batch21 corpus entry (named beside it) or another real message.
"""

from __future__ import annotations

import pytest
from builders import analyze_text, rules_of

_rules = rules_of


# openpi_pi0: JAX/XLA on a node whose CUDA is 12.2
_XLA_CUDA = (
    "01:09:19.915 [I] Progress on: -/30000 rate:- remaining:? elapsed:00:00 postfix:-                  "
    "(2605436:tqdm_logging.py:145)\n"
    "E1101 01:09:26.050426 2605436 pjrt_stream_executor_client.cc:3077] Execution of replica 0 failed: UNIMPLEMENTED: "
    "StreamBeginCaptureToGraph is not implemented for CUDA below version 12.3. Therefore tracing is not supported.\n"
    "Traceback (most recent call last):\n"
    '  File "/project/peilab/yanzhengyang/RoboTwin/policy/yzy_openpi/scripts/train.py", line 261, in main\n'
    "    train_state, info = ptrain_step(train_rng, train_state, batch)\n"
    "jaxlib.xla_extension.XlaRuntimeError: UNIMPLEMENTED: StreamBeginCaptureToGraph is not implemented for CUDA below "
    "version 12.3. Therefore tracing is not supported.\n")


def test_an_operation_the_installed_cuda_is_too_old_for_is_env_cuda(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _XLA_CUDA, "train.out")
    assert report.primary is not None and report.primary.rule == "env.cuda"
    assert report.primary.facts["kind"] == "cuda_too_old" and report.primary.facts["cuda_needed"] == "12.3"
    assert "crash.exception" not in _rules(report)


def test_xlas_driver_older_than_ptxas_notice_is_no_cuda_failure(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = ("2025-01-10 10:00:01.123456: W external/xla/xla/service/gpu/nvptx_compiler.cc:930] The NVIDIA driver's "
            "CUDA version is 12.2 which is older than the ptxas CUDA version (12.6.20). Because the driver is older "
            "than the ptxas version, XLA is disabling parallel compilation, which may slow down compilation. You "
            "should update your NVIDIA driver or use the NVIDIA-provided CUDA forward compatibility packages.\n"
            "step 100 loss 2.31\nstep 200 loss 2.05\n")
    assert "env.cuda" not in _rules(analyze_text(tmp_path, text, "train.out"))


# chatglm_efficient_tuning: HfArgumentParser's usage wraps TrainingArguments over 140 lines
_USAGE_TAIL = "".join(
    f"                     [--option_{i} OPTION_{i}] [--flag_{i} [FLAG_{i}]]\n" for i in range(60)) + (
    "                     [--lora_dropout LORA_DROPOUT] [--lora_target LORA_TARGET]\n"
    "                     [--stage {sft,rm,ppo}]\n"
    "train_bash.py: error: argument --fp16: Truthy value expected: got s but expected one of yes/no, true/false, t/f, "
    "y/n, 1/0 (case insensitive).\n")
_USAGE = "usage: train_bash.py [-h] [--model_name_or_path MODEL_NAME_OR_PATH]\n" + _USAGE_TAIL


@pytest.mark.parametrize("text", [_USAGE, _USAGE_TAIL])  # whole, and with its usage line above the kept tail
def test_argparse_refusal_below_a_long_wrapped_usage(tmp_path, text: str) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, text, "nohup.out")
    assert report.primary is not None and report.primary.rule == "crash.exception"
    assert report.primary.facts.get("program") == "train_bash.py"


def test_an_error_line_below_ordinary_log_lines_is_no_argparse_refusal(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = ("    loading shard 3 of 8\n    loading shard 4 of 8\n    loading shard 5 of 8\n"
            "reader.py: error: 3 malformed records skipped\n")
    report = analyze_text(tmp_path, text, "nohup.out")
    assert all(f.facts.get("program") is None for f in report.findings)


# eagnet_qcnet: Lightning DDP stopped by SIGTERM; its workers die with the process group
_SIGTERM = (
    "Epoch 0:  31%|███       | 1225/3999 [1:07:35<2:33:02,  3.31s/it, v_num=29, train_intent_loss_step=1.110, "
    "train_total_loss=0.375][rank: 2] Received SIGTERM: 15\n"
    "Traceback (most recent call last):\n"
    '  File "/home/dwb25/QcNet/modules/intent_recognition.py", line 87, in extract_intent_labels\n'
    "    valid_traj = traj[valid_mask]\n"
    '  File "/home/dwb25/miniconda3/envs/QCNet/lib/python3.8/site-packages/torch/utils/data/_utils/'
    'signal_handling.py", line 66, in handler\n'
    "    _error_if_any_worker_fails()\n"
    "RuntimeError: DataLoader worker (pid 4020138) is killed by signal: Terminated. \n\n"
    "During handling of the above exception, another exception occurred:\n\n"
    "Traceback (most recent call last):\n"
    '  File "/home/dwb25/QcNet/train_qcnet.py", line 48, in <module>\n'
    "    trainer.fit(model, datamodule)\n"
    '  File "/home/dwb25/miniconda3/envs/QCNet/lib/python3.8/site-packages/torch/utils/data/_utils/'
    'signal_handling.py", line 66, in handler\n'
    "    _error_if_any_worker_fails()\n"
    "RuntimeError: DataLoader worker (pid 4020404) is killed by signal: Terminated. \n")


def test_workers_terminated_by_an_outside_sigterm_are_the_stop(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _SIGTERM, "train.out")
    assert report.primary is not None and report.primary.rule == "run.incomplete"
    assert report.primary.facts["termination"] == "SIGTERM"
    assert not {"data.worker", "crash.exception"} & _rules(report)


@pytest.mark.parametrize("signal", ["Killed", "Bus error"])
def test_workers_killed_by_other_signals_still_died(tmp_path, signal: str) -> None:  # type: ignore[no-untyped-def]
    text = _SIGTERM.replace("[rank: 2] Received SIGTERM: 15", "").replace("Terminated", signal)
    assert "data.worker" in _rules(analyze_text(tmp_path, text, "train.out"))


# llamafactory_sagemaker: a rank's exception, the bar's last redraw as it unwound, then torchrun's report
_RANK_TB = (
    "[rank4]: Traceback (most recent call last):\n"
    '[rank4]:   File "/home/ec2-user/SageMaker/efs/Projects/LLaMA-Factory/src/train.py", line 28, in <module>\n'
    "[rank4]:     main()\n"
    '[rank4]:   File "/home/ec2-user/SageMaker/efs/conda_envs/360-llama-factory/lib/python3.11/site-packages/torch/'
    '_tensor.py", line 1043, in __iter__\n'
    '[rank4]:     raise TypeError("iteration over a 0-d tensor")\n'
    "[rank4]: TypeError: iteration over a 0-d tensor\n"
    "\r 20%|██        | 24/120 [1:03:31<4:14:06, 158.81s/it]\n"
    "W0401 08:33:18.099000 139878200616768 torch/distributed/elastic/multiprocessing/api.py:858] Sending process "
    "310609 closing signal SIGTERM\n"
    "E0401 08:33:18.169000 139878200616768 torch/distributed/elastic/multiprocessing/api.py:833] failed (exitcode: 1) "
    "local_rank: 0 (pid: 310608) of binary: /home/ec2-user/SageMaker/efs/conda_envs/360-llama-factory/bin/python3.11\n")


def test_a_bar_redrawn_once_below_a_traceback_is_no_training_going_on(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _RANK_TB, "train.out")
    assert report.primary is not None and report.primary.rule == "crash.exception"
    assert report.primary.facts["exc_type"] == "TypeError"


def test_a_traceback_followed_by_more_steps_was_caught(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = _RANK_TB.split("\r")[0] + "".join(
        f"{{'loss': 0.{40 - i}, 'learning_rate': 1e-05, 'epoch': 0.{i}}}\n" for i in range(1, 6))
    assert "crash.exception" not in _rules(analyze_text(tmp_path, text, "train.out"))


# aslconno_autrainer: hydra's report with HYDRA_FULL_ERROR unset (no traceback)
_HYDRA = ("Error executing job with overrides: ['+seed=0', 'dataset=SpeechCommands-16k', 'model=Cnn10']\n"
          "Error in call to target 'autrainer.datasets.speech_commands.SpeechCommands':\n"
          "{cause}\n\n"
          "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n")


def test_hydras_report_of_a_missing_directory_is_io_not_found(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cause = ("ValueError(\"Directory features_subdir='log_mel_16k' does not exist in "
             "'/mimer/NOBACKUP/groups/ulio_inverse/zhiping/data'.\")")
    report = analyze_text(tmp_path, _HYDRA.format(cause=cause), "train.err")
    assert report.primary is not None and report.primary.rule == "io.not_found"
    assert "crash.exception" not in _rules(report)


def test_hydras_report_of_another_exception_is_a_crash(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cause = "TypeError(\"__init__() got an unexpected keyword argument 'dropout'\")"
    report = analyze_text(tmp_path, _HYDRA.format(cause=cause), "train.err")
    assert report.primary is not None and report.primary.rule == "crash.exception"
    assert report.primary.facts["exc_type"] == "TypeError"
    assert report.primary.facts["message"] == "__init__() got an unexpected keyword argument 'dropout'"


def test_a_directory_created_because_it_did_not_exist_is_no_missing_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = "Output directory ./outputs/run1 does not exist. Creating it.\nepoch 1 loss 0.52\nepoch 2 loss 0.41\n"
    assert "io.not_found" not in _rules(analyze_text(tmp_path, text, "train.log"))


# microduck_rl: an RL loop prints loss=nan until its replay buffer gives a first batch
_RL = "".join(f"episode={i} step={120 * i} reward=180.0 epsilon=0.9{90 - i} loss=nan kc_mbon=0.98\n"
              for i in range(1, 16)) + "".join(
    f"episode={i} step={120 * i} reward=600.0 epsilon=0.9{90 - i} loss=0.{70 - i} kc_mbon=0.93\n"
    for i in range(16, 24))


def test_nan_before_the_first_update_then_finite_is_no_divergence(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert "loss.nonfinite" not in _rules(analyze_text(tmp_path, _RL, "slurm.out"))


@pytest.mark.parametrize("text", [
    _RL.replace("loss=0.", "loss=nan0.").replace("loss=nan0.", "loss=nan #"),  # never finite
    "".join(f"episode={i} step={120 * i} reward=600.0 loss={f'0.{70 - i}' if i < 10 else 'nan'}\n"
            for i in range(1, 24)),  # finite, then nan for good: diverged
])
def test_nan_that_stays_or_comes_after_finite_values_is_reported(tmp_path, text: str) -> None:  # type: ignore[no-untyped-def]
    assert "loss.nonfinite" in _rules(analyze_text(tmp_path, text, "slurm.out"))


# cliplora_pigs_16shots: a few-shot set fitted, "Loss: 0.0000" with the odd non-zero batch
_FITTED = "".join(f"LR: 0.000001, Acc: 100.0000, Loss: {v}\n"
                  for v in ["0.0000"] * 12 + ["0.0002", "0.0000", "0.0011", "0.0000", "0.0031"] + ["0.0000"] * 12)


def test_a_loss_at_zero_has_fitted_not_stalled(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert "loss.plateau" not in _rules(analyze_text(tmp_path, _FITTED, "CLIP-LoRA_pigs_16shots_1seed.out"))


def test_a_flat_loss_away_from_zero_still_stalls(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = "".join(f"LR: 0.000100, Acc: 31.2500, Loss: 1.{4 + i % 3}0{i % 7}\n" for i in range(30))
    assert "loss.plateau" in _rules(analyze_text(tmp_path, text, "CLIP-LoRA_pigs_16shots_1seed.out"))


def test_a_loss_exactly_zero_at_every_point_is_still_reported(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # nothing moves at all (no batch ever non-zero): a loss that cannot change, not a fit
    text = "LR: 0.000001, Acc: 100.0000, Loss: 0.0000\n" * 29
    assert "loss.plateau" in _rules(analyze_text(tmp_path, text, "CLIP-LoRA_pigs_16shots_1seed.out"))
