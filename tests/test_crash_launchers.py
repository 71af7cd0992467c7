"""Crash shapes of launchers and writers (issue 11, crash batch14): Ray's dead-worker reports and its
memory monitor, and torch's zip writer failing while it handles another error.

Each log is quoted from a crash/batch14 corpus entry (named beside it) or another real thread.
"""

from __future__ import annotations

import pytest
from builders import analyze_text, rules_of

_report = analyze_text
_rules = rules_of


# ray_47461 and simplerl_25: Ray's report of a dead worker lists the OOM killer and SIGSEGV only as possibilities
_RAY_CAUSES = ("Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection "
               "error code 2. End of file. There are some potential root causes. (1) The process is killed by "
               "SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called. (3) The worker is "
               "crashed unexpectedly due to SIGSEGV or other unexpected errors.")
_RAYLET = ("(raylet) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot "
           "the problem, check the logs for the dead worker. RayTask ID: "
           "ffffffffffffffff3fe85624f7ebc8f28d076a0702000000 Worker ID: "
           "fead2dfe78eeee17dd8922f0569f798cf51660782f4222a9acfc8fbe Node ID: "
           "201f2cc4bc593d830338a3ed774649489389d8695222912df0994e79 Worker IP address: 10.0.7.57 Worker port: 10046 "
           "Worker PID: 89513 " + _RAY_CAUSES + "\n")


@pytest.mark.parametrize(("text", "facts"), [
    (_RAYLET + "(TorchTrainer pid=89392) Worker 0 has failed.\n",
     {"pid": "89513", "host": "10.0.7.57", "ray_exit_type": "SYSTEM_ERROR", "failed_rank": 0,
      "trainer": "TorchTrainer"}),
    ("The actor is dead because its worker process has died. " + _RAY_CAUSES + "\n", {"ray_exit_type": "SYSTEM_ERROR"}),
])
def test_a_dead_ray_worker_is_a_rank_failure_of_unknown_cause(tmp_path, text: str, facts: dict) -> None:  # type: ignore[no-untyped-def,type-arg]
    report = _report(tmp_path, text)
    assert report.primary is not None and report.primary.rule == "dist.rank_failure"
    assert facts.items() <= report.primary.facts.items()
    assert not {"crash.segfault", "oom.host"} & _rules(report)


def test_rays_memory_monitor_kill_is_host_oom(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # OpenRLHF on Ray: the memory monitor says it killed the task
    report = _report(tmp_path, "ERROR - An error occurred during score calculation: Task was killed due to the node "
                               "running low on memory.\n")
    assert report.primary is not None and report.primary.rule == "oom.host"
    assert report.primary.facts["source"] == "Ray memory monitor (node low on memory)"


# dreambooth_45: torch.save's zip writer reports its short write while handling a MemoryError (Windows, a 6 GB
# checkpoint): the write failed of the MemoryError, not of a full disk
_SAVE_MEMORYERROR = (
    "Summoning checkpoint.\n\nTraceback (most recent call last):\n"
    '  File "H:\\Anaconda\\envs\\dreambooth\\lib\\site-packages\\torch\\serialization.py", line 379, in save\n'
    "    _save(obj, opened_zipfile, pickle_module, pickle_protocol)\n"
    '  File "H:\\Anaconda\\envs\\dreambooth\\lib\\site-packages\\torch\\serialization.py", line 499, in _save\n'
    "    zip_file.write_record(name, storage.data_ptr(), num_bytes)\nMemoryError\n\n"
    "During handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n"
    '  File "H:\\Anaconda\\envs\\dreambooth\\lib\\site-packages\\torch\\serialization.py", line 380, in save\n'
    "    return\n"
    '  File "H:\\Anaconda\\envs\\dreambooth\\lib\\site-packages\\torch\\serialization.py", line 259, in __exit__\n'
    "    self.file_like.write_end_of_file()\n"
    "RuntimeError: [enforce fail at ..\\caffe2\\serialize\\inline_container.cc:300] . unexpected pos 6057217600 vs "
    "6057217496\n")


def test_a_short_write_while_handling_a_memoryerror_is_not_a_full_disk(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = _report(tmp_path, _SAVE_MEMORYERROR)
    assert report.primary is not None and report.primary.rule == "oom.host"
    assert "disk.full" not in _rules(report)
    # the writer's message on its own (no other error above it) still reads as a full disk
    alone = _report(tmp_path, "RuntimeError: [enforce fail at inline_container.cc:626] . unexpected pos 8388672 vs "
                              "8388560\n")
    assert "disk.full" in _rules(alone)


# timm_1269: the worker's signal handler, then the main process's traceback cut while it waited in _data_queue.get
_WORKER_SEGFAULT = (
    "Train: 72 [1400/5004 ( 28%)]  Loss: 2.802 (2.69)  Time: 0.114s, 2249.52/s  (0.685s,  373.73/s)  LR: 1.000e-03  "
    "Data: 0.016 (0.588)\n"
    "ERROR: Unexpected segmentation fault encountered in worker.\n"
    "Traceback (most recent call last):\n"
    '  File "/home/hossein/anaconda3/lib/python3.9/site-packages/torch/utils/data/dataloader.py", line 1011, in '
    "_try_get_data\n"
    "    data = self._data_queue.get(timeout=timeout)\n"
    '  File "/home/hossein/anaconda3/lib/python3.9/multiprocessing/queues.py", line 113, in get\n'
    "    if not self._poll(timeout):\n")


def test_a_worker_segfault_is_the_worker_not_a_hang(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = _report(tmp_path, _WORKER_SEGFAULT)
    assert report.primary is not None and report.primary.rule == "data.worker"
    assert report.primary.facts["signal"] == "Segmentation fault"
    assert not {"run.stalled", "crash.segfault"} & _rules(report)


def test_the_same_cut_stack_with_no_worker_death_above_is_still_a_hang(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = _WORKER_SEGFAULT.replace("ERROR: Unexpected segmentation fault encountered in worker.\n", "")
    report = _report(tmp_path, text)
    assert report.primary is not None and report.primary.rule == "run.stalled"
    assert "data.worker" not in _rules(report)
