"""Number wording of the HTML charts: values in labels, and one format per axis.

An axis never mixes formats (``1e+05`` beside ``1,000``, ``10k`` beside ``7,500``): its
ticks are formatted together. Linear axes whose values are tiny or huge factor out a power
of ten into the axis title (``learning rate (×1e-4)`` over ticks ``0 0.5 1 1.5 2``, the way
matplotlib's offset text does), log axes label every decade alike, step axes use ``k`` / ``M``
for all ticks or for none, and byte axes put one unit in the title (``bytes on disk (GB)``).
Bytes are decimal like every other report (:func:`autopsy.units.fmt_bytes`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from autopsy.units import fmt_bytes as _shared_bytes

BYTE_UNITS = ("B", "KB", "MB", "GB", "TB")


def nonfinite_name(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    return "+inf" if v > 0 else "-inf"


def fmt_num(v: float | None) -> str:
    """Short human number: 4 significant digits, scientific notation for tiny/huge values."""
    if v is None:
        return "—"
    if isinstance(v, float) and not math.isfinite(v):
        return nonfinite_name(v)
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e15):
        return f"{int(v):,}"
    a = abs(v)
    if a != 0 and (a < 1e-3 or a >= 1e6):
        return f"{v:.3g}"
    return f"{v:.4g}"


def fmt_bytes(n: float | None) -> str:
    """The one byte wording of every report (decimal units); an em dash when unknown."""
    return "—" if n is None else _shared_bytes(n)


def _decimals(values: Sequence[float], most: int = 6) -> int:
    """Fewest decimals that print every value exactly (up to ``most``)."""
    for d in range(most + 1):
        if all(abs(round(v, d) - v) <= 1e-9 * max(1.0, abs(v)) for v in values):
            return d
    return most


def _fixed(values: Sequence[float]) -> list[str]:
    d = _decimals(values)
    return [f"{0.0 if abs(v) < 10 ** -(d + 1) else v:,.{d}f}" for v in values]


def step_ticks(values: Sequence[float]) -> list[str]:
    """Step tick labels, one style for the whole axis: ``0 2,500 5,000`` or ``0 5k 10k 15k``."""
    top = max((abs(v) for v in values), default=0.0)
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if top >= 10 * div:
            scaled = [v / div for v in values]
            return ["0" if v == 0 else s + suffix for v, s in zip(values, _fixed(scaled), strict=True)]
    return _fixed(values)


def linear_ticks(values: Sequence[float]) -> tuple[list[str], str]:
    """Tick labels of a linear value axis and the factor to append to its title (or "")."""
    top = max((abs(v) for v in values), default=0.0)
    if top == 0 or 1e-2 <= top < 1e5:
        return _fixed(values), ""
    k = math.floor(math.log10(top))
    scaled = [v / 10**k for v in values]
    return _fixed(scaled), f"×1e{k}"


def log_ticks(values: Sequence[float]) -> list[str]:
    """Decade labels: ``0.01 0.1 1 10 100`` when all are readable that way, else ``1e-5 1e-4 …``."""
    if all(1e-2 <= v <= 1e4 for v in values):
        return [fmt_num(v) for v in values]
    return [f"1e{round(math.log10(v))}" for v in values]


def byte_unit(top: float) -> tuple[float, str]:
    """(divisor, unit) of a byte axis whose largest tick is ``top``: the unit fmt_bytes would pick."""
    value, div = abs(top), 1.0
    for unit in BYTE_UNITS:
        if value < 1000 or unit == BYTE_UNITS[-1]:
            return div, unit
        value /= 1000
        div *= 1000
    return div, BYTE_UNITS[-1]  # pragma: no cover - the loop returns


def byte_ticks(values: Sequence[float]) -> tuple[list[str], str]:
    """Tick labels of a byte axis in one unit, and that unit (for the axis title)."""
    div, unit = byte_unit(max((abs(v) for v in values), default=0.0))
    return _fixed([v / div for v in values]), unit
