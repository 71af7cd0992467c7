"""A light view of the rule catalog for ``autopsy rules list`` / ``rules explain``.

The full load (:func:`autopsy.engine.loader.load_catalog`) parses every YAML card,
compiles every regex and runs every sample: ~70 ms, most of the start-up of
``autopsy rules list``. Those commands only print what the cards say, but they must
still report a refused card exactly as the full load does (a broken sample included),
so the light view is not a weaker validation: it is the full load's result, kept in a
small cache file and served only while nothing it was computed from has changed.

The cache key covers everything the result depends on: every card file under the
built-in rules directory (path, size, mtime, ctime: an edit, a new or a removed card),
the engine sources that validate cards, the ``regex`` and ``yaml`` packages that run the
samples and parse the YAML, and the Python version. A stale entry
is never served: on any difference the full load runs and the entry is rewritten. The
file lives in the user's cache directory (``$AUTOPSY_CACHE_DIR``, else
``$XDG_CACHE_HOME/autopsy``, else ``~/.cache/autopsy``), never in the package or a run
directory; when that is not writable the full load simply runs every time.
``AUTOPSY_NO_CACHE=1`` turns the cache off.

Team cards (``--rules DIR``) always go through the full load: they are edited between
runs and their refusals must fail the command.

Light on purpose: only ``os`` and ``sys`` at import (``json`` when a cache file is read);
the full loader (``regex``, ``yaml``, the model) is imported on a cache miss only. The file
is JSON, not marshal or pickle: the package never unpickles anything.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: `autopsy --help` may not load it
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any

    from autopsy.engine.loader import Catalog
    from autopsy.engine.types import Card

BUILTIN_PACKAGE = "autopsy._rules"
CACHE_FORMAT = 1  # bump when the cached layout changes
RACY_SECONDS = 2  # results computed from files changed this recently are not cached (see _racy)
_HERE = os.path.dirname(os.path.realpath(__file__))
# The sources whose code decides what a card loads into (validation, samples, literals, enums).
_ENGINE_SOURCES = ("catalog_index.py", "loader.py", "schema.py", "literals.py", "types.py",
                   os.path.join("..", "model.py"))
# Third-party packages that parse the YAML and run the samples.
_DEPENDENCIES = ("regex", "yaml")
_FIELDS = ("id", "title", "severity", "confidence", "status", "needs", "aliases", "docs", "supersedes", "explains",
           "params", "source", "kind")
_TUPLES = ("needs", "aliases", "supersedes", "explains")


class CardInfo:
    """What ``rules list`` / ``rules explain`` print of one card (plain values, no compiled regex)."""

    __slots__ = _FIELDS

    id: str
    title: str
    severity: str
    confidence: str
    status: str
    needs: tuple[str, ...]
    aliases: tuple[str, ...]
    docs: Mapping[str, Any]
    supersedes: tuple[str, ...]
    explains: tuple[str, ...]
    params: Mapping[str, Any]
    source: str
    kind: str

    def __init__(self, **values: Any) -> None:
        for name in _FIELDS:
            setattr(self, name, values[name])

    @classmethod
    def from_card(cls, card: Card) -> CardInfo:
        docs = {k: tuple(v) if isinstance(v, list) else v for k, v in card.docs.items()}
        kind = "pattern" if card.check is None else ("pattern+check" if card.match else "check")
        return cls(id=card.id, title=card.title, severity=str(card.severity), confidence=str(card.confidence),
                   status=card.status, needs=tuple(card.needs), aliases=tuple(card.aliases), docs=docs,
                   supersedes=tuple(card.supersedes), explains=tuple(card.explains), params=dict(card.params),
                   source=card.source, kind=kind)

    def to_data(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _FIELDS}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> CardInfo:
        """From :meth:`to_data` read back from JSON (lists where the card has tuples)."""
        values = dict(data)
        for name in _TUPLES:
            values[name] = tuple(values[name])
        values["docs"] = {k: tuple(v) if isinstance(v, list) else v for k, v in values["docs"].items()}
        return cls(**values)

    def summary(self) -> dict[str, Any]:
        """The one-line view ``autopsy rules list`` prints (same keys as ``loader.card_summary``)."""
        return {"id": self.id, "severity": self.severity, "status": self.status,
                "summary": self.docs.get("summary", ""), "kind": self.kind}


class CatalogIndex:
    """The cards (id -> :class:`CardInfo`, sorted by id), the refusals as messages, the aliases."""

    __slots__ = ("aliases", "cards", "errors")

    def __init__(self, cards: Iterable[CardInfo], errors: Iterable[str], aliases: Mapping[str, str]) -> None:
        self.cards = {c.id: c for c in sorted(cards, key=lambda c: c.id)}
        self.errors = tuple(errors)
        self.aliases = dict(aliases)

    @classmethod
    def from_catalog(cls, catalog: Catalog) -> CatalogIndex:
        return cls((CardInfo.from_card(c) for c in catalog.cards.values()), (str(e) for e in catalog.errors),
                   catalog.aliases)

    def get(self, id_or_alias: str) -> CardInfo | None:
        """The card with this id, or the card that took over this (old) id as an alias (as ``Catalog.get``)."""
        card = self.cards.get(id_or_alias)
        if card is None and id_or_alias in self.aliases:
            card = self.cards.get(self.aliases[id_or_alias])
        return card

    def to_data(self) -> dict[str, Any]:
        return {"cards": [c.to_data() for c in self.cards.values()], "errors": list(self.errors),
                "aliases": dict(self.aliases)}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> CatalogIndex:
        return cls((CardInfo.from_data(c) for c in data["cards"]), data["errors"], data["aliases"])


def builtin_rules_dir() -> str | None:
    """Where the built-in cards live: the installed package data, else ``<repo>/rules``.

    Plain path checks first (``autopsy/_rules`` beside this package in a wheel, ``rules/``
    in a checkout); ``importlib.resources`` (slow to import) only for other layouts.
    """
    package_root = os.path.dirname(_HERE)
    installed = os.path.join(package_root, "_rules")
    if os.path.isdir(installed):
        return installed
    checkout = os.path.join(os.path.dirname(package_root), "rules")
    if os.path.isdir(checkout):
        return checkout
    try:
        from importlib import resources

        path = str(resources.files(BUILTIN_PACKAGE))
        if os.path.isdir(path):
            return path
    except (ModuleNotFoundError, TypeError, ValueError):
        pass
    return None


def builtin_index(*, use_cache: bool | None = None) -> CatalogIndex:
    """The built-in catalog as :func:`load_catalog` with no ``--rules`` sees it, cached when unchanged."""
    if use_cache is None:
        use_cache = not os.environ.get("AUTOPSY_NO_CACHE")

    def full_load() -> CatalogIndex:
        from autopsy.engine.loader import load_catalog

        # fresh=True: the process-wide cache of the built-in load may predate the key taken below.
        return CatalogIndex.from_catalog(load_catalog((), fresh=True))

    base = builtin_rules_dir()
    if base is None:
        return full_load()
    return cached_index(base, full_load, cache_path() if use_cache else None)


def cached_index(base: str, full_load: Callable[[], CatalogIndex], path: str | None) -> CatalogIndex:
    """``full_load()`` of the cards under ``base``, served from ``path`` while its key still holds."""
    key = cache_key(base) if path is not None else None  # taken before the load: see _write
    if path is None or key is None:
        return full_load()
    cached = _read(path, key)
    if cached is not None:
        return cached
    index = full_load()
    _write(path, key, index)
    return index


def cache_dir() -> str | None:
    """The directory for autopsy's cache files, or None when none is configured or known."""
    explicit = os.environ.get("AUTOPSY_CACHE_DIR")
    if explicit:
        return explicit
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return os.path.join(xdg, "autopsy")
    home = os.path.expanduser("~")
    return None if home == "~" else os.path.join(home, ".cache", "autopsy")


def cache_path() -> str | None:
    d = cache_dir()
    if d is None:
        return None
    tag = sys.implementation.cache_tag or "py"
    # One file per installation (the built-in rules' directory): two virtual environments or
    # checkouts used in turn would otherwise overwrite each other's entry on every call.
    import zlib

    where = zlib.crc32(os.fsencode(builtin_rules_dir() or ""))
    return os.path.join(d, f"catalog-{tag}-{where:08x}.json")


def file_stat(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _card_files(base: str) -> list[str]:
    """Every ``*.yaml``/``*.yml`` under ``base``, as the loader's ``rglob`` finds them."""
    found: list[str] = []
    for root, _dirs, files in os.walk(base, followlinks=True):
        found.extend(os.path.join(root, f) for f in files if f.endswith((".yaml", ".yml")))
    return sorted(found)


def _dependency_origin(name: str) -> str | None:
    module = sys.modules.get(name)
    origin = getattr(module, "__file__", None) if module is not None else None
    if origin is None:
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name)
        origin = spec.origin if spec is not None else None
    return origin


def cache_key(base: str) -> tuple[Any, ...] | None:
    """Everything the built-in catalog's load depends on; None when something cannot be stat'ed."""
    parts: list[Any] = [CACHE_FORMAT, sys.version, os.path.abspath(base)]
    for rel in _ENGINE_SOURCES:
        path = os.path.normpath(os.path.join(_HERE, rel))
        parts.append((rel, file_stat(path)))
    for name in _DEPENDENCIES:
        origin = _dependency_origin(name)
        parts.append((name, origin, file_stat(origin) if origin else None))
    for path in _card_files(base):
        parts.append((path, file_stat(path)))
    if any(p[-1] is None for p in parts[3:]):
        return None  # a source inside a zip, a vanished file: no safe key, so no cache
    return tuple(parts)


def _key_text(key: tuple[Any, ...]) -> str:
    import json

    return json.dumps(key)  # a JSON text of str/int/None: compared as text, so tuples and lists never differ


def _read(path: str, key: tuple[Any, ...]) -> CatalogIndex | None:
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        if not isinstance(data, dict) or data.get("key") != _key_text(key):
            return None
        return CatalogIndex.from_data(data["index"])
    except Exception:  # a truncated, foreign or older file is only a miss
        return None


def recently_changed(entries: Iterable[Any]) -> bool:
    """Whether a ``(..., file_stat)`` entry changed so recently that a same-size edit could share its times.

    File times tick coarsely (a few ms); an edit right after a key was taken could keep
    size, mtime and ctime and would then be served stale. Such a result is not stored.
    """
    import time

    limit = time.time_ns() - RACY_SECONDS * 1_000_000_000
    return any(isinstance(p, tuple) and isinstance(p[-1], tuple) and p[-1][2] >= limit for p in entries)


def _write(path: str, key: tuple[Any, ...], index: CatalogIndex) -> None:
    import json

    if recently_changed(key):
        return
    data = index.to_data()
    try:
        blob = json.dumps({"key": _key_text(key), "index": data}, ensure_ascii=False).encode("utf-8")
        # JSON has no date and turns int keys into text: cache only what reads back as it was.
        if CatalogIndex.from_data(json.loads(blob)["index"]).to_data() != data:
            return
    except (TypeError, ValueError):  # a param JSON cannot hold (a YAML date): serve uncached
        return
    write_cache_file(path, blob)


def write_cache_file(path: str, blob: bytes) -> None:
    """Write a cache entry atomically (a concurrent reader sees the old file or the new one);
    a failure (read-only home, full disk) is ignored: a cache is only an optimisation."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the new one
    except OSError:  # read-only home, full disk: the cache is only an optimisation
        try:
            os.unlink(tmp)
        except OSError:
            pass


__all__ = ["CardInfo", "CatalogIndex", "builtin_index", "builtin_rules_dir", "cache_dir", "cache_key",
           "cache_path", "cached_index", "file_stat", "recently_changed", "write_cache_file"]
