"""Stops and crashes as shells, launchers and operators word them (issue 11, crash batch12).

Every log here is quoted from a real thread; fixtures/staging/crash/batch12 (later fixtures/corpus) holds
the entry named beside each test. Each reading is checked end to end (analyze on a one-log run) with a
real message that must not be read that way beside it.
"""

from __future__ import annotations

from pathlib import Path

import autopsy
from autopsy.checks.run_state import trained_after
from autopsy.model import Report
from autopsy.run import Run, load_run

# LLaMA-Factory under torchrun started with nohup: the session closed and torchrun relayed the hangup,
# glued to the bar (llamafactory_9695_sighup_death_signal_glued_bar)
_BAR = (
    "{'loss': 0.0605, 'grad_norm': 0.6059134602546692, 'learning_rate': 4.386993618371275e-06, 'epoch': 23.42}\n"
    "\n"
    " 59%|█████▊    | 1663/2840 [6:59:31<4:51:53, 14.88s/it]"
)
_SIGHUP_RELAY = ("W1229 16:43:25.650000 190834 /appdata//envs/llamafactory/lib/python3.12/site-packages/torch/"
                 "distributed/elastic/agent/server/api.py:723] Received 1 death signal, shutting down workers\n")


def _analyze(tmp_path: Path, text: str, name: str = "train.log") -> Report:
    run = tmp_path / "run"
    run.mkdir()
    (run / name).write_text(text, encoding="utf-8")
    return autopsy.analyze(run)


def _rules(report: Report) -> set[str]:
    return {f.rule for f in report.findings}


def test_torchrun_relaying_a_hangup_is_a_stop_from_outside(tmp_path: Path) -> None:
    report = _analyze(tmp_path, _BAR + _SIGHUP_RELAY)
    assert report.primary is not None and report.primary.rule == "run.incomplete"
    assert "SIGHUP" in report.primary.message and "1663 of 2840" in report.primary.message


def test_the_same_bar_without_the_relay_is_not_a_stop(tmp_path: Path) -> None:
    report = _analyze(tmp_path, _BAR + "\n")
    assert report.primary is None


def test_signal_exception_for_signal_1_names_the_hangup(tmp_path: Path) -> None:
    # RRHF (GanjinZero/RRHF#35): torch.distributed.launch on one A100, the run stops "after some steps"
    report = _analyze(tmp_path, (
        "WARNING:torch.distributed.elastic.agent.server.api:Received 1 death signal, shutting down workers\n"
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 2920926 closing signal SIGHUP\n"
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 2920830 got signal: 1\n"))
    incomplete = [f for f in report.findings if f.rule == "run.incomplete"]
    assert incomplete and "SIGHUP" in incomplete[0].message
    assert "crash.exception" not in _rules(report)


def test_zsh_job_report_of_a_bus_error_is_a_native_crash(tmp_path: Path) -> None:
    # llm.c train_gpt2.py on mps (llmc_35_zsh_job_bus_error_mps)
    report = _analyze(tmp_path, (
        "python3 train_gpt2.py\nusing device: mps\nloading weights from pretrained gpt: gpt2\n"
        "loading cached tokens in data/tiny_shakespeare_val.bin\n"
        "[1]    15017 bus error  python3 train_gpt2.py\n"), name="console.txt")
    assert report.primary is not None and report.primary.rule == "crash.segfault"
    assert report.primary.facts["signal"] == "SIGBUS"


def test_zsh_bus_error_glued_to_a_bar_is_read(tmp_path: Path) -> None:
    # simpletransformers on mps (simpletransformers_1549_zsh_bus_error_glued_bar)
    report = _analyze(tmp_path, (
        "Epoch 1 of 10:   0%|          | 0/10 [00:00<?, ?it/szsh: bus error  python:   0%|          "
        "| 0/1 [00:00<?, ?it/s]\n"
        "(deep)  % /Users/Shared/anaconda3/envs/deep/lib/python3.10/multiprocessing/resource_tracker.py:224: "
        "UserWarning: resource_tracker: There appear to be 1 leaked semaphore objects to clean up at shutdown\n"))
    assert report.primary is not None and report.primary.rule == "crash.segfault"
    assert report.primary.facts["signal"] == "SIGBUS"


def test_a_dataloader_worker_bus_error_is_not_the_process_crash(tmp_path: Path) -> None:
    # PyTorch's own wording for a worker killed by SIGBUS (shared memory): data.worker, not a native crash
    report = _analyze(tmp_path, (
        "RuntimeError: DataLoader worker (pid 2436) is killed by signal: Bus error. It is possible that "
        "dataloader's workers are out of shared memory. Please try to raise your shared memory limit.\n"))
    assert "crash.segfault" not in _rules(report)


def test_zsh_abort_after_an_mps_graph_error_is_a_native_abort(tmp_path: Path) -> None:
    # MinImagen on mps (minimagen_16_mps_broadcast_llvm_zsh_abort): 64x1 and 64x8 broadcast; the element
    # types (f32, si64) are what MPSGraph refuses, so no shape mismatch is claimed
    report = _analyze(tmp_path, (
        'loc("mps_subtract"("(mpsFileLoc): /AppleInternal/Library/BuildRoots/9e200cfa-7d96-11ed-886f-a23c4f261b56/'
        "Library/Caches/com.apple.xbs/Sources/MetalPerformanceShadersGraph/mpsgraph/MetalPerformanceShadersGraph/"
        "Core/Files/MPSGraphUtilities.mm\":228:0)): error: input types 'tensor<64x1xf32>' and 'tensor<64x8xsi64>' "
        "are not broadcast compatible\n"
        "LLVM ERROR: Failed to infer result type(s).\n"
        "zsh: abort      python train.py\n"), name="console.txt")
    assert report.primary is not None and report.primary.rule == "crash.segfault"
    assert report.primary.facts["signal"] == "SIGABRT"
    assert "code.shape" not in _rules(report)


def test_an_aborted_nccl_communicator_is_not_a_shell_abort(tmp_path: Path) -> None:
    report = _analyze(tmp_path, "RuntimeError: NCCL communicator was aborted.\n")
    assert "crash.segfault" not in _rules(report)


_WINERROR_1455 = (
    'OSError: [WinError 1455] The paging file is too small for this operation to complete. Error loading '
    '"D:\\Anaconda\\envs\\yolov8_custom\\Lib\\site-packages\\torch\\lib\\torch_python.dll" or one of its '
    "dependencies.\n")


def test_windows_paging_file_exhausted_is_host_memory(tmp_path: Path) -> None:
    # YOLOv8 on Windows (ultralytics_9476_winerror1455_paging_file_mosaic_close)
    report = _analyze(tmp_path, "Closing dataloader mosaic\n" + _WINERROR_1455, name="console.txt")
    assert report.primary is not None and report.primary.rule == "oom.host"
    assert "commit" in report.primary.facts["source"]
    assert "crash.exception" not in _rules(report)


def test_a_missing_windows_dll_is_not_host_memory(tmp_path: Path) -> None:
    report = _analyze(tmp_path, (
        'OSError: [WinError 126] The specified module could not be found. Error loading '
        '"C:\\Python38\\lib\\site-packages\\torch\\lib\\caffe2_detectron_ops.dll" or one of its dependencies.\n'))
    assert "oom.host" not in _rules(report)


def test_kubeflow_operator_failing_the_job_for_a_replica(tmp_path: Path) -> None:
    # kubectl describe of a TFJob (kubeflow_999_tfjob_failed_worker_replica_preempted)
    report = _analyze(tmp_path, (
        "  Message:               TFJob myjob has failed because 1 Worker replica(s) failed.\n"
        "    Reason:                TFJobFailed\n"
        "    Status:                True\n"
        "    Type:                  Failed\n"), name="tfjob_status.txt")
    assert report.primary is not None and report.primary.rule == "dist.rank_failure"
    facts = report.primary.facts
    assert (facts["job_kind"], facts["job_name"], facts["replica_type"], facts["failed_replicas"]) == \
        ("TFJob", "myjob", "Worker", 1)


def test_a_kubelet_backoff_event_is_not_a_replica_failure(tmp_path: Path) -> None:
    report = _analyze(tmp_path, (
        "  Warning  BackOff         11s (x276 over 60m)  kubelet            Back-off restarting failed container "
        "app in pod rc-oomkilled-memory-limit-b6d999d-5f29d_aiops-e2e(2a0a6edf-c1a7-4057-abfb-be8ea3edfa50)\n"))
    assert "dist.rank_failure" not in _rules(report)


# DreamBooth on Colab (fastsd_1113_ckpt_conversion_killed_training_resumes): the checkpoint conversion is
# killed, training resumes and logs step 2500
_KILLED_THEN_RESUMED = (
    "Progress:|██████                   | 25% 1999/8000 [1:02:25<3:07:25,  1.87s/it, loss=0.296, lr=7.75e-7] "
    "SAVING CHECKPOINT...\n"
    "Converting to CKPT ...\n"
    "Killed\n"
    "Done, resuming training ...\n"
    "Progress:|████████                 | 31% 2500/8000 [1:19:04<2:51:14,  1.87s/it, loss=0.171, lr=7.19e-7]\n")
# TF object detection (tfmodels_8593_killed_after_step1_ckpt0): the kill ends the log
_KILLED_AT_THE_END = (
    "INFO:tensorflow:Saving checkpoints for 0 into training/model.ckpt.\n"
    "INFO:tensorflow:loss = 4.3426676, step = 1\n"
    "I0529 12:57:42.588260 139872418367296 basic_session_run_hooks.py:262] loss = 4.3426676, step = 1\n"
    "Killed\n")


def _run_of(tmp_path: Path, text: str) -> tuple[Run, int]:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "console.txt").write_text(text, encoding="utf-8")
    killed = text.splitlines().index("Killed") + 1
    return load_run(run_dir), killed


def test_training_logged_after_a_kill_line_outlives_it(tmp_path: Path) -> None:
    run, killed = _run_of(tmp_path, _KILLED_THEN_RESUMED)
    assert trained_after(run, "console.txt", killed)
    # and no work is counted lost from it: the run went on
    assert "checkpoint.gap" not in _rules(autopsy.analyze(tmp_path / "run"))


def test_a_kill_line_that_ends_the_log_is_not_outlived(tmp_path: Path) -> None:
    run, killed = _run_of(tmp_path, _KILLED_AT_THE_END)
    assert not trained_after(run, "console.txt", killed)
