"""Compare text with a file in tests/snapshots/; AUTOPSY_UPDATE_SNAPSHOTS=1 rewrites them.

A missing snapshot fails (with how to create it) rather than being written silently,
so a test can never pass by recording whatever the code printed.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"


def updating() -> bool:
    return os.environ.get("AUTOPSY_UPDATE_SNAPSHOTS") == "1"


def assert_snapshot(name: str, text: str) -> None:
    path = SNAPSHOTS / name
    if updating():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"no snapshot {path.name}; create it with AUTOPSY_UPDATE_SNAPSHOTS=1 and review the diff")
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            f"snapshots/{name}", "actual"))
        pytest.fail(f"output differs from snapshots/{name} (AUTOPSY_UPDATE_SNAPSHOTS=1 to accept):\n{diff}")
