"""Issue 14, parsers: hostile numbers and shapes are bounded at the parser, reported as damage.

Each test is a reproduction from the issue, scaled down where the original was large:
safetensors headers that never returned (a 500,000-dimension shape, 4,000-digit and
near-2^64 offsets, too many tensors, deep brackets), numbers that crashed rules
(``1e999999`` and huge integers in trainer_state.json, a 5,000-digit config integer,
``max_steps: .inf``, ``checkpoint-99999999999999999999``), a zip64 end record that claims a
6 GB central directory, pathological launch scripts and a YAML manifest of many keys.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import zipfile
from pathlib import Path

import pytest
from conftest import RUNS

import autopsy
from autopsy.model import ArtifactKind, ParseStatus
from autopsy.parsers import safetensors_header as st
from autopsy.parsers.configs import read_config
from autopsy.parsers.launch_script import parse_launch_script
from autopsy.parsers.numbers import INT_MAX, bounded_float, bounded_int
from autopsy.parsers.zipcheck import check_torch_file


def _header(tensors: dict[str, object]) -> bytes:
    return json.dumps(tensors).encode()


# ------------------------------------------------------------------ safetensors


@pytest.mark.parametrize(("info", "words"), [
    ({"dtype": "F32", "shape": [1000] * 500_000, "data_offsets": [0, 4]}, "at most 64 dimensions"),
    ({"dtype": "F32", "shape": [1000] * 60, "data_offsets": [0, 4]}, "or more bytes"),
    ({"dtype": "F32", "shape": [1], "data_offsets": [0, 10**4000]}, "bad data_offsets"),
    ({"dtype": "F32", "shape": [1], "data_offsets": [2**64 - 8, 2**64 - 4]}, "bad data_offsets"),
    ({"dtype": "F32", "shape": [2**64], "data_offsets": [0, 4]}, "bad shape"),
])
def test_a_hostile_safetensors_header_is_damage_not_a_hang(info: dict[str, object], words: str) -> None:
    res = st.check_header_bytes("m.safetensors", 2**64 - 1, _header({"w": info}))
    assert not res.ok
    assert words in (res.problem or "")
    assert len(res.problem or "") < 300  # the shape or the number is described, not printed whole


def test_too_many_tensors_are_refused_before_any_arithmetic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(st, "MAX_TENSORS", 1000)
    # one key more than the cap plus __metadata__
    tensors = {f"t{i}": {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(1002)}
    res = st.check_header_bytes("m.safetensors", 10**6, _header(tensors))
    assert not res.ok and "more than 1,000" in (res.problem or "")


def test_deeply_nested_brackets_in_a_header_are_invalid_json(tmp_path: Path) -> None:
    raw = b'{"w": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    res = st.check_header_bytes("m.safetensors", len(raw) + 8, raw)
    assert not res.ok and "not valid JSON" in (res.problem or "")


def test_human_bytes_takes_any_integer() -> None:
    assert st.human_bytes(2**64).endswith("PB")
    assert st.human_bytes(10**4000).startswith("more than") or "10^" in st.human_bytes(10**4000)
    assert "10^400" in st.human_bytes(10**400)
    assert st.human_bytes(5, 10**400) == "5 B"


# ------------------------------------------------------------------ zip64 claims


def test_a_zip64_claim_of_a_6_gb_central_directory_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "pytorch_model.bin"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", b"x" * 100)
    size = 6 * 2**30  # sparse: no disk used
    with open(path, "r+b") as fh:
        fh.truncate(size)
        eocd64 = size - 200
        fh.seek(eocd64)
        fh.write(struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, 1, 1, size - 1000, 100))
        fh.write(struct.pack("<4sLQL", b"PK\x06\x07", 0, eocd64, 1))
        fh.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0))
        fh.truncate(fh.tell())
    fd = os.open(path, os.O_RDONLY)
    try:
        import tracemalloc

        tracemalloc.start()
        res = check_torch_file("pytorch_model.bin", str(path), fd, os.fstat(fd).st_size)
        _cur, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    finally:
        os.close(fd)
    assert not res.ok and "central directory" in (res.problem or "")
    assert peak < 2**20


def test_a_real_zip_still_passes(tmp_path: Path) -> None:
    path = tmp_path / "pytorch_model.bin"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", b"x" * 100)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert check_torch_file("pytorch_model.bin", str(path), fd, path.stat().st_size).ok
    finally:
        os.close(fd)


# ------------------------------------------------------------------ numbers


@pytest.mark.parametrize(("raw", "want"), [
    (5, 5), (2**63 - 1, INT_MAX), (2**63, None), (-(2**70), None), (1e999999, None), (float("nan"), None),
    (3.0, 3), (3.5, None), ("42", 42), ("9" * 5000, None), ("1e3", 1000), (True, None), ("x", None),
])
def test_bounded_int(raw: object, want: int | None) -> None:
    assert bounded_int(raw) == want


def test_bounded_float() -> None:
    assert bounded_float(10**400) is None  # float() would raise OverflowError
    assert bounded_float(float("inf")) == float("inf")  # a value: a NaN/inf loss is a finding
    assert bounded_float(float("inf"), allow_nonfinite=False) is None
    assert bounded_float("1e-4") == 1e-4


def _run_with(tmp_path: Path, name: str = "run") -> Path:
    dest = tmp_path / name
    shutil.copytree(RUNS / "nan_loss", dest)
    return dest


def _no_rule_errors(run: Path) -> autopsy.Report:
    report = autopsy.analyze(str(run))
    errors = [(o.rule, o.reason) for o in report.outcomes if o.kind.value == "rule_error"]
    assert not errors, errors
    return report


def test_huge_numbers_in_trainer_state_are_out_of_range_not_rule_errors(tmp_path: Path) -> None:
    run = _run_with(tmp_path)
    state = {"global_step": 10**400, "max_steps": 1e999999, "epoch": 1e999999, "save_steps": -(10**30),
             "log_history": [{"step": 10**30, "loss": 10**400}, {"step": 5, "loss": 1e999999},
                             {"step": 6, "loss": 2.5}]}
    (run / "trainer_state.json").write_text(json.dumps(state).replace("Infinity", "1e999999"))
    report = _no_rule_errors(run)
    assert report.run is not None


@pytest.mark.parametrize(("name", "text"), [
    ("config.yaml", "max_steps: .inf\nlearning_rate: 1e999999\nseed: " + "9" * 5000 + "\n"),
    ("config.toml", "max_steps = " + "9" * 5000 + "\n"),
    ("config.json", '{"max_steps": 1e999999, "save_steps": ' + "9" * 400 + "}"),
    ("run.sh", "python train.py --max_steps " + "9" * 5000 + " --learning_rate 1e999999\n"),
])
def test_out_of_range_config_numbers_are_notes_not_rule_errors(tmp_path: Path, name: str, text: str) -> None:
    run = _run_with(tmp_path)
    (run / name).write_text(text)
    _no_rule_errors(run)
    loaded = autopsy.load_run(str(run))
    assert loaded.max_steps is None or 0 < loaded.max_steps <= INT_MAX


def test_config_reader_names_the_values_out_of_range(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("max_steps: .inf\nwarmup_steps: 10\n")
    res = read_config(path, "config.yaml", ArtifactKind.CONFIG, None)
    values = {e.key: e.value for e in res.value}
    assert values["max_steps"] is None and values["warmup_steps"] == 10
    assert res.note is not None and "out of range" in res.note and "max_steps" in res.note


def test_a_checkpoint_named_with_a_huge_step_is_not_a_rule_error(tmp_path: Path) -> None:
    run = _run_with(tmp_path)
    # (an optimizer file beside the state: a checkpoint-N/ holding trainer_state.json alone is a copy of the
    # state, not a checkpoint, and is not listed)
    ck = run / "checkpoint-99999999999999999999"
    ck.mkdir()
    (ck / "trainer_state.json").write_text('{"global_step": 5}')
    (ck / "optimizer.pt").write_bytes(b"PK\x03\x04" + bytes(60))
    (run / "checkpoint-10").mkdir()
    (run / "checkpoint-10" / "trainer_state.json").write_text('{"global_step": 10}')
    (run / "checkpoint-10" / "optimizer.pt").write_bytes(b"PK\x03\x04" + bytes(60))
    _no_rule_errors(run)
    loaded = autopsy.load_run(str(run))
    huge = [c for c in loaded.checkpoint_list if c.path.endswith("99999999999999999999")]
    assert huge and huge[0].step is None and any("out of range" in p for p in huge[0].problems)


# ------------------------------------------------------------------ launch scripts and YAML


@pytest.mark.parametrize("text", [
    "python train.py --a 1\n" * 100_000,  # hundreds of thousands of lines (scaled)
    "python train.py \\\n" * 200_000,  # continuations
    "python train.py " + "--x y " * 500_000,  # one 3 MB line
    ("python train.py \"" * 5_000 + "\n") * 100,  # long runs of unbalanced quotes
    "#SBATCH --time 1" + " a" * 200_000,
])
def test_a_pathological_launch_script_is_parsed_within_bounds(tmp_path: Path, text: str) -> None:
    path = tmp_path / "run.sh"
    path.write_text(text)
    res = read_config(path, "run.sh", ArtifactKind.LAUNCH_SCRIPT, None)
    assert len(res.value) < 5000
    if len(text) > 64 * 1024:
        assert res.status is ParseStatus.TRUNCATED and "read only the first" in (res.note or "")


def test_a_launch_script_still_reads_its_flags() -> None:
    entries = parse_launch_script("#!/bin/bash\nexport X=1\ntorchrun --nproc_per_node 8 train.py \\\n  --lr 3e-4\n",
                                  "run.sh")
    got = {e.raw_key: e.value for e in entries}
    assert got.get("--lr") == 3e-4 and got.get("--nproc_per_node") == 8


def test_a_large_yaml_manifest_is_data_not_configuration(tmp_path: Path) -> None:
    big = tmp_path / "manifest.yaml"
    big.write_text("".join(f"key_{i}: {i}\n" for i in range(120_000)))  # 1.6 MB (the was 11 MB)
    res = read_config(big, "manifest.yaml", ArtifactKind.CONFIG, None)
    assert res.status is ParseStatus.SKIPPED and "data file" in (res.note or "")
    dense = tmp_path / "dense.yaml"
    dense.write_text("".join(f"k{i}: {i}\n" for i in range(25_000)))  # under 1 MB, over the node cap
    res = read_config(dense, "dense.yaml", ArtifactKind.CONFIG, None)
    assert res.status is ParseStatus.SKIPPED and "YAML nodes" in (res.note or "")


# ------------------------------------------------------------------ inputs swapped after the walk


def _swap(path: Path, to: str, secret: Path) -> None:
    path.unlink()
    if to == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(secret)


@pytest.mark.parametrize("to", ["fifo", "symlink"])
def test_a_file_swapped_after_the_walk_is_not_waited_on_nor_followed(tmp_path: Path, to: str) -> None:
    """Issue 14: a regular file at walk time becomes a FIFO (the open blocked forever) or a link
    to a secret outside the run (the open followed it) while autopsy reads another file."""
    from autopsy.parsers.logs import compile_patterns, scan_log
    from autopsy.parsers.trainer_state import read_trainer_state

    secret = tmp_path / "secret.txt"
    secret.write_text('{"global_step": 7, "password": "hunter2"}\nmax_steps: 3\n')
    run = tmp_path / "run"
    run.mkdir()
    for name in ("config.yaml", "trainer_state.json", "train.log", "run.sh"):
        (run / name).write_text("x: 1\n")
        _swap(run / name, to, secret)
    for name, kind in (("config.yaml", ArtifactKind.CONFIG), ("run.sh", ArtifactKind.LAUNCH_SCRIPT)):
        res = read_config(run / name, name, kind, None)
        assert res.status is ParseStatus.UNREADABLE and not res.value, (name, res)
    ts = read_trainer_state(run / "trainer_state.json", "trainer_state.json")
    assert ts.status is ParseStatus.UNREADABLE and ts.value is None
    scan = scan_log(run / "train.log", "train.log", compile_patterns([]), max_bytes=1 << 20, rank=None)
    assert scan.status is ParseStatus.UNREADABLE and scan.bytes_read == 0
