"""Numbers read from a run, bounded once at the parser so that no rule ever meets an absurd one.

A run is untrusted: ``trainer_state.json`` can say ``"global_step": 1e999999`` or a
400-digit integer, a config ``max_steps: .inf`` or a 5,000-digit integer, a checkpoint
directory ``checkpoint-99999999999999999999``, a safetensors header offsets near 2^64.
Python reads all of them, and a rule later dies on ``float(huge)`` (OverflowError),
``int(inf)`` or ``int("9"*5000)`` (the 4,300-digit limit). Each parser calls these
helpers instead: an integer must fit a signed 64-bit value, a count or step must be finite,
and what does not fit becomes ``None`` with :data:`OUT_OF_RANGE` in the parse note.
"""

from __future__ import annotations

import math
from typing import Any

INT_MAX = 2**63 - 1  # steps, sizes, offsets, counts: what an int64 holds
MAX_DIGITS = 19  # len(str(INT_MAX)); a longer digit string is out of range without parsing it
OUT_OF_RANGE = "out of range"


def bounded_int(v: Any) -> int | None:
    """``v`` as an int within +-INT_MAX (ints, integral finite floats, digit strings); else None."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return v if -INT_MAX <= v <= INT_MAX else None
    if isinstance(v, float):
        if math.isfinite(v) and v == int(v) and abs(v) <= INT_MAX:
            return int(v)
        return None
    if isinstance(v, str):
        t = v.strip()
        if len(t.lstrip("+-").lstrip("0")) > MAX_DIGITS + 8:  # beyond any float's integral range too
            return None
        try:
            return bounded_int(int(t))
        except ValueError:
            pass
        try:
            return bounded_int(float(t))
        except (ValueError, OverflowError):
            return None
    return None


def bounded_float(v: Any, *, allow_nonfinite: bool = True) -> float | None:
    """``v`` as a float; an int too large for a float, or a non-numeric value, is None.

    ``allow_nonfinite``: NaN and +-inf are values (a NaN loss is the finding); where they
    cannot mean anything (a step count, an epoch) pass False to get None for them.
    """
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        if abs(v) > INT_MAX * 2**960:  # float(v) would raise OverflowError
            return None
        v = float(v)
    elif isinstance(v, str):
        if len(v) > 400:
            return None
        try:
            v = float(v)
        except ValueError:
            return None
    if not isinstance(v, float):
        return None
    if not allow_nonfinite and not math.isfinite(v):
        return None
    return v


def config_number(value: Any) -> tuple[Any, bool]:
    """A config value with out-of-range numbers replaced by None: (value, was it out of range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value, False
    if isinstance(value, int):
        b = bounded_int(value)
        return b, b is None
    if math.isfinite(value):
        return value, False
    return None, True
