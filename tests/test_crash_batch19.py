"""Crash shapes of crash batch19 (issue 11): a job's console output committed as markdown under the job's own
name, schedulers and accelerators in their own words (the Torque server's walltime mail, HTCondor's memory hold,
Ascend CANN's HCCL notify-wait timeout, ROCm's hipErrorNoBinaryForGpu), bash's SIGABRT report and libstdc++'s
terminate handler, and a progress bar's display "loss=nan" beside the finite training loss (NeMo).

Each log is quoted from a crash/batch19 corpus entry (named beside it) or another real message.
"""

from __future__ import annotations

import pytest
from builders import analyze_text, rules_of

from autopsy.discover import classify
from autopsy.model import ArtifactKind

_rules = rules_of

# dtu_deeplearning_test_4: the head of an LSF job output saved as outputs/test_4/Markdown/test_4_1.md
_LSF_RUNLIMIT = (
    "User defined signal 2\n\n"
    "------------------------------------------------------------\n"
    "Sender: LSF System <lsfadmin@n-62-20-2>\n"
    "Subject: Job 8254049: <test_4_1> in cluster <dcc> Exited\n\n"
    "Job <test_4_1> was submitted from host <n-62-27-20> by user <s183905> in cluster <dcc> at "
    "Tue Nov  3 01:15:33 2020\n"
    "------------------------------------------------------------\n\n"
    "TERM_RUNLIMIT: job killed after reaching LSF run time limit.\n"
    "Exited with exit code 140.\n")
# dtu_painn_sundayfix: the same course's job that could not find its script
_CANT_OPEN = ("python: can't open file '/zhome/59/9/198225/Desktop/Deep_learning_2023/Deep_learning_2023/main.py': "
              "[Errno 2] No such file or directory\n\n"
              "------------------------------------------------------------\n"
              "Sender: LSF System <lsfadmin@hpc.dtu.dk>\n"
              "Subject: Job 19561498: <SundayFix_0> in cluster <dcc> Exited\n\n"
              "Exited with exit code 2.\n")


@pytest.mark.parametrize(("name", "text", "kind"), [
    ("test_4_1.md", _LSF_RUNLIMIT, ArtifactKind.LOG),
    ("SundayFix_0.md", _CANT_OPEN, ArtifactKind.LOG),
    # dtu_painn_batchsize128: wandb's console prefix first
    ("Batchsize128_0.md", "wandb: Currently logged in as: chessproject65. Use `wandb login --relogin` to force "
                          "relogin\nwandb: Tracking run with wandb version 0.16.0\n", ArtifactKind.LOG),
    # documents are not logs: a page that opens with a heading and quotes a traceback, a README, plain notes
    ("troubleshooting.md", "# Troubleshooting\n\n```\nTraceback (most recent call last):\n  File \"train.py\"\n```\n",
     ArtifactKind.OTHER),
    ("README.md", "wandb: Currently logged in as: someone\n", ArtifactKind.OTHER),
    ("notes.md", "Training went fine; the job was killed once by the scheduler.\n", ArtifactKind.OTHER),
])
def test_console_output_saved_as_markdown_is_a_log(name: str, text: str, kind: ArtifactKind) -> None:
    assert classify(name, text.encode())[0] is kind


def test_lsf_output_saved_as_markdown_is_read(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _LSF_RUNLIMIT, "test_4_1.md")
    assert report.primary is not None and report.primary.rule == "run.incomplete"
    assert "oom.host" not in _rules(report)


def test_python_cant_open_its_script_in_markdown_output(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _CANT_OPEN, "SundayFix_0.md")
    assert report.primary is not None and report.primary.rule == "io.not_found"


# cbiocluster_256: the Torque server's job mail at the walltime limit
_TORQUE_MAIL = ("PBS Job Id: 3264864.mskcc-fe1.local\n"
                "Job Name:   smufin_NYGC.8c.128g\n"
                "Aborted by PBS Server\n"
                "Job exceeded its walltime limit. Job was aborted\n"
                "See Administrator for help\n"
                "Exit_status=-11\n"
                "resources_used.walltime=72:00:25\n")


def test_torque_walltime_mail_is_a_time_limit_not_a_segfault(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _TORQUE_MAIL, "train.log")
    assert report.primary is not None and report.primary.rule == "run.incomplete"
    assert "time limit" in report.primary.message
    assert "crash.segfault" not in _rules(report)


def test_aborted_by_the_pbs_server_alone_is_no_native_abort(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, "PBS Job Id: 3264864.mskcc-fe1.local\nAborted by PBS Server\n", "train.log")
    assert "crash.segfault" not in _rules(report)


def test_htcondor_memory_hold_is_host_oom(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # chtc_templates_7
    text = ("Hold reason: Error from slot1_7@gpulab2002.chtc.wisc.edu: Docker job has gone over memory limit of "
            "1024 Mb\n")
    report = analyze_text(tmp_path, text, "train.log")
    assert report.primary is not None and report.primary.rule == "oom.host"
    assert "HTCondor" in report.primary.message or report.primary.facts.get("source", "").startswith("HTCondor")


def test_a_submit_files_memory_request_is_no_oom(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = "request_memory = 3GB\nrequest_gpus = 1\n+WantGPULab = true\n"
    assert "oom.host" not in _rules(analyze_text(tmp_path, text, "train.log"))


# llamafactory_975: torch_npu and CANN on an Ascend NPU
_HCCL = ("npuSynchronizeDevice:/usr1/02/workspace/j_vqN6BFvg/pytorch/torch_npu/csrc/core/npu/NPUStream.cpp:370 NPU "
         "error, error code is 107020.\n"
         "EI0002: The wait execution of the Notify register times out. Reason: The Notify register has not received "
         "the Notify record from remote rank [4294967295].base information: [streamID:[1], taskID[39], "
         "taskType[Notify Wait], tag[AllReduce_192.168.0.116%enp69s0_60000_0_1694500287022627].] task information: "
         "[notify id:[0x0000000500000010], stage:[0], remote rank:[local].]\n")


def test_hccl_notify_wait_timeout_is_a_collective_timeout(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _HCCL, "train.log")
    assert report.primary is not None and report.primary.rule == "dist.timeout"
    assert report.primary.facts["backend"] == "hccl" and report.primary.facts["op"] == "AllReduce"


def test_the_hccl_timeout_setting_alone_is_no_timeout(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = "export HCCL_EXEC_TIMEOUT=1800\nexport HCCL_CONNECT_TIMEOUT=1200\n"
    assert "dist.timeout" not in _rules(analyze_text(tmp_path, text, "train.log"))


# gcbfplus_11: XLA's fatal check in the GPU autotuner, then bash's SIGABRT report
_XLA_FATAL = ("F external/xla/xla/service/gpu/autotuning/gemm_fusion_autotuner.cc:1099] Non-OK-status: "
              "executable.status()\n"
              "Status: INTERNAL: ptxas exited with non-zero error code 139, output:\n"
              "Aborted (core dumped)\n")


def test_bash_aborted_report_is_a_native_abort(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _XLA_FATAL, "train.log")
    assert report.primary is not None and report.primary.rule == "crash.segfault"
    assert "SIGABRT" in report.primary.message


@pytest.mark.parametrize("line", [
    "Aborted!",  # click, after Ctrl-C at a prompt
    "Training Aborted",
    "[2024-01-02 10:00:00] INFO run aborted by user request",
])
def test_other_aborted_words_are_no_native_abort(tmp_path, line: str) -> None:  # type: ignore[no-untyped-def]
    assert "crash.segfault" not in _rules(analyze_text(tmp_path, line + "\n", "train.log"))


def test_hip_build_without_code_for_the_gpu_is_env_cuda_over_its_abort(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # rocm_1560: TensorFlow on ROCm, an APU the build has no code object for
    text = ("2021-08-20 06:58:23.004539: I tensorflow/stream_executor/platform/default/dso_loader.cc:53] Successfully "
            "opened dynamic library libamdhip64.so\n"
            '"hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"\n'
            "Aborted (core dumped)\n")
    report = analyze_text(tmp_path, text, "train.log")
    assert report.primary is not None and report.primary.rule == "env.cuda"
    assert "ROCm" in report.primary.message


# optimumhabana_1038: a c10::Error no one caught in the Gaudi bridge
_C10_TERMINATE = ("terminate called after throwing an instance of 'c10::Error'\n"
                  "  what():  [Rank:0] FATAL ERROR :: MODULE:PT_DEVICE GRAPH:: Capture must end on the same stream it "
                  "began on.\n"
                  "[Rank:0] Habana exception raised from mark_step at HPUGraph.cpp:138\n")


def test_an_uncaught_cxx_exception_is_a_native_abort(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _C10_TERMINATE, "train.log")
    assert report.primary is not None and report.primary.rule == "crash.segfault"
    assert "c10::Error" in report.primary.message and "Capture must end" in report.primary.message


def test_terminate_with_an_nccl_what_is_left_to_dist_comm(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # dist.comm's own sample: the NCCL error thrown through std::terminate
    text = ("terminate called after throwing an instance of 'std::runtime_error'\n"
            "  what():  NCCL error: remote process exited or there was a network error, NCCL version 2.14.3\n")
    report = analyze_text(tmp_path, text, "train.log")
    assert "crash.segfault" not in _rules(report)
    assert report.primary is not None and report.primary.rule == "dist.comm"


def test_terminate_with_bad_alloc_is_host_oom(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n"
    report = analyze_text(tmp_path, text, "train.log")
    assert report.primary is not None and report.primary.rule == "oom.host"
    assert "crash.segfault" not in _rules(report)


# neuronx_28: NeMo Megatron's bar on Trainium, its running "loss" shown as nan beside the reduced training loss
_NEMO_BAR = ("Epoch 0:   3%|▎         | 565/20101 [2:12:19<76:15:08, 14.05s/it, loss=nan, v_num=, "
             "val_loss_step=11.30, reduced_train_loss=3.910, gradient_norm=1.010, parameter_norm=1552.0, "
             "global_step=564.0, consumed_samples=1.45e+5, throughput=19.00\n")


def test_bar_loss_nan_beside_a_finite_training_loss_is_no_nonfinite_loss(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert "loss.nonfinite" not in _rules(analyze_text(tmp_path, _NEMO_BAR, "train.log"))


def test_bar_loss_nan_with_the_training_loss_nan_too_is_nonfinite(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = _NEMO_BAR.replace("reduced_train_loss=3.910", "reduced_train_loss=nan")
    assert "loss.nonfinite" in _rules(analyze_text(tmp_path, text, "train.log"))


def test_total_loss_nan_beside_finite_components_is_nonfinite(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # maskrcnn_1162 (Keras Mask R-CNN): the components are no copy of the training loss
    text = ("  9/500 [..............................] - ETA: 43:03 - loss: nan - rpn_class_loss: 0.4798 - "
            "rpn_bbox_loss: 0.5489 - mrcnn_class_loss: 1.1758 - mrcnn_bbox_loss: 0.4309 - mrcnn_mask_loss: 0.2511\n")
    assert "loss.nonfinite" in _rules(analyze_text(tmp_path, text, "train.log"))
