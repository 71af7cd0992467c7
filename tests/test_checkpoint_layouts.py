"""Checkpoints judged against their own framework's layout (never another framework's files).

Files are built in code with the layouts each framework writes (names from accelerate's
constants, DeepSpeed's and DCP's writers); the torch files are zips built by
``torch_like_zip_entries`` with a ``data.pkl`` written by :mod:`pickle` (never read back
as objects: autopsy only walks its opcodes). fixtures/runs/ holds the same layouts as the
real frameworks wrote them.
"""

from __future__ import annotations

import json
import pickle
import struct
from pathlib import Path

import pytest
from builders import torch_like_zip_entries, write_safetensors, write_zip

from autopsy.discover import discover
from autopsy.parsers.checkpoint_formats import HDF5_SIGNATURE, check_hdf5, pickle_facts
from autopsy.parsers.checkpoints import find_checkpoints
from autopsy.parsers.types import Checkpoint

TENSORS = {"w": ["F32", [4, 4]]}
LATER = 10**10


def _find(root: Path) -> dict[str, Checkpoint]:
    arts = discover(root).artifacts
    return {c.path: c for c in find_checkpoints(root, arts, now=LATER, in_progress_seconds=120)}


def _torch_file(path: Path, obj: object) -> None:
    entries = torch_like_zip_entries()
    entries["archive/data.pkl"] = pickle.dumps(obj, protocol=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_zip(path, entries)


def _pickle_file(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(obj, protocol=4))


def _accelerate_dir(d: Path, *, skip: tuple[str, ...] = (), procs: int = 1) -> None:
    d.mkdir(parents=True)
    if "model.safetensors" not in skip:
        write_safetensors(d / "model.safetensors", TENSORS)
    for name in ("optimizer.bin", "scheduler.bin"):
        if name not in skip:
            _torch_file(d / name, {"state": {}})
    for i in range(procs):
        if f"random_states_{i}.pkl" not in skip:
            _pickle_file(d / f"random_states_{i}.pkl", {"step": 0, "random_state": (3, (1, 2), None)})


def test_clean_accelerate_save_state_is_valid_and_not_hf(tmp_path: Path) -> None:
    for i in range(2):
        _accelerate_dir(tmp_path / "checkpoints" / f"checkpoint_{i}")
    cps = _find(tmp_path)
    assert {c.layout for c in cps.values()} == {"accelerate"}
    assert all(c.valid for c in cps.values()), [c.missing for c in cps.values()]


def test_accelerate_cut_before_random_states(tmp_path: Path) -> None:
    _accelerate_dir(tmp_path / "checkpoints" / "checkpoint_0")
    _accelerate_dir(tmp_path / "checkpoints" / "checkpoint_1", skip=("random_states_0.pkl", "scheduler.bin"))
    cps = _find(tmp_path)
    bad = cps["checkpoints/checkpoint_1"]
    assert bad.layout == "accelerate" and not bad.valid
    assert bad.missing == ("scheduler.bin", "random_states_0.pkl")
    assert cps["checkpoints/checkpoint_0"].valid


def test_accelerate_cut_after_the_model_only_is_judged_by_its_siblings(tmp_path: Path) -> None:
    _accelerate_dir(tmp_path / "out" / "step_100")
    _accelerate_dir(tmp_path / "out" / "step_200", skip=("optimizer.bin", "scheduler.bin", "random_states_0.pkl"))
    cps = _find(tmp_path)
    assert cps["out/step_200"].layout == "accelerate" and cps["out/step_200"].step == 200
    assert "random_states_0.pkl" in cps["out/step_200"].missing and "optimizer.bin" in cps["out/step_200"].missing


def test_accelerate_truncated_rng_pickle(tmp_path: Path) -> None:
    _accelerate_dir(tmp_path / "ckpt" / "step_5")
    p = tmp_path / "ckpt" / "step_5" / "random_states_0.pkl"
    p.write_bytes(p.read_bytes()[:-3])
    cp = _find(tmp_path)["ckpt/step_5"]
    assert not cp.valid and "random_states_0.pkl: pickle stream without its final STOP opcode" in cp.problems[0]


def test_accelerate_multi_process_rng_states(tmp_path: Path) -> None:
    _accelerate_dir(tmp_path / "c" / "step_1", procs=2)
    _accelerate_dir(tmp_path / "c" / "step_2", procs=2, skip=("random_states_1.pkl",))
    cps = _find(tmp_path)
    assert cps["c/step_1"].valid and cps["c/step_2"].missing == ("random_states_1.pkl",)


def test_hf_checkpoint_dir_still_needs_trainer_state(tmp_path: Path) -> None:
    d = tmp_path / "checkpoint-10"
    d.mkdir()
    write_safetensors(d / "model.safetensors", TENSORS)
    _torch_file(d / "optimizer.pt", {})
    cp = _find(tmp_path)["checkpoint-10"]
    assert cp.layout == "hf" and "trainer_state.json" in cp.missing


def test_lightning_ckpt_step_from_its_pickle(tmp_path: Path) -> None:
    state = {"epoch": 3, "global_step": 120, "pytorch-lightning_version": "2.5.0", "state_dict": {},
             "optimizer_states": [], "lr_schedulers": []}
    _torch_file(tmp_path / "checkpoints" / "last.ckpt", state)
    _torch_file(tmp_path / "checkpoints" / "epoch=1-step=60.ckpt", dict(state, global_step=60))
    cps = _find(tmp_path)
    last = cps["checkpoints/last.ckpt"]
    assert last.layout == "lightning" and last.step == 120 and last.valid
    assert cps["checkpoints/epoch=1-step=60.ckpt"].step == 60


def test_lightning_ckpt_cut_short(tmp_path: Path) -> None:
    p = tmp_path / "epoch=0-step=10.ckpt"
    _torch_file(p, {"pytorch-lightning_version": "2.5.0", "global_step": 10})
    p.write_bytes(p.read_bytes()[:-40])
    cp = _find(tmp_path)["epoch=0-step=10.ckpt"]
    assert not cp.valid and "cut short" in cp.problems[0]


def test_nanogpt_ckpt_iter_num(tmp_path: Path) -> None:
    _torch_file(tmp_path / "out" / "ckpt.pt", {"model": {}, "optimizer": {}, "model_args": {"n_layer": 2},
                                               "iter_num": 250, "best_val_loss": 1.5, "config": {}})
    cp = _find(tmp_path)["out/ckpt.pt"]
    assert (cp.layout, cp.step, cp.valid) == ("nanogpt", 250, True)


def test_plain_torch_file_is_loose_and_unknown_groups_are_listed_as_such(tmp_path: Path) -> None:
    _torch_file(tmp_path / "a" / "weights.pt", {"w": 1})
    _torch_file(tmp_path / "b" / "encoder.pt", {"w": 1})
    _torch_file(tmp_path / "b" / "decoder.pt", {"w": 1})
    cps = _find(tmp_path)
    assert cps["a/weights.pt"].layout == "loose" and cps["a/weights.pt"].valid
    assert cps["b"].layout == "unknown" and cps["b"].valid and not cps["b"].missing


def test_deepspeed_global_step_dirs_and_latest(tmp_path: Path) -> None:
    for step in (100, 200):
        d = tmp_path / "ds" / f"global_step{step}"
        _torch_file(d / "mp_rank_00_model_states.pt", {"module": {}})
        if step == 100:
            _torch_file(d / "zero_pp_rank_0_mp_rank_00_optim_states.pt", {})
    (tmp_path / "ds" / "latest").write_text("global_step300")
    cps = _find(tmp_path)
    assert cps["ds/global_step100"].layout == "deepspeed" and cps["ds/global_step100"].valid
    assert not cps["ds/global_step200"].valid and "optim_states" in cps["ds/global_step200"].missing[0]
    assert "latest" in cps["ds/global_step300"].problems[0]


def test_torch_distributed_checkpoint(tmp_path: Path) -> None:
    good = tmp_path / "dcp" / "step_10"
    good.mkdir(parents=True)
    (good / "__0_0.distcp").write_bytes(b"\0" * 64)
    (good / "__1_0.distcp").write_bytes(b"\0" * 64)
    _pickle_file(good / ".metadata", {"storage": {"a": "__0_0.distcp", "b": "__1_0.distcp"}})
    cut = tmp_path / "dcp" / "step_20"
    cut.mkdir()
    (cut / "__0_0.distcp").write_bytes(b"\0" * 64)
    lost = tmp_path / "dcp" / "step_30"
    lost.mkdir()
    (lost / "__0_0.distcp").write_bytes(b"\0" * 64)
    _pickle_file(lost / ".metadata", {"storage": {"a": "__0_0.distcp", "b": "__1_0.distcp"}})
    cps = _find(tmp_path)
    assert cps["dcp/step_10"].layout == "dcp" and cps["dcp/step_10"].valid and cps["dcp/step_10"].step == 10
    assert cps["dcp/step_20"].missing and ".metadata" in cps["dcp/step_20"].missing[0]
    assert "__1_0.distcp" in cps["dcp/step_30"].problems[0]


def _h5(path: Path, size: int, eof: int) -> None:
    # superblock v0 with 8-byte offsets: signature, versions, sizes, K values, flags, then
    # base address, free-space address, end-of-file address, driver block address
    sb = HDF5_SIGNATURE + bytes([0, 0, 0, 0, 0, 8, 8, 0]) + struct.pack("<HHI", 4, 16, 0)
    sb += struct.pack("<QQQQ", 0, 2**64 - 1, eof, 2**64 - 1)
    path.write_bytes(sb + b"\0" * (size - len(sb)))


def test_keras_weights_h5_and_keras_archive(tmp_path: Path) -> None:
    _h5(tmp_path / "model.weights.h5", 4096, 4096)
    _h5(tmp_path / "ckpt_epoch_2.weights.h5", 1000, 4096)
    write_zip(tmp_path / "model_01.keras", {"metadata.json": "{}", "config.json": "{}", "model.weights.h5": "x"})
    write_zip(tmp_path / "model_02.keras", {"metadata.json": "{}", "config.json": "{}"})
    (tmp_path / "data.h5").write_bytes(HDF5_SIGNATURE + b"\0" * 100)  # a dataset, not a model
    cps = _find(tmp_path)
    assert cps["model.weights.h5"].layout == "keras" and cps["model.weights.h5"].valid
    assert "ends at byte 4096, file has 1000" in cps["ckpt_epoch_2.weights.h5"].problems[0]
    assert cps["model_01.keras"].valid and cps["model_01.keras"].layout == "keras"
    assert "lacks model.weights.h5" in cps["model_02.keras"].problems[0]
    assert "data.h5" not in cps


def test_hdf5_check_edges(tmp_path: Path) -> None:
    p = tmp_path / "x.h5"
    p.write_bytes(HDF5_SIGNATURE[:5])
    import os
    fd = os.open(p, os.O_RDONLY)
    try:
        assert "cut short" in (check_hdf5("x.h5", fd, 5).problem or "")
    finally:
        os.close(fd)


def test_pickle_facts_never_builds_objects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    class Boom:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (print, ("EXECUTED",))

    p = tmp_path / "evil.ckpt"
    _torch_file(p, {"global_step": 7, "pytorch-lightning_version": "2.0", "x": Boom()})
    facts = pickle_facts(str(p), frozenset({"global_step"}))
    assert facts.numbers == {"global_step": 7.0} and facts.problem is None
    assert "EXECUTED" not in capsys.readouterr().out  # the reduce call was never made


def test_json_index_of_hf_is_untouched(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "m-1.safetensors"}}))
    write_safetensors(tmp_path / "m-1.safetensors", TENSORS)
    assert _find(tmp_path)["model.safetensors.index.json"].layout == "sharded"
