"""The one byte and one duration wording of autopsy: checks' messages and every report use these.

Bytes are decimal (``750.8 KB``, ``2.1 GB``) like ``df -h --si`` and volume sizes as sold;
durations read ``3h 02m``, ``12m 05s``, ``40s``. Figures quoted from a tool's own message
(PyTorch's "13.12 GiB already allocated") keep that tool's units.
"""

from __future__ import annotations

import math


def fmt_bytes(n: float | int | None) -> str:
    """``750.8 KB``, ``2.1 GB``, ``512 B``; ``?`` when unknown."""
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} PB"  # pragma: no cover - the loop returns at TB


def fmt_duration(seconds: float | None) -> str:
    """``3h 02m``, ``12m 05s``, ``40s``, ``2d 03h``; ``?`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    if 0 < seconds < 1:
        return "under 1s"
    s = round(seconds)
    if s >= 86400:
        return f"{s // 86400}d {s % 86400 // 3600:02d}h"
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s}s"


def parse_size(text: str) -> int:
    """``1000``, ``512K``, ``64MB``, ``2GiB`` -> bytes (K/M/G/T are powers of 1024, as in
    ``--max-bytes-per-file``); ValueError for anything else or a size that is not positive."""
    t = text.strip().upper().replace(" ", "")
    for suffix in ("IB", "B"):
        if t.endswith(suffix) and len(t) > len(suffix) and t[-len(suffix) - 1] in "KMGT":
            t = t[: -len(suffix)]
            break
    mult = 1
    if t and t[-1] in "KMGT":
        mult = 1024 ** ("KMGT".index(t[-1]) + 1)
        t = t[:-1]
    try:
        value = float(t)
    except ValueError:
        raise ValueError(f"{text!r} is not a size (e.g. 512M, 2G, 1000)") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{text!r}: a size must be positive")
    return int(value * mult)
