"""autopsy never changes the evidence and never executes anything it reads.

* Every fixture run is analysed (every output format) with its files made read-only; a
  hash of every file (content, size, mtime) and the listing must be the same afterwards.
* A checkpoint whose ``optimizer.pt``, ``training_args.bin`` and ``rng_state.pth`` carry a
  malicious pickle (loading it would create a marker file) is listed and checked, and the
  marker never appears; any call into the unpickler fails the test.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import shutil
import stat
import zipfile
from pathlib import Path

import pytest
from conftest import RUNS

FORMATS = ("text", "md", "json", "sarif", "junit", "html")


def _snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else "-"
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns, digest)
    return out


def _make_read_only(root: Path) -> None:
    # (a symbolic link has no mode of its own on Linux: chmod would go to its target, which may be
    # outside the copy or absent, as W&B's debug-core.log -> ~/.cache/wandb/... is on a fresh machine)
    for dirpath, _dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            if not (Path(dirpath) / name).is_symlink():
                os.chmod(Path(dirpath) / name, 0o444)
        os.chmod(dirpath, 0o555)


def _make_writable(root: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            if not (Path(dirpath) / name).is_symlink():
                os.chmod(Path(dirpath) / name, 0o644)


def _fixture_runs() -> list[Path]:
    return sorted(p for p in RUNS.glob("*") if p.is_dir()) if RUNS.exists() else []


@pytest.mark.parametrize("run_dir", _fixture_runs(), ids=lambda p: p.name)
def test_analysis_leaves_the_run_untouched(run_dir: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from autopsy.cli import main

    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy, symlinks=True)
    _make_read_only(copy)
    before = _snapshot(copy)
    try:
        runner = CliRunner()
        for fmt in FORMATS:
            result = runner.invoke(main, ["analyze", str(copy), "--format", fmt])
            assert result.exit_code in (0, 1), f"{fmt}: {result.output}\n{result.exception!r}"
        after = _snapshot(copy)
    finally:
        _make_writable(copy)
    assert after == before


class _Marker:
    """Unpickling this runs ``open(path, "w")``: proof of execution if the file appears."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (open, (self.path, "w"))


def _torch_style_zip(payload: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("archive/data.pkl", payload)
        zf.writestr("archive/version", "3\n")
    return buf.getvalue()


def test_malicious_pickles_are_listed_not_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import autopsy

    marker = tmp_path / "PWNED"
    payload = pickle.dumps(_Marker(str(marker)))
    run = tmp_path / "run"
    ckpt = run / "checkpoint-10"
    ckpt.mkdir(parents=True)
    (ckpt / "optimizer.pt").write_bytes(_torch_style_zip(payload))
    (ckpt / "training_args.bin").write_bytes(_torch_style_zip(payload))
    (ckpt / "rng_state.pth").write_bytes(payload)  # a legacy (non-zip) pickle
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 10, "max_steps": 10, "log_history": []}))
    (run / "train.log").write_text("step 10 | loss 2.0\n")

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("autopsy tried to unpickle a file")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)

    report = autopsy.analyze(run)
    run_view = autopsy.load_run(run)
    listed = {a.path for a in report.artifacts}
    assert {"checkpoint-10/optimizer.pt", "checkpoint-10/training_args.bin", "checkpoint-10/rng_state.pth"} <= listed
    (cp,) = run_view.checkpoint_list
    checked = {f.path.rsplit("/", 1)[-1]: f for f in cp.files}
    assert checked["optimizer.pt"].format == "zip" and checked["optimizer.pt"].ok
    assert not marker.exists()
