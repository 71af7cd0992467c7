"""W&B's binary run log read without the SDK: LevelDB-style framing and protobuf Records.

The bytes are built here exactly as wandb/sdk/internal/datastore.py frames them (7-byte file
header, 32 KiB blocks, CRC-32 of type + data, FIRST/MIDDLE/LAST for records that cross a
block) around Records encoded with the field numbers of wandb_internal.proto. The real file
an offline run writes is in fixtures/runs/wandb_*.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from pathlib import Path

from autopsy.model import ParseStatus
from autopsy.parsers.wandb_records import read_wandb_log

BLOCK = 32768


def _varint(n: int) -> bytes:
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def _field(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _vint(num: int, value: int) -> bytes:
    return _varint(num << 3) + _varint(value)


def _item(key: str, value: object) -> bytes:
    return _field(1, key.encode()) + _field(16, json.dumps(value).encode())


def history(step: int, **values: object) -> bytes:
    items = b"".join(_field(1, _item(k, v)) for k, v in {"_step": step, "_timestamp": 1.7e9 + step, **values}.items())
    return _vint(1, step) + _field(2, items + _field(2, _vint(1, step)))


def config(**values: object) -> bytes:
    return _field(5, b"".join(_field(1, _item(k, {"value": v})) for k, v in values.items()))


def run_record(**values: object) -> bytes:
    """RunRecord (Record field 17) with its config (RunRecord.config = 4): wandb.init(config=...)."""
    return _field(17, _field(1, b"abc123") + _field(4, b"".join(_field(1, _item(k, {"value": v}))
                                                               for k, v in values.items())))


def exit_record(code: int) -> bytes:
    return _field(18, _vint(1, code))


def frame(records: list[bytes]) -> bytes:
    out = bytearray(struct.pack("<4sHB", b":W&B", 0xBEE1, 0))
    for rec in records:
        left = BLOCK - len(out) % BLOCK
        if left < 7:
            out += b"\0" * left
            left = BLOCK
        if len(rec) + 7 <= left:
            parts = [(1, rec)]
        else:
            first, rest = rec[:left - 7], rec[left - 7:]
            parts = [(2, first)]
            while len(rest) > BLOCK - 7:
                parts.append((3, rest[:BLOCK - 7]))
                rest = rest[BLOCK - 7:]
            parts.append((4, rest))
        for rtype, data in parts:
            crc = zlib.crc32(data, zlib.crc32(bytes([rtype]))) & 0xFFFFFFFF
            out += struct.pack("<IHB", crc, len(data), rtype) + data
    return bytes(out)


def test_history_config_and_exit(tmp_path: Path) -> None:
    p = tmp_path / "run-abc.wandb"
    p.write_bytes(frame([run_record(batch_size=32), config(learning_rate=3e-4, max_steps=100),
                         history(0, **{"train/loss": 2.5}),
                         history(1, **{"train/loss": float("nan"), "eval/loss": 3.0}), exit_record(1)]))
    parsed = read_wandb_log(p, "run-abc.wandb", max_bytes=1 << 30)
    rows = parsed.value
    assert parsed.status is ParseStatus.OK, parsed.note
    got = list(zip(rows.tags, rows.steps, rows.values, rows.splits, strict=True))
    assert got[0] == ("train/loss", 0, 2.5, "train")
    assert got[1][:2] == ("train/loss", 1) and math.isnan(got[1][2])
    assert got[2] == ("eval/loss", 1, 3.0, "eval")
    assert rows.wall_times[0] == 1.7e9
    cfg = {e.key: e.value for e in rows.config}
    assert cfg == {"per_device_train_batch_size": 32, "learning_rate": 3e-4, "max_steps": 100, "exit_code": 1}


def test_records_across_blocks_and_a_cut_tail(tmp_path: Path) -> None:
    big = [history(i, loss=1.0 / (i + 1), blob="x" * 3000) for i in range(40)]  # ~120 KiB: crosses blocks
    data = frame(big)
    p = tmp_path / "run-big.wandb"
    p.write_bytes(data)
    rows = read_wandb_log(p, "x", max_bytes=1 << 30).value
    assert rows.steps == list(range(40))
    p.write_bytes(data[:-100])
    parsed = read_wandb_log(p, "x", max_bytes=1 << 30)
    assert parsed.status is ParseStatus.TRUNCATED and "cut short" in (parsed.note or "")
    assert parsed.value.steps == list(range(39))


def test_bad_crc_is_skipped_and_counted(tmp_path: Path) -> None:
    data = bytearray(frame([history(0, loss=1.0), history(1, loss=0.5)]))
    data[7 + 7 + 3] ^= 0xFF  # a byte inside the first record's data
    p = tmp_path / "run-crc.wandb"
    p.write_bytes(bytes(data))
    parsed = read_wandb_log(p, "x", max_bytes=1 << 30)
    assert parsed.value.steps == [1] and "CRC mismatch" in (parsed.note or "")


def test_not_a_wandb_file(tmp_path: Path) -> None:
    p = tmp_path / "run-x.wandb"
    p.write_bytes(b"hello world, not a log")
    parsed = read_wandb_log(p, "x", max_bytes=1 << 30)
    assert parsed.status is ParseStatus.UNREADABLE and not parsed.value.values
