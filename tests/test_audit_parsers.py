"""Parser defects found in review: torch C++ / glog timestamps and their year, steps beyond
int64, junk ``.pt`` files, nanochat rank files, nested ``train.steps`` config keys."""

from __future__ import annotations

import calendar
import os
import random
import time
from pathlib import Path

from builders import torch_like_zip_entries, write_zip
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autopsy.discover import discover
from autopsy.model import ArtifactKind, ParseStatus
from autopsy.parsers.checkpoints import find_checkpoints
from autopsy.parsers.config_aliases import canonical_key
from autopsy.parsers.configs import read_config
from autopsy.parsers.log_series import parse_bar, parse_dict_record, parse_step_line
from autopsy.parsers.logs import compile_patterns, scan_text
from autopsy.parsers.types import PatternSpec
from autopsy.parsers.zipcheck import check_torch_file

LATER = 10**10

OOM = compile_patterns([PatternSpec("oom", r"CUDA out of memory", ("CUDA out of memory",))])
OOM_LINE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"


def _utc(*fields: int) -> float:
    return float(calendar.timegm((*fields, 0, 0, 0)))


# ------------------------------------------------------------------ 1. glog / torch C++ timestamps


def test_torch_cpp_watchdog_line_gets_its_time() -> None:
    # torch >= 2.3 c10 logging: month not zero-padded, nanoseconds, no thread id
    log = ("2024-03-21 02:00:00,000 - INFO - start\n"
           "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [PG 0 Rank 0] Watchdog caught "
           "collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600000 milliseconds\n")
    scan = scan_text(log)
    assert scan.last_wall_time is not None
    assert abs(scan.last_wall_time - (_utc(2024, 3, 21, 2, 7, 8) + 0.408271257)) < 1e-3


def test_torch_cpp_two_digit_month_and_classic_glog() -> None:
    scan = scan_text("2023-11-30 23:00:00 boot\n[E1201 00:00:01.000000001 ProcessGroupNCCL.cpp:1] x\n")
    # four digits are MMDD; the year is the dated line's, not the file's
    assert scan.last_wall_time is not None
    assert abs(scan.last_wall_time - _utc(2023, 12, 1, 0, 0, 1)) < 1e-6
    scan = scan_text("2022-05-01 11:59:00 boot\nI0501 12:00:00.123456 12345 file.cc:12] hello\n")
    assert scan.last_wall_time is not None
    assert abs(scan.last_wall_time - (_utc(2022, 5, 1, 12, 0, 0) + 0.123456)) < 1e-6


def test_glog_year_comes_from_dated_lines_not_mtime() -> None:
    # a copied run: the file's mtime is "now", the log's own dates say 2021
    glog_first = "W0310 08:00:00.000000 77 elastic.cc:3] first\n2021-03-10 08:00:05 - INFO - dated\n"
    scan = scan_text(glog_first)
    assert scan.first_wall_time is not None and abs(scan.first_wall_time - _utc(2021, 3, 10, 8, 0, 0)) < 1e-6
    glog_last = "2021-03-10 08:00:05 - INFO - dated\n[E310 09:00:00.500000000 ProcessGroupNCCL.cpp:1] last\n"
    scan = scan_text(glog_last)
    assert scan.last_wall_time is not None and abs(scan.last_wall_time - (_utc(2021, 3, 10, 9, 0, 0) + 0.5)) < 1e-6


def test_glog_alone_falls_back_to_mtime_year() -> None:
    scan = scan_text("I0501 12:00:00.123456 12345 file.cc:12] hello\n")  # written now
    assert scan.last_wall_time is not None
    year = time.gmtime().tm_year
    assert abs(scan.last_wall_time - (_utc(year, 5, 1, 12, 0, 0) + 0.123456)) < 1e-6


def test_glog_lookalikes_are_not_times() -> None:
    for line in ("PARTI0501 12:00:00.123456 9 x.cc:1] glued to a word\n",
                 "I1301 12:00:00.123456 9 x.cc:1] month 13\n",
                 "I0501 12:00:00.12 9 x.cc:1] too few fraction digits\n"):
        assert scan_text(line).last_wall_time is None, line


# ------------------------------------------------------------------ 2. steps beyond int64


HUGE = [
    " 50%|#####     | 99999999999999999999999/5000 [00:10<00:10,  4.98it/s]\n",
    "{'loss': 2.0, 'step': 100000000000000000000000}\n",
    "{'loss': 2.0, 'global_step': 1e30}\n",
    "Epoch 3:  45%|####5     | 99999999999999999999999/1000 [00:10<00:10, 4.5it/s, loss=2.3]\n",
    "Epoch 99999999999999999999:  45%|####5     | 450/1000 [00:10<00:10, 4.5it/s, loss=2.3]\n",
    "Epoch [999999999999][999999999999/999999999999] loss: 2.3\n",
    "Overriding: max_iters = 99999999999999999999999\n",
    "  Total optimization steps = 99999999999999999999999\n",
]
NORMAL = [
    " 10%|#         | 100/1000 [00:10<01:30,  9.98it/s]\n",
    "{'loss': 2.5, 'grad_norm': 1.0, 'learning_rate': 1e-4, 'epoch': 0.1}\n",
    "step 120 | loss 2.4\n",
    "plain text\n",
]


def test_parsers_drop_out_of_range_steps() -> None:
    assert parse_bar(HUGE[0].strip()) is None
    rec = parse_dict_record(HUGE[1])
    assert rec is not None and rec[2] is None and rec[0] == ["loss"]
    bar = parse_bar(HUGE[4].strip())
    assert bar is None or bar.step is None
    assert parse_step_line(HUGE[5].strip()) is None


def test_each_huge_line_keeps_the_scan_alive() -> None:
    for line in HUGE:
        scan = scan_text(NORMAL[0] + line * 3 + OOM_LINE, OOM)
        assert scan.status is ParseStatus.OK, (line, scan.note)
        assert scan.hits["oom"].count == 1, line
        assert all(p.step is None or 0 <= p.step < 2**62 for p in scan.series), line
        assert all(not isinstance(e.value, int) or abs(e.value) < 2**63 for e in scan.config), line
        assert scan.max_steps_seen is None or scan.max_steps_seen < 2**62
        assert scan.last_step is None or scan.last_step < 2**62


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(HUGE + NORMAL), min_size=1, max_size=30), st.integers(0, 30))
def test_huge_steps_mixed_with_oom(lines: list[str], at: int) -> None:
    lines = list(lines)
    lines.insert(min(at, len(lines)), OOM_LINE)
    scan = scan_text("".join(lines), OOM)
    assert scan.status is ParseStatus.OK, scan.note
    assert scan.hits["oom"].count == 1
    assert all(p.step is None or 0 <= p.step < 2**62 for p in scan.series)


def test_hf_fast_path_with_huge_bar_count() -> None:
    # many identical HF lines teach the fast path a template; then a bar with a huge count
    good = "".join(f"\r{i * 10 // 50:3d}%|#    | {i}/50 [00:01<00:01,  4.98it/s]\r \r"
                   f"{{'loss': 2.0, 'grad_norm': 1.0, 'learning_rate': 0.0001, 'epoch': 0.1}}\n" for i in range(1, 40))
    bad = ("\r 50%|#    | 99999999999999999999999/50 [00:01<00:01,  4.98it/s]\r \r"
           "{'loss': 2.0, 'grad_norm': 1.0, 'learning_rate': 0.0001, 'epoch': 0.1}\n")
    scan = scan_text(good + bad * 5 + OOM_LINE, OOM)
    assert scan.status is ParseStatus.OK, scan.note
    assert scan.hits["oom"].count == 1
    assert max(p.step for p in scan.series if p.step is not None) == 39


# ------------------------------------------------------------------ 3. junk torch files


def _check(path: Path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return check_torch_file(path.name, str(path), fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _junk(seed: int, n: int = 5000) -> bytes:
    data = bytearray(random.Random(seed).randbytes(n))
    data[0] = 0x3F  # never a zip/pickle/zero start, whatever the seed
    return bytes(data)


def test_junk_pt_is_not_a_valid_checkpoint(tmp_path: Path) -> None:
    ck = tmp_path / "ckpt"
    ck.mkdir()
    (ck / "model_004000.pt").write_bytes(_junk(1))
    (ck / "meta_004000.json").write_text('{"step": 4000}')
    (ck / "optim_004000_rank0.pt").write_bytes(_junk(2))
    fc = _check(ck / "model_004000.pt")
    assert not fc.ok and "neither a zip archive nor a pickle" in (fc.problem or "")
    arts = discover(tmp_path).artifacts
    cps = find_checkpoints(tmp_path, arts, now=LATER, in_progress_seconds=120)
    (cp,) = cps
    assert not cp.valid and any("model_004000.pt" in p and "neither" in p for p in cp.problems)


def test_junk_pt_shows_in_artifact_list(tmp_path: Path) -> None:
    from autopsy.run import load_run

    (tmp_path / "step_4000.pt").write_bytes(_junk(3))
    run = load_run(tmp_path)
    (art,) = [a for a in run.artifact_list if a.path == "step_4000.pt"]
    assert art.note is not None and "neither a zip archive nor a pickle" in art.note
    assert art.status is ParseStatus.UNREADABLE
    assert run.latest_valid_checkpoint is None


def test_legacy_formats_still_pass(tmp_path: Path) -> None:
    for name, data in (("p2.pt", b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.\x80\x02}q\x00."),
                       ("p4.pt", b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94."),
                       ("p0.pt", b"L119547037146038801333356L\n."),
                       ("old.pt", b"\0" * 257 + b"ustar\x0000" + b"\0" * 600)):
        (tmp_path / name).write_bytes(data)
        fc = _check(tmp_path / name)
        assert fc.ok, (name, fc.problem)
    good = write_zip(tmp_path / "good.pt", torch_like_zip_entries())
    assert _check(good).ok


def test_unknown_bin_is_not_called_junk(tmp_path: Path) -> None:
    # nanoGPT's train.bin (uint16 tokens) is a .bin too: not a torch file we can judge
    (tmp_path / "train.bin").write_bytes(_junk(4))
    fc = _check(tmp_path / "train.bin")
    assert fc.ok and "neither a zip archive nor a pickle" in (fc.note or "")
    (tmp_path / "pytorch_model.bin").write_bytes(_junk(5))
    assert not _check(tmp_path / "pytorch_model.bin").ok


# ------------------------------------------------------------------ 4. nanochat rank files


def test_nanochat_missing_ranks_are_all_listed(tmp_path: Path) -> None:
    ck = tmp_path / "base_checkpoints" / "d20"
    ck.mkdir(parents=True)
    for step in ("004000", "008000", "012000"):
        write_zip(ck / f"model_{step}.pt", torch_like_zip_entries())
        (ck / f"meta_{step}.json").write_text('{"step": 1}')
        if step == "004000":
            for r in range(8):
                write_zip(ck / f"optim_{step}_rank{r}.pt", torch_like_zip_entries())
        if step == "012000":  # a save cut after four ranks
            for r in range(4):
                write_zip(ck / f"optim_{step}_rank{r}.pt", torch_like_zip_entries())
    arts = discover(tmp_path).artifacts
    cps = {c.step: c for c in find_checkpoints(tmp_path, arts, now=LATER, in_progress_seconds=120)}
    assert cps[4000].valid
    assert cps[8000].missing == tuple(f"optim_008000_rank{r}.pt" for r in range(8))
    assert cps[12000].missing == tuple(f"optim_012000_rank{r}.pt" for r in range(4, 8))


def test_nanochat_single_step_still_names_rank0(tmp_path: Path) -> None:
    write_zip(tmp_path / "model_000250.pt", torch_like_zip_entries())
    (tmp_path / "meta_000250.json").write_text('{"step": 250}')
    arts = discover(tmp_path).artifacts
    (cp,) = find_checkpoints(tmp_path, arts, now=LATER, in_progress_seconds=120)
    assert cp.missing == ("optim_000250_rank0.pt",)


# ------------------------------------------------------------------ 5. nested config keys


def _cfg(tmp_path: Path, name: str, text: str) -> dict[str, object]:
    p = tmp_path / name
    p.write_text(text)
    parsed = read_config(p, name, ArtifactKind.CONFIG, None)
    return {e.key: e.value for e in parsed.value}


def test_train_steps_section_is_max_steps(tmp_path: Path) -> None:
    got = _cfg(tmp_path, "m7c.yaml", "model:\n  dim: 768\ntrain:\n  steps: 50000\n  lr: 2.0e-4\n"
                                     "  seq_len: 1024\neval:\n  steps: 200\nwarmup:\n  steps: 500\n"
                                     "log:\n  steps: 10\nsave:\n  steps: 1000\n")
    assert got["max_steps"] == 50000
    assert got["learning_rate"] == 2.0e-4
    assert got["warmup_steps"] == 500
    assert got["logging_steps"] == 10
    assert got["save_steps"] == 1000
    assert got["steps"] == 200  # eval.steps: not a training length


def test_nested_forms(tmp_path: Path) -> None:
    got = _cfg(tmp_path, "a.yaml", "training:\n  max_steps: 100\noptim:\n  lr: 0.1\nscheduler:\n  warmup_steps: 7\n")
    assert got == {"max_steps": 100, "learning_rate": 0.1, "warmup_steps": 7}
    assert _cfg(tmp_path, "b.yaml", "trainer:\n  max_steps: 9\n") == {"max_steps": 9}
    assert _cfg(tmp_path, "c.json", '{"trainer": {"steps": 11}}') == {"max_steps": 11}
    assert _cfg(tmp_path, "d.toml", "[training]\nsteps = 12\n") == {"max_steps": 12}
    assert _cfg(tmp_path, "e.yaml", "optim:\n  steps: 13\n") == {"max_steps": 13}


def test_canonical_key_with_dotted_flags() -> None:
    assert canonical_key("--train.steps", 5) == "max_steps"
    assert canonical_key("train.steps", 5) == "max_steps"
    assert canonical_key("eval.steps", 5) == "eval.steps"
    assert canonical_key("steps", 5) == "steps"
    assert canonical_key("steps", 5, parent="training") == "max_steps"
    assert canonical_key("--optimizer.lr", 0.1) == "learning_rate"


def test_glog_year_across_blocks_and_dense_lazy_path() -> None:
    # more timestamps than a block indexes up front: the lazy backward lookups date them too
    dated = "".join(f"2021-06-01 10:{i // 60 % 60:02d}:{i % 60:02d},000 - INFO - tick {i}\n" for i in range(2500))
    glog = "[E601 11:00:00.000000001 ProcessGroupNCCL.cpp:607] Watchdog caught collective operation timeout\n"
    scan = scan_text(dated + glog + OOM_LINE, OOM)
    assert abs(scan.last_wall_time - _utc(2021, 6, 1, 11, 0, 0)) < 1e-3
    (hit,) = scan.hits["oom"].all_kept()
    assert hit.wall_time is not None and abs(hit.wall_time - _utc(2021, 6, 1, 11, 0, 0)) < 1e-3
