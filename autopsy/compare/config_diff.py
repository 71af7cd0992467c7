"""Configuration differences: every flattened key that differs or exists on one side only.

Keys are compared as written (``raw_key``, the dotted path in its file) within their source
kind (YAML, JSON, launch flags...), so a key moved to another section shows up as *moved*
rather than as two unrelated keys. Copies of one file inside several checkpoints collapse
into one value. ``trainer_state`` values are results, not configuration, and are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

_SKIP_SOURCES = frozenset({"trainer_state"})
# Values that differ between any two runs by design: a diff of these is expected, not a cause.
_VARIES = re.compile(
    r"(?:^|[._-])(?:seed|random_seed|run_name|run_id|name|exp_name|experiment_name|id|job_id|uuid|"
    r"output_dir|logging_dir|log_dir|out_dir|save_dir|dir|path|timestamp|date|time|host|hostname|node|"
    r"master_port|port|wandb_\w+|hub_\w+|resume_from_checkpoint)$", re.I)


@dataclass
class KeyValues:
    """The distinct values one run gives a key, and where each was written."""

    key: str
    source: str
    texts: list[str] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)

    def add(self, text: str, value: Any, where: str) -> None:
        if text not in self.texts:
            self.texts.append(text)
            self.values.append(value)
            self.where.append(where)

    @property
    def shown(self) -> str:
        return " | ".join(self.texts)


def _where(path: Any, line: Any) -> str:
    try:
        return f"{path}:{int(line)}"
    except (TypeError, ValueError):
        return str(path)


def key_table(config_rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str], KeyValues]:
    """(source, raw_key) -> its distinct values in one run, from ``Run.config`` records."""
    out: dict[tuple[str, str], KeyValues] = {}
    for row in config_rows:
        source = str(row.get("source") or "")
        if source in _SKIP_SOURCES:
            continue
        raw_key = str(row.get("raw_key") or row.get("key") or "")
        if not raw_key:
            continue
        kv = out.setdefault((source, raw_key), KeyValues(key=str(row.get("key") or raw_key), source=source))
        kv.add(str(row.get("text") if row.get("text") is not None else row.get("value")), row.get("value"),
               _where(row.get("path"), row.get("line")))
    return out


def expected_to_vary(raw_key: str) -> bool:
    """Seeds, names, ids, output paths, ports: keys that differ between runs by design."""
    return bool(_VARIES.search(raw_key.rsplit(".", 1)[-1])) or bool(_VARIES.search(raw_key))


@dataclass(frozen=True)
class ConfigChange:
    raw_key: str
    key: str
    source: str
    change: str  # "changed", "only_good", "only_bad", "moved"
    good: str | None
    bad: str | None
    good_where: tuple[str, ...]
    bad_where: tuple[str, ...]
    good_key: str | None = None  # for "moved": the raw key on the good side
    ratio: float | None = None  # bad / good for numbers that changed

    @property
    def varies(self) -> bool:
        return expected_to_vary(self.raw_key) or (self.good_key is not None and expected_to_vary(self.good_key))


def _ratio(good: Sequence[Any], bad: Sequence[Any]) -> float | None:
    if len(good) != 1 or len(bad) != 1:
        return None
    g, b = good[0], bad[0]
    if isinstance(g, bool) or isinstance(b, bool) or not isinstance(g, int | float) or not isinstance(b, int | float):
        return None
    if g == 0 or b == 0 or g != g or b != b:
        return None
    try:
        return float(b) / float(g)
    except (OverflowError, ZeroDivisionError):
        return None


def compare_config(goods: Sequence[dict[tuple[str, str], KeyValues]],
                   bad: dict[tuple[str, str], KeyValues]) -> list[ConfigChange]:
    """Every key whose values differ between the bad run and the good runs (union of goods).

    A key counts as changed only when the bad run's value is none of the good runs' values,
    so two good runs that disagree on a key (it varies among healthy runs) never blame it.
    """
    good_union: dict[tuple[str, str], KeyValues] = {}
    for table in goods:
        for k, kv in table.items():
            merged = good_union.setdefault(k, KeyValues(key=kv.key, source=kv.source))
            for text, value, where in zip(kv.texts, kv.values, kv.where, strict=True):
                merged.add(text, value, where)
    changes: list[ConfigChange] = []
    for k, b in bad.items():
        g = good_union.get(k)
        if g is None:
            continue
        if any(t in g.texts for t in b.texts) and set(b.texts) <= set(g.texts):
            continue
        changes.append(ConfigChange(k[1], b.key, k[0], "changed", g.shown, b.shown, tuple(g.where[:3]),
                                    tuple(b.where[:3]), ratio=_ratio(g.values, b.values)))
    only_good = {k: v for k, v in good_union.items() if k not in bad}
    only_bad = {k: v for k, v in bad.items() if k not in good_union}
    # A key that left one section for another: same canonical key and value, other raw path.
    for kb, b in list(only_bad.items()):
        match = next((kg for kg, g in only_good.items()
                      if kg[0] == kb[0] and g.key == b.key and kg[1].rsplit(".", 1)[-1] == kb[1].rsplit(".", 1)[-1]),
                     None)
        if match is None:
            continue
        g = only_good.pop(match)
        del only_bad[kb]
        changes.append(ConfigChange(kb[1], b.key, kb[0], "moved", g.shown, b.shown, tuple(g.where[:3]),
                                    tuple(b.where[:3]), good_key=match[1]))
    for k, g in only_good.items():
        changes.append(ConfigChange(k[1], g.key, k[0], "only_good", g.shown, None, tuple(g.where[:3]), ()))
    for k, b in only_bad.items():
        changes.append(ConfigChange(k[1], b.key, k[0], "only_bad", None, b.shown, (), tuple(b.where[:3])))
    return changes
