"""Known printing styles of training metrics, declared as data in ``metric_styles.yaml``.

Each style names the literals its lines carry (the scanner's anchors), a regex whose named
groups give the step axis, the split and the part of the line holding the pairs, and sample
lines with what the reader must produce from them. :func:`styles` loads the file once, compiles
it and runs every sample through a fresh :class:`~autopsy.parsers.metric_reader.MetricReader`:
a style whose samples fail is refused (:class:`StyleError`), the way the rule loader refuses a card.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from itertools import pairwise
from typing import Any

KINDS = ("line", "context", "block", "table", "wrapped")
AXES = ("step", "epoch", "order")


class StyleError(ValueError):
    """A style declaration the loader refuses (schema, regex or a failing sample)."""


@dataclass(frozen=True)
class Style:
    name: str
    program: str
    kind: str
    anchors: tuple[str, ...]
    match: re.Pattern[str] | None
    axis: str = "step"
    split: str = ""
    opener: re.Pattern[str] | None = None
    row: re.Pattern[str] | None = None
    samples: tuple[dict[str, Any], ...] = field(default=(), compare=False)
    # keys the program prints only while their value is > 0 (see :func:`vanished_keys`), and the counter of
    # skipped steps that explains a missing value otherwise
    dropped_keys: re.Pattern[str] | None = None
    dropped_unless: str = ""

    @property
    def value_groups(self) -> tuple[str, ...]:
        """``v_<tag>`` groups of ``match``: one value each, named by the style, for lines whose values
        come before their names (darknet "0.52, 0.61 avg loss, 0.001 rate") or are glued to the next
        word (CatBoost's old "learn 0.1211191019passed:")."""
        return tuple(n for n in (self.match.groupindex if self.match is not None else ()) if n.startswith("v_"))

    @property
    def reads_pairs(self) -> bool:
        """A style with value groups reads no ``key value`` pairs unless it names a ``body``."""
        return not self.value_groups or "body" in (self.match.groupindex if self.match is not None else {})


def _compile(name: str, spec: dict[str, Any], key: str) -> re.Pattern[str] | None:
    raw = spec.get(key)
    if raw is None:
        return None
    try:
        return re.compile(str(raw))
    except re.error as exc:
        raise StyleError(f"style {name}: {key} does not compile: {exc}") from exc


def parse_style(spec: dict[str, Any]) -> Style:
    """One declaration, checked (not its samples: see :func:`check_samples`)."""
    name = str(spec.get("name") or "")
    if not name:
        raise StyleError(f"a style without a name: {spec!r:.80}")
    unknown = set(spec) - {"name", "program", "kind", "anchors", "match", "axis", "split", "opener", "row", "samples",
                           "dropped_when_not_positive"}
    if unknown:
        raise StyleError(f"style {name}: unknown fields {sorted(unknown)}")
    kind = str(spec.get("kind", "line"))
    axis = str(spec.get("axis", "step"))
    if kind not in KINDS or axis not in AXES:
        raise StyleError(f"style {name}: kind must be one of {KINDS} and axis one of {AXES}")
    anchors = tuple(str(a) for a in spec.get("anchors") or ())
    if not anchors or not spec.get("program") or not spec.get("samples"):
        raise StyleError(f"style {name}: anchors, program and samples are required")
    dropped = spec.get("dropped_when_not_positive") or {}
    if dropped and (not isinstance(dropped, dict) or set(dropped) != {"keys", "unless"}):
        raise StyleError(f"style {name}: dropped_when_not_positive needs exactly keys and unless")
    style = Style(name, str(spec["program"]), kind, anchors, _compile(name, spec, "match"), axis,
                  str(spec.get("split", "")), _compile(name, spec, "opener"), _compile(name, spec, "row"),
                  tuple(spec["samples"]), _compile(name, dropped, "keys") if dropped else None,
                  str(dropped.get("unless", "")))
    if kind in ("block", "table", "wrapped") and (style.opener is None or style.row is None):
        raise StyleError(f"style {name}: a {kind} style needs opener and row")
    if kind in ("line", "context") and style.match is None:
        raise StyleError(f"style {name}: a {kind} style needs match")
    return style


def vanished_keys(style: Style, values: list[tuple[str, float]], after: dict[str, str]) -> list[tuple[str, float]]:
    """NaN for each of the style's ``dropped_keys`` that an earlier line printed and this one leaves out.

    Megatron-LM's training_log prints a loss only ``if avg > 0.0``: a NaN average fails the test and the key
    is left out of the line (epfLLM/Megatron-LLM#33: "lm loss" gone from iteration 3385 on). A key is read as
    NaN when the key printed right after it last time is on the line (the line reaches where it stood: not a
    line cut short) and the style's skip counter (``dropped_unless``) is not above 0 (every iteration of the
    interval skipped by an fp16 scaler leaves nothing to average, a different story). ``after`` remembers,
    per key, the key that followed it; it is updated from this line."""
    if style.dropped_keys is None:
        return []
    keys = [k for k, _ in values]
    for k, nxt in pairwise(keys):
        if style.dropped_keys.search(k):
            after[k] = nxt
    present = set(keys)
    skipped = dict(values).get(style.dropped_unless)
    if skipped is not None and skipped > 0:
        return []
    return [(k, math.nan) for k, nxt in after.items() if k not in present and nxt in present]


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b or math.isclose(a, b, rel_tol=1e-9)


def check_samples(style: Style, all_styles: tuple[Style, ...]) -> None:
    """Feed each sample's lines to a reader that knows ``all_styles``; compare with ``expect``."""
    from autopsy.parsers.metric_reader import MetricReader

    for i, sample in enumerate(style.samples):
        reader = MetricReader(all_styles)
        got = []
        for line in sample.get("lines") or ():
            r = reader.read(str(line))
            if r is not None:
                got.append(r)
        want = sample.get("expect") or []
        problem = None
        if len(got) != len(want):
            problem = f"{len(got)} readings, expected {len(want)}: {[dict(g.values) for g in got]}"
        for g, w in zip(got, want, strict=False):
            values = {str(k): float(v) for k, v in (w.get("values") or {}).items()}
            have = dict(g.values)
            if set(have) != set(values) or not all(_same(have[k], values[k]) for k in values):
                problem = f"values {have}, expected {values}"
            elif "step" in w and g.step != w["step"]:
                problem = f"step {g.step}, expected {w['step']}"
            elif g.split != str(w.get("split", "")) and "split" in w:
                problem = f"split {g.split!r}, expected {w['split']!r}"
            if problem:
                break
        if problem:
            raise StyleError(f"style {style.name}: sample {i + 1}: {problem}")


def load_styles(text: str) -> tuple[Style, ...]:
    """Parse and check a styles document (a YAML list); raises :class:`StyleError`."""
    import yaml

    # libyaml's safe loader when PyYAML has it (4x faster; every analysis loads this file). Named so
    # that tests/test_hostile_runs.py can tell it is a safe loader (a SafeLoader or its C twin).
    CSafeOrSafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    specs = yaml.load(text, Loader=CSafeOrSafeLoader) or []
    if not isinstance(specs, list) or not all(isinstance(s, dict) for s in specs):
        raise StyleError("the styles file must be a list of mappings")
    out = tuple(parse_style(s) for s in specs)
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise StyleError("duplicate style names")
    for s in out:
        check_samples(s, out)
    return out


@lru_cache(maxsize=1)
def styles() -> tuple[Style, ...]:
    """The built-in styles, loaded and checked once per process."""
    text = resources.files("autopsy.parsers").joinpath("metric_styles.yaml").read_text(encoding="utf-8")
    return load_styles(text)
