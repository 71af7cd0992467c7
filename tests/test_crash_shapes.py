"""Crash and hang shapes read from the line model and from frames (issue 11), one message each.

Lines are quoted from real logs (the corpus entries named beside them hold the whole log); the
frames of the hang tests are those of real KeyboardInterrupt / stack-dump tracebacks.
"""

from __future__ import annotations

import pytest
from builders import analyze_text, rules_of

from autopsy.checks.crash_headless import looks_like_exception as _looks_like_exception
from autopsy.checks.hang import is_hang_dump, is_stop, waiting_frame
from autopsy.checks.tb_causes import gate_open
from autopsy.discover import classify
from autopsy.model import ArtifactKind, Confidence
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
    # mmseg_308: mmcv's evaluation bar, then bash's "Killed" in a Chinese locale
    ("2020-12-18 19:56:07,472 - mmseg - INFO - Saving checkpoint at 4000 iterations [>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>"
     ">>>>>>>>> ] 3217/3849, 4.0 task/s, elapsed: 799s, ETA: 157s已杀死", "已杀死"),
    # tfmacos_13: a Keras bar, then zsh's job report of the segfault (found by its start: it ends in the command)
    ("194/195 [============================>.] - ETA: 0s - loss: 2.5521 - acc: 0.1561[1]    31192 segmentation fault  "
     "python resnet.py", "[1]    31192 segmentation fault  python resnet.py"),
    # tfmacos_19: the same for a foreground job
    ("5000/5000 [==============================] - ETA: 0s - loss: 2.3416 - accuracy: 0.3065zsh: segmentation fault  "
     "python cifar10_cnn.py", "zsh: segmentation fault  python cifar10_cnn.py"),
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
    "进程已杀死",  # Chinese prose ("the process was killed"), not a job report glued to output
    "zsh: segmentation fault  python cifar10_cnn.py",  # the report on a line of its own
    'the run ends in "zsh: killed     python main.py" after epoch 3',  # prose quoting a report
    "I always get zsh: segmentation fault  python train.py",
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


# ----------------------------------------------------------------------------- batch11's general causes
# Each log below is quoted from a crash/batch11 corpus entry (named beside it) or another real thread.

_report = analyze_text
_rules = rules_of


# modelbuilder_2779: libtorch's C++ report under its message, no Python traceback (ML.NET / TorchSharp)
_C10_INDEX = ("arget 4294967295 is out of bounds.\n"
              "Exception raised from nll_loss_out_frame at C:\\actions-runner\\_work\\pytorch\\pytorch\\builder"
              "\\windows\\pytorch\\aten\\src\\ATen\\native\\LossNLL.cpp:230 (most recent call first):\n"
              "00007FFEB155AD0200007FFEB155ACA0 c10.dll!c10::Error::Error [<unknown file> @ <unknown line number>]\n"
              "00007FFEB1523FB500007FFEB1523F40 c10.dll!c10::IndexError::IndexError [<unknown file> @ <unknown line "
              "number>]\n")
# torchsharp_950: the same report under a CUDA OOM, which oom.cuda explains
_C10_OOM = ("System.Runtime.InteropServices.ExternalException:“CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; "
            "23.99 GiB total capacity; 21.46 GiB already allocated; 0 bytes free; 23.18 GiB reserved in total by "
            "PyTorch)\n"
            "Exception raised from malloc at C:\\actions-runner\\_work\\pytorch\\pytorch\\builder\\windows"
            "\\pytorch\\c10\\cuda\\CUDACachingAllocator.cpp:704 (most recent call first):\n"
            "00007FFB7D59524500007FFB7D5951D0 c10.dll!c10::OutOfMemoryError::OutOfMemoryError [<unknown file> @ "
            "<unknown line number>]\n")


def test_a_c10_error_report_without_a_python_traceback_is_a_crash(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = _report(tmp_path, _C10_INDEX)
    assert report.primary is not None and report.primary.rule == "crash.exception"
    assert report.primary.facts["exc_type"] == "c10::Error"
    assert "4294967295 is out of bounds" in report.primary.facts["message"]
    assert "tokenizer.mismatch" not in _rules(report)


def test_a_c10_report_under_an_error_another_rule_knows_is_left_to_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = _report(tmp_path, _C10_OOM)
    assert report.primary is not None and report.primary.rule == "oom.cuda"
    assert "crash.exception" not in _rules(report)


@pytest.mark.parametrize(("text", "rule"), [
    # daysign_22: coreutils timeout's command died of SIGILL (bash's report), not of the time limit
    ('timeout: the monitored command dumped core\n/ql/shell/otask.sh: line 95:  2367 Illegal instruction     '
     '$timeoutCmd $which_program $file_param "${script_params[@]}"\n', "env.import"),
    # facemask_169: zsh's report of the same
    ("zsh: illegal hardware instruction  python train_mask_detector.py --dataset dataset\n", "env.import"),
    # a CUDA kernel's illegal instruction is a device error, not a CPU mismatch
    ("RuntimeError: CUDA error: an illegal instruction was encountered\n", None),
    # deepglobe_31: Windows' STATUS_ILLEGAL_INSTRUCTION as PyCharm prints it; the DataLoader worker that "exited
    # unexpectedly" in the same post is the same binary dying in a worker, not a data problem
    ("RuntimeError: DataLoader worker (pid(s) 12488) exited unexpectedly\n"
     "Process finished with exit code -1073741795 (0xC000001D)\n", "env.import"),
    # an access violation is still a native crash, not a CPU mismatch
    ("Process finished with exit code -1073741819 (0xC0000005)\n", None),
])
def test_sigill_is_a_binary_built_for_another_cpu(tmp_path, text: str, rule: str | None) -> None:  # type: ignore[no-untyped-def]
    report = _report(tmp_path, text)
    if rule is None:
        assert "env.import" not in _rules(report)
        return
    assert report.primary is not None and report.primary.rule == rule
    assert report.primary.confidence is Confidence.MEDIUM and report.primary.facts["kind"] == "cpu_instruction"
    assert "run.incomplete" not in _rules(report)


def test_make_reporting_timeouts_exit_status_is_a_time_limit(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from autopsy.clock import TERMINATION_LINE

    # whilp/working reflection 2026-03-06: a runner killed by coreutils timeout inside a make recipe
    report = _report(tmp_path, "[run-ah] 2026-03-06T08:09:04Z starting (timeout=300s)\n"
                               "[run-ah] 2026-03-06T08:14:04Z timed out after 300s\n"
                               "make[1]: *** [work.mk:193: o/do/done] Error 124\n")
    assert report.primary is not None and report.primary.rule == "run.incomplete"
    assert TERMINATION_LINE.search("make[1]: *** [work.mk:193: o/do/done] Error 124")
    # make went on past an ignored timeout; another status is not timeout's
    assert not TERMINATION_LINE.search("make: [Makefile:116: test/salidas/fecha4-combinado.sal] Error 124 (ignored)")
    assert not TERMINATION_LINE.search("make[1]: *** [Makefile:185: run-plugin-catch-syscalls-with-libinline.so] "
                                       "Error 134")


@pytest.mark.parametrize(("text", "rule"), [
    # mtgrnn_1: LuaJIT's allocator (char-rnn on the CPU)
    ("999/12000 (epoch 4.163), train_loss = 0.55656064, grad/param norm = 2.2091e-01, time/batch = 2.5914s\n"
     "evaluating loss over split index 2\n1/13...\nPANIC: unprotected error in call to Lua API (not enough memory)\n",
     "oom.host"),
    # mlnet_7040: the .NET runtime
    ("System.OutOfMemoryException\n  HResult=0x8007000E\n  Message=Exception of type 'System.OutOfMemoryException' "
     "was thrown.\n  Source=Microsoft.ML.Core\n", "oom.host"),
    # Lua torch's GPU allocator stays a GPU OOM (waifu2x / cutorch wording)
    ("THCudaCheck FAIL file=/tmp/luarocks_cutorch-scm-1-1606/cutorch/lib/THC/generic/THCStorage.cu line=66 "
     "error=2 : out of memory\n", "oom.cuda"),
])
def test_out_of_memory_of_wrapped_runtimes(tmp_path, text: str, rule: str) -> None:  # type: ignore[no-untyped-def]
    report = _report(tmp_path, text)
    assert report.primary is not None and report.primary.rule == rule
    if rule == "oom.cuda":
        assert "oom.host" not in _rules(report)


def test_jax_debug_nans_stop_is_a_nonfinite_loss(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # keras_jax_19595: Keras 3 on JAX with jax_debug_nans, the notebook's JSON error
    report = _report(tmp_path, '{\n\t"name": "FloatingPointError",\n\t"message": "invalid value (nan) encountered in '
                               'jit(compiled_train_step). Because jax_config.debug_nans.value and/or '
                               'config.jax_debug_infs is set, the de-optimized function was called.",\n')
    assert report.primary is not None and report.primary.rule == "loss.nonfinite"
    assert "jit(compiled_train_step)" in report.primary.message
    # numpy's warning (continual_learning entry's kind) is not a JAX stop
    healthy = _report(tmp_path, "RuntimeWarning: invalid value encountered in true_divide\nepoch 1 loss 0.5\n")
    assert "loss.nonfinite" not in _rules(healthy)


# minkowski_359: the loop catches the OOM, says it skips the batch, and the next iterations run
_OOM_SKIPPED = (
    "2021-06-02 15:50:59 dev-ssh-geza root[14429] INFO Iteration: 15/1184, epoch 0, Bif Loss: 0.00563023891299963,  "
    "lr: 0.10000\n"
    "2021-06-02 15:51:03 dev-ssh-geza root[14429] DEBUG CUDA out of memory. Tried to allocate 422.00 MiB (GPU 0; 15.78 "
    "GiB total capacity; 13.10 GiB already allocated; 372.75 MiB free; 13.78 GiB reserved in total by PyTorch)\n"
    "2021-06-02 15:51:03 dev-ssh-geza root[14429] DEBUG Traceback (most recent call last):\n"
    "2021-06-02 15:51:03 dev-ssh-geza root[14429] WARNING CUDA OOM Error during batch execution, skipping batch.\n"
    "2021-06-02 15:51:06 dev-ssh-geza root[14429] DEBUG Batch loss: 0.010648244060575962\n")
# fairseq_869: fairseq's skip, then the spawn traceback of the rank that did not recover
_OOM_SKIP_FAILED = (
    "| WARNING: ran out of memory with exception: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.93 GiB "
    "total capacity; 7.20 GiB already allocated; 17.56 MiB free; 46.25 MiB cached);\n"
    " Skipping batch\n"
    "Traceback (most recent call last):\n"
    '  File "./fairseq/train.py", line 306, in <module>\n'
    "    cli_main()\n")


def test_an_oom_the_loop_announces_it_skipped_is_not_fatal(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = _report(tmp_path, _OOM_SKIPPED)
    assert report.primary is None
    assert not {"oom.cuda", "crash.exception"} & _rules(report)


def test_a_traceback_right_after_the_skip_means_it_failed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = _report(tmp_path, _OOM_SKIP_FAILED)
    assert report.primary is not None and report.primary.rule == "oom.cuda"


def test_a_notebook_oom_header_is_the_oom_not_another_crash(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # mmdet_9759: a Colab paste that ends at IPython's traceback header
    report = _report(tmp_path, "[>>>>>>>>>>>>>                    ] 6/15, 0.6 task/s, elapsed: 10s, ETA:    15s\n"
                               "---------------------------------------------------------------------------\n"
                               "OutOfMemoryError                          Traceback (most recent call last)\n")
    assert report.primary is not None and report.primary.rule == "oom.cuda"
    assert "crash.exception" not in _rules(report)


@pytest.mark.parametrize(("code", "rule"), [
    ("1", "dist.rank_failure"),  # kubeflow_2044: the replica's own error, then "is restarting because"
    ("137", "oom.host"),  # the container's SIGKILL
    ("0", None),  # a replica that finished
])
def test_kubeflow_operator_pod_exit_event(tmp_path, code: str, rule: str | None) -> None:  # type: ignore[no-untyped-def]
    report = _report(tmp_path, f"INFO[0289] Pod: default.kfto-01-master-0 exited with code {code}  job=default.kfto-01 "
                               "replica-type=master uid=4acaf99e-c0e0-424e-b6fe-9cbb2e303f3b\n")
    if rule is None:
        assert report.primary is None
        return
    assert report.primary is not None and report.primary.rule == rule


@pytest.mark.parametrize("text", [
    # tfmacos_13 and tfmacos_19: zsh's segfault report glued to a Keras bar
    "Epoch 1/30\n194/195 [============================>.] - ETA: 0s - loss: 2.5521 - acc: 0.1561[1]    31192 "
    "segmentation fault  python resnet.py\n",
    "Epoch 1/100\n5000/5000 [==============================] - ETA: 0s - loss: 2.3416 - accuracy: 0.3065zsh: "
    "segmentation fault  python cifar10_cnn.py\nmultiprocessing/resource_tracker.py:216: UserWarning: "
    "resource_tracker: There appear to be 3 leaked semaphore objects to clean up at shutdown\n",
])
def test_zsh_report_glued_to_a_keras_bar_is_the_crash(tmp_path, text: str) -> None:  # type: ignore[no-untyped-def]
    report = _report(tmp_path, text)
    assert report.primary is not None and report.primary.rule == "crash.segfault"
    assert "segmentation fault  python" in report.primary.evidence[0].excerpt

