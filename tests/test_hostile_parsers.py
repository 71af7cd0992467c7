"""Every parser survives hostile bytes: random input, real artifacts cut at many offsets, deep JSON.

The contract (issue 7, "never crash"): a parser returns a status and a note, keeps what it
read before the damage, and raises nothing. Each property test here uses inputs made to
break naive parsers; the truncation tests use the real fixture artifacts, so the shapes
are the ones real writers produce.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import RUNS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autopsy.model import ArtifactKind, ParseStatus
from autopsy.parsers.configs import read_config
from autopsy.parsers.logs import compile_patterns, scan_log
from autopsy.parsers.safetensors_header import check_header_bytes, check_safetensors
from autopsy.parsers.tensorboard import read_scalars
from autopsy.parsers.trainer_state import read_trainer_state
from autopsy.parsers.types import FileCheck, LogScan, Parsed, PatternSpec
from autopsy.parsers.zipcheck import check_torch_file

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STATUSES = set(ParseStatus)
PATTERNS = compile_patterns([
    PatternSpec("t/oom", r"CUDA out of memory\. Tried to allocate (?P<n>\d+)", ("CUDA out of memory",)),
    PatternSpec("t/err", r"(?P<kind>\w+Error): (?P<msg>.*)", ("Error: ",)),
])


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="autopsy-hostile-") as tmp:
        yield Path(tmp)


def _write(scratch: Path, name: str, data: bytes) -> Path:
    path = scratch / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _scan(path: Path, rel: str = "train.log", max_bytes: int = 1 << 40) -> LogScan:
    return scan_log(path, rel, PATTERNS, max_bytes=max_bytes, rank=None)


def _config(path: Path, rel: str, detail: str | None = None,
            kind: ArtifactKind = ArtifactKind.CONFIG) -> Parsed:
    parsed = read_config(path, rel, kind, detail)
    assert parsed.status in STATUSES
    assert isinstance(parsed.value, list)
    return parsed


# Bytes that are hostile to each format: framing bytes, quotes, escapes, NUL, CR, ESC, BOMs.
_HOSTILE_ALPHABET = [b"\x00", b"\n", b"\r", b"\x1b[31m", b"\x1b]0;x\x07", b"{'", b"'loss': ", b"nan", b"inf",
                     b"Traceback (most recent call last)\n", b'  File "x.py", line 1, in f\n', b"Error: ",
                     b"step ", b"/", b"|", b"it/s]", b"\xff\xfe", b"\xef\xbb\xbf", b"\xc3", b"\x80", b"9" * 30,
                     b"[rank3]: ", b"Failures:\n", b"Root Cause", b"During handling of the above exception",
                     b"CUDA out of memory. Tried to allocate 99", b" " * 7, b"\t"]
hostile_text = st.lists(st.sampled_from(_HOSTILE_ALPHABET) | st.binary(max_size=40), max_size=60).map(b"".join)


# ------------------------------------------------------------------------------- logs


@FAST
@given(data=st.binary(max_size=4096) | hostile_text)
def test_log_scanner_never_raises(scratch: Path, data: bytes) -> None:
    path = _write(scratch, "rand/train.log", data)
    scan = _scan(path)
    assert scan.status in (ParseStatus.OK, ParseStatus.TRUNCATED)
    assert scan.bytes_read == len(data)
    if "UTF-16" not in (scan.note or ""):
        # Raw newline bytes bound the line count only for byte-oriented text: a UTF-16 log's
        # b"\n\n" after a BOM is one code unit, not two lines.
        assert scan.n_lines >= data.count(b"\n")
    assert 0.0 <= scan.binary_fraction <= 1.0
    for hits in scan.hits.values():
        assert all(1 <= h.lineno <= max(scan.n_lines, 1) for h in hits.all_kept())


@FAST
@given(data=hostile_text, limit=st.integers(min_value=0, max_value=300))
def test_log_max_bytes_is_respected_and_reported(scratch: Path, data: bytes, limit: int) -> None:
    path = _write(scratch, "limit/train.log", data)
    scan = _scan(path, max_bytes=limit)
    assert scan.bytes_read <= limit
    if len(data) > limit:
        assert scan.status is ParseStatus.TRUNCATED
        assert scan.note and f"of {len(data):,}" in scan.note


_LOG_SAMPLE = (
    "step 10 | loss 2.5000\n"
    "{'loss': 2.25, 'grad_norm': 1.5, 'learning_rate': 0.0001, 'epoch': 0.5}\n"
    "Traceback (most recent call last):\n"
    '  File "train.py", line 12, in <module>\n'
    "    main()\n"
    "RuntimeError: CUDA out of memory. Tried to allocate 20 MiB (café ✓)\n"
)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_utf16_logs_are_read_as_text(scratch: Path, encoding: str) -> None:
    path = _write(scratch, f"enc/{encoding}.log", _LOG_SAMPLE.encode(encoding))
    scan = _scan(path)
    assert scan.status is ParseStatus.OK, scan.note
    assert [(t.exc_type, t.line_start) for t in scan.tracebacks] == [("RuntimeError", 3)]
    assert "café ✓" in scan.tracebacks[0].message
    assert scan.hits["t/oom"].count == 1
    assert {p.tag for p in scan.series} >= {"loss", "grad_norm", "learning_rate"}


def test_latin1_and_invalid_utf8_survive(scratch: Path) -> None:
    data = (_LOG_SAMPLE.replace("café ✓", "caf\udce9").encode("utf-8", "surrogateescape")
            + b"garbage \xff\xfe\xc3( \x00\x00 line\n" + b"RuntimeError: after junk \xe9\n")
    scan = _scan(_write(scratch, "enc/latin1.log", data))
    assert scan.status is ParseStatus.OK
    assert scan.tracebacks and scan.tracebacks[0].exc_type == "RuntimeError"
    assert "caf" in scan.tracebacks[0].message
    assert scan.hits["t/err"].count == 2  # the line after the junk is still matched
    assert scan.binary_fraction > 0
    assert scan.n_lines == data.count(b"\n")


def test_mixed_encodings_in_one_file(scratch: Path) -> None:
    """A log appended to by a UTF-8 and a cp1252 process, with a UTF-16 fragment in the middle."""
    data = (b"step 1 | loss 3.0\n" + "step 2 | loss 2.9 – ü\n".encode("cp1252")
            + "step 3 | loss 2.8\n".encode("utf-16-le") + b"\nstep 4 | loss 2.7\n")
    scan = _scan(_write(scratch, "enc/mixed.log", data))
    assert scan.status is ParseStatus.OK
    steps = {p.step for p in scan.series if p.tag == "loss"}
    assert {1, 2, 4} <= steps


# ----------------------------------------------------------------------- event files


@FAST
@given(data=st.binary(max_size=2048))
def test_event_reader_never_raises_on_random_bytes(scratch: Path, data: bytes) -> None:
    parsed = read_scalars(_write(scratch, "rand/events.out.tfevents.1.h", data), max_bytes=1 << 30)
    assert parsed.status in STATUSES
    assert parsed.value is None or list(parsed.value.columns) == ["tag", "step", "wall_time", "value"]


def _fixture_files(pattern: str) -> list[Path]:
    return sorted(p for p in RUNS.glob(f"*/**/{pattern}") if p.is_file() and p.stat().st_size > 0)


def _offsets(size: int, n: int = 24) -> list[int]:
    """Cut points: the first bytes, every n-th of the file, and just before the end."""
    cuts = {0, 1, 7, 8, 9, 11, 12, 13, 15, 16, 17, size - 1, size - 2, size - 5}
    cuts.update(size * k // n for k in range(1, n))
    return sorted(c for c in cuts if 0 <= c < size)


EVENT_FILES = _fixture_files("events.out.tfevents.*")


@pytest.mark.parametrize("src", EVENT_FILES[:6], ids=lambda p: str(p.relative_to(RUNS)))
def test_real_event_files_cut_at_many_offsets(scratch: Path, src: Path) -> None:
    data = src.read_bytes()
    full = read_scalars(src, max_bytes=1 << 30).value
    assert full is not None
    for cut in _offsets(len(data)):
        parsed = read_scalars(_write(scratch, "cut/events.out.tfevents.1.h", data[:cut]), max_bytes=1 << 30)
        assert parsed.status in (ParseStatus.OK, ParseStatus.TRUNCATED), (cut, parsed.note)
        got = parsed.value
        assert got is not None
        # What was kept is exactly a prefix of the full read: never an invented or shifted point.
        assert got.equals(full.iloc[: len(got)].reset_index(drop=True)), cut
        if parsed.status is ParseStatus.TRUNCATED:
            assert parsed.note and "byte offset" in parsed.note
    assert EVENT_FILES, "fixtures hold event files"


@pytest.mark.parametrize("src", EVENT_FILES[:3], ids=lambda p: str(p.relative_to(RUNS)))
def test_real_event_files_with_flipped_bytes(scratch: Path, src: Path) -> None:
    data = bytearray(src.read_bytes())
    full = read_scalars(src, max_bytes=1 << 30).value
    for pos in range(0, len(data), max(1, len(data) // 40)):
        bad = bytearray(data)
        bad[pos] ^= 0xFF
        parsed = read_scalars(_write(scratch, "flip/events.out.tfevents.1.h", bytes(bad)), max_bytes=1 << 30)
        # With CRCs checked, a flipped byte is caught: at most the damaged record is lost.
        assert parsed.status is ParseStatus.TRUNCATED, pos
        assert parsed.value is not None and len(parsed.value) <= len(full)


# ------------------------------------------------------------------------ safetensors


@FAST
@given(raw=st.binary(max_size=512), size=st.integers(min_value=0, max_value=2**64))
def test_safetensors_header_bytes_never_raise(raw: bytes, size: int) -> None:
    check = check_header_bytes("m.safetensors", size, raw)
    assert isinstance(check, FileCheck)
    assert check.ok is False or check.problem is None


json_leaf = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | st.text(
    max_size=8)
json_values = st.recursive(json_leaf, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
    st.text(max_size=6), kids, max_size=4), max_leaves=30)
tensor_entry = st.fixed_dictionaries({
    "dtype": st.sampled_from(["F32", "BF16", "I8", "F4", "BOOL", "X9", ""]) | json_leaf,
    "shape": st.lists(st.integers(min_value=-3, max_value=2**40), max_size=4) | json_values,
    "data_offsets": st.lists(st.integers(min_value=-5, max_value=2**65), min_size=0, max_size=3) | json_values,
})


@FAST
@given(header=st.dictionaries(st.text(max_size=10), tensor_entry | json_values, max_size=6),
       extra=st.integers(min_value=-64, max_value=2**62))
def test_safetensors_structured_headers_never_raise(scratch: Path, header: dict, extra: int) -> None:
    raw = json.dumps(header).encode()
    path = _write(scratch, "rand/model.safetensors", len(raw).to_bytes(8, "little") + raw)
    if extra > 0:
        os.truncate(path, 8 + len(raw) + min(extra, 2**40))  # sparse: costs nothing
    fd = os.open(path, os.O_RDONLY)
    try:
        check = check_safetensors("model.safetensors", fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    assert isinstance(check, FileCheck) and (check.ok or check.problem)


@FAST
@given(data=st.binary(max_size=300))
def test_safetensors_file_of_random_bytes(scratch: Path, data: bytes) -> None:
    path = _write(scratch, "rand/x.safetensors", data)
    fd = os.open(path, os.O_RDONLY)
    try:
        check = check_safetensors("x.safetensors", fd, len(data))
    finally:
        os.close(fd)
    assert isinstance(check, FileCheck)


SAFETENSORS = _fixture_files("*.safetensors")


@pytest.mark.parametrize("src", SAFETENSORS[:4], ids=lambda p: str(p.relative_to(RUNS)))
def test_real_safetensors_cut_at_many_offsets(scratch: Path, src: Path) -> None:
    data = src.read_bytes()
    for cut in _offsets(len(data), 40):
        path = _write(scratch, "cut/model.safetensors", data[:cut])
        fd = os.open(path, os.O_RDONLY)
        try:
            check = check_safetensors("model.safetensors", fd, cut)
        finally:
            os.close(fd)
        assert not check.ok and check.problem, cut
    assert SAFETENSORS


def test_deeply_nested_safetensors_header() -> None:
    raw = b"[" * 200_000 + b"]" * 200_000
    check = check_header_bytes("m.safetensors", len(raw) + 8, raw)
    assert not check.ok and "JSON" in (check.problem or "")


# --------------------------------------------------------------------- .pt zip files


TORCH_FILES = sorted(p for p in RUNS.glob("*/**/*") if p.suffix in (".pt", ".bin", ".pth") and p.is_file())


@pytest.mark.parametrize("src", TORCH_FILES[:4], ids=lambda p: str(p.relative_to(RUNS)))
def test_real_torch_zips_cut_at_many_offsets(scratch: Path, src: Path) -> None:
    data = src.read_bytes()
    assert data[:4] == b"PK\x03\x04"
    for cut in _offsets(len(data), 30):
        path = _write(scratch, "cut/optimizer.pt", data[:cut])
        fd = os.open(path, os.O_RDONLY)
        try:
            check = check_torch_file("optimizer.pt", str(path), fd, cut)
        finally:
            os.close(fd)
        assert not check.ok, (cut, check)
    assert TORCH_FILES


@FAST
@given(data=st.binary(max_size=1024), prefix=st.sampled_from([b"", b"PK\x03\x04", b"PK\x05\x06", b"\x80\x02"]))
def test_torch_file_check_never_raises(scratch: Path, data: bytes, prefix: bytes) -> None:
    path = _write(scratch, "rand/optimizer.pt", prefix + data)
    fd = os.open(path, os.O_RDONLY)
    try:
        check = check_torch_file("optimizer.pt", str(path), fd, len(prefix + data))
    finally:
        os.close(fd)
    assert isinstance(check, FileCheck)


# --------------------------------------------------------------------- trainer_state


@FAST
@given(data=st.binary(max_size=2048) | json_values.map(lambda v: json.dumps(v).encode()))
def test_trainer_state_never_raises(scratch: Path, data: bytes) -> None:
    parsed = read_trainer_state(_write(scratch, "rand/trainer_state.json", data), "trainer_state.json")
    assert parsed.status in STATUSES
    if parsed.status is ParseStatus.OK:
        assert parsed.value is not None


STATES = _fixture_files("trainer_state.json")


@pytest.mark.parametrize("src", STATES[:3], ids=lambda p: str(p.relative_to(RUNS)))
def test_real_trainer_state_cut_at_many_offsets(scratch: Path, src: Path) -> None:
    data = src.read_bytes()
    full = read_trainer_state(src, "trainer_state.json").value
    kept_before = 0
    for cut in _offsets(len(data.rstrip()), 30):
        parsed = read_trainer_state(_write(scratch, "cut/trainer_state.json", data[:cut]), "trainer_state.json")
        assert parsed.status is not ParseStatus.OK, cut
        assert parsed.note
        if parsed.value is not None:
            kept = parsed.value.log_history
            # complete entries only, in order, never more as the cut moves earlier
            assert list(kept) == list(full.log_history[: len(kept)])
            assert len(kept) >= kept_before
            kept_before = len(kept)
    assert STATES


@pytest.mark.parametrize("depth", [100, 5_000, 200_000])
def test_deeply_nested_json_everywhere(scratch: Path, depth: int) -> None:
    deep = b'{"log_history": ' + b"[" * depth + b"]" * depth + b', "global_step": 5}'
    parsed = read_trainer_state(_write(scratch, "deep/trainer_state.json", deep), "trainer_state.json")
    assert parsed.status in STATUSES
    cfg = _config(_write(scratch, "deep/args.json", b'{"a": ' * depth + b"1" + b"}" * depth), "args.json",
                  "args_dump")
    assert cfg.status in STATUSES
    yml = _config(_write(scratch, "deep/train.yaml", b"[" * min(depth, 20_000) + b"]" * min(depth, 20_000)),
                  "train.yaml")
    assert yml.status in STATUSES


# --------------------------------------------------------------------------- configs


@FAST
@given(data=st.binary(max_size=1024) | hostile_text,
       name=st.sampled_from(["train.yaml", "config.json", "args.json", "tokenizer.json", "tokenizer_config.json",
                             "cfg.toml", ".hydra/config.yaml", "run.sh"]))
def test_configs_never_raise(scratch: Path, data: bytes, name: str) -> None:
    path = _write(scratch, f"rand/{name}", data)
    kind = ArtifactKind.LAUNCH_SCRIPT if name.endswith(".sh") else ArtifactKind.CONFIG
    _config(path, name, None, kind)


@FAST
@given(value=json_values)
def test_random_json_configs(scratch: Path, value: object) -> None:
    text = json.dumps({"training": value, "learning_rate": value}).encode()
    _config(_write(scratch, "rand/config.json", text), "config.json", "hf_config")
    _config(_write(scratch, "rand/tokenizer.json", json.dumps({"model": {"vocab": value}}).encode()),
            "tokenizer.json", "tokenizer")


def _yaml_bomb(levels: int, width: int = 9) -> bytes:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        refs = ", ".join(f"*a{i - 1}" for _ in range(width))
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines.append(f"bomb: *a{levels - 1}")
    lines.append("learning_rate: 3e-4")
    return "\n".join(lines).encode()


def test_yaml_billion_laughs_is_bounded(scratch: Path) -> None:
    # 9**10 leaves: unbounded expansion would never return; the node budget stops it
    parsed = _config(_write(scratch, "bomb/train.yaml", _yaml_bomb(10)), "train.yaml")
    assert parsed.status is ParseStatus.TRUNCATED and parsed.note
    assert len(parsed.value) <= 20_000


def test_yaml_merge_key_bomb_is_bounded(scratch: Path) -> None:
    lines = ["b0: &b0 {k0: 1, k1: 2}"]
    for i in range(1, 25):
        lines.append(f"b{i}: &b{i} {{<<: [*b{i - 1}, *b{i - 1}], n{i}: {i}}}")
    parsed = _config(_write(scratch, "bomb/merge.yaml", "\n".join(lines).encode()), "merge.yaml")  # 2**24 keys
    assert len(parsed.value) <= 20_000


def test_yaml_python_tags_are_not_constructed(scratch: Path) -> None:
    marker = scratch / "YAML_PWNED"
    text = (f"lr: !!python/object/apply:os.system ['touch {marker}']\n"
            f"x: !!python/object/new:subprocess.check_output [['touch', '{marker}']]\n"
            "max_steps: 100\n")
    parsed = _config(_write(scratch, "tags/train.yaml", text.encode()), "train.yaml")
    assert not marker.exists()
    assert parsed.status is not ParseStatus.OK or any(e.key == "max_steps" for e in parsed.value)


CONFIGS = sorted(p for p in RUNS.glob("*/**/*") if p.is_file() and p.suffix in (".yaml", ".yml", ".json", ".sh")
                 and p.name != "trainer_state.json" and p.stat().st_size < 200_000)


@pytest.mark.parametrize("src", CONFIGS[:: max(1, len(CONFIGS) // 8)], ids=lambda p: str(p.relative_to(RUNS)))
def test_real_configs_cut_at_many_offsets(scratch: Path, src: Path) -> None:
    data = src.read_bytes()
    kind = ArtifactKind.LAUNCH_SCRIPT if src.suffix == ".sh" else ArtifactKind.CONFIG
    detail = "tokenizer" if src.name.startswith("tokenizer") else None
    for cut in _offsets(len(data), 20):
        _config(_write(scratch, f"cut/{src.name}", data[:cut]), src.name, detail, kind)
    assert CONFIGS
