"""The built-in cards as the full load made them, kept in a cache file that can never be stale.

Every ``autopsy analyze`` needs the built-in catalog: reading ~30 YAML cards, validating them,
compiling ~250 regexes and running every sample cost ~0.1 s of CPU on an idle machine (and
2-5x that on a loaded one), before any run is read. The result depends only on the card
files, the engine code that validates them and the ``regex``/``yaml`` packages, which is
exactly the key of :mod:`autopsy.engine.catalog_index` (``rules list``'s cache). So the
finished cards and refusals are stored as JSON under that key (plus this module's own
source) and read back while every part of the key is unchanged; on any difference the full
load runs and the entry is rewritten. An entry is written only when reading it back gives
cards whose ``repr`` is identical to the loaded ones (a value JSON cannot hold exactly, such
as a YAML date or a NaN param, means no cache), and never from files changed within the
last seconds (see :func:`~autopsy.engine.catalog_index.recently_changed`).

The cached cards' regexes are not compiled here: the log scanner compiles a built-in
pattern on first use (:mod:`autopsy.parsers.log_match`), so a run whose logs never show a
pattern's literals never pays for it. That is safe because the cached cards passed the
same validation (every regex compiled, every sample ran) under the same key.
``AUTOPSY_NO_CACHE=1`` turns this off, as it does the other caches. JSON, never pickle.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from autopsy.engine.catalog_index import cache_dir, cache_key, file_stat, recently_changed, write_cache_file
from autopsy.engine.schema import CardError
from autopsy.engine.types import Card, Match, Pattern
from autopsy.model import Confidence, Severity

CACHE_FORMAT = 1  # bump when the stored layout changes
_HERE = os.path.realpath(__file__)

Loaded = tuple[dict[str, Card], tuple[CardError, ...]]
_TUPLE_FIELDS = ("needs", "supersedes", "explains", "aliases", "samples_match", "samples_no_match")


def _pattern_data(p: Pattern) -> dict[str, Any]:
    return {"name": p.name, "regex": p.regex, "comment": p.comment, "literals": list(p.literals),
            "ignore_case": p.ignore_case}


def _pattern(d: dict[str, Any]) -> Pattern:
    return Pattern(name=d["name"], regex=d["regex"], comment=d["comment"], literals=tuple(d["literals"]),
                   ignore_case=d["ignore_case"])


def card_data(card: Card) -> dict[str, Any]:
    """One card as JSON-able values (tuples become lists; enums their names)."""
    match = None
    if card.match is not None:
        m = card.match
        match = {"any": [_pattern_data(p) for p in m.any], "all": [_pattern_data(p) for p in m.all],
                 "none": [_pattern_data(p) for p in m.none], "window_lines": m.window_lines}
    out: dict[str, Any] = {
        "id": card.id, "title": card.title, "severity": card.severity.name, "confidence": card.confidence.name,
        "status": card.status, "docs": dict(card.docs), "match": match, "check": card.check,
        "params": dict(card.params), "specificity": card.specificity, "source": card.source,
        "builtin": card.builtin,
    }
    for name in _TUPLE_FIELDS:
        out[name] = list(getattr(card, name))
    return out


def card_from_data(d: dict[str, Any]) -> Card:
    """:func:`card_data` read back (docs lists become tuples, as the schema makes them)."""
    m = d["match"]
    match = None if m is None else Match(any=tuple(_pattern(p) for p in m["any"]),
                                         all=tuple(_pattern(p) for p in m["all"]),
                                         none=tuple(_pattern(p) for p in m["none"]), window_lines=m["window_lines"])
    docs = {k: tuple(v) if isinstance(v, list) else v for k, v in d["docs"].items()}
    return Card(id=d["id"], title=d["title"], severity=Severity[d["severity"]], confidence=Confidence[d["confidence"]],
                status=d["status"], docs=docs, match=match, check=d["check"], params=d["params"],
                specificity=d["specificity"], source=d["source"], builtin=d["builtin"],
                **{name: tuple(d[name]) for name in _TUPLE_FIELDS})


def _to_data(loaded: Loaded) -> dict[str, Any]:
    cards, errors = loaded
    return {"cards": [card_data(c) for c in cards.values()],
            "errors": [[e.source, e.field, e.message, e.rule] for e in errors]}


def _from_data(data: dict[str, Any]) -> Loaded:
    cards = [card_from_data(c) for c in data["cards"]]
    return {c.id: c for c in cards}, tuple(CardError(*e) for e in data["errors"])


def _same(a: Loaded, b: Loaded) -> bool:
    """Equal down to types (a tuple is not a list, 1 is not 1.0 or True): compared by ``repr``."""
    def view(x: Loaded) -> str:
        return repr((x[0], [(e.source, e.field, e.message, e.rule, str(e)) for e in x[1]]))

    return view(a) == view(b)


def cache_path(base: str) -> str | None:
    d = cache_dir()
    if d is None:
        return None
    import zlib

    tag = sys.implementation.cache_tag or "py"
    return os.path.join(d, f"cards-{tag}-{zlib.crc32(os.fsencode(os.path.abspath(base))):08x}.json")


def _key(base: str) -> tuple[Any, ...] | None:
    key = cache_key(base)
    own = file_stat(_HERE)
    if key is None or own is None:
        return None
    return (CACHE_FORMAT, *key, ("card_cache.py", own))


def cached_builtin(base: str, full_load: Any) -> Loaded:
    """``full_load(base)`` (the built-in cards under ``base`` and their refusals), from the cache while valid."""
    path = None if os.environ.get("AUTOPSY_NO_CACHE") else cache_path(base)
    key = _key(base) if path is not None else None  # taken before the load: an edit meanwhile is a miss later
    if path is None or key is None:
        return full_load(base)  # type: ignore[no-any-return]
    text = json.dumps(key)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        if isinstance(data, dict) and data.get("key") == text:
            return _from_data(data["cards"])
    except Exception:  # no file yet, a truncated, foreign or older one: a miss
        pass
    loaded: Loaded = full_load(base)
    _write(path, key, text, loaded)
    return loaded


def _write(path: str, key: tuple[Any, ...], key_text: str, loaded: Loaded) -> None:
    if recently_changed(key):
        return
    try:
        data = _to_data(loaded)
        blob = json.dumps({"key": key_text, "cards": data}, ensure_ascii=False).encode("utf-8")
        if not _same(_from_data(json.loads(blob)["cards"]), loaded):
            return  # something JSON does not hold exactly: serve uncached
    except (TypeError, ValueError):
        return
    write_cache_file(path, blob)


__all__ = ["cache_path", "cached_builtin", "card_data", "card_from_data"]
