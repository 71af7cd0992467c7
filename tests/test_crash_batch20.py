"""Crash shapes of crash batch20 (issue 11): MPICH / Intel MPI's Hydra launcher naming the signal a rank died of,
TensorFlow's UnavailableError (gRPC's UNAVAILABLE between the tasks of a distributed run, here in Google Cloud ML
Engine's flattened traceback), and a value the program printed glued in front of a Python warning's header (the
warning went to stderr before stdout's line ended): training output, so the log is not "only warnings".

Each log is quoted from a crash/batch20 corpus entry (named beside it) or another real message (a public
repository's test, note or log, quoted as the search index stores it).
"""

from __future__ import annotations

import pytest
from builders import analyze_text, rules_of

from autopsy.checks.run import is_banner_line

_rules = rules_of

# mlsh_17: mpirun (MPICH Hydra) in a docker container
_HYDRA_BUS_ERROR = (
    "=====================================================================================\n"
    "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
    "=   EXIT CODE: 135\n"
    "=   CLEANING UP REMAINING PROCESSES\n"
    "=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES\n"
    "=====================================================================================\n"
    "APPLICATION TERMINATED WITH THE EXIT STRING: Bus error (signal 7)\n")
# an MPI program's log quoted in a public note (MPICH 3, a rank killed by the OOM killer)
_HYDRA_KILLED = (
    "===================================================================================\n"
    "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
    "=   PID 49762 RUNNING AT nitin-linux\n"
    "=   EXIT CODE: 9\n"
    "=   CLEANING UP REMAINING PROCESSES\n"
    "=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES\n"
    "===================================================================================\n"
    "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)\n"
    "This typically refers to a problem with your application.\n"
    "Please see the FAQ page for debugging suggestions\n")
# MPICH 4's wording inside the banner, quoted in a public troubleshooting page
_HYDRA4_SEGV = (
    "===================================================================================\n"
    "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
    "=   RANK 1 PID 27494 RUNNING AT node1\n"
    "=   KILLED BY SIGNAL: 11 (Segmentation fault)\n"
    "===================================================================================\n")
_HYDRA4_FPE = _HYDRA4_SEGV.replace("11 (Segmentation fault)", "8 (Floating point exception)")


def test_hydra_bus_error_exit_string_is_a_native_crash(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _HYDRA_BUS_ERROR, "train.log")
    assert report.primary is not None and report.primary.rule == "crash.segfault"
    assert report.primary.facts.get("signal") == "SIGBUS"
    assert "oom.host" not in _rules(report)


def test_hydra_killed_exit_string_is_host_oom_not_a_segfault(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _HYDRA_KILLED, "train.log")
    assert report.primary is not None and report.primary.rule == "oom.host"
    assert "crash.segfault" not in _rules(report)


def test_mpich4_killed_by_signal_11_is_a_segfault(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _HYDRA4_SEGV, "train.log")
    assert report.primary is not None and report.primary.rule == "crash.segfault"
    assert report.primary.facts.get("signal") == "SIGSEGV"


def test_mpich4_floating_point_exception_is_not_called_a_segfault(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rules = _rules(analyze_text(tmp_path, _HYDRA4_FPE, "train.log"))
    assert "crash.segfault" not in rules and "oom.host" not in rules


# tfmodels_4342: an Object Detection API worker on Google Cloud ML Engine, the console's flattened traceback
_CLOUDML_UNAVAILABLE = (
    'es) File "/usr/local/lib/python2.7/dist-packages/tensorflow/python/training/session_manager.py", line 490, '
    "in _try_run_local_init_op sess.run(self._local_init_op) File "
    '"/usr/local/lib/python2.7/dist-packages/tensorflow/python/client/session.py", line 1335, in _do_call raise '
    "type(e)(node_def, op, message) UnavailableError: OS Error \n"
    "The replica worker 2 exited with a non-zero status of 1. Termination reason: Error. Traceback (most recent "
    'call last): [...] File "/usr/lib/python2.7/contextlib.py", l\n')


def test_tensorflow_unavailable_error_is_a_communication_failure(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _CLOUDML_UNAVAILABLE, "train.log")
    assert report.primary is not None and report.primary.rule == "dist.comm"
    assert "OS Error" in report.primary.message


@pytest.mark.parametrize("line", [
    # Ray's actor died (its own cause is elsewhere); a public note on an RL run
    "Ray reported `ActorUnavailableError: Socket closed` only after the Slurm termination, so that exception is a "
    "consequence of external job cancellation",
    # Arrow Flight's client (a feature store read), from a public repository's tests
    "The free-tier Arrow Flight service intermittently drops a large read with ``FlightUnavailableError: Socket "
    "closed`` (gRPC status 14, UNAVAILABLE)",
])
def test_other_libraries_unavailable_errors_are_not_dist_comm(tmp_path, line: str) -> None:  # type: ignore[no-untyped-def]
    assert "dist.comm" not in _rules(analyze_text(tmp_path, line + "\n", "train.log"))


# ptc_21: a loss the program printed, then torch's warning on the same line (quoted "> " by the poster)
_LOSS_GLUED_TO_WARNING = (
    "> 0.767207/usr/local/lib/python3.6/dist-packages/torch/optim/lr_scheduler.py:82: UserWarning: Detected call of "
    "`lr_scheduler.step()` before `optimizer.step()`. In PyTorch 1.1.0 and later, you should call them in the "
    "opposite order: `optimizer.step()` before `lr_scheduler.step()`.  Failure to do this will result in PyTorch "
    "skipping the first value of the learning rate schedule.See more details at "
    "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate\n"
    '>   "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate", UserWarning)\n')


@pytest.mark.parametrize(("line", "banner"), [
    (_LOSS_GLUED_TO_WARNING.splitlines()[0], False),
    # a bar past zero with torch's warning glued on (bar from Pytorch-UNet#192, warning from a corpus entry)
    ("Epoch 1/5:  11%|█         | 10/90 [00:01<00:08,  8.95img/s, loss (batch)=0.0278]/Users/calkoen/miniconda3/"
     "envs/torch/lib/python3.10/site-packages/torch/amp/autocast_mode.py:198: UserWarning:", False),
    # what stays a banner: the warning alone, a bar still at 0 in front of it (a corpus entry), a logging
    # handler's header, a shell prompt, a relative path
    ("/usr/local/lib/python3.6/dist-packages/torch/optim/lr_scheduler.py:82: UserWarning: Detected call of", True),
    ("Epoch 1/5:   0%|                          | 0/4580 [00:00<?, ?img/s]/Users/calkoen/miniconda3/envs/torch/lib/"
     "python3.10/site-packages/torch/amp/autocast_mode.py:198: UserWarning:", True),
    ("2025-12-21 12:13:49.741\tquick-machine-smashes-fin-03:0\tpy.warnings:110\tWARNING\t/home/vec_norm/.venv/lib/"
     "python3.12/site-packages/torch/utils/data/dataloader.py:627: UserWarning:", True),
    ("(base) zaheer$: /Users/zaheer/.pyenv/versions/3.10.6/lib/python3.10/multiprocessing/resource_tracker.py:224: "
     "UserWarning:", True),
    ("venv/lib/python3.8/site-packages/jax/_src/lib/xla_bridge.py:429: UserWarning:", True),
    # a logging format whose time ends in ".980" and a blank before the warning: layout, not a glued value
    ("2023-07-31 11:08:28.980 /home/user/.venv/lib/python3.10/site-packages/torch/optim/lr_scheduler.py:82: "
     "UserWarning: Detected call of", True),
    # a crafted line: thousands of digits before the header (the float test is tried on its last 120 characters)
    ("1" * 4060 + "x/a.py:1: UserWarning: w", True),
    ("1" * 4060 + "/a.py:1: UserWarning: w", True),
    ("1" * 4060 + ".5/a.py:1: UserWarning: w", False),
])
def test_output_glued_before_a_warning_header(line: str, banner: bool) -> None:
    assert is_banner_line(line) is banner


def test_printed_loss_glued_to_a_warning_is_not_an_empty_log(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _LOSS_GLUED_TO_WARNING, "train.log")
    assert "log.empty" not in _rules(report)


def test_a_log_of_only_that_warning_is_still_empty(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _LOSS_GLUED_TO_WARNING.replace("> 0.767207", ""), "train.log")
    assert report.primary is not None and report.primary.rule == "log.empty"
