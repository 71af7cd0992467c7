"""Crash shapes of crash batch16 (issue 11): torchrun's agent stopping a failed rank's siblings, exceptions raised
through a finalizer at interpreter exit, slurmstepd's memory-limit kill, a terminal-wrapped NCCL watchdog line and
TensorFlow's lame-worker heartbeat.

Each log is quoted from a crash/batch16 corpus entry (named beside it) or another real message.
"""

from __future__ import annotations

import pytest
from builders import analyze_text, rules_of


def _report(tmp_path, text: str):  # type: ignore[no-untyped-def]
    return analyze_text(tmp_path, text, "train.log")


_rules = rules_of


_TORCHRUN_TB = ("Traceback (most recent call last):\n"
                '  File "/home/ubuntu/pythonn3.11/bin/torchrun", line 10, in <module>\n'
                "    sys.exit(main())\n"
                '  File "/home/ubuntu/pythonn3.11/lib/python3.10/site-packages/torch/distributed/run.py", line 892, '
                "in main\n"
                "    run(args)\n")


def test_the_agents_sigterms_to_a_failed_ranks_siblings_are_no_stop(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # unsloth_10: rank 3 exited with 1 and the agent stopped the other three
    text = ("  0%|          | 0/800 [00:22<?, ?it/s]\n"
            "W0801 13:23:17.366000 32974 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 33051 "
            "closing signal SIGTERM\n"
            "W0801 13:23:17.367000 32974 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 33052 "
            "closing signal SIGTERM\n"
            "E0801 13:23:20.000000 32974 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: 1) "
            "local_rank: 3 (pid: 33054) of binary: /home/ubuntu/pythonn3.11/bin/python3\n" + _TORCHRUN_TB)
    report = _report(tmp_path, text)
    assert report.primary is not None and report.primary.rule == "dist.rank_failure"
    assert "run.incomplete" not in _rules(report)


def test_a_sigterm_the_agent_received_is_still_a_stop(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # pytorch_150916: the agent itself got SIGTERM and relayed it
    text = ("W0409 07:28:49.530000 1359 torch/distributed/elastic/agent/server/api.py:719] Received 15 death signal, "
            "shutting down workers\n"
            "W0409 07:28:49.531000 1359 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 1365 "
            "closing signal SIGTERM\n" + _TORCHRUN_TB)
    report = _report(tmp_path, text)
    assert report.primary is not None and report.primary.rule == "run.incomplete"
    assert "dist.rank_failure" not in _rules(report)


@pytest.mark.parametrize("text", [
    # tf_35326: the first of three, whose "Exception ignored in" header is above the quote
    ("Traceback (most recent call last):\n"
     '  File "/home/cirno/anaconda3/envs/pytf/lib/python3.7/site-packages/tensorflow_core/python/data/ops/'
     'dataset_ops.py", line 3009, in __del__\n'
     "AttributeError: 'NoneType' object has no attribute 'device'\n"),
    # cleverhans_17 without its header: the exception left through __del__, two frames below it
    ("Completed model training.\nTraceback (most recent call last):\n"
     '  File "/opt/anaconda/4.2.0/lib/python3.5/site-packages/tensorflow/python/client/session.py", '
     "line 522, in __del__\n"
     '  File "/opt/anaconda/4.2.0/lib/python3.5/site-packages/tensorflow/python/client/session.py", '
     "line 518, in close\n"
     '  File "/opt/anaconda/4.2.0/lib/python3.5/contextlib.py", line 133, in helper\n'
     "TypeError: 'NoneType' object is not callable\n"),
])
def test_an_exception_raised_through_a_finalizer_is_no_crash(tmp_path, text: str) -> None:  # type: ignore[no-untyped-def]
    report = _report(tmp_path, text)
    assert "crash.exception" not in _rules(report)
    assert report.primary is None


def test_a_traceback_without_a_finalizer_frame_is_still_a_crash(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # safetensors_668: raised in __init__, not __del__
    text = ("Traceback (most recent call last):\n"
            '  File "D:\\xxxxxx\\xxxxxxx.py", line 80, in __init__\n'
            '    with safe_open(data_file, framework="pt") as f:\n'
            "safetensors_rust.SafetensorError: Error while deserializing header: header too large\n")
    assert "crash.exception" in _rules(_report(tmp_path, text))


def test_slurmstepds_memory_limit_kill_is_host_oom(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # coquistt_2238: the kill, then the cancel line, then one step line flushed after it
    text = ("Epoch 0 |   Training | Elapsed Time: 0:00:15 | Steps: 93 | Loss: 24.580695\n"
            "slurmstepd: error: Job 7518 exceeded memory limit (626359956 > 512000000), being killed\n"
            "slurmstepd: error: Exceeded job memory limit\n"
            "slurmstepd: error: *** JOB 7518 ON xantipa CANCELLED AT 2022-06-10T17:11:35 ***\n"
            "Epoch 0 |   Training | Elapsed Time: 0:00:15 | Steps: 95 | Loss: 24.186966\n")
    report = _report(tmp_path, text)
    assert report.primary is not None and report.primary.rule == "oom.host"
    assert report.primary.facts["source"] == "slurm memory limit"


def test_slurmstepds_at_some_point_warning_on_a_finished_step_is_no_oom(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # slurm_54: dd finished; the warning counts page cache, nothing was killed
    text = ("51200+0 records in\n51200+0 records out\n52428800 bytes (52 MB) copied, 0.459204 s, 114 MB/s\n"
            "slurmstepd: Exceeded step memory limit at some point.\n")
    report = _report(tmp_path, text)
    assert "oom.host" not in _rules(report) and report.primary is None


def test_a_watchdog_line_the_terminal_broke_is_still_a_timeout(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # accelerate_157: torch 1.9's line (no SeqNum), "ran for" split onto the next line by an 80-column terminal
    text = ("terminate called after throwing an instance of 'std::runtime_error'\n"
            "  what():  [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE, "
            "Timeout(ms)=1800000) r\n"
            "an for 1804582 milliseconds before timing out.\n")
    report = _report(tmp_path, text)
    assert report.primary is not None and report.primary.rule == "dist.timeout"
    assert report.primary.facts["timeout_ms"] == 1800000
    assert "ran_ms" not in report.primary.facts  # never "ran for 0 ms"


def test_tensorflows_lame_worker_is_a_rank_failure(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # t5japanese_1: TPUEstimator on a preemptible TPU
    text = ("I0902 03:33:36.516501 140070334211904 basic_session_run_hooks.py:260] loss = 1.109375, step = 488600 "
            "(45.410 sec)\n"
            "INFO:tensorflow:ShutdownHook: lame workers found: "
            "HeartbeatManager(/job:worker/replica:0/task:0/device:CPU:0)\n")
    report = _report(tmp_path, text)
    assert report.primary is not None and report.primary.rule == "dist.rank_failure"
    assert report.primary.facts["host"] == "/job:worker/replica:0/task:0/device:CPU:0"
