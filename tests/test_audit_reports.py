"""Reviewer-found defects in reports: --append identity, work lost, resume advice, failure
time, host-OOM config citations, small copied runs, and precedence over an old bad checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

import report_samples as samples
from builders import write_safetensors, write_zip
from conftest import RUNS
from engine_helpers import FakeRun

import autopsy
from autopsy.model import Confidence, Evidence, Finding, Severity
from autopsy.parsers.types import Checkpoint, ChildFailure, ConfigEntry, LogScan
from autopsy.report.append import append_entries
from autopsy.report.markdown import render_entries, run_identity
from autopsy.report.terminal import render_terminal
from autopsy.resume_plan import plan_resume
from autopsy.run import load_run
from autopsy.summary import summarize

OLD = 1715680800.0  # 2024-05-14 10:00:00 UTC


def _touch_all(root: Path, t: float) -> None:
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, (t, t))


# ------------------------------------------------------------------ 1. --append per (fingerprint, run)


def test_another_run_with_the_same_failure_is_appended_the_same_run_is_not(tmp_path: Path) -> None:
    log = tmp_path / "ISSUES.md"
    first = samples.disk_full()
    assert append_entries(log, render_entries(first, samples.CATALOG)).added
    other = replace(first, run=replace(first.run, path="runs/exp43", failure_time=first.run.failure_time + 86400))
    second = append_entries(log, render_entries(other, samples.CATALOG))
    assert len(second.added) == 1, "a second run's failure of the same kind must get its own entry"
    # The same run analysed from another cwd (another path as typed): still the same run.
    moved = replace(first, run=replace(first.run, path="/home/me/project/runs/exp42/"))
    assert run_identity(moved) == run_identity(first)
    third = append_entries(log, render_entries(moved, samples.CATALOG))
    assert third.added == () and len(third.skipped) == 1
    assert log.read_text().count("\n## ") == 1  # two entries, the first starts the file


def test_entries_written_before_run_identities_are_still_recognised(tmp_path: Path) -> None:
    report = samples.disk_full()
    ((fp, _text),) = render_entries(report, samples.CATALOG)[:1]
    log = tmp_path / "ISSUES.md"
    log.write_text(f"## 2025-10-24 - old\n\n- autopsy fingerprint: `{fp}` (run `runs/exp42`)\n")
    assert append_entries(log, render_entries(report, samples.CATALOG)[:1]).added == ()


def _oom_run(root: Path, function: str) -> Path:
    root.mkdir(parents=True)
    (root / "train.log").write_text(
        "step 10 loss 2.0\nstep 11 loss 1.9\nTraceback (most recent call last):\n"
        '  File "train.py", line 88, in <module>\n    main()\n'
        f'  File "train.py", line 40, in {function}\n    out = model(x)\n'
        '  File "/usr/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1501, in _call_impl\n'
        "    return forward_call(*args, **kwargs)\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.15 GiB of which 6.75 MiB is free.\n")
    return root


def test_oom_fingerprint_names_the_project_function_and_is_stable_across_runs(tmp_path: Path) -> None:
    def fp(run: Path) -> str:
        return next(f.fingerprint for f in autopsy.analyze(run).findings if f.rule == "oom.cuda")

    a = fp(_oom_run(tmp_path / "a" / "exp1", "train_step"))
    b = fp(_oom_run(tmp_path / "b" / "exp2", "train_step"))
    c = fp(_oom_run(tmp_path / "c" / "exp3", "evaluate"))
    assert a == b and a != c


# ------------------------------------------------------------------ 3. a completed run lost nothing


def test_completed_run_without_checkpoints_lost_nothing(tmp_path: Path) -> None:
    run = tmp_path / "done"
    run.mkdir()
    hist = [{"loss": 3.0 - i * 0.01, "learning_rate": 1e-4, "step": 10 * i} for i in range(1, 31)]
    (run / "trainer_state.json").write_text(json.dumps({"global_step": 300, "max_steps": 300, "log_history": hist}))
    report = autopsy.analyze(run)
    assert report.run.last_step == 300
    assert report.run.steps_lost is None and report.run.seconds_lost is None


def test_lost_time_is_unknown_not_zero() -> None:
    log = LogScan(path="a.log", size=1, bytes_read=1, n_lines=1, first_wall_time=500.0, last_wall_time=500.0)
    s = summarize(FakeRun(last_step=120, max_steps=1000, logs=[log]), None)
    assert s.steps_lost == 120 and s.seconds_lost is None


# ------------------------------------------------------------------ 4. no invented resume flag


def _ckpt(path: str, step: int | None, layout: str) -> Checkpoint:
    return Checkpoint(path=path, layout=layout, step=step, files=(), bytes=10, mtime=1.0)


def _entry(raw: str, value: object, source: str, path: str = "run.sh", key: str | None = None) -> ConfigEntry:
    leaf = raw.lstrip("-").rsplit(".", 1)[-1]
    return ConfigEntry(key=key or leaf, raw_key=raw, value=value, text=str(value), path=path, line=3, source=source)


def test_resume_option_named_only_when_the_run_shows_it(tmp_path: Path) -> None:
    run = load_run(tmp_path)  # no launch script, no training script: only what the entries show
    loose = _ckpt("ckpt/step_2000.pt", 2000, "loose")
    plan = plan_resume(run, loose, "runs/x")
    assert plan.command is None and plan.option is None and "not in the run directory" in (plan.note or "")
    plan = plan_resume(run, loose, "runs/x", [_entry("--resume_from", "none", "launch_flag")])
    assert plan.command is None and plan.option == "--resume_from"
    assert plan.note is not None and plan.note.endswith("takes --resume_from: give it ckpt/step_2000.pt")
    plan = plan_resume(run, loose, "runs/x", [_entry("resume_from_step", 0, "args_dump", "args.json")])
    assert plan.note is not None and plan.note.endswith("give it 2000")
    plan = plan_resume(run, loose, "runs/x", [_entry("init_from", "scratch", "args_dump", "args.json")])
    assert plan.note is not None and plan.note.endswith("give it resume")
    # a config key is not a command-line option: no flag is made of it
    plan = plan_resume(run, loose, "runs/x", [_entry("train.resume_from", None, "yaml", "cfg.yaml")])
    assert plan.option is None
    nanochat = plan_resume(run, _ckpt("base_checkpoints/d4/model_000500", 500, "nanochat"), "runs/x")
    assert nanochat.command is None and "--resume_from_step" not in (nanochat.note or "")


def test_plain_loop_checkpoint_gets_words_not_a_flag(tmp_path: Path) -> None:
    run = tmp_path / "loose"
    (run / "ckpt").mkdir(parents=True)
    lines = [f"step {s} | loss {3.0 - s / 5000:.3f}" for s in range(100, 2600, 100)]
    lines.append("RuntimeError: CUDA error: an illegal memory access was encountered")
    (run / "train.log").write_text("\n".join(lines) + "\n")
    for step in (1000, 2000):
        write_zip(run / "ckpt" / f"step_{step}.pt", {"archive/data.pkl": "x", "archive/version": "3"})
    report = autopsy.analyze(run)
    text = render_terminal(report, color=False)
    assert "--resume_from_step" not in text
    md = "".join(t for _, t in render_entries(report, samples.CATALOG))
    assert "--resume_from_step" not in md
    assert report.run.latest_valid_checkpoint == "ckpt/step_2000.pt" and report.run.resume_hint is None
    assert "resume: the training script is not in the run directory, so no resume flag is proposed: pass " \
        "ckpt/step_2000.pt" in " ".join(text.split())  # (the terminal wraps at 100 columns)


# ------------------------------------------------------------------ 5. failure time


def test_crash_time_prefers_torchrun_record_over_a_stale_log_time() -> None:
    crash = Finding(rule="crash.exception", severity=Severity.CRITICAL, confidence=Confidence.HIGH, title="t",
                    message="m", primary=True, wall_time=OLD,
                    evidence=(Evidence(path="train.log", line=3000, excerpt="RuntimeError: boom"),))
    cf = ChildFailure(path="train.log", line=3010, rank=0, local_rank=0, exitcode=1, signal=None, host=None,
                      pid=None, error_file=None, traceback=None, time="2024-05-14_12:00:09", root_cause=True)
    run = FakeRun(last_step=10)
    run.all_child_failures = [cf]  # type: ignore[attr-defined]
    s = summarize(run, crash)
    assert s.failure_time == OLD + 2 * 3600 + 9 and s.failure_time_source == "torchrun error record"


def test_a_header_timestamp_thousands_of_lines_before_is_not_the_failure_time(tmp_path: Path) -> None:
    run = tmp_path / "glog"
    run.mkdir()
    body = ["[2024-05-14 10:00:00,000] INFO launcher: starting job"]
    body += [f"epoch 0 batch {i} running" for i in range(3000)]
    body += ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
             "ValueError: shapes do not match"]
    (run / "train.log").write_text("\n".join(body) + "\n")
    report = autopsy.analyze(run)
    assert report.primary is not None
    assert report.run.failure_time != OLD, report.run.failure_time_source


# ------------------------------------------------------------------ 6. host OOM cites the config


def test_host_oom_and_worker_death_cite_loader_settings(tmp_path: Path) -> None:
    run = tmp_path / "hostoom"
    run.mkdir()
    (run / "train.yaml").write_text("data:\n  num_workers: 16\n  batch_size: 64\n  pin_memory: true\n"
                                    "trainer:\n  max_steps: 2500\n")
    (run / "slurm-777.out").write_text(
        "Epoch 0:  20%| 500/2500 [01:20<10:00,  3.20it/s, loss=2.002]\n"
        "RuntimeError: DataLoader worker (pid 12345) is killed by signal: Killed. \n"
        "slurmstepd: error: Detected 1 oom_kill event in StepId=777.0. Some of the step tasks have been "
        "OOM Killed.\n")
    report = autopsy.analyze(run)
    by_rule = {f.rule: f for f in report.findings}
    for rule in ("oom.host", "data.worker"):
        if rule not in by_rule:
            assert rule == "data.worker", rule  # oom.host must fire
            continue
        f = by_rule[rule]
        assert f.facts["num_workers"] == 16 and f.facts["batch_size"] == 64, f.facts
        assert f.facts["pin_memory"] is True
        assert ("train.yaml", 2) in {(e.path, e.line) for e in f.evidence}
        assert "data.num_workers=16 (train.yaml:2)" in f.message


# ------------------------------------------------------------------ 7. small copied runs


def test_a_small_copied_run_is_not_live(tmp_path: Path) -> None:
    run = tmp_path / "copied"
    (run / "checkpoint-100").mkdir(parents=True)
    (run / "train.log").write_text("".join(
        f"2024-05-14 10:{i // 60:02d}:{i % 60:02d},000 INFO step {i} loss 2.0\n" for i in range(1, 101)))
    write_safetensors(run / "checkpoint-100" / "model.safetensors", {"w": ["F32", [64, 64]]}, truncate_to=200)
    (run / "checkpoint-100" / "trainer_state.json").write_text(json.dumps({"global_step": 100, "max_steps": 1000}))
    (run / "config.json").write_text(json.dumps({"hidden_size": 64}))
    _touch_all(run, time.time())  # scp / CI download: every mtime the copy's, equal
    loaded = autopsy.load_run(run)
    assert not loaded.clock.mtimes_trusted and not loaded.clock.live
    assert "checkpoint.corrupt" in {f.rule for f in autopsy.analyze(run).findings}


def test_a_cp_r_of_a_three_file_nan_run_keeps_its_own_date(tmp_path: Path) -> None:
    run = tmp_path / "nan"
    run.mkdir()
    (run / "train.log").write_text("".join(
        f"2024-05-14 10:00:{i:02d},000 INFO step {i} loss {'nan' if i > 30 else '2.0'}\n" for i in range(1, 50)))
    (run / "args.json").write_text(json.dumps({"learning_rate": 1e-3}))
    (run / "config.json").write_text(json.dumps({"hidden_size": 64}))
    _touch_all(run, time.time())
    assert not autopsy.load_run(run).clock.mtimes_trusted
    report = autopsy.analyze(run)
    for _, text in render_entries(report, samples.CATALOG):
        assert text.startswith("## 2024-05-14") or text.startswith("## unknown-date"), text[:40]


# ------------------------------------------------------------------ 8. precedence over an old bad checkpoint


def test_time_limit_is_primary_over_an_old_corrupt_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "nano"
    shutil.copytree(RUNS / "nanochat", run)
    d = run / "base_checkpoints" / "d4"
    shutil.copy2(d / "optim_000500_rank0.pt", d / "optim_000750_rank0.pt")  # 750: complete
    (d / "meta_000500.json").unlink()  # 500: an older checkpoint, not resumable
    with (run / "base_train.log").open("a") as fh:
        fh.write("slurmstepd: error: *** JOB 4242 ON gpu-node-17 CANCELLED AT 2024-05-14T12:00:09 "
                 "DUE TO TIME LIMIT ***\n")
    report = autopsy.analyze(run)
    assert report.run.latest_valid_checkpoint and report.run.latest_valid_checkpoint.endswith("model_000750")
    corrupt = [f for f in report.findings if f.rule == "checkpoint.corrupt"]
    assert corrupt and all(f.severity == Severity.INFO and not f.primary for f in corrupt)
    assert report.primary is not None and report.primary.rule != "checkpoint.corrupt"
