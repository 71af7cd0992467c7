"""Streaming text-log scanner: one pass, constant memory, C-speed on the common case.

``scan_log`` reads a log in 8 MB blocks (never the whole file), cut at the last line
separator so no line is split. Per block it does only C-level work over the whole bytes:

1. counts ``\\n`` (line numbers agree with ``grep -n``; ``\\r`` tqdm redraws are separate
   *segments* of the same line), NUL and invalid UTF-8 bytes (``binary_fraction``);
2. finds candidate segments with two multi-literal searches (see :mod:`log_match`): the
   literals of every pattern rule, and a fixed set of triggers (``{'`` for HF dicts,
   ``step``/``iter`` lines, ``Traceback (most recent call last)``, torchrun's
   ``Failures:``/``Root Cause``, chain markers, ESC for coloured lines);
3. only those segments are decoded, cleaned (ANSI/OSC stripped, ``[rank3]:`` prefixes
   stripped and recorded) and handed to the Python handlers. While a traceback or a
   ``ChildFailedError`` report is open every segment is handled (slow mode), until it closes.

Context (the step and wall time of a hit) is resolved lazily, in position order:
progress bars are found by searching *backwards* for ``it/s``/``s/it`` from the event
(``rfind``), so the millions of tqdm redraws of a long run are never parsed one by one;
rate points (``it/s``/``s/it``, Lightning postfix metrics) are sampled at those lookups and
every 32 KB (every bar in files under 1 MB), one per step. Timestamps are indexed per block
(ISO, ``[...]``, glog, torchrun) with regexes anchored on a literal, or looked up backwards
when a block is densely timestamped. Naive times are read as UTC.

Bounded memory: a segment is searched in its first 64 KB and kept (hits, head, tail) in
its first 4 KB; a line longer than a block is carried at most 64 KB; hits keep the first
and last 20 per pattern; tracebacks 100 + 100 chain heads. Never raises: an unreadable or
non-regular file (FIFO, device) gives ``status=unreadable``; ``max_bytes`` gives
``status=truncated`` with "read only the first N bytes of M". UTF-16 logs (BOM, or NUL
every other byte) are transcoded to UTF-8 first; offsets then count transcoded bytes.

This module opens the file and assembles the :class:`LogScan`; the reading in blocks is
:mod:`log_blocks`, the per-block scanner :mod:`log_scanner`, and the step and time
context of a position :mod:`log_context`.
"""

from __future__ import annotations

import gc
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from autopsy.model import ParseStatus
from autopsy.parsers import log_blocks, log_metrics, log_parallel, log_window
from autopsy.parsers.log_blocks import ByteCounter, chain, feed, read_blocks, transcode, utf16_kind
from autopsy.parsers.log_match import CompiledPatterns, compile_patterns, reference_hits
from autopsy.parsers.log_scanner import LogScanner
from autopsy.parsers.safe_open import open_regular
from autopsy.parsers.types import LogScan, PatternSpec

__all__ = ["CompiledPatterns", "PatternSpec", "compile_patterns", "reference_hits", "scan_log"]


def scan_log(fs_path: Path, rel_path: str, compiled: CompiledPatterns, *, max_bytes: int,
             rank: int | None) -> LogScan:
    """Scan one text log in a single streaming pass; never raises (see the module docstring)."""
    scan = LogScan(path=rel_path, size=0, bytes_read=0, n_lines=0, rank=rank)
    gc_was_on = gc.isenabled()
    gc.disable()  # the scan makes no reference cycles; collections only cost time
    try:
        return _scan(fs_path, rel_path, compiled, max_bytes, scan)
    finally:
        if gc_was_on:
            gc.enable()


def _scan(fs_path: Path, rel_path: str, compiled: CompiledPatterns, max_bytes: int, scan: LogScan) -> LogScan:
    rank = scan.rank
    try:
        fd = open_regular(fs_path)
    except OSError as exc:
        scan.status = ParseStatus.UNREADABLE
        scan.note = f"cannot open: {exc.strerror or exc}"
        return scan
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            scan.status = ParseStatus.UNREADABLE
            scan.note = "not a regular file (FIFO, socket or device): not read"
            return scan
        scan.size = st.st_size
        # Read what the file held when opened: a log that grows while it is read (training still
        # running) gives a consistent snapshot, and a fast writer cannot keep the scan going.
        limit = max(0, min(int(max_bytes), st.st_size))
        # over the budget: read the head and the tail (the crash is at the end), skip the middle
        window = log_window.plan(fd, st.st_size, max_bytes)
        approx_from: int | None = None
        year = time.gmtime(st.st_mtime).tm_year if st.st_mtime > 0 else time.gmtime().tm_year
        scanner = LogScanner(rel_path, compiled, rank, st.st_size, year)
        counted = ByteCounter(read_blocks(fd, limit if window is None else window.head_end))
        stream: Iterator[bytes] = counted
        first = next(counted, b"")
        kind = utf16_kind(first) if first else None
        if kind:
            stream = transcode(first, counted, kind)
            scanner.note = f"decoded as {kind.upper()}; offsets count UTF-8 bytes"
        else:
            stream = chain(first, counted)
        if not kind:
            log_metrics.learn(scanner, first, st.st_size)  # before a parallel child copies the scanner
        notes = [scanner.note] if scanner.note else []
        par = None
        if window is None and log_parallel.usable(st.st_size, limit):
            par = log_parallel.plan(fd, limit, log_blocks.BLOCK)
        try:
            if par is not None:
                counted.it = chain(first, read_blocks(fd, par.chunk_start - len(first)))
                counted.total = 0
                def make() -> LogScanner:
                    sc = LogScanner(rel_path, compiled, rank, st.st_size, year)
                    sc.reader_learnt, sc.metric_finder = True, scanner.metric_finder
                    sc.reader.templates, sc.reader.enabled = scanner.reader.templates, scanner.reader.enabled
                    return sc

                unterminated, extra = log_parallel.scan(fd, scanner, limit, make, counted, par, log_blocks.BLOCK)
                counted.total += extra
            else:
                unterminated = feed(scanner, stream)
            if window is not None and not kind and window.tail_start < window.size:
                middle, exact = log_window.middle_newlines(fd, window)
                scanner.skip_middle(window.tail_start, middle)
                if not exact:
                    approx_from = scanner.lines_before + 1
                os.lseek(fd, window.tail_start, os.SEEK_SET)
                counted.it = read_blocks(fd, window.size - window.tail_start)
                unterminated = feed(scanner, counted)
        except OSError as exc:
            scan.status = ParseStatus.TRUNCATED
            notes.append(f"read error after {counted.total:,} bytes: {exc.strerror or exc}")
            unterminated = False
        scan.bytes_read = counted.total
        scan.n_lines = scanner.lines_before + (1 if unterminated else 0)
        if scan.status is ParseStatus.OK and scan.size > limit:
            scan.status = ParseStatus.TRUNCATED
            if window is not None and not kind:
                notes.insert(0, window.note(approx_from))
                scan.approx_lines_from = approx_from
            else:
                notes.insert(0, f"read only the first {scan.bytes_read:,} bytes of {scan.size:,}")
        scan.note = "; ".join(notes) or None
        scanner.finish(scan)
    except Exception as exc:  # the contract is "never raise"; keep what was read
        scan.status = ParseStatus.TRUNCATED if scan.bytes_read else ParseStatus.UNREADABLE
        scan.note = f"scanner stopped: {type(exc).__name__}: {exc}"
    finally:
        os.close(fd)
    return scan


def scan_text(text: str | bytes, compiled: CompiledPatterns | None = None, *, rel_path: str = "test.log",
              rank: int | None = None) -> LogScan:
    """Scan an in-memory log (tests, notebooks): same code path as :func:`scan_log`."""
    import tempfile

    data = text.encode("utf-8") if isinstance(text, str) else text
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "log.txt"
        p.write_bytes(data)
        return scan_log(p, rel_path, compiled or compile_patterns(()), max_bytes=1 << 40, rank=rank)
