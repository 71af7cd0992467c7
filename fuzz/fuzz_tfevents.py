"""Fuzz the event-file reader (autopsy.parsers.tensorboard.read_scalars), CRCs off and on.

With CRCs checked, random framing is rejected early; half the inputs are read with
``check_crc=False`` so the fuzzer reaches the protobuf decoding and the grouped fast path.
"""

from __future__ import annotations

import atheris

with atheris.instrument_imports():
    from _common import run, scratch_file

    from autopsy.parsers.tensorboard import read_scalars


def test_one(data: bytes) -> None:
    check = bool(data[:1]) and data[0] & 1 == 1
    path = scratch_file("events.out.tfevents.1.fuzz", data[1:])
    parsed = read_scalars(path, max_bytes=1 << 30, check_crc=check)
    if parsed.value is None and parsed.status.value == "ok":
        raise AssertionError("ok without a frame")
    if parsed.note and ("out of memory" in parsed.note):
        raise AssertionError(parsed.note)


if __name__ == "__main__":
    run(test_one)
