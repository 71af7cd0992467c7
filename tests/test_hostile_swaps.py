"""Issue 14: files of a run swapped between the walk and the read, through every reader.

The run is listed first and read later. In between, an attacker (or an unlucky job) can
replace a regular file by a FIFO (a plain ``open`` blocks forever), by a symlink to a secret
outside the run (a plain ``open`` follows it), or replace a directory of the run by a symlink
to a directory outside it (``O_NOFOLLOW`` guards only the last component of a path).

The analysis runs in a child process (a thread blocked in ``open`` cannot be stopped); its
``timeout`` only guards the suite against the hang, it asserts nothing about speed. The child
records every ``open`` of a path inside the run through an audit hook, so a reader that
opens without ``O_NOFOLLOW | O_NONBLOCK`` fails here even when the fixture run happens not to
send a swapped file its way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, RUNS

# One run holding every reader's input: logs, trainer_state, configs, launch scripts, event
# files, CSV, W&B and MLflow stores, torch zips, safetensors, pickles, DeepSpeed/DCP layouts.
PARTS = ("nan_loss", "keras_nan", "wandb_eval_crash", "mlflow_nan", "lightning_nan", "accelerate_killed_mid_save",
         "nanogpt_killed_mid_save", "truncated_checkpoint")
SECRET = "hunter2-issue14-secret"

CHILD = r'''
import json, os, sys
from pathlib import Path

run, mode, outside, record = sys.argv[1:5]
run_real = os.path.realpath(run)
opens = []

def hook(event, args):
    if event == "open" and not isinstance(args[0], int) and args[0] is not None:
        name = os.fsdecode(args[0])
        p = os.path.abspath(name)
        if p.startswith(run_real + os.sep):
            opens.append((p[len(run_real) + 1:], args[2]))
        elif not os.path.isabs(name) and os.sep not in name and args[1] is None:
            opens.append(("<dir_fd>/" + name, args[2]))  # os.open(name, dir_fd=...): one component

sys.addaudithook(hook)
import autopsy.run as run_mod
real_discover = run_mod.discover

def walk_then_swap(root, limits=None):
    found = real_discover(root, limits)
    swapped = []
    for a in found.artifacts:
        p = Path(run_real) / a.path
        if mode == "dir":
            continue
        if not p.is_file() or p.is_symlink():
            continue
        p.unlink()
        if mode == "fifo":
            os.mkfifo(p)
        else:
            os.symlink(os.path.join(outside, "secret.txt"), p)
        swapped.append(a.path)
    if mode == "dir":
        dirs = sorted({a.path.split("/")[0] for a in found.artifacts if "/" in a.path})
        for d in dirs:
            os.rename(Path(run_real) / d, Path(run_real) / (d + ".moved"))
            os.symlink(os.path.join(outside, "mirror", d), Path(run_real) / d)
            swapped.append(d + "/")
    with open(record + ".swapped", "w") as fh:
        json.dump(swapped, fh)
    return found

run_mod.discover = walk_then_swap
from autopsy.cli import main
try:
    main(["analyze", run, "--format", "json"], standalone_mode=False)
    code = 0
except SystemExit as exc:
    code = exc.code
finally:
    with open(record, "w") as fh:
        json.dump(opens, fh)
sys.exit(code)
'''


def _composite(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for part in PARTS:
        shutil.copytree(RUNS / part, run / part, symlinks=True)
    return run


def _outside(tmp_path: Path, run: Path) -> Path:
    """A secret file, and a mirror of the run's top directories whose every file is that secret."""
    out = tmp_path / "outside"
    out.mkdir()
    text = f"RuntimeError: CUDA out of memory. {SECRET}\n"
    (out / "secret.txt").write_text(text)
    for path in run.rglob("*"):
        if path.is_file() and not path.is_symlink():
            dest = out / "mirror" / path.relative_to(run)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
    return out


@pytest.mark.parametrize("mode", ["fifo", "symlink", "dir"])
def test_every_file_swapped_after_the_walk_is_neither_waited_on_nor_followed(tmp_path: Path, mode: str) -> None:
    """fifo: every file of the run becomes a FIFO; symlink: every file becomes a link to a
    secret outside the run; dir: every top directory becomes a link to a directory outside
    the run holding the secret under every name the walk listed."""
    run = _composite(tmp_path)
    outside = _outside(tmp_path, run)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    record = tmp_path / "opens.json"
    proc = subprocess.run([sys.executable, str(script), str(run), mode, str(outside), str(record)],
                          capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          timeout=600)  # a hang guard only: a blocked open would never return
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode in (0, 1, 2), (proc.returncode, proc.stderr[-3000:])
    swapped = json.loads(Path(str(record) + ".swapped").read_text())
    assert len(swapped) >= (8 if mode == "dir" else 40), swapped  # the swap did happen, broadly
    assert SECRET not in proc.stdout and SECRET not in proc.stderr
    report = json.loads(proc.stdout)
    assert report["run"] is not None
    opens = json.loads(record.read_text())
    assert opens, "the audit hook saw no open inside the run: the test no longer watches the readers"
    assert any(rel.startswith("<dir_fd>/") for rel, _ in opens), "no file was opened from the run's root down"
    if mode == "dir":
        assert "on its path is a symbolic link" in proc.stdout  # refused and said so, per file
    careless = sorted({rel for rel, flags in opens
                       if not (flags & os.O_NOFOLLOW and flags & os.O_NONBLOCK)})
    assert not careless, f"opened without O_NOFOLLOW|O_NONBLOCK: {careless}"


def test_a_directory_swapped_for_a_link_is_refused_but_a_linked_root_is_read(tmp_path: Path) -> None:
    """The unit behind the ``dir`` case: below a registered root, no component is followed
    through a link; the root itself may be one (``runs/latest -> exp42``, as the user named it)."""
    from autopsy.parsers.safe_open import confine_to, read_regular

    real = tmp_path / "exp42"
    (real / "ckpt").mkdir(parents=True)
    (real / "ckpt" / "state.json").write_text("inside")
    secret = tmp_path / "elsewhere"
    secret.mkdir()
    (secret / "state.json").write_text(SECRET)
    latest = tmp_path / "latest"
    latest.symlink_to(real)
    confine_to(latest)
    assert read_regular(latest / "ckpt" / "state.json", 100) == b"inside"
    (real / "ckpt").rename(real / "ckpt.moved")
    (real / "ckpt").symlink_to(secret)
    with pytest.raises(OSError, match="on its path is a symbolic link"):
        read_regular(latest / "ckpt" / "state.json", 100)
    assert read_regular(secret / "state.json", 100) == SECRET.encode()  # outside any root: an ordinary read


def test_files_of_one_directory_share_one_walk_and_a_new_run_walks_again(tmp_path: Path, monkeypatch) -> None:
    """The kept directory descriptor: reading many files of one directory walks from the root
    once (a run of 10,000 small files paid three extra opens per file), and registering a run
    again (a new analysis) drops it, so a directory deleted and re-created is read afresh."""
    from autopsy.parsers import safe_open
    from autopsy.parsers.safe_open import confine_to, read_regular

    run = tmp_path / "run"
    (run / "eval" / "samples").mkdir(parents=True)
    for i in range(20):
        (run / "eval" / "samples" / f"s{i}.json").write_text(f"{i}")
    confine_to(run)
    opened: list[object] = []
    real_open = os.open

    def counting_open(path, flags, mode=0o777, *, dir_fd=None):  # type: ignore[no-untyped-def]
        opened.append(path)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(safe_open.os, "open", counting_open)
    assert [read_regular(run / "eval" / "samples" / f"s{i}.json", 10) for i in range(20)] == \
        [str(i).encode() for i in range(20)]
    assert len(opened) == 20 + 3  # one open per file, plus root, eval, samples once
    shutil.rmtree(run / "eval")
    (run / "eval" / "samples").mkdir(parents=True)
    (run / "eval" / "samples" / "s0.json").write_text("new")
    confine_to(run)
    assert read_regular(run / "eval" / "samples" / "s0.json", 10) == b"new"
