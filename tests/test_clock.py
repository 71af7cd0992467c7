"""Verdicts do not depend on where the run directory's mtimes came from (autopsy/clock.py).

Users copy runs before analysing them (scp, ``cp -r``, CI artifacts, ``git clone``), which
rewrites every mtime. Every fixture run is analysed four ways and must get the same primary
finding each time: with its real mtimes (fixtures/mtimes.json), as a fresh copy made days
later, as a copy made an hour before the analysis, and with every mtime identical. A run
really being written (fresh partial files, agreeing clocks) must still be "in progress".
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from builders import write_tfevents
from conftest import RUNS
from fixture_runs import pinned_copy, pinned_now, recorded_mtimes, run_names

from autopsy.model import ArtifactKind, ParseStatus
from autopsy.run import LoadOptions, load_run

DAY = 86_400.0
NAMES = run_names()
# Runs whose last checkpoint was cut mid-save by a SIGKILL that left no trace in the log.
KILLED_MID_SAVE = ("killed_mid_save", "truncated_checkpoint", "nanochat")


def _files(root: Path) -> list[Path]:
    return sorted(Path(d, n) for d, _, names in os.walk(root) for n in names)


def _set_mtimes(root: Path, t: float, step: float = 0.0) -> None:
    """Give every file mtime ``t`` (+ ``step`` per file in walk order, as ``cp -r`` writes them)."""
    for i, p in enumerate(_files(root)):
        # a link's own time (W&B's debug-core.log points out of the run, at a file that need not exist here)
        os.utime(p, (t + i * step, t + i * step), follow_symlinks=False)


def _copy(name: str, dest: Path) -> Path:
    """``cp -r``: contents copied, symbolic links as links, mtimes not kept (then set by the scenario)."""
    out = dest / name
    shutil.copytree(RUNS / name, out, symlinks=True, copy_function=shutil.copyfile)
    return out


def _scenario(name: str, kind: str, tmp: Path) -> tuple[Path, float]:
    """A copy of fixture run ``name`` with the mtimes of scenario ``kind``, and the analysis time."""
    top = max(recorded_mtimes()[name].values())
    if kind == "original":
        return pinned_copy(name, tmp), pinned_now(name)
    run = _copy(name, tmp)
    if kind == "fresh_copy":  # copied five days after the run, analysed right away
        _set_mtimes(run, top + 5 * DAY, step=0.0004)
        return run, top + 5 * DAY + 3
    if kind == "copy_1h_old":  # copied five days after the run, analysed an hour after the copy
        _set_mtimes(run, top + 5 * DAY - 3600)
        return run, top + 5 * DAY
    assert kind == "identical"  # every mtime the run's last write (an archive with one stamp)
    _set_mtimes(run, top)
    return run, pinned_now(name)


def _analyze(run: Path, now: float, catalog):  # type: ignore[no-untyped-def]
    from autopsy.api import analyze

    return analyze(run, catalog=catalog, options=LoadOptions(now=now))


@pytest.mark.skipif(not NAMES, reason="no fixture runs")
@pytest.mark.parametrize("name", NAMES)
def test_same_primary_whatever_the_mtimes(name: str, tmp_path: Path, catalog) -> None:  # type: ignore[no-untyped-def]
    got = {}
    for kind in ("original", "fresh_copy", "copy_1h_old", "identical"):
        run, now = _scenario(name, kind, tmp_path / kind)
        report = _analyze(run, now, catalog)
        got[kind] = report.primary.rule if report.primary else None
        in_progress = [a.path for a in report.artifacts if a.status is ParseStatus.IN_PROGRESS]
        assert not in_progress, f"{name} ({kind}): a run written an hour or days ago has files in progress"
        if kind != "original":
            # a stall judged from the clock (no new step for hours) must not come from a copy's mtimes;
            # one judged from the log's text alone (it stops on a setup message, a stop caught waiting)
            # may, but never quoting the copy's mtime as how long the log has been idle
            stalls = [f for f in report.findings if f.rule == "run.stalled"]
            from_clock = [f.key for f in stalls if not f.key.startswith(("run.stalled:setup:", "run.stalled:waiting:"))]
            assert not from_clock, f"{name} ({kind}): stalled from a copy: {from_clock}"
            if kind != "identical":  # (identical: every mtime is the run's real last write)
                assert not [f for f in stalls if "has not been written for" in f.message], f"{name} ({kind})"
    assert len(set(got.values())) == 1, f"{name}: primary differs with the mtimes: {got}"


@pytest.mark.parametrize("name", [n for n in KILLED_MID_SAVE if n in NAMES])
@pytest.mark.parametrize("kind", ["fresh_copy", "copy_1h_old"])
def test_a_copy_is_not_live_and_its_partial_checkpoint_is_corrupt(name: str, kind: str, tmp_path: Path) -> None:
    run_dir, now = _scenario(name, kind, tmp_path)
    run = load_run(run_dir, LoadOptions(now=now))
    assert not run.clock.mtimes_trusted and not run.clock.live, run.clock
    assert "copied" in run.clock.reason
    assert any(not c.valid and not c.in_progress for c in run.checkpoint_list)


def test_real_mtimes_are_trusted(tmp_path: Path) -> None:
    run = load_run(pinned_copy("truncated_checkpoint", tmp_path), LoadOptions(now=pinned_now("truncated_checkpoint")))
    assert run.clock.mtimes_trusted, run.clock.reason
    assert "event file" in run.clock.reason
    assert run.clock.internal_end is not None and run.clock.internal_start is not None


# ----------------------------------------------------------------------------- a run being written


def _live_run(tmp_path: Path) -> tuple[Path, float]:
    """The healthy run, with its real mtimes, caught while saving checkpoint-250 a few seconds ago.

    Its event file was last written at its last event (it agrees with its mtime), the log
    is growing (a line half written) and checkpoint-250 has partial weights and optimizer and
    no trainer_state.json yet (the Trainer writes it last).
    """
    run = pinned_copy("healthy", tmp_path)
    top = max(recorded_mtimes()["healthy"].values())
    t = top + 20
    src, ckpt = run / "outputs" / "checkpoint-200", run / "outputs" / "checkpoint-250"
    ckpt.mkdir()
    for name in ("model.safetensors", "optimizer.pt", "config.json"):
        data = (src / name).read_bytes()
        (ckpt / name).write_bytes(data if name == "config.json" else data[: len(data) // 3])
    log = run / "train.log"
    log.write_bytes(log.read_bytes() + b"{'loss': 2.1, 'grad_norm': 0.9, 'learning_ra")
    for p in [*ckpt.iterdir(), log]:
        os.utime(p, (t, t))
    return run, t + 5


def test_a_run_being_written_is_in_progress(tmp_path: Path, catalog) -> None:  # type: ignore[no-untyped-def]
    run_dir, now = _live_run(tmp_path)
    run = load_run(run_dir, LoadOptions(now=now))
    assert run.clock.mtimes_trusted and run.clock.live and run.clock.ended is None, run.clock
    cp = next(c for c in run.checkpoint_list if c.path.endswith("checkpoint-250"))
    assert cp.in_progress and not cp.valid
    report = _analyze(run_dir, now, catalog)
    arts = {a.path: a for a in report.artifacts}
    for path in ("outputs/checkpoint-250/model.safetensors", "outputs/checkpoint-250/optimizer.pt"):
        assert arts[path].status is ParseStatus.IN_PROGRESS, arts[path]
    assert "checkpoint.corrupt" not in {f.rule for f in report.findings}


def test_the_same_run_copied_later_is_corrupt_not_in_progress(tmp_path: Path, catalog) -> None:  # type: ignore[no-untyped-def]
    run_dir, now = _live_run(tmp_path / "live")
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy, copy_function=shutil.copyfile)
    _set_mtimes(copy, now + 2 * DAY, step=0.001)
    report = _analyze(copy, now + 2 * DAY + 2, catalog)
    assert "checkpoint.corrupt" in {f.rule for f in report.findings}
    assert not [a for a in report.artifacts if a.status is ParseStatus.IN_PROGRESS]


@pytest.mark.parametrize("ending", [
    "Killed\n",
    "slurmstepd: error: *** JOB 42 ON gpu1 CANCELLED AT 2026-11-21T12:40:00 ***\n",
    "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    main()\n"
    "RuntimeError: CUDA error: an illegal memory access was encountered\n",
])
def test_fresh_partial_files_of_a_process_that_ended_are_corrupt(ending: str, tmp_path: Path, catalog) -> None:  # type: ignore[no-untyped-def]
    run_dir, now = _live_run(tmp_path)
    log = run_dir / "train.log"
    st = log.stat()
    log.write_bytes(log.read_bytes() + b"\n" + ending.encode())
    os.utime(log, (st.st_mtime, st.st_mtime))
    run = load_run(run_dir, LoadOptions(now=now))
    assert run.clock.ended and not run.clock.live
    assert not [c for c in run.checkpoint_list if c.in_progress]
    report = _analyze(run_dir, now, catalog)
    assert "checkpoint.corrupt" in {f.rule for f in report.findings}


def test_an_exit_code_file_ends_the_process(tmp_path: Path) -> None:
    run_dir, now = _live_run(tmp_path)
    (run_dir / "exit_code").write_text("137\n")
    os.utime(run_dir / "exit_code", (now - 1, now - 1))
    run = load_run(run_dir, LoadOptions(now=now))
    assert run.clock.ended is not None and "137" in run.clock.ended
    assert not run.clock.live


# ----------------------------------------------------------------------------- the rules themselves


def _tb_run(root: Path, last_wall: float, mtime: float) -> Path:
    ev = write_tfevents(root / "tb" / "events.out.tfevents.1.host",
                        [("train/loss", s, 2.0, last_wall - 1000 + s) for s in range(0, 1001, 100)])
    os.utime(ev, (mtime, mtime))
    for i, name in enumerate(("train.log", "config.yaml", "run.sh")):
        (root / name).write_text("step 1 | loss 2.0\n" if name == "train.log" else "x: 1\n")
        os.utime(root / name, (last_wall - 5000 * (i + 1), last_wall - 5000 * (i + 1)))
    return root


def test_an_event_file_modified_long_after_its_last_event_means_a_copy(tmp_path: Path) -> None:
    run = load_run(_tb_run(tmp_path, 1_800_000_000.0, 1_800_000_000.0 + 7200), LoadOptions(now=1_800_010_000.0))
    assert not run.clock.mtimes_trusted and "after its last event" in run.clock.reason


def test_an_event_file_at_its_last_event_is_trusted_even_with_clock_skew(tmp_path: Path) -> None:
    for i, skew in enumerate((30.0, -1800.0)):  # flushed 30 s later; a file server 30 min behind
        root = tmp_path / str(i)
        run = load_run(_tb_run(root, 1_800_000_000.0, 1_800_000_000.0 + skew), LoadOptions(now=1_800_010_000.0))
        assert run.clock.mtimes_trusted, run.clock.reason


def test_every_file_written_at_once_is_a_copy(tmp_path: Path) -> None:
    for i in range(6):
        (tmp_path / f"f{i}.log").write_text("step 1 | loss 2.0\n")
    _set_mtimes(tmp_path, 1_800_000_000.0, step=0.1)
    run = load_run(tmp_path, LoadOptions(now=1_800_000_100.0))
    assert not run.clock.mtimes_trusted and "within 2 s" in run.clock.reason
    assert run.clock.mtime(run.artifacts_of(ArtifactKind.LOG)[0]) is None


def test_a_traceback_survived_mid_log_does_not_end_the_process(tmp_path: Path) -> None:
    lines = ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>', "ValueError: retrying"]
    lines += [f"step {i} | loss 2.0" for i in range(1, 200)]
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    run = load_run(tmp_path, LoadOptions(now=os.stat(tmp_path / "train.log").st_mtime + 10))
    assert run.clock.ended is None
