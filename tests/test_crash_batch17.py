"""Crash shapes of crash batch17 (issue 11): Open MPI's report of a rank killed by a signal, PaddlePaddle's
DataLoader killed by a signal in its own words, and PaddlePaddle's launcher aborting the job for a failed trainer.

Each log is quoted from a crash/batch17 corpus entry (named beside it) or another real message.
"""

from __future__ import annotations

import pytest
from builders import analyze_text, rules_of


def _report(tmp_path, text: str):  # type: ignore[no-untyped-def]
    return analyze_text(tmp_path, text, "train.log")


_rules = rules_of

_OPEN_MPI_ABORTED = ("/-------------------------------------------------------\n"
                     "Primary job  terminated normally, but 1 process returned\n"
                     "a non-zero exit code. Per user-direction, the job has been aborted.\n"
                     "/-------------------------------------------------------\n\n")


def test_open_mpi_reporting_a_rank_killed_by_sigkill_is_host_oom(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # horovod_469: eight Keras ranks start their epoch, Open MPI reports rank 7 killed by signal 9
    text = ("Epoch 1/1\n" * 8 + _OPEN_MPI_ABORTED
            + "/--------------------------------------------------------------------------\n"
            "mpirun noticed that process rank 7 with PID 0 on node HOSTNAME exited on signal 9 (Killed).\n"
            "/--------------------------------------------------------------------------\n")
    report = _report(tmp_path, text)
    assert report.primary is not None and report.primary.rule == "oom.host"
    assert report.primary.facts["rank"] == 7
    assert report.primary.message.startswith("Rank 7 was killed with SIGKILL")
    assert "crash.segfault" not in _rules(report)


@pytest.mark.parametrize("line", [
    # glow_18: Open MPI's report of a segfault (a native crash, not memory)
    "mpiexec noticed that process rank 0 with PID 19474 on node lhx-910 exited on signal 11 (Segmentation fault).",
    # horovod#926: an illegal instruction (a binary built for a CPU the host lacks), with the node left empty
    "mpirun noticed that process rank 0 with PID 0 on node exited on signal 4 (Illegal instruction).",
])
def test_open_mpi_reporting_another_signal_is_not_host_oom(tmp_path, line: str) -> None:  # type: ignore[no-untyped-def]
    report = _report(tmp_path, "Epoch 1/1\n" + _OPEN_MPI_ABORTED + line + "\n")
    assert "oom.host" not in _rules(report)


_PADDLE_TB = ("Traceback (most recent call last):\n"
              '  File "tools/train.py", line 132, in run\n'
              "    trainer.train(FLAGS.eval)\n"
              '  File "/usr/local/python3.7.0/lib/python3.7/site-packages/paddle/fluid/multiprocess_utils.py", '
              "line 134, in __handler__\n"
              "    core._throw_error_if_process_failed()\n")


def test_paddles_dataloader_process_killed_by_sigkill_is_host_oom(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # paddledet_7252: Paddle's DataLoader names its worker a "process" and says it "exited is killed by signal"
    text = (_PADDLE_TB + "SystemError: (Fatal) DataLoader process (pid 1104) exited is killed by signal: Killed. (at "
            "/paddle/paddle/fluid/imperative/data_loader.cc:181)\n")
    report = _report(tmp_path, text)
    assert report.primary is not None and report.primary.rule == "oom.host"
    assert "data.worker" in _rules(report)
    assert report.primary.facts["source"] == "DataLoader worker SIGKILL"


def test_paddles_dataloader_process_killed_by_another_signal_is_no_oom(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # the same Paddle message with torch's real segfault wording (timm_1269's "is killed by signal: Segmentation
    # fault") is a worker crash, not memory
    text = (_PADDLE_TB + "SystemError: (Fatal) DataLoader process (pid 1104) exited is killed by signal: Segmentation "
            "fault. (at /paddle/paddle/fluid/imperative/data_loader.cc:181)\n")
    report = _report(tmp_path, text)
    assert "oom.host" not in _rules(report)
    assert report.primary is not None and report.primary.rule == "data.worker"


@pytest.mark.parametrize(("line", "rank"), [
    # paddle_33074: one trainer of four
    ("ERROR 2021-05-24 17:17:14,611 launch_utils.py:545] ABORT!!! Out of all 4 trainers, the trainer process with "
     "rank=[3] was aborted. Please check its log.", 3),
    # PaddlePaddle/models#4064: two trainers of four; the first is named
    ("ERROR 2019-12-12 04:02:41,061 launch.py:269] ABORT!!! Out of all 4 trainers, the trainer process with "
     "rank=[0, 2] was aborted. Please check its log.", 0),
])
def test_paddles_launcher_abort_is_a_rank_failure(tmp_path, line: str, rank: int) -> None:  # type: ignore[no-untyped-def]
    text = ("INFO 2021-05-24 17:17:14,611 launch_utils.py:307] terminate all the procs\n" + line + "\n"
            "INFO 2021-05-24 17:17:17,615 launch_utils.py:307] terminate all the procs\n"
            "[INFO]: train job failed! train_ret: 1\n")
    report = _report(tmp_path, text)
    assert report.primary is not None and report.primary.rule == "dist.rank_failure"
    assert report.primary.facts["failed_rank"] == rank


def test_paddles_launcher_terminating_its_procs_alone_is_no_rank_failure(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # paddle_33074's other launcher lines, without the ABORT report
    text = ("INFO 2021-05-24 17:17:14,611 launch_utils.py:307] terminate all the procs\n"
            "INFO 2021-05-24 17:17:17,615 launch_utils.py:307] terminate all the procs\n")
    assert "dist.rank_failure" not in _rules(_report(tmp_path, text))
