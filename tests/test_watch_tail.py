"""Following files by offset: growth, partial lines, truncation, replacement; the live scanner
fed in pieces agrees with the post-mortem's one-pass scan of the whole file."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from autopsy.engine.loader import load_catalog
from autopsy.parsers.log_match import compile_patterns
from autopsy.parsers.logs import scan_log
from autopsy.watch.live_log import LiveLog
from autopsy.watch.tail import FileTail, TailChange

RUNS = Path(__file__).resolve().parent.parent / "fixtures" / "runs"


@pytest.fixture(scope="module")
def compiled():  # type: ignore[no-untyped-def]
    cat = load_catalog(())
    return compile_patterns(cat.patterns(list(cat.cards.values())))


def test_tail_reads_only_what_was_appended(tmp_path: Path) -> None:
    p = tmp_path / "a.log"
    p.write_bytes(b"one\n")
    t = FileTail(p)
    r = t.poll()
    assert (r.change, r.data, r.start) == (TailChange.NEW, b"one\n", 0)
    assert t.poll().change is TailChange.NONE
    with open(p, "ab") as fh:
        fh.write(b"two\nthr")
    r = t.poll()
    assert (r.change, r.data, r.start) == (TailChange.GREW, b"two\nthr", 4)


def test_tail_truncated_and_replaced_restart_at_zero(tmp_path: Path) -> None:
    p = tmp_path / "a.log"
    p.write_bytes(b"0123456789\n")
    t = FileTail(p)
    t.poll()
    p.write_bytes(b"new\n")  # truncated in place (same inode), shorter
    r = t.poll()
    assert (r.change, r.data) == (TailChange.TRUNCATED, b"new\n")
    q = tmp_path / "b.log"
    q.write_bytes(b"rotated in\n")
    os.replace(q, p)  # logrotate / atomic save: another inode at the same path
    r = t.poll()
    assert (r.change, r.data) == (TailChange.REPLACED, b"rotated in\n")
    p.unlink()
    assert t.poll().change is TailChange.VANISHED
    assert t.poll().change is TailChange.NONE  # said once


def test_tail_caps_one_poll_and_goes_on_at_the_next(tmp_path: Path) -> None:
    p = tmp_path / "a.log"
    p.write_bytes(b"x" * 100)
    t = FileTail(p, max_bytes=40)
    assert len(t.poll().data) == 40 and t.pending
    assert len(t.poll().data) == 40
    assert len(t.poll().data) == 20 and not t.pending


def test_tail_never_opens_a_fifo(tmp_path: Path) -> None:
    p = tmp_path / "fifo.log"
    os.mkfifo(p)
    assert FileTail(p).poll().change is TailChange.UNREADABLE


def test_partial_line_waits_for_its_end(tmp_path: Path, compiled) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "train.log"
    p.write_bytes(b"step 1 loss 2.0\nstep 2 loss n")
    ll = LiveLog(p, "train.log", compiled)
    ll.poll()
    pts = ll.new_points()
    assert [(x.tag, x.step, x.value) for x in pts] == [("loss", 1, 2.0)]
    with open(p, "ab") as fh:
        fh.write(b"an\n")
    ll.poll()
    pts = ll.new_points()
    assert [(x.tag, x.step) for x in pts] == [("loss", 2)] and pts[0].value != pts[0].value  # NaN, whole


@pytest.mark.parametrize("name", ["disk_full", "tokenizer_overflow", "dist_timeout"])
def test_pieces_agree_with_the_one_pass_scan(tmp_path: Path, compiled, name: str) -> None:  # type: ignore[no-untyped-def]
    src = next(p for p in sorted((RUNS / name).rglob("*.log")) if p.stat().st_size > 0)
    data = src.read_bytes()
    p = tmp_path / "x.log"
    p.write_bytes(b"")
    ll = LiveLog(p, "x.log", compiled)
    rnd = random.Random(7)
    pos = 0
    read = 0
    while pos < len(data):
        piece = data[pos:pos + rnd.randint(1, 700)]
        n = len(piece)
        with open(p, "ab") as fh:
            fh.write(piece)
        pos += n
        before = ll.bytes_scanned
        ll.poll()
        ll.new_points()
        read += ll.bytes_scanned - before
        assert ll.bytes_scanned - before == n  # each poll reads exactly what arrived
    assert read == len(data)
    live = ll.snapshot()
    whole = scan_log(p, "x.log", compiled, max_bytes=1 << 40, rank=None)
    assert live.n_lines == whole.n_lines
    assert live.last_step == whole.last_step
    assert {k: v.count for k, v in live.hits.items()} == {k: v.count for k, v in whole.hits.items()}
    assert [(t.line_start, t.exc_type) for t in live.tracebacks] == [
        (t.line_start, t.exc_type) for t in whole.tracebacks]
    # Progress-bar rates (it/s) are sampled every 32 KB of a block, so where blocks start moves
    # them; every value a line prints is read from every line, however the file arrives.
    lv = [(x.tag, x.step, x.value) for x in live.series if x.tag not in ("it/s", "s/it")]
    wv = [(x.tag, x.step, x.value) for x in whole.series if x.tag not in ("it/s", "s/it")]
    assert len(lv) == len(wv) and str(lv) == str(wv)  # str: NaN == NaN
