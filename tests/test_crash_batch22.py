"""Crash shapes of crash batch22 (issue 11): a compiled PyTorch extension built without its CUDA kernels
("Not compiled with CUDA support" / "Not compiled with GPU support"), a progress counter that reached its total
and started over before a scheduler's stop, an outer tqdm bar over epochs whose total is no step plan, and a
KeyboardInterrupt traceback whose header line, read again from the log's tail, is the stop's and not a second
error.

Each log is quoted from a crash/batch22 corpus entry (named beside it) or another real message (a public
repository's source or note, quoted as the search index stores it).
"""

from __future__ import annotations

import pytest
from builders import analyze_text, rules_of

from autopsy.parsers.log_series import parse_bar

# gnn4itk_acorn: torch_scatter installed as a CPU-only build, its scatter_max reached with a GPU tensor
_SCATTER_CPU_ONLY = (
    "Traceback (most recent call last):\n"
    '  File "/u/jareddb2/GNN4ITk/acorn/check_acorn.py", line 80, in check\n'
    "    out, argmax = scatter_max(src, index, dim=-1)\n"
    '  File "/u/jareddb2/.conda/envs/acorn/lib/python3.10/site-packages/torch_scatter/scatter.py", line 72, in '
    "scatter_max\n"
    "    return torch.ops.torch_scatter.scatter_max(src, index, dim, out, dim_size)\n"
    '  File "/u/jareddb2/.conda/envs/acorn/lib/python3.10/site-packages/torch/_ops.py", line 692, in __call__\n'
    "    return self._op(*args, **kwargs or {})\n"
    "RuntimeError: Not compiled with CUDA support\n")
# a public BEVFusion note: mmdet3d's voxel op built CPU-only (AT_ERROR("Not compiled with GPU support"))
_VOXEL_CPU_ONLY = "RuntimeError: Not compiled with GPU support\n"
# a program's own fallback warning (an MPI solver's source, quoted by the index): it goes on on the CPU
_FALLBACK_WARNING = ("Warning: GPU requested but code not compiled with GPU support. Using CPU.\n"
                     "step 1 residual 3.2e-01\nstep 2 residual 1.1e-01\n")


@pytest.mark.parametrize("text", [_SCATTER_CPU_ONLY, _VOXEL_CPU_ONLY])
def test_extension_built_without_cuda_is_env_cuda(tmp_path, text: str) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, text, "job.err")
    assert report.primary is not None and report.primary.rule == "env.cuda"
    assert report.primary.facts.get("kind") == "extension_cpu_only"
    assert "crash.exception" not in rules_of(report)


def test_a_programs_cpu_fallback_warning_is_not_env_cuda(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert "env.cuda" not in rules_of(analyze_text(tmp_path, _FALLBACK_WARNING, "run.log"))


def test_torch_not_compiled_with_cuda_is_still_the_cpu_only_build(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, "AssertionError: Torch not compiled with CUDA enabled\n", "train.log")
    assert report.primary is not None and report.primary.rule == "env.cuda"
    assert report.primary.facts.get("kind") == "cpu_only_build"


# xaiclustering: every worker's bar once reached 25/25, a second round was at 8/25 when SLURM's time limit hit;
# the notice is glued to the last redraw after its cursor-up sequences (tqdm position=N)
def _rounds(final: str) -> str:
    first = "".join(f"\r{100 * i // 25:3d}%|#         | {i}/25 [{i:02d}:00<00:00, 60.00s/it]" for i in range(26))
    return (first + "\n" + final + "\x1b[A\x1b[A\x1b[A\x1b[A"
            "slurmstepd: error: *** JOB 682310 ON node024 CANCELLED AT 2023-11-17T05:11:52 DUE TO TIME LIMIT ***\n")


def test_time_limit_after_the_counter_started_over_is_incomplete(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = _rounds("".join(f"\r{100 * i // 25:3d}%|#         | {i}/25 [{i:02d}:00<00:00, 60.00s/it]"
                           for i in range(9)))
    report = analyze_text(tmp_path, text, "slurm.err")
    assert report.primary is not None and report.primary.rule == "run.incomplete"
    assert report.primary.facts.get("last_step") == 8
    assert report.primary.facts.get("progress_restarted") is True


def test_time_limit_after_the_last_round_finished_is_not_incomplete(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = _rounds("".join(f"\r{100 * i // 25:3d}%|#         | {i}/25 [{i:02d}:00<00:00, 60.00s/it]"
                           for i in range(26)))
    assert "run.incomplete" not in rules_of(analyze_text(tmp_path, text, "slurm.err"))


# dflow: an outer bar over the epochs ("Epochs: 1/126") and an inner batch bar without a total ("Epoch 1: 341it")
@pytest.mark.parametrize(("bar", "training"), [
    ("Epochs:   1%|          | 1/126 [00:59<2:03:53, 59.47s/it]", False),
    ("epoch: 100%|##########| 5/5 [10:00<00:00, 120.0s/it]", False),
    ("Training epochs:  20%|##        | 2/10 [00:20<01:20, 10.0s/it]", False),
    ("Epoch 3:  50%|#####     | 5/10 [00:01<00:01,  3.00it/s]", True),  # an epoch's batches: steps
    (" 12%|#2        | 3/25 [35:00<3:53:49, 637.71s/it]", True),
    ("Epoch 1: 341it [00:13, 25.72it/s]", True),
])
def test_a_bar_over_the_epochs_counts_no_steps(bar: str, training: bool) -> None:
    parsed = parse_bar(bar)
    assert parsed is not None and parsed.training is training


_DFLOW_TAIL = (
    "".join(f"\rEpoch 1: {i}it [00:{i // 25:02d}, 25.72it/s]\x1b[A\n" for i in range(2, 342, 3))
    + "\r                                 \x1b[A\rEpochs:   1%|          | 1/126 [01:14<2:34:16, 74.05s/it]\n"
    "Step: 599 (1) | Loss: 0.21240 | Grad: 1.54090 | Lr: 6.665e-06\n"
    + "Traceback (most recent call last):\n"
    '  File "/home/johnma/d-flow/train.py", line 111, in <module>\n'
    "    x = x.to(device)\n"
    "KeyboardInterrupt\n"
    + "Traceback (most recent call last):\n"
    '  File "/home/johnma/d-flow/train.py", line 111, in <module>\n'
    "    x = x.to(device)\n"
    "KeyboardInterrupt\n"
    "wandb: Find logs at: wandb/run-20250730_031012-nka3ib1x/logs\n")


def test_ctrl_c_while_stepping_under_an_epochs_bar_is_incomplete(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = analyze_text(tmp_path, _DFLOW_TAIL, "nohup.out")
    assert report.primary is not None and report.primary.rule == "run.incomplete"
    assert report.primary.facts.get("termination") == "interrupted (SIGINT)"
    assert not {"crash.exception", "run.stalled"} & rules_of(report)


def test_a_real_exception_under_the_same_bars_is_no_stop(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = _DFLOW_TAIL.replace("KeyboardInterrupt\n", "RuntimeError: CUDA error: an illegal memory access was "
                                                      "encountered\n")
    rules = rules_of(analyze_text(tmp_path, text, "nohup.out"))
    assert "run.incomplete" not in rules and "cuda.runtime" in rules
