"""A log timestamp dates a hit only when few training steps separate them (``Hit.wall_time_step``).

HF Trainer stamps only some lines (a checkpoint save); progress is tqdm bars redrawn with ``\\r``
on one physical line, so an OOM hundreds of steps after the save is few physical lines after it.
"""

from __future__ import annotations

from pathlib import Path

from log_runs import analyze_log

from autopsy.parsers.logs import compile_patterns, scan_log
from autopsy.parsers.types import PatternSpec

SAVE = "[INFO|trainer.py:3203] 2024-05-01 10:15:00,123 >> Saving model checkpoint to out/checkpoint-1500"
T_SAVE = 1714558500.123  # 2024-05-01 10:15:00.123 UTC
OOM_TB = ["Traceback (most recent call last):",
          '  File "/home/me/train.py", line 88, in <module>',
          "    trainer.train()",
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
          "79.15 GiB of which 1.20 GiB is free."]


def _bars(lo: int, hi: int, total: int = 3000) -> str:
    bar = "\r {pct}%|###       | {s}/{total} [10:00<20:00,  2.50it/s]"
    return "".join(bar.format(pct=100 * s // total, s=s, total=total) for s in range(lo, hi + 1))


def _stale_log() -> str:
    return "\n".join([_bars(1490, 1500), SAVE, _bars(1501, 1720), *OOM_TB]) + "\n"


def test_the_hit_records_the_step_at_its_timestamp(tmp_path: Path) -> None:
    p = tmp_path / "train.log"
    p.write_text(_stale_log())
    specs = [PatternSpec(key="oom", regex=r"CUDA out of memory\. Tried", literals=("CUDA out of memory",))]
    scan = scan_log(p, "train.log", compile_patterns(specs), max_bytes=1 << 40, rank=None)
    hit = scan.hits["oom"].all_kept()[0]
    assert (hit.step, hit.wall_time_line, hit.wall_time_step) == (1720, 2, 1500)
    assert abs(hit.wall_time - T_SAVE) < 1e-3  # type: ignore[operator]


def test_a_save_time_220_steps_before_the_oom_is_not_the_failure_time(tmp_path: Path) -> None:
    report = analyze_log(tmp_path, _stale_log())
    ft = report.run.failure_time
    assert ft is None or abs(ft - T_SAVE) > 1.0, report.run.failure_time_source


def test_a_time_at_the_same_step_just_before_the_oom_dates_it(tmp_path: Path) -> None:
    stamp = "[INFO|trainer.py:2100] 2024-05-01 10:25:00,000 >> step 1720 memory 78.9 GiB"
    text = "\n".join([_bars(1490, 1500), SAVE, _bars(1501, 1720), stamp, *OOM_TB]) + "\n"
    report = analyze_log(tmp_path, text)
    assert report.run.failure_time is not None and abs(report.run.failure_time - (T_SAVE + 600 - 0.123)) < 1e-3, \
        report.run.failure_time_source


def test_launcher_banner_before_any_step_does_not_date_a_later_failure(tmp_path: Path) -> None:
    # DeepSpeed/accelerate print dated start-up lines, then untimed training: the banner time is
    # not when the OOM at step 250 struck.
    banner = "[2024-05-01 09:00:05,000] [INFO] [comm.py:637:init_distributed] cdb=None"
    text = "\n".join([banner, "{'loss': 2.1, 'grad_norm': 3.2, 'learning_rate': 1e-05, 'epoch': 0.1}",
                      _bars(200, 250), *OOM_TB]) + "\n"
    report = analyze_log(tmp_path, text)
    assert report.run.failure_time is None or abs(report.run.failure_time - 1714554005.0) > 1


def test_renderers_use_the_vetted_failure_time_for_the_primary(tmp_path: Path) -> None:
    from autopsy.report.common import failure_time, struck_at

    report = analyze_log(tmp_path, _stale_log())
    primary = report.primary
    assert primary is not None
    # The finding keeps the raw hit time; the summary rejected it as stale.
    assert report.run.failure_time is None or abs(report.run.failure_time - T_SAVE) > 1
    assert "10:15:00" not in struck_at(report, primary)
    ts = failure_time(report, primary)
    assert ts is None or abs(ts - T_SAVE) > 1
