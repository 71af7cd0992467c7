"""The scanner's fast paths give exactly what its general path gives.

* log_fast: HF dict lines with their progress bar, read from bytes by learnt key layouts,
  against the general per-segment walk (no layouts learnt: ``MAX_TEMPLATES = 0``);
* log_parallel: a forked child scanning the second half of a big log, merged, against one
  sequential scan: hits (first/last kept, counts), tracebacks, child failures, config
  entries, series (thinned too), head, tail, steps, wall times, line counts; with
  tracebacks, reports and config dumps straddling the cut (the parent then scans the
  second half itself) and with the child's guessed context at the cut confirmed.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
from logscan_gen import CHAINED, CHILD_FAILED, SPECS, hf_log

from autopsy.parsers import log_blocks, log_context, log_match, log_parallel, log_scanner, log_store
from autopsy.parsers.log_series import DictTemplate, dict_template, parse_dict_record
from autopsy.parsers.logs import compile_patterns, scan_log
from autopsy.parsers.types import LogScan

BIG = 1 << 40


@pytest.fixture(autouse=True)
def _no_wall_clock_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test patterns (SPECS) are user-card patterns, searched with a wall-clock timeout and a
    per-file budget (log_match). On a loaded machine (load 10 on 2 cores) a linear search was
    descheduled past the 0.25 s timeout and one scan of a pair lost a hit the other kept: these
    tests compare two scans, so neither may depend on how busy the machine is."""
    monkeypatch.setattr(log_match, "REGEX_TIMEOUT_S", 3600.0)
    monkeypatch.setattr(log_match, "REGEX_BUDGET_S", 1e9)


def canon(scan: LogScan) -> dict[str, Any]:
    """Everything a LogScan says, comparable with == (NaN-safe series columns)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(scan):
        v = getattr(scan, f.name)
        if f.name == "series":
            cols = v.columns()
            cols["value"] = [("nan" if math.isnan(x) else x) for x in cols["value"]]
            v = (cols, getattr(v, "stride", 1))
        elif f.name == "hits":
            v = {k: (h.count, [repr(x) for x in h.first], [repr(x) for x in h.last]) for k, h in v.items()}
        else:
            v = repr(v)
        out[f.name] = v
    return out


def _diff(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [k for k in a if a[k] != b[k]]


def _scan(path: Path, compiled: Any = None) -> LogScan:
    return scan_log(path, "train.log", compiled or compile_patterns(SPECS), max_bytes=BIG, rank=None)


# --------------------------------------------------------------------------- fast path


def _count_fast(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    handled = [0]
    real = log_scanner.fast_run

    def counting(sc: Any, entries: list[int], idx: int, done: int) -> tuple[int, int]:
        got = real(sc, entries, idx, done)
        handled[0] += got[0] - idx
        return got

    monkeypatch.setattr(log_scanner, "fast_run", counting)
    return handled


@pytest.mark.parametrize("seed", range(4))
def test_fast_path_equals_general_walk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    p = tmp_path / "train.log"
    p.write_text(hf_log(seed, 3000, timestamps=seed % 2 == 0), encoding="utf-8")
    monkeypatch.setattr(log_blocks, "BLOCK", 64 << 10)  # many blocks: runs cut at block ends
    # small files take a rate from every bar (the general path, bar by bar): seeds 2, 3 do that
    monkeypatch.setattr(log_scanner, "EVERY_BAR_BELOW", 0 if seed < 2 else 1 << 30)
    handled = _count_fast(monkeypatch)
    fast = _scan(p)
    if seed < 2:
        assert handled[0] > 400  # most dicts went the fast way
    monkeypatch.setattr(log_scanner, "MAX_TEMPLATES", 0)
    general = _scan(p)
    assert _diff(canon(fast), canon(general)) == []
    assert len(fast.series) > 3000 and fast.hits["nan/dict"].count > 0 and fast.tracebacks


def test_fast_path_thins_like_the_general_walk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "train.log"
    p.write_text(hf_log(5, 4000), encoding="utf-8")
    monkeypatch.setattr(log_blocks, "BLOCK", 32 << 10)
    monkeypatch.setattr(log_scanner, "EVERY_BAR_BELOW", 0)
    monkeypatch.setattr(log_store, "MAX_SERIES_POINTS", 700)
    handled = _count_fast(monkeypatch)
    fast = _scan(p)
    assert handled[0] > 400
    monkeypatch.setattr(log_scanner, "MAX_TEMPLATES", 0)
    general = _scan(p)
    assert getattr(fast.series, "stride", 1) > 2 and len(fast.series) < 700
    assert _diff(canon(fast), canon(general)) == []


def test_template_reads_what_the_dict_parser_reads() -> None:
    keys = ["loss", "grad_norm", "learning_rate", "epoch"]
    tpl = dict_template(keys, "'")
    assert isinstance(tpl, DictTemplate)
    for values in (["2.5", "0.1", "1.999998e-05", "0.0000"], ["nan", "inf", "-.5", "Infinity"],
                   ["1e5", "+3", "NaN", "7."]):
        line = "{" + ", ".join(f"'{k}': {v}" for k, v in zip(keys, values, strict=True)) + "}"
        m = tpl.rx.fullmatch(line.encode())
        assert m is not None
        ref = parse_dict_record(line)
        assert ref is not None and ref[0] == keys and ref[2] is None
        assert [repr(float(v)) for v in m.groups()] == [repr(v) for v in ref[1]]
    # layouts the fast path must not claim
    assert dict_template(["loss", "step"], "'") is None  # the dict's own step
    assert dict_template(["loss", "max steps"], "'") is None  # a space: could trigger config lines
    assert dict_template(["loss", "train_it/s"], "'") is None  # a rate unit: the bar lookup
    assert tpl.rx.fullmatch(b"{'loss': 2.5, 'grad_norm': '0.1', 'learning_rate': 1, 'epoch': 0}") is None


# --------------------------------------------------------------------------- parallel


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parallel scans on small files: 64 KB blocks, any size qualifies, a short warm-up."""
    monkeypatch.setattr(log_blocks, "BLOCK", 64 << 10)
    monkeypatch.setattr(log_scanner, "EVERY_BAR_BELOW", 0)  # as in big files: the fast path runs
    monkeypatch.setattr(log_parallel, "MIN_BYTES", 1)
    monkeypatch.setattr(log_parallel, "WARM_BYTES", 24 << 10)
    monkeypatch.setenv("AUTOPSY_LOG_WORKERS", "2")


def _both(p: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[LogScan, LogScan, str]:
    par = _scan(p)
    outcome = log_parallel.last_outcome
    monkeypatch.setenv("AUTOPSY_LOG_WORKERS", "1")
    seq = _scan(p)
    monkeypatch.setenv("AUTOPSY_LOG_WORKERS", "2")
    return par, seq, outcome


@pytest.mark.parametrize("seed", range(3))
def test_parallel_equals_sequential(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_blocks: None,
                                    seed: int) -> None:
    p = tmp_path / "train.log"
    # seed 1: timestamps only in the header, so the second half's wall times come from the first
    p.write_text(hf_log(seed, 6000, timestamps=seed != 1), encoding="utf-8")
    par, seq, outcome = _both(p, monkeypatch)
    assert _diff(canon(par), canon(seq)) == []
    assert outcome == "merged"
    assert par.tracebacks and par.child_failures and par.config and par.hits["nan/dict"].count > 40


def test_parallel_merges_thinned_series(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_blocks: None) -> None:
    p = tmp_path / "train.log"
    p.write_text(hf_log(11, 8000), encoding="utf-8")
    monkeypatch.setattr(log_store, "MAX_SERIES_POINTS", 1500)
    par, seq, outcome = _both(p, monkeypatch)
    assert outcome == "merged" and getattr(par.series, "stride", 1) >= 4
    assert _diff(canon(par), canon(seq)) == []


def _plan(p: Path) -> log_parallel.Plan:
    import os

    fd = os.open(p, os.O_RDONLY)
    try:
        plan = log_parallel.plan(fd, p.stat().st_size, log_blocks.BLOCK)
    finally:
        os.close(fd)
    assert plan is not None
    return plan


@pytest.mark.parametrize("block", [CHAINED, CHILD_FAILED, "Overriding config with config/x.py:\nn_layer = 12\n"
                                   "n_head = 12\nlearning_rate = 6e-4\n"])
def test_parallel_with_a_block_straddling_the_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  small_blocks: None, block: str) -> None:
    base = hf_log(3, 6000, tracebacks=False)
    p = tmp_path / "train.log"
    p.write_text(base, encoding="utf-8")
    # the block's first lines before the cut (the last separator before k * BLOCK), the rest after
    at = _plan(p).chunk_start - len(block) // 2
    data = base.encode()
    p.write_bytes(data[:at] + b"\n" + block.encode() + data[at:])
    assert at < _plan(p).cut < at + len(block)
    par, seq, outcome = _both(p, monkeypatch)
    assert outcome.startswith("traceback, report or config dump open")  # the parent scanned the rest
    assert _diff(canon(par), canon(seq)) == []


def test_parallel_when_the_context_differs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           small_blocks: None) -> None:
    # a bigger bar total early on that the child's warm-up cannot see: it must not merge
    log = hf_log(4, 6000, total=5000)
    bigger = "\r" + " 1%|          | 3/9000000 [00:01<00:09,  9.90it/s]\r{'loss': 1.0, 'epoch': 0.1}\n"
    p = tmp_path / "train.log"
    p.write_text(log[:2000] + bigger + log[2000:], encoding="utf-8")
    par, seq, outcome = _both(p, monkeypatch)
    assert outcome == "context at the cut differs"
    assert _diff(canon(par), canon(seq)) == []


def test_parallel_needs_a_big_enough_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not log_parallel.usable(10 << 20, 10 << 20)
    assert not log_parallel.usable(1 << 30, 100 << 20)  # --max-bytes-per-file window: sequential
    monkeypatch.setenv("AUTOPSY_LOG_WORKERS", "1")
    assert not log_parallel.usable(1 << 30, 1 << 30)


def test_timestamp_candidates_find_what_finditer_finds() -> None:
    from autopsy.parsers import log_text as lt

    text = (b"2024-05-01 12:00:00,123 x\n-01-01-01-02 03:04:05\n1970-13-40 10:00:00\nrun-12-12-2024\n"
            b"I0501 12:00:00.123456  4242 a.cc:1] y\nx 9:00:00.000001 7 \n[00:03<44442:40,  3.75it/s]"
            b"{'lr': 1e-05}\n2024-05-01T12:00:00.5+05:00 2024-05-01_12:00:00Z\n:12:34.567890 1 :1:2.3\n") * 3
    for rx in (lt._TS_ISO, lt._TS_GLOG):
        ours = [(m.start(), m.group()) for m in log_context._ts_matches(rx, text)]
        assert ours == [(m.start(), m.group()) for m in rx.finditer(text)]
        assert ours


def test_parallel_without_a_child_scans_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              small_blocks: None) -> None:
    p = tmp_path / "train.log"
    p.write_text(hf_log(8, 4000), encoding="utf-8")
    import multiprocessing.context as mpc

    def refuse(self: Any) -> None:
        raise OSError("no fork today")

    monkeypatch.setattr(mpc.ForkProcess, "start", refuse)
    par, seq, outcome = _both(p, monkeypatch)
    assert outcome == "no child: OSError"
    assert _diff(canon(par), canon(seq)) == []
