"""Crash shapes of crash batch18 (issue 11): a DataLoader deadlock ended by Ctrl-C (a lock taken by ``with``,
and the cut main traceback printed right below the finalizer's KeyboardInterrupt), an exception whose message
goes on below its exception line (torch's load_state_dict), and Python warning lines above a bare device-side
assert (they name the module that warned, not what the failing call was doing).

Each log is quoted from a crash/batch18 corpus entry (named beside it) or another real message.
"""

from __future__ import annotations

from builders import analyze_text, rules_of


def _report(tmp_path, text: str):  # type: ignore[no-untyped-def]
    return analyze_text(tmp_path, text, "train.log")


_rules = rules_of

_SITE = "/home/bcheng/anaconda3/lib/python3.6"
# detectronpt_140: the DataLoader's finalizer, interrupted while its worker shutdown waits on the queue's lock
_FINALIZER_CTRL_C = (
    "Exception ignored in: <bound method _DataLoaderIter.__del__ of <torch.utils.data.dataloader._DataLoaderIter "
    "object at 0x7f33d805aa20>>\n"
    "Traceback (most recent call last):\n"
    f'  File "{_SITE}/site-packages/torch/utils/data/dataloader.py", line 349, in __del__\n'
    "Process Process-19:\n"
    "    self._shutdown_workers()\n"
    f'  File "{_SITE}/site-packages/torch/utils/data/dataloader.py", line 340, in _shutdown_workers\n'
    "    self.worker_result_queue.put(None)\n"
    f'  File "{_SITE}/multiprocessing/queues.py", line 346, in put\n'
    "    with self._wlock:\n"
    f'  File "{_SITE}/multiprocessing/synchronize.py", line 96, in __enter__\n'
    "    return self._semlock.__enter__()\n"
    "KeyboardInterrupt:\n")
_MAIN_CUT = ("Traceback (most recent call last):\n"
             '  File "tools/train_net_step.py", line 415, in main\n'
             "    input_data = next(dataiterator)\n")


def test_ctrl_c_in_a_dataloader_deadlock_is_a_stall(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # detectronpt_140: the lock wait is the hang, and the main traceback cut right below it is the same Ctrl-C
    report = _report(tmp_path, _FINALIZER_CTRL_C + _MAIN_CUT)
    assert report.primary is not None and report.primary.rule == "run.stalled"
    assert "synchronize.py" in report.primary.message and "Ctrl-C" in report.primary.message
    assert "crash.exception" not in _rules(report)


def test_a_traceback_with_its_exception_below_a_ctrl_c_is_still_a_crash(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # the same finalizer, then a main traceback that does end in an error (mmdet's real "CUDA out of memory" line
    # is left to oom.cuda, so a plain ValueError from pycocotools' loadRes is used: "Results do not correspond to
    # current coco set")
    text = (_FINALIZER_CTRL_C + _MAIN_CUT
            + "AssertionError: Results do not correspond to current coco set\n")
    report = _report(tmp_path, text)
    assert report.primary is not None and report.primary.rule == "crash.exception"


# a DataLoader worker's own Ctrl-C while it waits for the index queue's lock (CPython's queues.py get)
_WORKER_CTRL_C = ("Traceback (most recent call last):\n"
                  '  File "/usr/lib/python3.8/multiprocessing/process.py", line 315, in _bootstrap\n'
                  "    self.run()\n"
                  '  File "/usr/lib/python3.8/multiprocessing/queues.py", line 96, in get\n'
                  "    with self._rlock:\n"
                  '  File "/usr/lib/python3.8/multiprocessing/synchronize.py", line 95, in __enter__\n'
                  "    return self._semlock.__enter__()\n"
                  "KeyboardInterrupt\n")


def test_a_cut_traceback_right_below_a_workers_ctrl_c_is_that_stop(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = _report(tmp_path, _WORKER_CTRL_C + _MAIN_CUT)
    assert report.primary is not None and report.primary.rule == "run.stalled"
    assert "crash.exception" not in _rules(report)


def test_a_cut_traceback_far_below_a_ctrl_c_is_not_that_stop(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # more than one line between them (here the run's own step lines): the cut traceback is not the same stop
    text = (_WORKER_CTRL_C + "[2023-05-02 10:11:12] Epoch 3 | iter 120/500 | loss 0.3412\n"
            "[2023-05-02 10:11:14] Epoch 3 | iter 140/500 | loss 0.3398\n" + _MAIN_CUT)
    report = _report(tmp_path, text)
    assert report.primary is not None and report.primary.rule == "crash.exception"


def test_ctrl_c_inside_a_context_manager_that_is_no_lock_is_no_wait(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # contextlib's __enter__ runs the generator's code (here torch.autograd.profiler's record_function), it
    # does not block: no interrupted wait
    text = ("Traceback (most recent call last):\n"
            '  File "train.py", line 88, in <module>\n'
            '    with torch.autograd.profiler.record_function("forward"):\n'
            '  File "/usr/lib/python3.10/contextlib.py", line 135, in __enter__\n'
            "    return next(self.gen)\n"
            "KeyboardInterrupt\n")
    report = _report(tmp_path, text)
    assert "run.stalled" not in _rules(report)


# neptune_192: torch's load_state_dict message, its lines indented by a tab and wrapped by the terminal
_STATE_DICT = (
    "RuntimeError: Error(s) in loading state_dict for DataParallel:\n"
    '        Missing key(s) in state_dict: "module.encoder.conv1.weight", "module.encoder.bn1.weight", '
    '"module.encoder.bn1.bias", "module\n'
    '.encoder.bn1.running_mean", "module.encoder.bn1.running_var", "module.encoder.layer1.0.conv1.weight", '
    '"module.encoder.layer1.0.bn1.w\n'
    'eight", "module.encoder.layer1.0.bn1.bias", "module.encoder.layer1.0.downsample.0.weight"...\n')


def test_an_exception_whose_message_goes_on_below_it_is_the_crash(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = _report(tmp_path, _STATE_DICT)
    assert report.primary is not None and report.primary.rule == "crash.exception"
    assert report.primary.facts["exc_type"] == "RuntimeError"
    assert "the message below it" in report.primary.message
    assert "checkpoint.corrupt" not in _rules(report)


def test_a_size_mismatch_in_the_message_below_is_left_to_code_shape(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # adaface_141: the size mismatch is in the message's second line; code.shape explains the exception
    text = ("RuntimeError: Error(s) in loading state_dict for Trainer:\n"
            "        size mismatch for head.kernel: copying a param with shape torch.Size([512, 205990]) from "
            "checkpoint, the shape in current model is torch.Size([512, 85742]).\n")
    report = _report(tmp_path, text)
    assert report.primary is not None and report.primary.rule == "code.shape"
    assert "crash.exception" not in _rules(report)


def test_an_exception_line_followed_by_unrelated_lines_is_no_message(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # the lines below are short and not indented (a loader that caught the error and went on): not its message
    text = ("RuntimeError: Error(s) in loading state_dict for DataParallel:\n"
            "=> loading checkpoint 'best.torch' with strict=False\n"
            "=> loaded checkpoint 'best.torch' (epoch 12)\n")
    report = _report(tmp_path, text)
    assert "crash.exception" not in _rules(report)


# teclass2_2: an HPC .err file; the transformers FutureWarning above the asserts is not a tokenizer frame
_TECLASS2 = (
    "/home/daray/conda/envs/TEclass2-test/lib/python3.12/site-packages/transformers/training_args.py:1525: "
    "FutureWarning: `evaluation_strategy` is deprecated and will be removed in version 4.46 of \U0001f917 "
    "Transformers. Use `eval_strategy` instead\n"
    "  warnings.warn(\n"
    "Detected kernel version 4.18.0, which is below the recommended minimum of 5.5.0; this can cause the process "
    "to hang. It is recommended to upgrade the kernel to the minimum version or higher.\n\n")
_ASSERTS = (
    "  0%|          | 0/1900 [00:00<?, ?it/s]/opt/conda/conda-bld/pytorch_1724789560443/work/aten/src/ATen/native/"
    "cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [0,0,0] Assertion "
    "`t >= 0 && t < n_classes` failed.\n"
    "/opt/conda/conda-bld/pytorch_1724789560443/work/aten/src/ATen/native/cuda/Loss.cu:250: "
    "nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [1,0,0] Assertion `t >= 0 && t < n_classes` "
    "failed.\n")


def test_a_warning_line_above_a_label_assert_is_no_tokenizer_evidence(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = _report(tmp_path, _TECLASS2 + _ASSERTS)
    assert report.primary is not None and report.primary.rule == "cuda.runtime"
    assert "tokenizer.mismatch" not in _rules(report)
    assert "run.stalled" not in _rules(report)


def test_a_tokenizer_log_line_above_a_label_assert_still_is(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # transformers' own log of loading the tokenizer (tokenization_utils_base.py's "loading file ...", as
    # LlamaFactory#1223's log prints its configuration_utils lines) is a tokenizer in the run: the gate opens
    text = ("[INFO|tokenization_utils_base.py:2044] 2023-10-19 09:41:02,112 >> loading file tokenizer.model\n"
            + _TECLASS2 + _ASSERTS)
    report = _report(tmp_path, text)
    assert report.primary is not None and report.primary.rule == "tokenizer.mismatch"
