"""Issue 14's hostile suite: every hostile case in every output format, with the same checks.

Each case is a small run built from one of the issue's reproductions. For every format the
CLI must: exit with a documented code (0-3) and without a traceback; print valid UTF-8 and,
for the machine formats, a document that parses (JSON, SARIF, JUnit XML, HTML); keep raw
control bytes out of text, Markdown and JUnit; leave the run directory unchanged; stay in
bounded memory (the analysis' peak RSS growth under 500 MB: every case is under 2 MB on disk,
the zip64 one being sparse); and write nothing outside the output the user named.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import RUNS
from text_checks import CONTROL

from autopsy.cli import main

FORMATS = ("text", "md", "json", "jsonl", "sarif", "junit", "html")


def _names(root: Path) -> None:
    bad = os.fsencode(root) + b"/weird\xff\x1b]52;c;eA==\x07.log"
    with open(bad, "wb") as fh:
        fh.write(b"RuntimeError: CUDA error: out of memory\n")


def _github(root: Path) -> None:
    log = root / "train.log"
    log.write_text(log.read_text() + "::set-env name=PWN::1\n##[add-mask]x\n\x1b]0;title\x07\n")


def _numbers(root: Path) -> None:
    (root / "trainer_state.json").write_text(
        '{"global_step": 1e999999, "max_steps": ' + "9" * 400 + ', "log_history": [{"step": '
        + "9" * 30 + ', "loss": 1e999999}, {"step": 2, "loss": ' + "9" * 400 + "}]}")
    (root / "config.yaml").write_text("max_steps: .inf\nseed: " + "9" * 5000 + "\n")
    (root / "checkpoint-99999999999999999999").mkdir()


def _headers(root: Path) -> None:
    ck = root / "checkpoint-5"
    ck.mkdir()
    header = json.dumps({"w": {"dtype": "F32", "shape": [1000] * 5000, "data_offsets": [0, 2**64 - 4]}}).encode()
    (ck / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 16)
    zp = ck / "optimizer.pt"
    zp.write_bytes(b"PK\x03\x04" + b"\0" * 100 + struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1,
                                                               0x7FFFFFFF, 0, 0))


def _scripts(root: Path) -> None:
    (root / "run.sh").write_text("python train.py " + '"' * 5000 + " \\\n" * 3000 + "--lr 1e999999\n")


def _zip64(root: Path) -> None:
    """A sparse 6 GB pytorch_model.bin whose zip64 end record claims a 6 GB central directory."""
    ck = root / "checkpoint-7"
    ck.mkdir()
    path = ck / "pytorch_model.bin"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", b"x" * 100)
    size = 6 * 2**30
    with open(path, "r+b") as fh:
        fh.truncate(size)
        eocd64 = size - 200
        fh.seek(eocd64)
        fh.write(struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, 1, 1, size - 1000, 100))
        fh.write(struct.pack("<4sLQL", b"PK\x06\x07", 0, eocd64, 1))
        fh.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0))
        fh.truncate(fh.tell())


def _configs(root: Path) -> None:
    """A YAML alias bomb, a dense YAML under the size cap, 5,000-digit TOML and YAML integers."""
    bomb = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    bomb += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    (root / "config.yaml").write_text("\n".join(bomb) + "\nmax_steps: .inf\n")
    (root / "dense.yaml").write_text("".join(f"k{i}: {i}\n" for i in range(25_000)))
    (root / "config.toml").write_text("max_steps = " + "9" * 5000 + "\nseed = -" + "9" * 5000 + "\n")


CASES: dict[str, Callable[[Path], None]] = {"names": _names, "github": _github, "numbers": _numbers,
                                            "headers": _headers, "scripts": _scripts, "zip64": _zip64,
                                            "configs": _configs}
MEMORY_BOUND = 500 * 2**20


def _rss_growth(fn: Callable[[], object]) -> tuple[object, int | None]:
    """(fn(), the growth of this process' peak RSS while it ran), or None where it cannot be read.

    Linux: the peak (VmHWM) is reset through /proc/self/clear_refs, so the figure is this call's."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return fn(), None

    def field(name: str) -> int:
        with open("/proc/self/status") as fh:
            return next(int(ln.split()[1]) * 1024 for ln in fh if ln.startswith(name + ":"))

    before = field("VmRSS")
    result = fn()
    return result, field("VmHWM") - before


def _snapshot(root: Path) -> dict[str, tuple[int, str]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if p.is_symlink() or not p.is_file():
                digest = "-"
            elif st.st_size > 16 * 2**20:  # the sparse zip64 file: not read whole, its inode and mtime say
                digest = f"{st.st_ino}:{st.st_mtime_ns}"
            else:
                digest = hashlib.sha256(p.read_bytes()).hexdigest()
            out[os.fsencode(p).hex()] = (st.st_size, digest)
    return out


class _Strict(HTMLParser):
    pass


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name, make in CASES.items():
        root = tmp_path_factory.mktemp(f"case-{name}") / "run"
        shutil.copytree(RUNS / "oom_host", root)
        make(root)
        out[name] = root
    return out


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_hostile_case_in_every_format(cases: dict[str, Path], case: str, fmt: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    run = cases[case]
    before = _snapshot(run)
    outdir = tmp_path / "out"
    outdir.mkdir()
    monkeypatch.chdir(outdir)  # stdout is the output; the cwd must stay empty
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": ""}
    res, grown = _rss_growth(lambda: CliRunner().invoke(main, ["analyze", str(run), "--format", fmt], env=env,
                                                        catch_exceptions=False))
    assert isinstance(res, Result)
    if grown is not None:
        assert grown < MEMORY_BOUND, f"peak RSS grew {grown / 2**20:.0f} MB"
    assert res.exit_code in (0, 1, 2, 3), res.exit_code
    assert res.exit_code != 3, res.stderr  # no internal error on any case
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    assert "\x1b" not in res.stderr and "\x07" not in res.stderr
    data = res.stdout_bytes
    text = data.decode("utf-8")  # strict
    if fmt in ("json", "sarif"):
        json.loads(text)
    elif fmt == "jsonl":
        for line in text.splitlines():
            json.loads(line)
    elif fmt == "junit":
        ET.fromstring(data)
    elif fmt == "html":
        _Strict().feed(text)
        assert "<html" in text.lower()
    if fmt in ("text", "md", "junit"):
        assert CONTROL.search(text) is None, repr(CONTROL.search(text))
    for line in text.splitlines():  # stdout under GitHub Actions: no workflow command from run text
        assert not line.lstrip().startswith("::") and "##[" not in line, line
    assert _snapshot(run) == before, "the run directory changed"
    assert list(outdir.iterdir()) == [], "something was written outside the output"
