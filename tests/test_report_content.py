"""What the reports say: when the failure struck, unreadable inputs, consistent disk figures,
causes worded as causes, and charts that survive a save to JSON and back.

Fixture runs are analysed from a pinned copy (recorded mtimes, pinned ``now`` and volume
size), like tests/test_report_fixtures.py, so every figure asserted here is reproducible.
"""

from __future__ import annotations

import calendar
import collections
import json
import os
import shutil
from importlib import resources
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
from builders import write_safetensors, write_tfevents
from conftest import RUNS
from fixture_runs import pinned_copy, pinned_now

import autopsy
from autopsy.model import Report
from autopsy.report.json_report import reports_from_text
from autopsy.report.markdown import render_markdown
from autopsy.report.terminal import render_terminal, render_verdict
from autopsy.run import LoadOptions

PINNED_DISK = collections.namedtuple("usage", "total used free")(100 * 10**9, 60 * 10**9, 40 * 10**9)
_cache: dict[str, Report] = {}


def _utc(text: str) -> float:
    import datetime as dt

    return float(calendar.timegm(dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S").timetuple()))


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("content")


def fixture_report(pinned: Path, name: str) -> Report:
    if not (RUNS / name).is_dir():
        pytest.skip(f"fixture run {name} not generated")
    if name not in _cache:
        if not (pinned / name).exists():
            pinned_copy(name, pinned)
        cwd, real = os.getcwd(), shutil.disk_usage
        os.chdir(pinned)
        shutil.disk_usage = lambda _p: PINNED_DISK  # type: ignore[assignment]
        try:
            _cache[name] = autopsy.analyze(name, options=LoadOptions(now=pinned_now(name)))
        finally:
            os.chdir(cwd)
            shutil.disk_usage = real
    return _cache[name]


# ------------------------------------------------------------------ 1. when it struck


def test_disk_full_failure_time_is_the_event_time_at_its_step(pinned: Path) -> None:
    report = fixture_report(pinned, "disk_full")
    # The log has no timestamps: the last event-file wall time at or before step 80.
    assert report.run.failure_time is not None
    assert report.run.failure_time_source == "event-file wall time at step 80"
    verdict = render_verdict(report)
    assert "at step 80, 2026-11-21 12:32:38 UTC:" in verdict
    md = render_markdown(report)
    assert md.startswith("## 2026-11-21 - ")
    issue = next(line for line in md.splitlines() if line.startswith("**Issue:**"))
    assert issue.startswith("**Issue:** At step 80, 2026-11-21 12:32:38 UTC: A write failed")
    data = json.loads(report.to_json())
    assert data["run"]["failure_time"] == report.run.failure_time
    assert data["verdict"]["wall_time"] == report.run.failure_time


def test_child_failed_time_comes_from_the_torchrun_error_record(pinned: Path) -> None:
    report = fixture_report(pinned, "child_failed")
    assert report.primary is not None and report.primary.rule == "code.shape"
    assert report.run.failure_time == _utc("2026-11-21 12:32:22")
    assert report.run.failure_time_source is not None and "torchrun" in report.run.failure_time_source
    assert "2026-11-21 12:32:22 UTC" in render_verdict(report)
    assert report.run.ended is not None and report.run.ended >= report.run.failure_time


def test_a_log_without_timestamps_falls_back_to_its_last_write_and_says_so(pinned: Path) -> None:
    report = fixture_report(pinned, "oom_host")
    assert report.run.failure_time is not None
    assert report.run.failure_time_source == "train.log last written"
    assert "(train.log last written)" in render_verdict(report)


def test_failure_time_from_the_nearest_log_timestamp_before_the_evidence(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text(
        "2025-03-04 10:00:00,001 INFO starting\n"
        "2025-03-04 10:05:00,001 INFO step 10 loss 2.0\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "    main()\n"
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x24 and 16x64)\n"
        + "filler\n" * 80)
    report = autopsy.analyze(tmp_path)
    assert report.primary is not None and report.primary.rule == "code.shape"
    assert report.run.failure_time == _utc("2025-03-04 10:05:00") + 0.001


# ------------------------------------------------------------------ 2. charts from saved JSON


def test_saved_json_carries_display_series_and_rerenders_charts(pinned: Path) -> None:
    from autopsy.report.html import render_html

    report = fixture_report(pinned, "disk_full")
    assert report.series is not None
    metrics = report.series["metrics"]
    assert {s["metric"] for s in metrics} >= {"loss", "lr"}
    assert all(len(s["steps"]) == len(s["values"]) <= 600 for s in metrics)
    assert [c["path"] for c in report.series["checkpoints"]][-1] == "checkpoints/checkpoint-80"
    text = report.to_json()
    schema = json.loads(resources.files("autopsy").joinpath("schema", "report.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(json.loads(text))
    saved = reports_from_text(text)[0]
    assert saved.to_json() == text
    html = render_html(saved)
    assert html.count("<svg") >= 3
    assert 'id="chart-loss"' in html and 'id="chart-checkpoints"' in html
    assert "Plots need the run directory" not in html
    assert render_html(saved) == html  # deterministic


def test_display_series_keep_spikes_and_nonfinite_points() -> None:
    from autopsy.report.display_series import MAX_POINTS, downsample

    steps = np.arange(20_000, dtype="float64")
    values = np.sin(steps / 500.0)
    values[12_345] = 1e6  # a one-step spike
    values[15_000:15_010] = np.nan
    s, v = downsample(steps, values)
    assert len(s) <= MAX_POINTS + 20
    assert 12_345 in s and 1e6 in v
    assert s[0] == 0 and s[-1] == 19_999
    assert 15_000 in s and 15_009 in s and np.isnan(v[list(s).index(15_000)])


def test_series_are_built_only_for_canonical_display_metrics(tmp_path: Path) -> None:
    rows = [("train/loss", i, 3.0 - i * 0.01) for i in range(50)]
    rows += [("train/epoch", i, i / 50) for i in range(50)] + [("custom/foo", i, 1.0) for i in range(50)]
    write_tfevents(tmp_path / "tb" / "events.out.tfevents.1.host", rows)
    report = autopsy.analyze(tmp_path)
    assert report.series is not None
    assert [(s["metric"], s["tag"]) for s in report.series["metrics"]] == [("loss", "train/loss")]


# ------------------------------------------------------------------ 3. nothing readable


def test_binary_log_only_says_nothing_readable_and_lists_the_skip(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_bytes(bytes(range(256)) * 20)
    report = autopsy.analyze(tmp_path)
    text = render_terminal(report)
    first = text.split("\n\n", 1)[0]  # the verdict, wrapped at 100 columns
    assert "nothing autopsy can read in" in first and "no failure found" not in first
    assert "train.log" in first
    assert "train.log (skipped): binary content" in text
    assert "no text logs found" not in text  # the 32 per-rule lines are collapsed
    n = len(report.not_evaluated)
    assert f"{n} rules could not be checked: no logs, scalars, checkpoints or configs found" in text
    assert "nothing autopsy can read" in render_markdown(report)


def test_empty_dir_says_it_is_empty(tmp_path: Path) -> None:
    report = autopsy.analyze(tmp_path)
    first = render_verdict(report)
    assert "nothing autopsy can read in" in first and "empty" in first


def test_nothing_readable_exits_2_even_with_fail_on(tmp_path: Path) -> None:
    """An empty run directory was not analysed: it never passes a --fail-on gate (exit 2)."""
    from click.testing import CliRunner

    from autopsy.cli import main

    (tmp_path / "empty").mkdir()
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "train.log").write_text("step 1 loss 2.0\nstep 2 loss 1.9\n")
    runner = CliRunner()
    for args in ([], ["--fail-on", "error"], ["--format", "json"], ["-q"]):
        r = runner.invoke(main, ["analyze", str(tmp_path / "empty"), *args], env={"NO_COLOR": "1"})
        assert r.exit_code == 2, (args, r.output)
    assert runner.invoke(main, ["analyze", str(tmp_path / "logs"), "--fail-on", "error"]).exit_code == 0
    # one unreadable run among good ones: still 2
    r = runner.invoke(main, ["analyze", str(tmp_path / "logs"), str(tmp_path / "empty"), "-q"])
    assert r.exit_code == 2


def test_zero_byte_event_file_is_listed(tmp_path: Path) -> None:
    (tmp_path / "tb").mkdir()
    (tmp_path / "tb" / "events.out.tfevents.1.host").write_bytes(b"")
    (tmp_path / "train.log").write_text("".join(f"step {i} loss {2.0 - i / 100}\n" for i in range(30)))
    text = render_terminal(autopsy.analyze(tmp_path))
    assert "tb/events.out.tfevents.1.host (0 bytes): empty event file" in text
    assert "nothing autopsy can read" not in text


# ------------------------------------------------------------------ 4. disk figures


def test_disk_full_figures_agree_between_findings(pinned: Path) -> None:
    report = fixture_report(pinned, "disk_full")
    by_rule = {f.rule: f for f in report.findings}
    full, ret = by_rule["disk.full"].facts, by_rule["checkpoint.retention"].facts
    assert "count" not in full and "checkpoints_on_disk" not in full
    assert full["complete_checkpoints"] == ret["count"] == 7
    assert full["partial_checkpoints"] == ret["count_incomplete"] == 1
    assert full["bytes_per_checkpoint"] == ret["bytes_per_checkpoint"]
    assert full["checkpoint_bytes"] == ret["checkpoint_bytes"]
    # both say the same numbers, by the same definition (disk.full leaves out the size per save)
    assert "7 complete checkpoints plus 1 partial one (750.8 KB in all)" in by_rule["disk.full"].message
    assert ("7 complete checkpoints of 107.1 KB each plus 1 partial one (750.8 KB in all)"
            in by_rule["checkpoint.retention"].message)
    for f in report.findings:  # analysis-time figures live in one place, not in facts
        assert not [k for k in f.facts if k.endswith(("_now", "_at_analysis"))], f.rule
    assert report.run.disk_at_analysis == {"fs_total_bytes": PINNED_DISK.total, "fs_free_bytes": PINNED_DISK.free,
                                           "fs_used_bytes": PINNED_DISK.used}
    assert json.loads(report.to_json())["run"]["disk_at_analysis"]["fs_free_bytes"] == PINNED_DISK.free


def test_retention_is_worded_as_the_cause_of_disk_full(pinned: Path) -> None:
    report = fixture_report(pinned, "disk_full")
    text = render_terminal(report)
    assert "checkpoint.retention (cause of disk.full)" in text
    assert "checkpoint.corrupt (explained by disk.full)" in text
    md = render_markdown(report)
    root = md.split("**Root Cause:**")[1].split("**Solution Applied:**")[0]
    symptoms = md.split("**Symptoms:**")[1].split("**Root Cause:**")[0]
    assert "contributing cause" in root.lower() and "`checkpoint.retention`" in root
    assert "`checkpoint.retention` (critical)" not in symptoms
    assert "`checkpoint.corrupt`" in symptoms
    assert json.loads(report.to_json())["findings"][1]["explained_by"] == "disk.full"


def test_cleanup_advice_deletes_the_half_written_checkpoint(pinned: Path) -> None:
    md = render_markdown(fixture_report(pinned, "disk_full"))
    solution = md.split("**Solution Applied:**")[1].split("**Files Changed:**")[0]
    step = next(line for line in solution.splitlines() if "Keep `checkpoints/checkpoint-70`" in line)
    assert "`checkpoints/checkpoint-80`" in step and "cannot be resumed" in step
    assert "6 complete checkpoint" in step


# ------------------------------------------------------------------ 5. loose checkpoints


def _ckpt_paths(tmp_path: Path) -> tuple[list[str], str | None]:
    from autopsy.run import load_run

    run = load_run(tmp_path, LoadOptions(now=2e9))
    latest = run.latest_valid_checkpoint
    return [c.path for c in run.checkpoint_list], latest.path if latest else None


@pytest.mark.parametrize("names", [
    ("training_args.bin",),
    ("training_args.bin", "rng_state.pth"),
    ("optimizer.pt", "scheduler.pt", "rng_state_0.pth", "training_args.bin"),
])
def test_auxiliary_files_alone_never_make_a_checkpoint(tmp_path: Path, names: tuple[str, ...]) -> None:
    from builders import torch_like_zip_entries, write_zip

    for n in names:
        write_zip(tmp_path / n, torch_like_zip_entries())
    assert _ckpt_paths(tmp_path) == ([], None)


def test_loose_weights_beside_training_args_are_a_checkpoint(tmp_path: Path) -> None:
    from builders import torch_like_zip_entries, write_zip

    write_zip(tmp_path / "training_args.bin", torch_like_zip_entries())
    write_safetensors(tmp_path / "model.safetensors", {"w": ["F32", [4, 4]]})
    paths, latest = _ckpt_paths(tmp_path)
    assert latest is not None and len(paths) == 1


def test_hf_dir_with_training_args_outside_resumes_from_the_dir(tmp_path: Path) -> None:
    from builders import torch_like_zip_entries, write_zip

    write_zip(tmp_path / "training_args.bin", torch_like_zip_entries())
    ck = tmp_path / "checkpoint-100"
    write_safetensors(ck / "model.safetensors", {"w": ["F32", [4, 4]]})
    for n in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin"):
        write_zip(ck / n, torch_like_zip_entries())
    (ck / "trainer_state.json").write_text('{"global_step": 100}')
    assert _ckpt_paths(tmp_path) == (["checkpoint-100"], "checkpoint-100")


def test_pandas_is_only_used_for_display_frames() -> None:
    # the display series module builds its rows from plain lists: a saved report needs no run
    from autopsy.report.display_series import series_frame

    frame = series_frame({"metrics": [{"source": "log", "path": "a.log", "tag": "loss", "metric": "loss",
                                       "rank": None, "n_points": 2, "steps": [1, 2], "values": [2.0, 1.5]}]})
    assert isinstance(frame, pd.DataFrame) and list(frame["value"]) == [2.0, 1.5]


def test_no_failure_found_only_when_everything_was_checked() -> None:
    """A clean verdict names the rules that could not check and the files not fully read."""
    from autopsy.model import Artifact, ArtifactKind, Outcome, OutcomeKind, ParseStatus, Report, RunSummary
    from autopsy.report.common import clean_verdict

    ran = (Outcome("disk.full", OutcomeKind.NOT_FIRED), Outcome("oom.cuda", OutcomeKind.NOT_FIRED))
    log = Artifact("train.log", ArtifactKind.LOG, 100, 1.0)
    full = Report(RunSummary(path="r", last_step=10), (), outcomes=ran, artifacts=(log,))
    assert clean_verdict(full) == ("no failure found", "last step 10; 2 rules checked")
    cut = Artifact("tb/events.out.tfevents.1.h", ArtifactKind.TFEVENTS, 100, 1.0, ParseStatus.TRUNCATED, "cut")
    partial = Report(RunSummary(path="r", last_step=10), (),
                     outcomes=(*ran, Outcome("loss.spike", OutcomeKind.NOT_EVALUATED, reason="no loss series")),
                     artifacts=(log, cut))
    what, details = clean_verdict(partial)
    assert what == "no failure found in what autopsy could check"
    assert "1 could not check (loss.spike)" in details and "tb/events.out.tfevents.1.h truncated" in details
    assert render_verdict(partial).startswith("r: no failure found in what autopsy could check (")
    assert "no failure found in what autopsy could check" in render_markdown(partial)


def test_rules_across_ranks_do_not_make_a_single_process_run_unchecked() -> None:
    from autopsy.model import Artifact, ArtifactKind, Outcome, OutcomeKind, Report, RunSummary
    from autopsy.report.common import clean_verdict

    outcomes = (Outcome("disk.full", OutcomeKind.NOT_FIRED),
                Outcome("dist.straggler", OutcomeKind.NOT_EVALUATED, reason="single-process run"))
    one = Report(RunSummary(path="r", last_step=5), (), outcomes=outcomes,
                 artifacts=(Artifact("train.log", ArtifactKind.LOG, 10, 1.0),))
    assert clean_verdict(one) == ("no failure found", "last step 5; 1 rule checked; 1 not applicable to a "
                                                      "single-process run")
    two = Report(RunSummary(path="r", last_step=5), (), outcomes=outcomes,
                 artifacts=(Artifact("logs/0/stderr.log", ArtifactKind.LOG, 10, 1.0, rank=0),
                            Artifact("logs/1/stderr.log", ArtifactKind.LOG, 10, 1.0, rank=1)))
    assert clean_verdict(two)[0] == "no failure found in what autopsy could check"
