"""Log scanner on damaged and hostile input: never raises, bounded, still finds things."""

from __future__ import annotations

import os
import random
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autopsy.model import ParseStatus
from autopsy.parsers.logs import compile_patterns, scan_log, scan_text
from autopsy.parsers.types import PatternSpec

OOM = compile_patterns([PatternSpec("oom/x", r"CUDA out of memory\. Tried to allocate (?P<n>[\d.]+)",
                                    ("CUDA out of memory",))])
OOM_LINE = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"


def test_binary_junk_with_a_real_line_inside():
    rng = random.Random(1)
    junk = bytes(rng.getrandbits(8) for _ in range(200_000))
    scan = scan_text(junk + b"\n" + OOM_LINE + junk, OOM)
    assert scan.status is ParseStatus.OK
    assert scan.hits["oom/x"].count == 1
    assert scan.binary_fraction > 0.1


def test_nul_bytes_and_invalid_utf8_survive():
    data = b"\x00\x00abc\xff\xfe\xc3(\n" + b"\x00" + OOM_LINE
    scan = scan_text(data, OOM)
    (hit,) = scan.hits["oom/x"].all_kept()
    assert hit.text.startswith("\x00torch") and hit.lineno == 2
    assert "\ufffd" in scan.head[0] and "\x00" in scan.head[0]
    assert 0 < scan.binary_fraction < 0.5


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le"])
def test_utf16_logs_are_decoded(encoding):
    text = "header\n" + OOM_LINE.decode() + "{'loss': 1.5, 'epoch': 0.1}\n"
    scan = scan_text(text.encode(encoding), OOM)
    assert scan.hits["oom/x"].count == 1 and scan.hits["oom/x"].first[0].lineno == 2
    assert [p.value for p in scan.series if p.tag == "loss"] == [1.5]
    assert "UTF-16" in (scan.note or "")


def test_carriage_return_only_file():
    data = b"".join(b"\r %d%%|#| %d/50 [00:01<00:01, 3.00it/s]" % (i * 2, i) for i in range(1, 51))
    scan = scan_text(data + b"\r" + OOM_LINE.rstrip(b"\n"), OOM)
    assert scan.hits["oom/x"].count == 1
    assert scan.last_step == 50 and scan.max_steps_seen == 50
    assert scan.n_lines == 1


def test_ansi_and_osc_sequences_are_stripped():
    data = (b"\x1b]0;title\x07\x1b[31mtorch.OutOfMemoryError: CUDA \x1b[1mout of memory\x1b[0m. "
            b"Tried to allocate 1.00 GiB\x1b[0m\n")
    scan = scan_text(data, OOM)
    (hit,) = scan.hits["oom/x"].all_kept()
    assert hit.text == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB"
    assert "\x1b" not in scan.head[0]


def test_huge_single_line_is_bounded(tmp_path):
    p = tmp_path / "huge.log"
    with open(p, "wb") as fh:
        fh.write(OOM_LINE)
        fh.write(b"x" * (20 << 20))  # a 20 MB line (100 MB in the bench): read, not kept
        fh.write(b"\n" + OOM_LINE)
    scan = scan_log(p, "huge.log", OOM, max_bytes=1 << 40, rank=None)
    assert scan.status is ParseStatus.OK and scan.n_lines == 3
    hits = scan.hits["oom/x"].all_kept()
    assert [h.lineno for h in hits] == [1, 3]
    assert hits[1].offset == p.stat().st_size - len(OOM_LINE)
    assert all(len(t) <= 4200 for _, t in scan.tail)


def test_max_bytes_truncates_with_note(tmp_path):
    p = tmp_path / "t.log"
    p.write_bytes(OOM_LINE * 1000)
    scan = scan_log(p, "t.log", OOM, max_bytes=len(OOM_LINE) * 10, rank=None)
    assert scan.status is ParseStatus.TRUNCATED
    # head and tail, half the budget each, cut at line boundaries
    half = len(OOM_LINE) * 5
    assert scan.note.startswith(f"read only the first {half:,} and the last {half:,} bytes of {len(OOM_LINE) * 1000:,}")
    assert scan.hits["oom/x"].count == 10 and scan.bytes_read == len(OOM_LINE) * 10
    assert scan.hits["oom/x"].all_kept()[-1].lineno == 1000  # middle counted: exact line numbers


def test_missing_file_and_directory_are_unreadable(tmp_path):
    scan = scan_log(tmp_path / "nope.log", "nope.log", OOM, max_bytes=100, rank=None)
    assert scan.status is ParseStatus.UNREADABLE and scan.note
    scan = scan_log(tmp_path, "dir", OOM, max_bytes=100, rank=None)
    assert scan.status is ParseStatus.UNREADABLE


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_does_not_block(tmp_path):
    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)
    result = []
    t = threading.Thread(target=lambda: result.append(scan_log(fifo, "train.log", OOM, max_bytes=100, rank=None)))
    t.start()
    t.join(5)
    assert not t.is_alive(), "scan_log blocked on a FIFO"
    assert result[0].status is ParseStatus.UNREADABLE and "regular" in result[0].note


def test_hostile_regex_input_times_out_not_hangs():
    evil = compile_patterns([PatternSpec("evil/x", r"(a+)+b", ("a",))])
    scan = scan_text(b"a" * 5000 + b"\n", evil)
    assert scan.status is ParseStatus.OK  # either matched or timed out, never stuck


def test_invalid_pattern_is_reported_not_raised():
    compiled = compile_patterns([PatternSpec("bad/x", r"(unclosed", ("x",))])
    assert "bad/x" in compiled.errors
    assert scan_text("x\n", compiled).status is ParseStatus.OK


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=4000) | st.lists(st.sampled_from([
    b"\n", b"\r", b"\x00", b"\xff", b"\x1b[31m", b"\x1b]0;", b"[rank1]:", b"Traceback (most recent call last):",
    b'  File "x.py", line 1, in f', b"    code", b"ValueError: x", b"{'loss': ", b"nan", b"}", b" 5/10 [",
    b"00:01<00:02, 2.0it/s]", b"step 5 | loss 2", b"Failures:", b"[0]:", b"  rank      : 0 (local_rank: 0)",
    b"  exitcode  : -9 (pid: 1)", b"Root Cause (first observed failure):", b"=====", b"\xff\xfe", b"0: ",
    b"During handling of the above exception, another exception occurred:", b"2024-05-01 12:00:00",
    b"CUDA out of memory. Tried to allocate 1 GiB",
]), max_size=60).map(b"".join))
def test_no_byte_string_crashes(data):
    scan = scan_text(data, OOM)
    assert scan.status is ParseStatus.OK, scan.note
    assert scan.bytes_read == len(data)
    assert 0.0 <= scan.binary_fraction <= 1.0
    for p in scan.series:
        assert isinstance(p.value, float)
