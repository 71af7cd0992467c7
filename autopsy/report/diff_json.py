"""JSON rendering of a :class:`~autopsy.compare.RunDiff` (schema documented in docs/json-schema.md)."""

from __future__ import annotations

import json
import math
from typing import Any

from autopsy.compare.model import RunDiff

DIFF_SCHEMA_VERSION = 1


def _clean(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    if hasattr(v, "item"):  # numpy scalars
        return _clean(v.item())
    return v


def diff_to_dict(rd: RunDiff) -> dict[str, Any]:
    def finding(f: Any) -> dict[str, Any] | None:
        return None if f is None else {"rule": f.rule, "message": f.message, "severity": f.severity.name.lower()}

    return _clean({
        "schema_version": DIFF_SCHEMA_VERSION,
        "kind": "autopsy.compare",
        "goods": list(rd.goods),
        "bad": rd.bad,
        "agree": rd.agree,
        "bad_primary": finding(rd.bad_primary),
        "good_primaries": [finding(f) for f in rd.good_primaries],
        "differences": [d.to_dict() for d in rd.differences],
        "parts": {k: v for k, v in sorted(rd.rows.items())},
        "notes": list(rd.notes),
    })


def render_json(rd: RunDiff) -> str:
    return json.dumps(diff_to_dict(rd), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
