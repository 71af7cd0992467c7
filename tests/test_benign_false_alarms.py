"""Benign false alarms (issues 10 and 11): healthy shapes that named a cause, and the real failure beside each.

Each case is a run directory written from text quoted from a corpus entry (named beside it) or a real
message: the benign shape must leave its rule quiet, and the failure of the same family must still fire it.
A confident wrong verdict on a healthy run is worse than "could not tell".
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from builders import rules_of

from autopsy.api import analyze

DAY = 86_400.0


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    t = time.time() - 2 * DAY  # old files: a run that has stopped, not one still being written
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            os.utime(Path(dirpath) / n, (t, t))


# ---------------------------------------------------------------- loss.nonfinite: fp16 scaler lines without steps

def _fairseq_progress(i: int, loss: str, ppl: str, wps: int, wpb: str, bsz: str, updates: int, lr: str, gnorm: str,
                      scale: str, wall: int, train_wall: int) -> str:
    return (f"| epoch 001:    {i} / 1374 loss={loss}, ppl={ppl}, wps={wps}, ups=0, wpb={wpb}, bsz={bsz}, "
            f"num_updates={updates}, lr={lr}, gnorm={gnorm}, clip=0.000, oom=0.000, loss_scale={scale}, "
            f"wall={wall}, train_wall={train_wall}\n")


def _fairseq_overflow(scale: str) -> str:
    return f"| WARNING: overflow detected, setting loss scale to: {scale}\n"


# fairseq_515_overflow_warnings_loss_falling: the scaler halves its scale between progress lines whose loss falls
_FAIRSEQ_FALLING = "".join((
    _fairseq_overflow("0.0625"),
    _fairseq_progress(200, "14.351", "20899.56", 49604, "277035.016", "8563.074", 190, "4.84525e-06", "3.901", "0.062",
                      1061, 945),
    _fairseq_progress(300, "13.689", "13208.82", 51846, "277242.090", "8636.772", 290, "7.34275e-06", "3.057", "0.062",
                      1551, 1413),
    _fairseq_overflow("0.03125"),
    _fairseq_progress(400, "13.137", "9007.95", 52932, "277361.147", "8693.717", 389, "9.81528e-06", "2.587", "0.031",
                      2038, 1880),
    _fairseq_overflow("0.015625"),
    _fairseq_overflow("0.0078125"),
    _fairseq_overflow("0.00390625"),
    _fairseq_progress(500, "12.636", "6365.15", 53414, "277442.903", "8660.477", 486, "1.22379e-05", "2.302", "0.004",
                      2524, 2346)))
# the same lines with the loss standing still: the weights no longer move, the scale collapsed
_FAIRSEQ_FLAT = (_FAIRSEQ_FALLING.replace("loss=13.689", "loss=14.349").replace("loss=13.137", "loss=14.352")
                 .replace("loss=12.636", "loss=14.350"))
# fairseq_512_overflow_cascade_then_traceback: the scale halves line after line with no progress between
_FAIRSEQ_CASCADE = (
    "| epoch 027 | loss 6.343 | nll_loss 4.984 | ppl 31.65 | wps 164346 | ups 0.4 | wpb 364096 | bsz 11907 | "
    "num_updates 10198 | lr 0.000626286 | gnorm 0.390 | clip 0% | oom 0 | loss_scale 0.500 | wall 23080 | "
    "train_wall 21383\n"
    + "".join(f"| WARNING: overflow detected, setting loss scale to: {0.5 / 2 ** k}\n" for k in range(1, 13)))


# ---------------------------------------------------------------- run.incomplete: HF Trainer one step short

def _trainer_state(global_step: int, max_steps: int, epoch: float, num_train_epochs: float) -> str:
    """An HF trainer_state.json shaped like ts_google_hf_27419of27420's (loss 0.40 -> 0.21, linear decay)."""
    history = [{"epoch": round(epoch * s / global_step, 2), "learning_rate": 5e-05 * (1 - s / max_steps),
                "loss": round(0.40 - 0.19 * s / global_step, 4), "step": s}
               for s in range(500, global_step + 1, 500)]
    return json.dumps({"best_metric": None, "best_model_checkpoint": None, "epoch": epoch,
                       "global_step": global_step, "is_hyper_param_search": False, "is_local_process_zero": True,
                       "is_world_process_zero": True, "log_history": history, "max_steps": max_steps,
                       "num_train_epochs": num_train_epochs, "total_flos": 5.09e16, "trial_name": None,
                       "trial_params": None})


# ---------------------------------------------------------------- lr.floor: a step schedule's last level

_D2_LINE = ('{{"data_time": 0.0238, "eta_seconds": 0.0, "fast_rcnn/cls_accuracy": 0.8808, "iteration": {it}, '
            '"loss_box_reg": 0.6026, "loss_cls": 0.3208, "loss_rpn_cls": 0.0277, "loss_rpn_loc": 0.0298, "lr": {lr!r}, '
            '"rank_data_time": 0.0238, "time": 2.4338, "total_loss": {loss}}}\n')


def _d2_metrics(lr_at: object) -> str:
    """detectron2 metrics.json lines (medical_waste_detectron2_step_decay's keys), every 20 iterations to 3999."""
    return "".join(_D2_LINE.format(it=it, lr=lr_at(it), loss=round(2.7 - 1.7 * min(1.0, it / 2000), 4))  # type: ignore[operator]
                   for it in range(19, 4000, 20))


def _d2_warmup(it: int) -> float:
    return 5e-05 * min(1.0, (it + 1) / 1000)


# medical_waste_detectron2_step_decay: WarmupMultiStepLR, warmup to 5e-05, one milestone at 2000 (gamma 0.1)
_D2_STEPS = _d2_metrics(lambda it: _d2_warmup(it) * (0.1 if it >= 2000 else 1.0))
# a linear decay clamped at 10% of its peak: it glides into a floor nothing planned
_D2_CLAMPED = _d2_metrics(lambda it: _d2_warmup(it) if it < 1000 else 5e-05 * max(0.1, 1 - (it - 1000) / 2000))

# ---------------------------------------------------------------- log.empty: a logged traceback is output

# pytorch_106152_dynamo_warning_traceback: dynamo logs the frame it could not compile at WARNING level
_DYNAMO = "".join(f"[2023-07-31 11:08:28,980] torch._dynamo.convert_frame: [WARNING] {line}\n" for line in (
    "    raise BackendCompilerFailed(self.compiler_fn, e).with_traceback(",
    '  File "/data/users/williamwen/pytorch/torch/_dynamo/output_graph.py", line 973, in call_user_compiler',
    "    compiled_fn = compiler_fn(gm, self.example_inputs())",
    '  File "/data/users/williamwen/pytorch/torch/_dynamo/repro/after_dynamo.py", line 117, in debug_wrapper',
    "    compiled_gm = compiler_fn(gm, example_inputs)",
    '  File "/data/users/williamwen/pytorch/torch/__init__.py", line 1586, in __call__',
    "    return self.compiler_fn(model_, inputs_, **self.kwargs)"))
# warnings and nothing else: the process never printed a step (hung, or its stdout sits in a block buffer)
_ONLY_WARNINGS = (
    "/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py:557: UserWarning: This DataLoader will "
    "create 16 worker processes in total. Our suggested max number of worker in current system is 8, which is smaller "
    "than what this DataLoader is going to create.\n"
    "  warnings.warn(_create_warning_msg(\n"
    "huggingface/tokenizers: The current process just got forked, after parallelism has already been used. "
    "Disabling parallelism to avoid deadlocks...\n"
    "To disable this warning, you can either:\n"
    "\t- Avoid using `tokenizers` before the fork if possible\n"
    "\t- Explicitly set the environment variable TOKENIZERS_PARALLELISM=(true | false)\n"
    "[2023-07-31 11:08:28,980] torch._dynamo.convert_frame: [WARNING] torch._dynamo hit config.cache_size_limit (8)\n")

# ---------------------------------------------------------------- crash.exception: a thread's error after the end

_TBX_THREAD = "".join(f"{line}\n" for line in (
    "Traceback (most recent call last):",
    '  File "/home/lxc/miniconda3/envs/gan/lib/python3.10/threading.py", line 1016, in _bootstrap_inner',
    "    self.run()",
    '  File "/home/lxc/miniconda3/envs/gan/lib/python3.10/site-packages/tensorboardX/event_file_writer.py", line 202, '
    "in run",
    "    data = self._queue.get(True, queue_wait_duration)",
    '  File "/home/lxc/miniconda3/envs/gan/lib/python3.10/multiprocessing/queues.py", line 117, in get',
    "    res = self._recv_bytes()",
    '  File "/home/lxc/miniconda3/envs/gan/lib/python3.10/multiprocessing/connection.py", line 136, in _check_closed',
    '    raise OSError("handle is closed")',
    "OSError: handle is closed"))
_STTN_HEAD = ("saving model to release_model/sttn_gait/gen_00010.pth ...\n"
              "acc_NM_mean:93.81520661157025 , acc_BG_mean:90.2692561983471 , acc_CL_mean:81.51148760330578\n"
              "===Rank-1 (Include identical-view cases)===\n"
              "NM: 93.815,\tBG: 89.311,\tCL: 80.264\n"
              "d: -0.001;gen: -0.008: : 20001it [12:18:18,  2.21s/it]\n"
              "Exception in thread Thread-1:\n")
# sttn_end_training_tensorboardx_handle_closed: training and evaluation ended, then the writer thread's queue closed
_STTN_ENDED = _STTN_HEAD + "\nEnd training....\n" + _TBX_THREAD
# the same thread error with no word that training ended: it may have been what stopped the run
_STTN_NOT_ENDED = _STTN_HEAD + _TBX_THREAD
# after "End training....", the main thread's final save raised: the run died there
_MAIN_AFTER_END = _STTN_HEAD + "\nEnd training....\n" + (
    "Traceback (most recent call last):\n"
    '  File "/home/lxc/STTN/train.py", line 88, in <module>\n'
    "    torch.save(model.state_dict(), path)\n"
    '  File "/home/lxc/miniconda3/envs/gan/lib/python3.10/site-packages/torch/serialization.py", line 440, in save\n'
    "    with _open_zipfile_writer(f) as opened_zipfile:\n"
    "RuntimeError: File release_model/sttn_gait/final.pth cannot be opened.\n")

# ---------------------------------------------------------------- loss.plateau: a loss that rose is not stuck

# multiagent_dqn_final_results: ten DQN sessions appended to one file, the episode counter restarting in each
_DQN_SESSIONS = ((1, (2.0629,)), (1, (35.9689,)), (1, (0.6301,)), (1, (42.8993,)),
                 (10, (1.7145, 14.3826, 26.4854, 29.5193, 32.8229, 12.8260, 28.4721, 10.6518, 22.2643, 12.9142)),
                 (10, (28.9858, 13.4443, 20.6640, 11.3078, 18.7981, 12.3552, 11.4963, 6.5097, 10.5739, 9.9104)),
                 (10, (0.6690, 15.4825, 18.2971, 11.7978, 10.0375, 1.2655, 6.4286, 14.7698, 19.6544, 14.5984)),
                 (10, (2.5909, 0.5948, 0.4342, 6.2221, 11.4707, 14.8912, 18.4391, 12.2450, 24.9089, 16.4748)),
                 (10, (35.1137, 19.6829, 26.5732, 24.3685, 28.3343, 16.0819, 16.3495, 13.4886, 21.5163, 16.6254)),
                 (10, (0.6615, 16.1182, 26.9001, 28.2980, 41.2228, 34.0317, 31.2138, 23.8302, 23.8487, 20.8691)))


def _dqn_log(sessions: tuple[tuple[int, tuple[float, ...]], ...]) -> str:
    bar = "=" * 60
    out = []
    for n, losses in sessions:
        out.append(f"\n{bar}\nTraining Session Started: 2026-02-03 15:37:27\n{bar}\n\n")
        out += [f"Episode {i}/{n} | Deliveries: 3 | Collisions: 0 | Loss: {v:.4f} | \u03b5: 0.000\n"
                for i, v in enumerate(losses, 1)]
        out.append(f"\n{bar}\nFINAL RESULTS (Online DQN Learning)\n{bar}\nTotal Deliveries: 3\n")
    return "".join(out)


# the same console, one session of 64 episodes whose loss stays at 7.5: it never learned
_DQN_FLAT = _dqn_log(((64, tuple(7.5 + 0.01 * ((i * 7) % 5 - 2) for i in range(64))),))

# ---------------------------------------------------------------- loss.plateau: a carried validation loss

def _nemo_line(epoch: int, it: int, step: int, train: str, timing: str, val: str) -> str:
    return (f"Training epoch {epoch}, iteration {it}/149 | lr: 3e-05 | consumed_samples: {step + 1} | "
            f"global_batch_size: 1 | global_step: {step} | reduced_train_loss: {train} | "
            f"train_step_timing in s: {timing} | val_loss: {val}\n")


# bionemo_740_carried_val_loss_pipes: the last validation loss printed again on every iteration line of epoch 0
_NEMO_CARRIED = "".join(_nemo_line(0, 120 + k, 120 + k, t, tm, "4.106") for k, (t, tm) in enumerate(
    (("1.233", "0.03146"), ("1.288", "0.03163"), ("1.333", "0.03215"), ("1.245", "0.03157"), ("1.375", "0.0317"),
     ("1.34", "0.03147"))))
# tflearn_388_val_loss_never_changes: one line per epoch, the epoch counter on it, val_loss re-measured and frozen
_TFLEARN_FROZEN_VAL = "Training samples: 239\nValidation samples: 560\n" + "".join(
    f"--\nTraining Step: {e}  | total loss: {t}\n| Adam | epoch: {e:03d} | loss: {t} - Sum: 1354.9858 | "
    "val_loss: 0.50179 - val_acc: 281.0000 -- iter: 239/239\n"
    for e, t in enumerate(("114.27066", "21.18387", "5.66940", "3.10222", "2.50713"), 2))
# facenet_3_keras_val_loss_frozen_0p2000: Keras's epoch-end lines, val_loss 0.2000 re-measured each epoch
_KERAS_FROZEN_VAL = "".join(
    f"Epoch {e}/15\n1539/1539 [==============================] - 3427s 2s/step - loss: {t} - val_loss: 0.2000\n"
    for e, t in zip(range(1, 8), ("0.1927", "0.1902", "0.1872", "0.1844", "0.1816", "0.1790", "0.1765"), strict=True))

# ---------------------------------------------------------------- loss.spike: noise by a factor is not a spike

# cvimg_lightning_test_loss_healthy: Lightning CSVLogger train_loss every 50 steps over 5 epochs, falling from 0.635
# with single batches anywhere between 0.0002 and 0.35 (a small-batch loss scatters by a factor once it is low)
_CVIMG_LOSS = [float(v) for v in """
0.635 0.1959 0.3167 0.08673 0.4583 0.06365 0.1512 0.0594 0.094 0.08835 0.3558 0.0455 0.144 0.1703 0.1055 0.03301
0.06036 0.2175 0.06439 0.01424 0.1097 0.0498 0.2896 0.04513 0.07077 0.1359 0.0132 0.03956 0.03551 0.05869 0.09807
0.07987 0.02579 0.006099 0.002522 0.09149 0.02116 0.129 0.05698 0.0592 0.0235 0.1295 0.01885 0.009563 0.009111
0.004168 0.001072 0.04707 0.001199 0.01866 0.02044 0.001282 0.01522 0.08822 0.01403 0.004529 0.02753 0.0309 0.1691
0.01619 0.003565 0.02103 0.02167 0.2453 0.005017 0.09843 0.002909 0.04601 0.01389 0.008371 0.02859 0.02936 0.006553
0.001149 0.001263 0.06228 0.003227 0.09914 0.04654 0.008878 0.00494 0.01128 0.008673 0.00342 0.04167 0.05762
0.001946 0.04347 0.01053 0.1113 0.00799 0.2586 0.01837 0.0007674 0.01754 0.008693 0.0285 0.2725 0.03346 0.02908
0.001091 0.1793 0.03956 0.05524 0.002882 0.001036 0.04704 0.1431 0.003489 0.00149 0.02079 0.007527 0.0009848
0.006935 0.005881 0.01531 0.005767 0.01157 0.02001 0.00767 0.1273 0.0004081 0.03479 0.003571 0.001756 0.05738
0.07304 0.09156 0.0009411 0.1035 0.002024 0.001806 0.001772 0.06862 0.006349 0.000834 0.07745 0.009587 0.007156
0.006504 0.3498 0.009442 0.006399 0.01605 0.01508 0.002186 0.0004082 0.05694 0.008723 0.002217 0.01745 0.001233
0.0004697 0.05756 0.002037 0.008046 0.002496 0.007425 0.005696 0.02479 0.0007743 0.001388 0.02348 0.02839 0.00695
0.000522 0.01473 0.1746 0.005802 0.0002132 0.02199""".split()]


def _lightning_csv(values: list[float]) -> str:
    return "epoch,step,train_loss\n" + "".join(f"{(49 + 50 * i) // 1719},{49 + 50 * i},{v}\n"
                                              for i, v in enumerate(values))


# deeplab_lfov_5_one_step_spike_at_checkpoint: a per-step loss scattering 0.4-1.8 that jumps to 5.1 for one step
_DEEPLAB_STEPS = ("0.428 0.737 0.711 0.413 0.426 0.469 0.592 0.818 0.890 1.108 1.679 1.788 1.253 1.817 0.940 1.235 "
                  "1.302 0.942 0.532 0.677 1.077 0.642 1.034 0.751 0.737 0.602 1.115 0.915").split()
_DEEPLAB = ("".join(f"step {12972 + i} \t loss = {v}, (1.010 sec/step)\n" for i, v in enumerate(_DEEPLAB_STEPS))
            + "The checkpoint has been created.\nstep 13000 \t loss = 5.128, (5.495 sec/step)\n"
            "step 13001 \t loss = 0.860, (0.743 sec/step)\n")
# a steady per-step loss (2.30 +- 3%) that jumps to 7 and stays there: a divergence
_STEADY_THEN_UP = _lightning_csv([2.3 * (1 + 0.03 * ((i * 7) % 5 - 2)) * (3.0 if i >= 120 else 1.0)
                                  for i in range(171)])

# a supervised run's loss (Lightning's CSVLogger layout) rising smoothly from 2.0 to 5.0 over 200 steps, then flat
# for 200: it got worse and stayed there (a reviewer's case; with the rise left unjudged it gave no finding at all)
_SUPERVISED_ROSE = _lightning_csv([2.0 + 3.0 * min(i, 199) / 199 + 0.01 * ((i * 7) % 5 - 2) for i in range(400)])

# stable-baselines3's progress.csv (Sb3Test, a corpus entry's shape): a PPO loss that follows its value loss up
# as rare large rewards come in, beside the rollout's reward column; the same loss without the RL columns is
# _SUPERVISED_ROSE's case
_SB3_PROGRESS = "rollout/ep_rew_mean,time/total_timesteps,train/loss,train/value_loss\n" + "".join(
    f"{-80 + i * 0.5:.1f},{10 * (i + 1)},{2000 + 40 * min(i, 150) + 7 * ((i * 7) % 5):.1f},"
    f"{4000 + 80 * min(i, 150):.1f}\n" for i in range(300))

CASES = [
    # (id, files, rule, fires)
    ("fairseq_overflow_loss_falling", {"train.log": _FAIRSEQ_FALLING}, "loss.nonfinite", False),
    ("fairseq_overflow_loss_flat", {"train.log": _FAIRSEQ_FLAT}, "loss.nonfinite", True),
    ("fairseq_overflow_cascade", {"train.log": _FAIRSEQ_CASCADE}, "loss.nonfinite", True),
    ("detectron2_step_decay", {"metrics.json": _D2_STEPS}, "lr.floor", False),
    ("detectron2_linear_decay_clamped", {"metrics.json": _D2_CLAMPED}, "lr.floor", True),
    # the same steps against a config that plans a cosine decay to 0: the level it holds is above the plan
    ("detectron2_steps_against_cosine_config", {"metrics.json": _D2_STEPS,
                                                "config.yaml": "lr_scheduler_type: cosine\nmax_steps: 4000\n"},
     "lr.floor", True),
    ("dynamo_warning_traceback", {"train.log": _DYNAMO}, "log.empty", False),
    ("only_warnings", {"train.log": _ONLY_WARNINGS}, "log.empty", True),
    ("thread_error_after_end_training", {"train.out": _STTN_ENDED}, "crash.exception", False),
    ("thread_error_without_end", {"train.out": _STTN_NOT_ENDED}, "crash.exception", True),
    ("main_thread_error_after_end_training", {"train.out": _MAIN_AFTER_END}, "crash.exception", True),
    ("rl_sessions_loss_rising", {"train_log.txt": _dqn_log(_DQN_SESSIONS)}, "loss.plateau", False),
    ("rl_session_loss_flat", {"train_log.txt": _DQN_FLAT}, "loss.plateau", True),
    ("supervised_loss_rose_and_stayed", {"metrics.csv": _SUPERVISED_ROSE}, "loss.plateau", True),
    ("rl_table_loss_rising_with_rewards", {"logs/progress.csv": _SB3_PROGRESS}, "loss.plateau", False),
    ("nemo_val_loss_carried_in_epoch", {"train.log": _NEMO_CARRIED}, "loss.plateau", False),
    ("tflearn_val_loss_frozen_across_epochs", {"train.log": _TFLEARN_FROZEN_VAL}, "loss.plateau", True),
    ("keras_val_loss_frozen_across_epochs", {"train.log": _KERAS_FROZEN_VAL}, "loss.plateau", True),
    ("per_step_loss_noise_by_a_factor", {"metrics.csv": _lightning_csv(_CVIMG_LOSS)}, "loss.spike", False),
    # the same loss ten times higher from its 121st point on: the level moved, not one batch
    ("per_step_loss_level_jumps_tenfold", {"metrics.csv": _lightning_csv(
        [v * (10 if i >= 120 else 1) for i, v in enumerate(_CVIMG_LOSS)])}, "loss.spike", True),
    ("one_step_jump_on_a_scattering_loss", {"train.log": _DEEPLAB}, "loss.spike", True),
    ("steady_loss_jumps_and_stays", {"metrics.csv": _STEADY_THEN_UP}, "loss.spike", True),
    # ts_google_hf_27419of27420: global_step 27419 of max_steps 27420, epoch 9.9996 of 10
    ("hf_one_step_short_epochs_ran", {"trainer_state.json": _trainer_state(27419, 27420, 9.99963530269876, 10)},
     "run.incomplete", False),
    ("hf_one_step_short_no_work_lost", {"trainer_state.json": _trainer_state(27419, 27420, 9.99963530269876, 10)},
     "checkpoint.gap", False),
    # the same run cut 10% short: its epoch counter stops at 9.0
    ("hf_cut_ten_percent_short", {"trainer_state.json": _trainer_state(24678, 27420, 9.0, 10)},
     "run.incomplete", True),
    # one step short of an explicit max_steps: the Trainer rounded num_train_epochs up, the counter is short of it
    ("hf_one_step_short_explicit_max_steps", {"trainer_state.json": _trainer_state(27419, 27420, 9.4, 10)},
     "run.incomplete", True),
]


@pytest.mark.parametrize(("files", "rule", "fires"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_benign_shape_is_quiet_and_the_failure_fires(tmp_path: Path, files: dict[str, str], rule: str,
                                                     fires: bool) -> None:
    _write(tmp_path, files)
    report = analyze(tmp_path)
    assert (rule in rules_of(report)) is fires, [(f.rule, f.message[:200]) for f in report.findings]
