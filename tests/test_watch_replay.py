"""autopsy watch on recorded fixture runs replayed in the order their files were written.

Polls are driven by the test between writes; the watcher's clock is the replay's clock, so
no test depends on wall-clock time. Each warning must fire *before* the failure it foresees.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autopsy.units import fmt_duration
from autopsy.watch import Watcher, WatchEvent
from tests.watch_replay import Replayer

Replay = tuple[Replayer, Watcher, list[tuple[WatchEvent, int]]]
DISK_FULL_VOLUME = 925_696  # the fixture's tmpfs (fixtures/README.md: df right after the crash)


def _replay(name: str, tmp_path: Path, chunk_lines: int = 3, **kw: object) -> Replay:
    """Replay a fixture; each event with the number of writes applied when it fired."""
    rp = Replayer(name, tmp_path / name, chunk_lines=chunk_lines)
    (tmp_path / name).mkdir()
    w = Watcher(tmp_path / name, clock=lambda: rp.now, volume=rp.volume(DISK_FULL_VOLUME), **kw)  # type: ignore[arg-type]
    events: list[tuple[WatchEvent, int]] = []
    for _ in rp:
        events.extend((e, len(rp.done)) for e in w.poll())
    return rp, w, events


@pytest.fixture(scope="module")
def disk_full(tmp_path_factory: pytest.TempPathFactory) -> tuple[Replayer, Watcher, list[tuple[WatchEvent, int]]]:
    return _replay("disk_full", tmp_path_factory.mktemp("replay"))


def _written_at(rp: Replayer, n_writes: int, rel: str) -> bytes:
    return b"".join(w.data for w in rp.done[:n_writes] if w.rel == rel and w.kind == "log")


def test_disk_full_forecast_fires_before_enospc(disk_full: Replay) -> None:
    rp, _w, events = disk_full
    fc = [(e, n) for e, n in events
          if e.kind == "warning" and e.finding and e.finding.key == "checkpoint.retention:forecast"]
    assert len(fc) == 1, [e.finding.message for e, _ in events if e.finding]
    ev, n = fc[0]
    f = ev.finding
    assert f is not None
    log_then = _written_at(rp, n, "train.log")
    assert b"No space left on device" not in log_then  # fired before the failure line was written
    assert b"No space left on device" in rp.written("train.log")  # which the replay did write later
    # the step it foresees is the step the run really died at (the 8th save, step 80)
    assert f.facts["forecast_fill_step"] == 80
    assert "step ~80" in f.message
    assert f.facts["lead_steps"] >= 50 and f.step is not None and f.step <= 30
    assert f.facts["forecast_seconds"] is not None and f.facts["forecast_seconds"] > 0
    assert f"{fmt_duration(f.facts['forecast_seconds'])} at " in f.message  # the lead time, in words
    assert f.facts["forecast_saves_that_fit"] >= 5
    # the failure itself is then diagnosed as the post-mortem does, once
    full = [e for e, _ in events if e.kind == "warning" and e.finding and e.finding.rule == "disk.full"]
    assert len(full) == 1


def test_disk_full_retention_warned_right_after_the_save_over_the_limit(disk_full: Replay) -> None:
    rp, _w, events = disk_full
    ret = [(e, n) for e, n in events if e.kind == "warning" and e.finding and e.finding.key == "checkpoint.retention"]
    assert len(ret) == 1
    ev, n = ret[0]
    # right after the 4th save (4 > save_total_limit 3)
    assert rp.done[n - 1].kind == "checkpoint" and rp.done[n - 1].rel.endswith("checkpoint-40")
    assert ev.finding is not None and ev.finding.facts["limit"] == 3 and ev.finding.facts["count"] == 4
    # and it is updated (not repeated) as more checkpoints pile up
    ups = [e for e, _ in events if e.kind == "update" and e.finding and e.finding.key == "checkpoint.retention"]
    assert ups and ups[-1].finding is not None and ups[-1].finding.facts["count"] == 7


def test_each_warning_fires_once(disk_full: Replay) -> None:
    _, w, events = disk_full
    fps = [e.finding.fingerprint for e, _ in events if e.kind == "warning" and e.finding]
    assert len(fps) == len(set(fps))
    assert len(w.findings) == len(fps)


def test_nan_loss_warns_at_the_first_nan_line(tmp_path: Path) -> None:
    rp, _w, events = _replay("nan_loss", tmp_path, chunk_lines=1)
    nf = [(e, n) for e, n in events if e.kind == "warning" and e.finding and e.finding.rule == "loss.nonfinite"]
    assert {e.finding.facts["metric"] for e, _ in nf if e.finding} == {"loss", "grad_norm"}
    for ev, n in nf:
        f = ev.finding
        assert f is not None and f.step == 6
        assert f.evidence[0].path == "train.log" and f.evidence[0].line == 9
        written = _written_at(rp, n, "train.log").splitlines()
        assert written[-1].startswith(b"step 6 loss nan")  # fired on the poll right after the first NaN line
        assert f.facts["values_before"][-1][0] == 5  # the finite values that led there


def test_empty_log_hang_warns_after_the_writes_stop(tmp_path: Path) -> None:
    rp, w, events = _replay("empty_log_hang", tmp_path)
    assert not [e for e, _ in events if e.finding and e.finding.rule == "log.empty"]
    created = os.stat(tmp_path / "empty_log_hang" / "nohup.out").st_mtime
    fired_at = None
    for _ in range(20):
        rp.now += 60
        for e in w.poll():
            if e.kind == "warning" and e.finding and e.finding.rule == "log.empty":
                fired_at = rp.now
                f = e.finding
    assert fired_at is not None
    assert 300 <= fired_at - created < 360  # the card's watch_empty_after_seconds, at poll granularity
    assert f.evidence[0].path == "nohup.out" and "empty" in f.message


def test_tokenizer_overflow_warned_before_the_index_error(tmp_path: Path) -> None:
    rp, _, events = _replay("tokenizer_overflow", tmp_path)
    tok = [(e, n) for e, n in events if e.kind == "warning" and e.finding and e.finding.rule == "tokenizer.overflow"]
    assert tok
    _, n = tok[0]
    assert b"IndexError" not in _written_at(rp, n, "train.log")  # warned while it still trained
    assert b"IndexError" in rp.written("train.log")


# Last in this file: it polls the shared disk_full replay further.
def test_watch_never_writes_into_the_run(disk_full: Replay) -> None:
    rp, w, _ = disk_full
    root = rp.dst
    before = sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*"))
    for _ in range(3):
        rp.now += 600
        w.poll()
    w.evaluate()
    after = sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*"))
    assert before == after
