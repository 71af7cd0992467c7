"""Log scanner: Python tracebacks (chains, ranks) and torchrun ChildFailedError reports."""

from __future__ import annotations

from autopsy.parsers.logs import scan_text

SIMPLE = """\
Some output
Traceback (most recent call last):
  File "/home/user/train.py", line 212, in <module>
    main()
  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 1859, in train
    return inner_training_loop(
           ^^^^^^^^^^^^^^^^^^^^
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB
"""

CHAINED = """\
Traceback (most recent call last):
  File "a.py", line 3, in load
    return d["x"]
KeyError: 'x'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "a.py", line 5, in main
    load()
ValueError: no x

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "a.py", line 9, in <module>
    main()
RuntimeError: failed
"""


def test_simple_traceback():
    scan = scan_text(SIMPLE)
    (tb,) = scan.tracebacks
    assert tb.exc_type == "torch.OutOfMemoryError"
    assert tb.message.startswith("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert tb.line_start == 2 and tb.line_end == 8
    assert [f.function for f in tb.frames] == ["<module>", "train"]
    assert tb.innermost.code == "return inner_training_loop(" and tb.innermost.line == 1859


def test_chained_tracebacks_keep_the_chain():
    scan = scan_text(CHAINED)
    (tb,) = scan.tracebacks  # only the chain's head is listed
    assert tb.exc_type == "RuntimeError" and tb.chain == "cause"
    assert tb.cause.exc_type == "ValueError" and tb.cause.chain == "context"
    assert tb.cause.cause.exc_type == "KeyError" and tb.cause.cause.cause is None


def test_interleaved_ranks_are_separated():
    log = ('[rank1]:Traceback (most recent call last):\n'
           '[rank0]:Traceback (most recent call last):\n'
           '[rank1]:  File "train.py", line 10, in <module>\n'
           '[rank0]:  File "train.py", line 20, in <module>\n'
           '[rank1]:    main()\n'
           '[rank0]:    step()\n'
           '[rank0]:torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970\n'
           '[rank1]:RuntimeError: boom\n'
           '[rank0]:\n[rank1]:\n')
    scan = scan_text(log)
    by_rank = {tb.rank: tb for tb in scan.tracebacks}
    assert by_rank[0].exc_type == "torch.distributed.DistBackendError"
    assert by_rank[0].frames[0].line == 20 and by_rank[0].frames[0].code == "step()"
    assert by_rank[1].exc_type == "RuntimeError" and by_rank[1].frames[0].line == 10


def test_multiline_message_until_blank_line():
    log = ("Traceback (most recent call last):\n"
           '  File "t.py", line 1, in <module>\n'
           "    x.cuda()\n"
           "RuntimeError: CUDA error: an illegal memory access was encountered\n"
           "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
           "might be incorrect.\n"
           "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n"
           "\n"
           "{'loss': 1.0, 'epoch': 1.0}\n")
    (tb,) = scan_text(log).tracebacks
    assert tb.message.splitlines() == [
        "CUDA error: an illegal memory access was encountered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
        "might be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
    ]
    assert tb.line_end == 6


def test_exception_without_header_is_not_a_traceback():
    scan = scan_text("ValueError: something\nRuntimeError: CUDA error\n")
    assert scan.tracebacks == []


def test_cut_off_traceback_is_kept():
    (tb,) = scan_text('Traceback (most recent call last):\n  File "t.py", line 3, in f\n').tracebacks
    assert tb.exc_type == "" and "cut off" in tb.message and tb.frames[0].line == 3


def test_traceback_gets_step_of_last_bar():
    log = "\r 40%|████      | 40/100 [00:10<00:15,  4.00it/s]\n" + SIMPLE
    (tb,) = scan_text(log).tracebacks
    assert tb.step == 40


NEW_FORMAT = """\
E0325 20:57:27.620000 2606 site-packages/torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) \
local_rank: 1 (pid: 2630) of binary: /root/miniconda3/bin/python
Traceback (most recent call last):
  File "/root/miniconda3/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/root/miniconda3/lib/python3.12/site-packages/torch/distributed/launcher/api.py", line 269, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[2]:
  time      : 2025-05-23_19:14:40
  host      : node-7
  rank      : 2 (local_rank: 2)
  exitcode  : -9 (pid: 172396)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 172396
------------------------------------------------------------
Root Cause (first observed failure):
[1]:
  time      : 2025-05-23_19:14:39
  host      : node-7
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 172395)
  error_file: /tmp/torchelastic_x/none_y/attempt_0/1/error.json
  traceback : Traceback (most recent call last):
    File "/root/train.py", line 10, in main
      raise ValueError("bad batch")
  ValueError: bad batch

============================================================
"""

OLD_FORMAT = """\
***************************************
            tools/train.py FAILED
=======================================
Root Cause:
[0]:
  time: 2021-09-14_13:50:00
  rank: 0 (local_rank: 0)
  exitcode: 1 (pid: 866229)
  error_file: <N/A>
  msg: "Process failed with exitcode 1"
=======================================
Other Failures:
[1]:
  time: 2021-09-14_13:50:00
  rank: 1 (local_rank: 1)
  exitcode: -6 (pid: 866230)
  error_file: <N/A>
  msg: "Signal 6 (SIGABRT) received by PID 866230"
***************************************
"""


def test_child_failed_error_new_format():
    scan = scan_text(NEW_FORMAT)
    failures = {cf.rank: cf for cf in scan.child_failures}
    assert set(failures) == {1, 2}
    killed, root = failures[2], failures[1]
    assert killed.exitcode == -9 and killed.signal == "SIGKILL" and killed.pid == 172396
    assert killed.host == "node-7" and killed.local_rank == 2 and not killed.root_cause
    assert killed.time == "2025-05-23_19:14:40" and killed.error_file is None
    assert root.root_cause and root.exitcode == 1 and root.signal is None
    assert root.error_file.endswith("error.json")
    assert "ValueError: bad batch" in root.traceback
    # the launcher's own traceback is still a traceback; the child's is not double counted
    assert [tb.exc_type for tb in scan.tracebacks] == [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"]


def test_child_failed_error_old_format():
    scan = scan_text(OLD_FORMAT)
    failures = {cf.rank: cf for cf in scan.child_failures}
    assert failures[0].root_cause and failures[0].exitcode == 1 and failures[0].pid == 866229
    assert failures[0].traceback == "Process failed with exitcode 1"
    assert failures[1].signal == "SIGABRT" and failures[1].exitcode == -6 and not failures[1].root_cause


def test_child_failure_with_rank_prefix_and_stderr_relay():
    log = "".join("stderr: " + line + "\n" for line in NEW_FORMAT.splitlines())
    scan = scan_text(log)
    assert {cf.rank for cf in scan.child_failures} == {1, 2}
