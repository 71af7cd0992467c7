"""Shared set-up of the atheris harnesses: a scratch file per process and the run loop.

Each harness writes the fuzzer's bytes to one scratch file (the parsers read files, and the
file path is the code path real runs take) and calls the parser; any exception is a
finding. ``python fuzz/fuzz_X.py -max_total_time=180 fuzz/corpus/X`` runs one.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, not an install

SCRATCH = Path(tempfile.mkdtemp(prefix="autopsy-fuzz-"))


def scratch_file(name: str, data: bytes) -> Path:
    path = SCRATCH / name
    with open(path, "wb") as fh:
        fh.write(data)
    return path


def run(test_one: Callable[[bytes], None]) -> None:
    import atheris

    atheris.Setup(sys.argv, test_one)
    # The parsers import pandas/numpy lazily on first use: do it here, not inside the first
    # fuzzed unit, where it counted against libFuzzer's -timeout (a 30 s "timeout" on the
    # empty input, seen with the harness at nice 19 on a busy machine).
    test_one(b"")
    try:
        atheris.Fuzz()
    finally:
        for p in SCRATCH.iterdir():
            os.unlink(p)
        SCRATCH.rmdir()
