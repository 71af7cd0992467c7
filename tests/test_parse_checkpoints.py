"""Checkpoint grouping and header-only integrity checks (safetensors, zip, index, JSON)."""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import pytest
from builders import bytes_read_while, torch_like_zip_entries, write_safetensors, write_zip
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autopsy.discover import discover
from autopsy.parsers.checkpoints import MISSING_WEIGHTS, find_checkpoints
from autopsy.parsers.safetensors_header import check_header_bytes, check_safetensors
from autopsy.parsers.types import Checkpoint
from autopsy.parsers.zipcheck import check_torch_file

TENSORS = {"w": ["F32", [4, 4]], "b": ["BF16", [4]]}
LATER = 10**10  # "now" far after every mtime: nothing is in progress


def _find(root: Path, now: float = LATER) -> dict[str, Checkpoint]:
    arts = discover(root).artifacts
    return {c.path: c for c in find_checkpoints(root, arts, now=now, in_progress_seconds=120)}


def _hf_dir(root: Path, step: int, skip: tuple[str, ...] = ()) -> Path:
    d = root / f"checkpoint-{step}"
    d.mkdir(parents=True)
    if "model.safetensors" not in skip:
        write_safetensors(d / "model.safetensors", TENSORS)
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        if name not in skip:
            write_zip(d / name, torch_like_zip_entries())
    if "trainer_state.json" not in skip:
        (d / "trainer_state.json").write_text(json.dumps({"global_step": step}, indent=2))
    (d / "config.json").write_text('{"vocab_size": 10}')
    return d


def _check(path: Path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return check_safetensors(path.name, fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def test_builder_output_is_a_real_safetensors_file(tmp_path: Path) -> None:
    from safetensors import safe_open

    p = write_safetensors(tmp_path / "m.safetensors", {"w": ["F32", [2, 3]], "x": ["I64", [5]]})
    with safe_open(str(p), "np") as f:
        assert sorted(f.keys()) == ["w", "x"] and f.get_tensor("w").shape == (2, 3)
    assert _check(p).ok and _check(p).entries == 2


def test_safetensors_written_by_the_library(tmp_path: Path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    p = tmp_path / "lib.safetensors"
    save_file({"a": np.zeros((3, 5), np.float32), "b": np.ones(7, np.int8)}, str(p))
    assert _check(p).ok
    os.truncate(p, p.stat().st_size - 3)
    fc = _check(p)
    assert not fc.ok and "3 bytes missing" in (fc.problem or "")


@pytest.mark.parametrize("cut,needle", [(0, "too short"), (5, "too short"), (8, "header length field says"),
                                        (40, "header length field says"), (None, "header says")])
def test_short_safetensors(tmp_path: Path, cut: int | None, needle: str) -> None:
    p = write_safetensors(tmp_path / "m.safetensors", {"w": ["F32", [1000, 1000]]})
    header_end = 8 + struct.unpack("<Q", p.read_bytes()[:8])[0]
    os.truncate(p, cut if cut is not None else header_end + 1000)
    fc = _check(p)
    assert not fc.ok and needle in (fc.problem or "")


def test_header_says_gb_file_has_less(tmp_path: Path) -> None:
    p = write_safetensors(tmp_path / "m.safetensors", {"w": ["F32", [525_000_000]]}, truncate_to=400_000_000)
    fc = _check(p)
    assert fc.problem is not None and "header says 2.1 GB of tensors, file has 0.4 GB" in fc.problem


def test_absurd_header_length_and_sparse_terabyte(tmp_path: Path) -> None:
    p = tmp_path / "huge.safetensors"
    with open(p, "wb") as fh:
        fh.write(struct.pack("<Q", 2**63))
    os.truncate(p, 10**12)  # sparse 1 TB
    fc, read = bytes_read_while(lambda: _check(p))
    assert read < 1 << 20, f"{read:,} bytes read"  # the length field, never the terabyte
    assert not fc.ok and "header length field says 9223372036854775808" in (fc.problem or "")
    # a tiny valid-looking header in a 1 TB file: tensors end long before the file does
    p2 = write_safetensors(tmp_path / "tb.safetensors", {"w": ["F32", [4]]})
    os.truncate(p2, 10**12)
    fc2 = _check(p2)
    assert not fc2.ok and "after the last tensor" in (fc2.problem or "")


@pytest.mark.parametrize("header,needle", [
    (b"not json", "not valid JSON"),
    (b"[1,2]", "not a JSON object"),
    (b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}}', "bad data_offsets"),
    (b'{"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}', "needs 12 bytes"),
    (b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, '
     b'"v": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}', "overlaps"),
    (b'{"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}', "bad shape"),
])
def test_bad_headers(header: bytes, needle: str) -> None:
    fc = check_header_bytes("x", 8 + len(header) + 16, header)
    assert not fc.ok and needle in (fc.problem or "")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200), st.integers(0, 2**64 - 1))
def test_no_byte_string_crashes_the_header_check(tmp_path: Path, blob: bytes, length: int) -> None:
    p = tmp_path / "f.safetensors"
    p.write_bytes(blob)
    assert _check(p).format == "safetensors"
    p.write_bytes(struct.pack("<Q", length) + blob)
    assert isinstance(_check(p).ok, bool)
    p.write_bytes(struct.pack("<Q", len(blob)) + blob)
    assert isinstance(_check(p).ok, bool)


def _zip_check(p: Path):
    fd = os.open(p, os.O_RDONLY)
    try:
        return check_torch_file(p.name, str(p), fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def test_zip_checks(tmp_path: Path) -> None:
    good = write_zip(tmp_path / "optimizer.pt", torch_like_zip_entries())
    fc = _zip_check(good)
    assert fc.ok and fc.format == "zip" and fc.entries == 4
    data = good.read_bytes()
    for cut in (len(data) - 1, len(data) - 30, len(data) // 2, 10):
        (tmp_path / "cut.pt").write_bytes(data[:cut])
        fc = _zip_check(tmp_path / "cut.pt")
        assert not fc.ok and "central directory" in (fc.problem or ""), cut
    (tmp_path / "empty.pt").write_bytes(b"")
    assert "empty" in (_zip_check(tmp_path / "empty.pt").problem or "")
    (tmp_path / "legacy.bin").write_bytes(b"\x80\x02}q\x00.")
    legacy = _zip_check(tmp_path / "legacy.bin")
    assert legacy.ok and legacy.format == "pickle" and "not inspected" in (legacy.note or "")


def test_malicious_pickle_is_never_loaded(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = b"\x80\x02cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."  # would run os.system
    for name in ("optimizer.pt", "training_args.bin", "rng_state.pth"):
        write_zip(tmp_path / "checkpoint-1" / name, {"archive/data.pkl": payload})
    (tmp_path / "legacy.pt").write_bytes(payload)
    cps = _find(tmp_path)
    assert not marker.exists()
    assert any(f.path.endswith("legacy.pt") and f.format == "pickle" for c in cps.values() for f in c.files)


def test_hf_complete_and_partial_dirs(tmp_path: Path) -> None:
    _hf_dir(tmp_path, 100)
    _hf_dir(tmp_path, 200, skip=("trainer_state.json", "rng_state.pth", "scheduler.pt"))
    d3 = _hf_dir(tmp_path, 300)
    write_safetensors(d3 / "model.safetensors", TENSORS, truncate_to=60)
    _hf_dir(tmp_path, 400, skip=("model.safetensors",))
    cps = _find(tmp_path)
    assert cps["checkpoint-100"].valid and cps["checkpoint-100"].layout == "hf" and cps["checkpoint-100"].step == 100
    assert set(cps["checkpoint-200"].missing) == {"trainer_state.json", "rng_state.pth", "scheduler.pt"}
    c3 = cps["checkpoint-300"]
    assert not c3.valid and c3.problems[0].startswith("model.safetensors: ")
    assert MISSING_WEIGHTS in cps["checkpoint-400"].missing
    assert cps["checkpoint-100"].bytes == sum(f.size for f in cps["checkpoint-100"].files)


def test_sharded_index_missing_shard(tmp_path: Path) -> None:
    d = _hf_dir(tmp_path, 5, skip=("model.safetensors",))
    write_safetensors(d / "model-00001-of-00002.safetensors", {"a": ["F32", [2]]})
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    c = _find(tmp_path)["checkpoint-5"]
    assert not c.valid and not c.missing
    assert any("model-00002-of-00002.safetensors" in p for p in c.problems)
    # outside a checkpoint dir: a "sharded" checkpoint of its own
    out = tmp_path / "final"
    write_safetensors(out / "model-00001-of-00002.safetensors", {"a": ["F32", [2]]})
    write_safetensors(out / "model-00002-of-00002.safetensors", {"b": ["F32", [2]]})
    (out / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    s = _find(tmp_path)["final/model.safetensors.index.json"]
    assert s.layout == "sharded" and s.valid and len(s.files) == 3


def test_nanochat_sets(tmp_path: Path) -> None:
    ck = tmp_path / "base_checkpoints" / "d20"
    ck.mkdir(parents=True)
    for step in ("000250", "000500"):
        write_zip(ck / f"model_{step}.pt", torch_like_zip_entries())
        write_zip(ck / f"optim_{step}_rank0.pt", torch_like_zip_entries())
    (ck / "meta_000250.json").write_text('{"step": 250}')
    cps = _find(tmp_path)
    a, b = cps["base_checkpoints/d20/model_000250"], cps["base_checkpoints/d20/model_000500"]
    assert a.layout == "nanochat" and a.step == 250 and a.valid and len(a.files) == 3
    assert b.missing == ("meta_000500.json",) and not b.valid


def test_loose_files_and_steps(tmp_path: Path) -> None:
    write_zip(tmp_path / "ckpts" / "step_1000.pt", torch_like_zip_entries())
    write_zip(tmp_path / "lightning" / "epoch=3-step=1200.ckpt", torch_like_zip_entries())
    (tmp_path / "ckpts" / "step_2000.pt").write_bytes(b"PK\x03\x04" + b"\0" * 100)  # cut mid-save
    cps = _find(tmp_path)
    assert cps["ckpts/step_1000.pt"].step == 1000 and cps["ckpts/step_1000.pt"].valid
    assert cps["lightning/epoch=3-step=1200.ckpt"].step == 1200
    bad = cps["ckpts/step_2000.pt"]
    assert not bad.valid and "central directory" in bad.problems[0]


def test_in_progress_only_when_fresh_and_partial(tmp_path: Path) -> None:
    _hf_dir(tmp_path, 10, skip=("trainer_state.json",))
    _hf_dir(tmp_path, 20)
    now = time.time()
    fresh = _find(tmp_path, now=now)
    assert fresh["checkpoint-10"].in_progress and not fresh["checkpoint-20"].in_progress
    assert not _find(tmp_path, now=now + 3600)["checkpoint-10"].in_progress


def test_constant_time_per_file(tmp_path: Path) -> None:
    for i in range(20):
        write_safetensors(tmp_path / f"big{i}" / "model.safetensors", {"w": ["F32", [25_000_000_000]]})  # 100 GB sparse
    arts = discover(tmp_path).artifacts
    cps, read = bytes_read_while(lambda: find_checkpoints(tmp_path, arts, now=LATER, in_progress_seconds=120))
    assert read < 20 * (1 << 16), f"{read:,} bytes read"  # headers only: a constant per file, not per tensor byte
    assert len(cps) == 20 and all(c.valid for c in cps) and sum(c.bytes for c in cps) > 2 * 10**12


def test_deepspeed_latest_naming_a_missing_directory(tmp_path: Path) -> None:
    from autopsy.discover import discover

    good = tmp_path / "out" / "checkpoint-200"
    (good / "global_step200").mkdir(parents=True)
    (good / "latest").write_text("global_step200")
    write_zip(good / "global_step200" / "mp_rank_00_model_states.pt", torch_like_zip_entries())
    write_zip(good / "global_step200" / "zero_pp_rank_0_mp_rank_00_optim_states.pt", torch_like_zip_entries())
    bad = tmp_path / "out" / "checkpoint-240"
    bad.mkdir(parents=True)
    (bad / "latest").write_text("global_step240")
    for cp in (good, bad):
        write_safetensors(cp / "model.safetensors", {"w": ["F32", [4, 4]]})
        (cp / "trainer_state.json").write_text("{}")
        write_zip(cp / "scheduler.pt", torch_like_zip_entries())
        write_zip(cp / "rng_state.pth", torch_like_zip_entries())
    cps = {c.path: c for c in find_checkpoints(tmp_path, discover(tmp_path).artifacts, now=2e9,
                                               in_progress_seconds=120)}
    assert cps["out/checkpoint-200"].valid, cps["out/checkpoint-200"]
    bad_cp = cps["out/checkpoint-240"]
    assert not bad_cp.valid and "optimizer.pt" not in bad_cp.missing
    assert any("global_step240/" in p for p in bad_cp.problems)
