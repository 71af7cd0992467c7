"""Where a hit's wall time comes from (``Hit.wall_time_line``) and what the failure time makes of it;
disk.full names the user's frame, not the library's, as where the write failed.

* the scanner records the line of the timestamp a hit was dated by: indexed per block, looked
  up backwards (dense blocks), carried over from earlier blocks, and across the 2-process merge;
* the failure time refuses a timestamp printed more than ``MAX_TIMESTAMP_LINES`` lines before the
  evidence by that exact distance (not a guess from the log's first timestamp).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import RUNS
from log_runs import analyze_log

import autopsy
from autopsy.checks import disk
from autopsy.parsers import log_blocks, log_context, log_parallel, log_scanner
from autopsy.parsers.logs import compile_patterns, scan_log
from autopsy.parsers.types import Frame, Hit, LogScan, PatternSpec, Traceback
from autopsy.summary import MAX_TIMESTAMP_LINES

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
SPECS = [PatternSpec(key="oom", regex=r"CUDA out of memory\. Tried to allocate (?P<gib>\d+\.\d+) GiB",
                     literals=("CUDA out of memory",))]
T0 = 1715680800.0  # 2024-05-14 10:00:00 UTC


def _scan(p: Path) -> LogScan:
    return scan_log(p, "train.log", compile_patterns(SPECS), max_bytes=1 << 40, rank=None)


def _oom_hits(scan: LogScan) -> list[Hit]:
    return scan.hits["oom"].all_kept()


def _header_log(untimed: int) -> str:
    """Two timed lines, ``untimed`` lines without a time, an OOM; then a timed line and another OOM."""
    lines = ["[2024-05-14 10:00:00,000] INFO launcher: starting job",
             "[2024-05-14 10:05:00,000] INFO data: loaded 1000 shards"]
    lines += [f"step {i + 1}: loss {i % 7}.5" for i in range(untimed)]
    lines += [OOM, "2024-05-14 11:00:00 INFO retrying with a smaller batch", OOM]
    return "\n".join(lines) + "\n"


def test_a_hit_knows_the_line_of_its_timestamp(tmp_path: Path) -> None:
    p = tmp_path / "train.log"
    p.write_text(_header_log(3000))
    first, second = _oom_hits(_scan(p))
    assert (first.lineno, first.wall_time, first.wall_time_line) == (3003, T0 + 300, 2)
    assert (second.lineno, second.wall_time, second.wall_time_line) == (3005, T0 + 3600, 3004)


@pytest.mark.parametrize("lazy", [False, True])
def test_the_line_carries_over_from_earlier_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   lazy: bool) -> None:
    monkeypatch.setattr(log_blocks, "BLOCK", 8 << 10)  # the timestamps in the first of many blocks
    if lazy:
        monkeypatch.setattr(log_context, "_TS_INDEX_LIMIT", 1)  # every block looked up backwards
    p = tmp_path / "train.log"
    p.write_text(_header_log(3000))
    first, second = _oom_hits(_scan(p))
    assert (first.wall_time, first.wall_time_line) == (T0 + 300, 2)
    assert (second.wall_time, second.wall_time_line) == (T0 + 3600, 3004)


def test_lazy_lookup_within_a_block_gives_the_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_context, "_TS_INDEX_LIMIT", 1)
    p = tmp_path / "train.log"
    p.write_text(_header_log(50))
    first, second = _oom_hits(_scan(p))
    assert (first.lineno, first.wall_time_line) == (53, 2)
    assert (second.lineno, second.wall_time_line) == (55, 54)


def test_a_hit_on_a_timed_line_points_at_itself(tmp_path: Path) -> None:
    p = tmp_path / "train.log"
    p.write_text("untimed\n" * 10 + f"2024-05-14 10:00:00 ERROR {OOM}\n")
    (hit,) = _oom_hits(_scan(p))
    assert (hit.lineno, hit.wall_time, hit.wall_time_line) == (11, T0, 11)


def test_no_timestamp_no_line(tmp_path: Path) -> None:
    p = tmp_path / "train.log"
    p.write_text("untimed\n" * 10 + OOM + "\n")
    (hit,) = _oom_hits(_scan(p))
    assert hit.wall_time is None and hit.wall_time_line is None


def test_the_parallel_merge_shifts_and_fills_the_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_blocks, "BLOCK", 64 << 10)
    monkeypatch.setattr(log_scanner, "EVERY_BAR_BELOW", 0)
    monkeypatch.setattr(log_parallel, "MIN_BYTES", 1)
    monkeypatch.setattr(log_parallel, "WARM_BYTES", 24 << 10)
    p = tmp_path / "train.log"
    # the second half's first OOM is dated by the header (from the parent), the second by a line in the child
    p.write_text(_header_log(12000))
    monkeypatch.setenv("AUTOPSY_LOG_WORKERS", "2")
    par = _scan(p)
    assert log_parallel.last_outcome == "merged"
    monkeypatch.setenv("AUTOPSY_LOG_WORKERS", "1")
    seq = _scan(p)
    assert [(h.lineno, h.wall_time, h.wall_time_line) for h in _oom_hits(par)] == \
        [(h.lineno, h.wall_time, h.wall_time_line) for h in _oom_hits(seq)] == \
        [(12003, T0 + 300, 2), (12005, T0 + 3600, 12004)]


# ------------------------------------------------------------------ failure time


def test_a_second_header_time_thousands_of_lines_before_is_not_the_failure_time(tmp_path: Path) -> None:
    # not the log's first timestamp, and no other record carries it: only its line tells it is stale
    lines = ["[2024-05-14 10:00:00,000] INFO launcher: starting job",
             "[2024-05-14 10:05:00,000] INFO data: loaded 1000 shards"]
    lines += [f"epoch 0 batch {i} running" for i in range(3000)] + [OOM]
    report = analyze_log(tmp_path, "\n".join(lines) + "\n")
    assert report.run.failure_time != T0 + 300, report.run.failure_time_source


def test_the_log_first_time_just_before_the_failure_dates_it(tmp_path: Path) -> None:
    # the log's only timestamp, far into it, on the line just before the OOM: it dates the failure
    lines = [f"epoch 0 batch {i} running" for i in range(MAX_TIMESTAMP_LINES + 100)]
    lines += ["2024-05-14 10:00:00 INFO step 300 saving nothing", OOM]
    report = analyze_log(tmp_path, "\n".join(lines) + "\n")
    assert report.run.failure_time == T0, report.run.failure_time_source


# ------------------------------------------------------------------ disk.full frames


def _tb(frames: list[Frame]) -> Traceback:
    return Traceback(path="train.log", line_start=10, line_end=20, exc_type="SafetensorError",
                     message="Error while serializing: I/O error: No space left on device (os error 28)",
                     frames=tuple(frames))


LIB = "/venv/lib/python3.11/site-packages"


def test_disk_full_names_the_project_frame_and_keeps_the_library_one() -> None:
    tb = _tb([Frame(file="/home/me/proj/train.py", line=43, function="<module>"),
              Frame(file=f"{LIB}/transformers/trainer.py", line=3369, function="_save_checkpoint"),
              Frame(file="/home/me/proj/callbacks.py", line=12, function="on_save"),
              Frame(file=f"{LIB}/transformers/modeling_utils.py", line=2400, function="save_pretrained"),
              Frame(file=f"{LIB}/safetensors/torch.py", line=323, function="save_file")])
    where = disk.write_frames(tb)
    assert where == ("/home/me/proj/callbacks.py:12 in on_save", f"{LIB}/safetensors/torch.py:323 in save_file")


def test_disk_full_frame_in_project_code_has_no_library_frame() -> None:
    tb = _tb([Frame(file="/home/me/proj/train.py", line=43, function="<module>"),
              Frame(file="/home/me/proj/ckpt.py", line=7, function="save_checkpoint")])
    assert disk.write_frames(tb) == ("/home/me/proj/ckpt.py:7 in save_checkpoint", None)


def test_disk_full_all_library_frames_keep_the_library_frame_only() -> None:
    tb = _tb([Frame(file=f"{LIB}/accelerate/launch.py", line=5, function="main"),
              Frame(file=f"{LIB}/safetensors/torch.py", line=323, function="save_file")])
    assert disk.write_frames(tb) == (None, f"{LIB}/safetensors/torch.py:323 in save_file")


def test_disk_full_fixture_facts() -> None:
    report = autopsy.analyze(RUNS / "disk_full")
    f = next(f for f in report.findings if f.rule == "disk.full")
    assert f.facts["frame"].endswith("disk_full/train.py:43 in <module>")
    assert f.facts["library_frame"].endswith("site-packages/safetensors/torch.py:323 in save_file")
    details = [e.detail for e in f.evidence if e.detail and e.detail.startswith("write failed in")]
    assert details and "train.py:43" in details[0] and "safetensors/torch.py:323" in details[0]
