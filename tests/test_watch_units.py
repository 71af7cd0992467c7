"""The watcher's pieces on small hand-made runs: stall, rotation, retention honoured, escaping."""

from __future__ import annotations

import json
import os
from pathlib import Path

from autopsy.watch import Watcher
from autopsy.watch.checkpoints import CheckpointWatch
from autopsy.watch.progress import Progress
from autopsy.watch.render import event_line, json_line, status_line


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _append(p: Path, text: str) -> None:
    with open(p, "a", encoding="utf-8") as fh:
        fh.write(text)


def _steps(p: Path, clock: Clock, w: Watcher, first: int, last: int, seconds_per_step: float) -> list:
    events = []
    for s in range(first, last + 1):
        _append(p, f"step {s} loss {3.0 - s * 0.001:.4f}\n")
        clock.now += seconds_per_step
        events.extend(w.poll())
    return events


def test_stall_fires_after_factor_times_the_median_step_time(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    clock = Clock()
    w = Watcher(tmp_path, clock=clock, select="run,loss")
    _steps(log, clock, w, 1, 20, 30.0)  # 30 s per step: threshold max(10 x 30, 120) = 300 s
    _append(log, "\x1b[31mwaiting on the data loader\x1b[0m \x1b]0;title\x07\n")
    fired = []
    for _ in range(12):
        clock.now += 30
        fired += [e for e in w.poll() if e.kind == "warning" and e.finding and e.finding.rule == "run.stalled"]
        if fired:
            break
    assert fired
    f = fired[0].finding
    assert f is not None and f.facts["last_step"] == 20 and f.facts["threshold_seconds"] == 300.0
    assert 300 <= f.facts["idle_seconds"] < 330
    line = event_line(fired[0])
    assert "\x1b" not in line and "\x07" not in line and "waiting on the data loader" in line
    doc = json_line(fired[0].to_dict())
    assert doc.isascii() and "\n" not in doc
    assert json.loads(doc)["finding"]["rule"] == "run.stalled"


def test_a_finished_run_is_not_stalled(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    clock = Clock()
    w = Watcher(tmp_path, clock=clock, select="run")
    _steps(log, clock, w, 1, 20, 1.0)
    _append(log, "{'train_runtime': 20.1, 'train_samples_per_second': 3.2, 'epoch': 1.0}\n")
    clock.now += 3600
    assert not [e for e in w.poll() if e.finding and e.finding.rule == "run.stalled"]


def test_rotation_is_said_and_reading_goes_on(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    clock = Clock()
    w = Watcher(tmp_path, clock=clock, select="loss")
    _steps(log, clock, w, 1, 5, 1.0)
    os.replace(log, tmp_path / "train.log.1")  # logrotate: renamed (no longer a .log), a new one created
    log.write_text("step 6 loss nan\n")
    events = w.poll()
    assert any(e.kind == "notice" and "replaced" in (e.text or "") for e in events)
    nf = [e for e in events if e.kind == "warning" and e.finding and e.finding.rule == "loss.nonfinite"]
    assert nf and nf[0].finding is not None and nf[0].finding.step == 6


def test_truncated_log_is_read_again(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    clock = Clock()
    w = Watcher(tmp_path, clock=clock, select="loss")
    _steps(log, clock, w, 1, 50, 1.0)
    log.write_text("step 1 loss inf\n")  # `> train.log` again by a restarted run
    events = w.poll()
    assert any(e.kind == "notice" and "truncated" in (e.text or "") for e in events)
    assert any(e.finding and e.finding.rule == "loss.nonfinite" for e in events)


def _ckpt(root: Path, step: int, size: int) -> None:
    d = root / "out" / f"checkpoint-{step}"
    d.mkdir(parents=True)
    (d / "model.safetensors").write_bytes(b"\0" * size)


def test_forecast_from_growth_and_none_when_retention_is_honoured(tmp_path: Path) -> None:
    cw = CheckpointWatch(tmp_path)
    for step in (100, 200, 300):
        _ckpt(tmp_path, step, 40_000)
        cw.poll()
    fc = cw.forecast(total=1_000_000, free=200_000)
    assert fc is not None
    per_save = fc.growth_per_save
    assert per_save >= 40_000 and fc.cadence_steps == 100
    assert fc.saves_that_fit == 200_000 // per_save and fc.fill_step == 300 + (fc.saves_that_fit + 1) * 100
    # a rotating run: each new save deletes the oldest, the bytes stay flat -> no fill forecast
    import shutil

    for step in (400, 500, 600):
        shutil.rmtree(tmp_path / "out" / f"checkpoint-{step - 300}")
        _ckpt(tmp_path, step, 40_000)
        cw.poll()
    assert cw.deleted == 3
    assert cw.forecast(total=1_000_000, free=200_000) is None


def test_progress_rate_and_unknown_pace() -> None:
    p = Progress()
    assert p.stall(100.0, 10, 120) is None  # nothing seen yet
    p.observe(0.0, 10)
    assert p.rate() is None
    assert p.stall(100.0, 10, 120) is None  # pace unknown: 10 x 120 s
    assert p.stall(1300.0, 10, 120) == (1300.0, 1200.0)
    p.observe(10.0, 20)
    p.observe(20.0, 30)
    assert p.rate() == 1.0 and p.median_step_seconds() == 1.0
    assert p.stall(139.0, 10, 120) is None and p.stall(140.0, 10, 120) == (120.0, 120.0)


def test_status_line_is_one_escaped_line(tmp_path: Path) -> None:
    w = Watcher(tmp_path, clock=Clock(), select="loss")
    w.poll()
    line = status_line(w.status, "runs/\x1b[2Jexp\n42")
    assert "\x1b" not in line and "\n" not in line and "no step yet" in line


def test_the_notebook_api_calls_back_once_per_warning(tmp_path: Path) -> None:
    import autopsy

    (tmp_path / "train.log").write_text("step 1 loss 2.5\nstep 2 loss nan\n")
    got: list = []
    w = autopsy.watch(tmp_path, on_finding=got.append, interval=0.0, max_polls=3, select="loss")
    assert [f.rule for f in got] == ["loss.nonfinite"] and got[0].step == 2
    assert w.findings == got and w.status.polls == 3
    report = w.post_mortem()
    assert report.primary is not None and report.primary.rule == "loss.nonfinite"


def test_a_broken_rule_is_said_once(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from autopsy.engine import runner

    def broken(ctx: object) -> list:
        raise RuntimeError("boom")

    monkeypatch.setitem(runner._CHECK_CACHE, "autopsy.checks.loss:plateau", broken)
    (tmp_path / "train.log").write_text("step 1 loss 2.5\n")
    clock = Clock()
    w = Watcher(tmp_path, clock=clock, select="loss")
    first = [e for e in w.poll() if e.kind == "notice"]
    assert len(first) == 1 and "loss.plateau failed: RuntimeError: boom" in (first[0].text or "")
    clock.now += 3600
    w.evaluate()
    assert not [e for e in w.evaluate() if e.kind == "notice"]
