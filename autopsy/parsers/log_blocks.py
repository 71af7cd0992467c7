"""Reading a log as blocks cut at line separators, so that no line is ever split.

The file is read in ``BLOCK``-sized reads (never whole). :func:`feed_blocks` cuts each
block after its last ``\\n`` or ``\\r`` and hands the whole segments to a scanner; the
bytes after the cut are carried into the next block. A line longer than a block keeps
only its first 64 KB (the rest is read and dropped, not searched) and the scanner is told
where the dropped middle was, so offsets still point into the file. UTF-16 logs are
transcoded to UTF-8 on the way (:func:`utf16_kind`, :func:`transcode`).
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterator
from typing import Protocol

from autopsy.parsers import log_text as lt

BLOCK = 8 << 20


class BlockSink(Protocol):
    """What blocks are fed to: the log scanner."""

    def block(self, buf: bytes, skip_at: int = -1, skip_len: int = 0) -> None: ...


def read_blocks(fd: int, limit: int) -> Iterator[bytes]:
    left = limit
    while left > 0:
        data = os.read(fd, min(BLOCK, left))
        if not data:
            return
        left -= len(data)
        yield data


def utf16_kind(head: bytes) -> str | None:
    if head[:2] == b"\xff\xfe":
        return "utf-16-le"
    if head[:2] == b"\xfe\xff":
        return "utf-16-be"
    sample = head[:4096]
    if len(sample) < 64:
        return None
    even, odd = sample[0::2], sample[1::2]
    ez, oz = even.count(0) / len(even), odd.count(0) / len(odd)
    if oz > 0.4 and ez < 0.05:
        return "utf-16-le"
    if ez > 0.4 and oz < 0.05:
        return "utf-16-be"
    return None


def transcode(first: bytes, rest: Iterator[bytes], kind: str) -> Iterator[bytes]:
    dec = codecs.getincrementaldecoder("utf-16" if first[:2] in (b"\xff\xfe", b"\xfe\xff") else kind)("replace")
    yield dec.decode(first).encode("utf-8", "replace")
    for block in rest:
        yield dec.decode(block).encode("utf-8", "replace")
    tail = dec.decode(b"", final=True)
    if tail:
        yield tail.encode("utf-8", "replace")


class ByteCounter:
    """Iterator over blocks that counts the raw bytes it handed out."""

    def __init__(self, it: Iterator[bytes]) -> None:
        self.it = it
        self.total = 0

    def __iter__(self) -> ByteCounter:
        return self

    def __next__(self) -> bytes:
        b = next(self.it)
        self.total += len(b)
        return b


def chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


def feed(scanner: BlockSink, blocks: Iterator[bytes]) -> bool:
    """Cut blocks at their last separator and hand whole segments to the scanner.

    Returns whether the data ended with a line that has no ``\\n``. A line longer than a
    block keeps only its first 64 KB (the rest is read and dropped, not searched).
    """
    carry, dropped, last_byte = feed_blocks(scanner, blocks)
    if carry:
        scanner.block(carry, len(carry) if dropped else -1, dropped)
    return bool(last_byte) and last_byte != b"\n"


def feed_blocks(scanner: BlockSink, blocks: Iterator[bytes], carry: bytes = b"",
                dropped: int = 0) -> tuple[bytes, int, bytes]:
    """The work of :func:`feed` without the end: returns the bytes after the last separator
    (not scanned yet), how many bytes of that over-long segment were dropped, and the last
    byte read. ``carry`` (and ``dropped``): what an earlier call returned, when the input
    goes on in more than one call."""
    last_byte = b""
    for block in blocks:
        last_byte = block[-1:]
        cut = max(block.rfind(b"\n"), block.rfind(b"\r"))
        if cut < 0:
            room = lt.MAX_SEGMENT_BYTES - len(carry)
            if room > 0:
                carry += block[:room]
            dropped += max(0, len(block) - max(room, 0))
            continue
        if dropped:
            nl, cr = block.find(b"\n"), block.find(b"\r")
            first = min(x for x in (nl, cr) if x >= 0)
            skip_at, skip_len = len(carry), dropped + first
            buf = carry + block[first:cut + 1]
        else:
            skip_at, skip_len = -1, 0
            # one copy (join of a view), not two (slice, then concatenation)
            buf = block if not carry and cut + 1 == len(block) else b"".join((carry, memoryview(block)[:cut + 1]))
        scanner.block(buf, skip_at, skip_len)
        carry = block[cut + 1:]
        dropped = max(0, len(carry) - lt.MAX_SEGMENT_BYTES)
        carry = carry[: lt.MAX_SEGMENT_BYTES]
    return carry, dropped, last_byte
