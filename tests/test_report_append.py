"""--append: atomic, earlier bytes unchanged, the same failure never twice."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import report_samples as samples

from autopsy.report import append as append_mod
from autopsy.report.append import append_entries, fingerprints_in
from autopsy.report.markdown import render_entries

SEED_LOG = ("# ISSUES LOG - MY PROJECT\n\nThis log documents all bugs.\n\n---\n\n"
            "## 2025-10-01 - Old issue\n\n**Issue:** something\n\n**Status:** ✅ RESOLVED\n")


def test_append_keeps_earlier_bytes_and_dedupes(tmp_path: Path) -> None:
    log = tmp_path / "ISSUES.md"
    log.write_bytes(SEED_LOG.encode())
    entries = render_entries(samples.disk_full(), samples.CATALOG)
    first = append_entries(log, entries)
    assert len(first.added) == 1 and not first.skipped
    after_one = log.read_bytes()
    assert after_one.startswith(SEED_LOG.encode())
    assert after_one[len(SEED_LOG.encode()):].startswith(b"\n---\n\n## 2025-10-24 - Training crash: disk full")
    second = append_entries(log, entries)
    assert second.added == () and second.skipped == first.added
    assert log.read_bytes() == after_one  # idempotent
    third = append_entries(log, render_entries(samples.nan_loss(), samples.CATALOG))
    assert len(third.added) == 1
    text = log.read_text()
    assert text.startswith(after_one.decode())
    assert fingerprints_in(text) == {fp for fp, _ in entries} | set(third.added)
    assert text.count("\n## ") == 3


def test_log_ending_in_separator_gets_no_second_one(tmp_path: Path) -> None:
    log = tmp_path / "ISSUES.md"
    log.write_text("# LOG\n\n---\n")
    append_entries(log, render_entries(samples.empty_log(), samples.CATALOG))
    assert log.read_text().startswith("# LOG\n\n---\n\n## ")


def test_missing_log_is_created(tmp_path: Path) -> None:
    log = tmp_path / "new" / "ISSUES.md"
    log.parent.mkdir()
    result = append_entries(log, render_entries(samples.empty_log(), samples.CATALOG))
    assert len(result.added) == 1 and log.read_text().startswith("## ")


def test_duplicates_within_one_call_are_written_once(tmp_path: Path) -> None:
    log = tmp_path / "ISSUES.md"
    entries = render_entries(samples.disk_full(), samples.CATALOG)
    result = append_entries(log, entries + entries)
    assert len(result.added) == 1 and len(result.skipped) == 1


def test_failed_write_leaves_the_log_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "ISSUES.md"
    log.write_bytes(SEED_LOG.encode())
    os.chmod(log, 0o640)

    def boom(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(append_mod.os, "replace", boom)
    with pytest.raises(OSError):
        append_entries(log, render_entries(samples.disk_full(), samples.CATALOG))
    assert log.read_bytes() == SEED_LOG.encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ISSUES.md"]
    monkeypatch.undo()
    append_entries(log, render_entries(samples.disk_full(), samples.CATALOG))
    assert (log.stat().st_mode & 0o777) == 0o640  # mode kept across the rename


def test_nothing_is_left_beside_the_log(tmp_path: Path) -> None:
    log = tmp_path / "ISSUES.md"
    append_entries(log, render_entries(samples.disk_full(), samples.CATALOG))
    append_entries(log, render_entries(samples.disk_full(), samples.CATALOG))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ISSUES.md"]


def test_concurrent_appends_lose_nothing(tmp_path: Path) -> None:
    import threading

    log = tmp_path / "ISSUES.md"
    log.write_bytes(SEED_LOG.encode())
    (fp, text), = render_entries(samples.nan_loss(), samples.CATALOG)
    entries = [(f"{fp[:-12]}{i:012x}", text.replace(fp, f"{fp[:-12]}{i:012x}")) for i in range(12)]
    threads = [threading.Thread(target=append_entries, args=(log, [e])) for e in entries]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fingerprints_in(log.read_text()) == {e[0] for e in entries}
    assert log.read_bytes().startswith(SEED_LOG.encode())
