"""Crash and hang shapes read from the line model and from frames (issue 11), one message each.

Lines are quoted from real logs (the corpus entries named beside them hold the whole log); the
frames of the hang tests are those of real KeyboardInterrupt / stack-dump tracebacks.
"""

from __future__ import annotations

import pytest

from autopsy.checks.crash_exception import _looks_like_exception
from autopsy.checks.hang import is_hang_dump, is_stop, waiting_frame
from autopsy.checks.tb_causes import gate_open
from autopsy.discover import classify
from autopsy.model import ArtifactKind
from autopsy.parsers.log_text import clean, split_glued
from autopsy.parsers.types import Frame, Traceback


@pytest.mark.parametrize(("line", "tail"), [
    # tqdm bar, then the shell's report of the SIGKILL (no newline after the bar)
    (" 25%|##5       | 512/2048 [02:10<06:31, 3.92it/s]Killed", "Killed"),
    # tqdm bar, then slurmstepd's time-limit notice
    ("100%|██████████| 837/837 [07:11<00:00,  1.94it/s]slurmstepd: error: *** JOB 4242 ON gpu07 CANCELLED AT "
     "2024-01-01T10:00:00 DUE TO TIME LIMIT ***",
     "slurmstepd: error: *** JOB 4242 ON gpu07 CANCELLED AT 2024-01-01T10:00:00 DUE TO TIME LIMIT ***"),
    # tqdm without a total, then a traceback header
    ("45it [00:03, 14.2it/s]Traceback (most recent call last):", "Traceback (most recent call last):"),
    # Keras progress bar, then Killed
    (" 128/1000 [==>...........................] - ETA: 3s - loss: 0.6931Killed", "Killed"),
    # Keras 3's Progbar (no brackets), then TerminateOnNaN's line (fixtures/runs/keras_progbar_nan)
    ("1/7 ━━━━━━━━━━━━━━━━━━━━ 9s 2s/step - loss: 989.9342 - mae: 24.8975Batch 3: Invalid loss, terminating training",
     "Batch 3: Invalid loss, terminating training"),
    # pyemma's own progress display, then bash's Terminated
    ("getting output of UniformTimeClustering:  20% (117/558) [#      ] eta 28:34:54 \\Terminated", "Terminated"),
])
def test_message_glued_to_a_bar_is_split_off(line: str, tail: str) -> None:
    pieces = split_glued(line)
    assert len(pieces) == 2 and pieces[1] == tail


@pytest.mark.parametrize("line", [
    "Epoch 0:  45%|####5     | 450/1000 [00:10<00:12, 43.2it/s, v_num=0, loss=0.3]",
    " 128/1000 [==>...........................] - ETA: 3s - loss: 0.6931 - mAP: 0.5",
    "7/7 ━━━━━━━━━━━━━━━━━━━━ 2s 351ms/step - loss: inf - mae: inf - val_loss: nan - val_mae: nan",
    "the DataLoader worker was Killed",
    "[rank0]: [2024-01-01 10:00:00] step 5 loss 2.0",
    "Killed",
])
def test_lines_without_a_glued_message_stay_whole(line: str) -> None:
    assert split_glued(line) == [line]


def test_markdown_bold_paste_is_the_line_itself() -> None:
    assert clean(b"**Killed**")[0] == "Killed"
    assert clean(b"**")[0] == "**"


@pytest.mark.parametrize(("name", "kind"), [
    ("cluster-CK2.o7082041", ArtifactKind.LOG),  # PBS / SGE job output
    ("overlap.30.out-30", ArtifactKind.LOG),  # a numbered copy of a .out
    ("train.log.1", ArtifactKind.LOG),
    ("model.safetensors", ArtifactKind.CHECKPOINT_FILE),
    ("SOAP_42.e", ArtifactKind.LOG),  # `#SBATCH -e SOAP_42.e`
    ("fold=11.o", ArtifactKind.LOG),
])
def test_scheduler_output_names_are_logs(name: str, kind: ArtifactKind) -> None:
    assert classify(name, b"text\n")[0] is kind


def test_a_binary_object_file_is_not_a_log() -> None:
    assert classify("kernels.o", b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00")[0] is not ArtifactKind.LOG


def _tb(exc_type: str, *frames: tuple[str, str, str], message: str = "") -> Traceback:
    return Traceback(path="train.log", line_start=1, line_end=10, exc_type=exc_type, message=message,
                     frames=tuple(Frame(f, 1, fn, code) for f, fn, code in frames))


_QUEUE_WAIT = ("/usr/lib/python3.6/multiprocessing/connection.py", "_recv", "chunk = read(handle, remaining)")
_THREAD_WAIT = ("/usr/lib/python3.10/threading.py", "wait", "gotit = waiter.acquire(True, timeout)")
_SLEEP = ("train.py", "main", "time.sleep(5)")
_WAITPID = ("/usr/lib/python3.5/subprocess.py", "_try_wait", "(pid, sts) = os.waitpid(self.pid, wait_flags)")
_FORWARD = ("/site-packages/torch/nn/modules/linear.py", "forward", "return F.linear(input, self.weight, self.bias)")
_DATASET_GET = ("data/dataset.py", "get", "return self.items[idx]")


@pytest.mark.parametrize("frame", [_QUEUE_WAIT, _THREAD_WAIT, _SLEEP, _WAITPID])
def test_stop_in_a_waiting_frame_is_a_hang(frame: tuple[str, str, str]) -> None:
    tb = _tb("KeyboardInterrupt", ("train.py", "<module>", "main()"), frame)
    assert is_stop(tb) and waiting_frame(tb) is not None and is_hang_dump(tb)


@pytest.mark.parametrize("frame", [_FORWARD, _DATASET_GET])
def test_stop_while_computing_is_not_a_hang(frame: tuple[str, str, str]) -> None:
    assert waiting_frame(_tb("KeyboardInterrupt", frame)) is None


def test_a_crash_in_a_waiting_frame_is_not_a_hang_dump() -> None:
    assert not is_hang_dump(_tb("RuntimeError", _THREAD_WAIT, message="boom"))
    assert is_hang_dump(_tb("", _WAITPID))  # a stack with no exception line: a dump of a live process


def test_sigterm_named_by_a_handler_is_a_stop() -> None:
    assert is_stop(_tb("Exception", _SLEEP, message="Received SIGTERM, exiting"))
    assert not is_stop(_tb("ValueError", _SLEEP, message="bad value"))


@pytest.mark.parametrize(("rule", "context", "open_"), [
    ("checkpoint.corrupt", "/site-packages/torch/serialization.py _legacy_load magic_number = pickle_module.load(f)",
     True),
    ("checkpoint.corrupt",
     "/usr/lib/python3.8/multiprocessing/spawn.py _main self = reduction.pickle.load(from_parent)", False),
    ("disk.full", "/tensorflow/python/training/saver.py save {self.saver_def.filename_tensor_name: checkpoint_file}",
     True),
    ("disk.full", "ResourceExhaustedError: OOM when allocating tensor with shape[64,512]", False),
    ("dist.comm", "/torch/distributed/rendezvous.py _tcp_rendezvous_handler store = TCPStore(...)", True),
    ("dist.comm", "/site-packages/tensorboard/program.py _make_server OSError: [Errno 98] Address already in use",
     False),
])
def test_frames_gate(rule: str, context: str, open_: bool) -> None:
    assert gate_open(rule, context) is open_


@pytest.mark.parametrize(("name", "is_exc"), [
    ("ZeroDivisionError", True), ("AssertionError", True), ("torch._dynamo.exc.FailOnRecompileLimitHit", True),
    ("Epoch", False), ("INFO", False), ("transformers.TrainingArguments", False),
])
def test_last_line_exception_names(name: str, is_exc: bool) -> None:
    assert _looks_like_exception(name) is is_exc


# torchrun relaying a stop to its workers, then a worker's traceback cut before its exception line
# (lines from the RTD-Action #31 corpus entry; the SIGTERM wording is torch 2.x's, as in the olmo entry).
_RELAY_SIGINT = ("WARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting down workers\n"
                 "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 4797 closing signal SIGINT\n")
_RELAY_SIGTERM = ("W0101 10:00:00.000000 140 torch/distributed/elastic/agent/server/api.py:704] Received "
                  "Signals.SIGTERM death signal, shutting down workers\n")
_CUT_TRACEBACK = ('Traceback (most recent call last):\n  File "main.py", line 84, in <module>\n    main()\n'
                  '  File "/root/anaconda3/envs/biot5/lib/python3.8/site-packages/hydra/main.py", line 94, in '
                  'decorated_main\n    _run_hydra(\n')


@pytest.mark.parametrize(("above", "stop"), [
    (_RELAY_SIGINT, "KeyboardInterrupt"),
    (_RELAY_SIGTERM, "SIGTERM"),
    ("Epoch 3: 100%|##########| 50/50 [00:10<00:00]\n", None),  # nothing marks it: a cut crash traceback
    (_RELAY_SIGINT + "".join(f"step {i} loss 2.0\n" for i in range(5)), None),  # the relay is too far above
])
def test_a_cut_traceback_right_below_a_relayed_stop_is_a_stop(tmp_path, above: str, stop: str | None) -> None:  # type: ignore[no-untyped-def]
    from autopsy.checks.hang import marked_stop
    from autopsy.run import load_run

    (tmp_path / "console.txt").write_text(above + _CUT_TRACEBACK, encoding="utf-8")
    run = load_run(tmp_path)
    tbs = [tb for tb in run.all_tracebacks if not tb.exc_type]
    assert len(tbs) == 1
    assert marked_stop(run, tbs[0]) == stop
    assert is_stop(tbs[0], run) is (stop is not None)
