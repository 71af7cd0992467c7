"""Fuzz the streaming log scanner (autopsy.parsers.logs.scan_log) with real rule patterns."""

from __future__ import annotations

import atheris

with atheris.instrument_imports():
    from _common import run, scratch_file

    from autopsy.engine.loader import load_catalog
    from autopsy.model import ParseStatus
    from autopsy.parsers.logs import compile_patterns, scan_log

CATALOG = load_catalog(())
COMPILED = compile_patterns(CATALOG.patterns(list(CATALOG.cards.values())))


def test_one(data: bytes) -> None:
    path = scratch_file("train.log", data)
    scan = scan_log(path, "train.log", COMPILED, max_bytes=1 << 30, rank=None)
    if scan.status not in (ParseStatus.OK, ParseStatus.TRUNCATED) or scan.bytes_read != len(data):
        raise AssertionError(f"unexpected scan result: {scan.status} {scan.note} {scan.bytes_read}/{len(data)}")
    if scan.note and "scanner stopped" in scan.note:
        raise AssertionError(f"the scanner hit an internal error: {scan.note}")


if __name__ == "__main__":
    run(test_one)
