"""The literal-prefilter path finds exactly the hits of a plain per-line regex scan."""

from __future__ import annotations

import random

import pytest

from autopsy.parsers import log_match
from autopsy.parsers.log_match import LiteralFinder, reference_hits
from autopsy.parsers.logs import compile_patterns, scan_log
from autopsy.parsers.types import PatternSpec


@pytest.fixture(autouse=True)
def _no_search_timeout(monkeypatch):
    # These patterns are searched as a user card's are, with a 0.25 s timeout per search. On a
    # machine stalled for longer than that (seen on the shared 2-core VM at load 7) a search
    # times out and the fast path counts a timeout where the reference counts a hit: a flaky
    # failure that says nothing about the prefilter. The timeout has its own tests.
    monkeypatch.setattr(log_match, "REGEX_TIMEOUT_S", 60.0)

SPECS = [
    PatternSpec("oom/cuda", r"CUDA out of memory\. Tried to allocate (?P<req>[\d.]+) (?P<unit>[KMG]iB)",
                ("CUDA out of memory",)),
    PatternSpec("oom/short", r"out of memory", ("out of memory",)),  # overlaps the literal above
    PatternSpec("nan/dict", r"'loss': nan", ("'loss': nan",)),  # overlaps the "{'" trigger
    PatternSpec("nccl/x", r"^NCCL error in: (?P<where>\S+)$", ("NCCL error",)),  # anchored: after prefix strip
    PatternSpec("disk/x", r"no space left on device", ("no space left",), ignore_case=True),
    PatternSpec("killed/x", r"^Killed$", ("Killed",)),
    PatternSpec("two/x", r"Error while saving|PytorchStreamWriter failed", ("Error while saving", "PytorchStream")),
]

PIECES = [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "CUDA out of memory", "{'loss': nan, 'epoch': 1.0}", "{'loss': 2.0, 'epoch': 1.0}",
    "[rank3]:NCCL error in: ProcessGroupNCCL.cpp:1970", "NCCL error in: x.cpp y",
    "OSError: [Errno 28] No Space Left On Device",
    "Killed", " Killed", "\x1b[31mCUDA out of \x1b[0mmemory", "RuntimeError: Error while saving ckpt",
    "PytorchStreamWriter failed writing file data/2", " 10%|#   | 10/100 [00:01<00:09, 9.9it/s]", "plain noise",
    "step 5 | loss 2.0", "Traceback (most recent call last):", '  File "x.py", line 1, in f', "ValueError: x",
    "\x00\xff junk",
]


def _random_log(seed: int, n: int) -> bytes:
    rng = random.Random(seed)
    parts = []
    for _ in range(n):
        parts.append(rng.choice(PIECES).encode("utf-8", "surrogateescape") if rng.random() < 0.97
                     else bytes([rng.getrandbits(8)]))
        parts.append(rng.choice([b"\n", b"\n", b"\r", b"\r\n", b" "]))
    return b"".join(parts)


def _key(hits):
    return {k: (v.count, [(h.lineno, h.offset, h.text, h.groups, h.rank) for h in v.all_kept()])
            for k, v in hits.items()}


@pytest.mark.parametrize("accel", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_prefilter_equals_reference(tmp_path, seed, accel):
    if accel and log_match._ac is None:
        pytest.skip("ahocorasick_rs not installed")
    p = tmp_path / "t.log"
    p.write_bytes(_random_log(seed, 3000))
    compiled = compile_patterns(SPECS, use_accelerator=accel)
    fast = scan_log(p, "t.log", compiled, max_bytes=1 << 40, rank=None)
    slow = reference_hits(p, "t.log", compiled)
    assert _key(fast.hits) == _key(slow)
    assert sum(v.count for v in slow.values()) > 100


def test_prefilter_across_block_boundaries(tmp_path, monkeypatch):
    from autopsy.parsers import log_blocks

    monkeypatch.setattr(log_blocks, "BLOCK", 4096)  # many blocks, lines cut everywhere
    p = tmp_path / "t.log"
    p.write_bytes(_random_log(7, 4000))
    compiled = compile_patterns(SPECS)
    assert _key(scan_log(p, "t.log", compiled, max_bytes=1 << 40, rank=None).hits) == _key(
        reference_hits(p, "t.log", compiled))


def test_pattern_without_literals_scans_every_segment(tmp_path):
    p = tmp_path / "t.log"
    p.write_bytes(_random_log(3, 500))
    compiled = compile_patterns([PatternSpec("any/x", r"^Kil+ed$")])
    assert compiled.every_segment
    assert _key(scan_log(p, "t.log", compiled, max_bytes=1 << 40, rank=None).hits) == _key(
        reference_hits(p, "t.log", compiled))


def test_literal_finders_agree():
    data = _random_log(11, 2000)
    lits = [b"CUDA out of memory", b"out of memory", b"Killed", b"{'", b"loss"]
    fast = LiteralFinder(lits, use_accelerator=True)
    plain = LiteralFinder(lits, use_accelerator=False)
    assert fast.positions(data) == plain.positions(data)


def test_hits_keep_first_and_last_twenty(tmp_path):
    p = tmp_path / "t.log"
    p.write_bytes(b"".join(b"Killed %d\nKilled\n" % i for i in range(100)))
    scan = scan_log(p, "t.log", compile_patterns(SPECS), max_bytes=1 << 40, rank=None)
    hl = scan.hits["killed/x"]
    assert hl.count == 100 and len(hl.first) == 20 and len(hl.last) == 20
    assert hl.first[0].lineno == 2 and hl.last[-1].lineno == 200


@pytest.mark.parametrize("shape", ["hf", "hf_noeval", "lightning", "keras", "torchrun", "openworld", "quiet"])
def test_builtin_literals_are_selective_on_healthy_progress_output(tmp_path, shape):
    """A card literal that occurs on every progress-bar redraw switches the prefilter off for that
    card: every redraw goes through the regexes. (``'0%|'`` for a tqdm bar at 0% also matched
    10%, 20%...: ``autopsy analyze`` on a 12 MB HF log went from ~5 s to 15 s of CPU.) On the
    healthy progress output of each benchmark shape, no built-in literal may occur in more than
    one segment (a line, or a bar redraw between two \\r) in 200."""
    import sys
    from pathlib import Path

    from autopsy.engine.loader import load_catalog

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import gen_shapes

    gen_shapes.SHAPES[shape](tmp_path / shape, 1)
    buf = b"".join(p.read_bytes() for p in sorted((tmp_path / shape).rglob("*")) if p.is_file())
    buf = buf.replace(b"\r", b"\n")
    n_segments = buf.count(b"\n") + 1
    lowered = buf.lower()
    noisy = []
    for card in load_catalog(()).cards.values():
        for p in card.patterns:
            for lit in p.literals:
                # occurrences, an upper bound of the segments holding it (literals hold no newline)
                hay, needle = (lowered, lit.lower().encode()) if p.ignore_case else (buf, lit.encode())
                share = hay.count(needle) / n_segments
                if share > 1 / 200:
                    noisy.append(f"{card.id}/{p.name} literal {lit!r}: in {share:.1%} of segments")
    assert not noisy, "; ".join(noisy)
