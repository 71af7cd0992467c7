"""Fuzz the safetensors header check (autopsy.parsers.safetensors_header) on whole files."""

from __future__ import annotations

import os

import atheris

with atheris.instrument_imports():
    from _common import run, scratch_file

    from autopsy.parsers.safetensors_header import check_header_bytes, check_safetensors


def test_one(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, 2)
    if mode == 0:  # the raw file, as written on disk
        path = scratch_file("model.safetensors", fdp.ConsumeBytes(fdp.remaining_bytes()))
        fd = os.open(path, os.O_RDONLY)
        try:
            check = check_safetensors("model.safetensors", fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
    else:  # a header with a well-formed length field, against a claimed file size
        size = fdp.ConsumeIntInRange(0, 2**64)
        check = check_header_bytes("model.safetensors", size, fdp.ConsumeBytes(fdp.remaining_bytes()))
    if check.ok and check.problem:
        raise AssertionError("ok with a problem")


if __name__ == "__main__":
    atheris.instrument_all()  # instrument_imports alone left the header checker uninstrumented (cov 35)
    run(test_one)
