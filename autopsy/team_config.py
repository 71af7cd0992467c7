"""Team defaults for ``autopsy analyze``: ``[tool.autopsy]`` in ``pyproject.toml`` or ``.autopsy.toml``.

Looked for from each run directory upward, then from the working directory upward; in each
directory ``.autopsy.toml`` wins over ``pyproject.toml``, and a ``pyproject.toml`` without a
``[tool.autopsy]`` table is passed over (the search goes on upward). ``.autopsy.toml`` holds
the keys at its top level (or under ``[tool.autopsy]``, so one text serves both files)::

    [tool.autopsy]
    select = ["oom", "disk", "checkpoint.corrupt"]   # rule ids or families
    ignore = ["loss.plateau"]
    rules = ["ci/autopsy-rules"]                     # team rule-card dirs, relative to this file
    fail-on = "error"
    format = "text"
    max-bytes-per-file = "2G"
    baseline = "ci/autopsy-baseline.json"            # relative to this file

Keys may be spelled with ``-`` or ``_``. An unknown key or a wrong type is an error
(:class:`ConfigError`, exit 2 on the command line): a typo must not silently loosen a CI gate.
A value given on the command line replaces the config's, except ``--rules``, which adds dirs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autopsy.fileio import read_capped

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CONFIG_NAMES = (".autopsy.toml", "pyproject.toml")
MAX_CONFIG_BYTES = 1 << 20
FAIL_ON_VALUES = ("none", "info", "warning", "error", "critical")
_KEYS = ("select", "ignore", "rules", "fail-on", "format", "max-bytes-per-file", "baseline")


class ConfigError(Exception):
    """A team config that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class TeamConfig:
    """The settings of one config file; None (or empty) where the file does not set a key.

    ``rules`` and ``baseline`` are resolved against the directory of ``path``.
    """

    path: Path
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] | None = None
    rules: tuple[Path, ...] = ()
    fail_on: str | None = None
    format: str | None = None
    max_bytes_per_file: int | None = None
    baseline: Path | None = None


def _read_table(path: Path) -> dict[str, Any] | None:
    """The autopsy table of a config file, or None when a pyproject.toml has none."""
    try:
        raw, over = read_capped(path, MAX_CONFIG_BYTES)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if over:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes; not a config file")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    tool = data.get("tool")
    table = tool.get("autopsy") if isinstance(tool, dict) else None
    if path.name == "pyproject.toml":
        return table if isinstance(table, dict) else None
    if table is not None:
        if not isinstance(table, dict) or set(data) != {"tool"}:
            raise ConfigError(f"{path}: put the settings either at the top level or under [tool.autopsy], not both")
        return table
    return data


def find_config(start: str | os.PathLike[str]) -> Path | None:
    """The nearest config file at or above ``start`` (a directory), or None."""
    here = Path(os.path.abspath(start))
    for d in (here, *here.parents):
        for name in CONFIG_NAMES:
            candidate = d / name
            if candidate.is_file() and _read_table(candidate) is not None:
                return candidate
    return None


def _strings(path: Path, key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{path}: {key} must be a list of strings")
    return tuple(v.strip() for v in value)


def _string(path: Path, key: str, value: Any, choices: Sequence[str] | None = None) -> str:
    if not isinstance(value, str) or (choices is not None and value.lower() not in choices):
        allowed = f" (one of {', '.join(choices)})" if choices else ""
        raise ConfigError(f"{path}: {key} must be a string{allowed}, not {value!r}")
    return value.lower() if choices is not None else value


def load_config(path: str | os.PathLike[str]) -> TeamConfig:
    """Read and check one config file (``.autopsy.toml`` or a ``pyproject.toml``)."""
    from autopsy.units import parse_size

    p = Path(os.path.abspath(path))
    table = _read_table(p)
    if table is None:
        raise ConfigError(f"{p}: no [tool.autopsy] table")
    settings = {str(k).replace("_", "-"): v for k, v in table.items()}
    unknown = sorted(set(settings) - set(_KEYS))
    if unknown:
        raise ConfigError(f"{p}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                          f"(known: {', '.join(_KEYS)})")
    base = p.parent
    out: dict[str, Any] = {"path": p}
    if "select" in settings:
        out["select"] = _strings(p, "select", settings["select"])
    if "ignore" in settings:
        out["ignore"] = _strings(p, "ignore", settings["ignore"])
    if "rules" in settings:
        dirs = tuple(base / d for d in _strings(p, "rules", settings["rules"]))
        missing = [str(d) for d in dirs if not d.is_dir()]
        if missing:
            raise ConfigError(f"{p}: rules dir not found: {', '.join(missing)}")
        out["rules"] = dirs
    if "fail-on" in settings:
        out["fail_on"] = _string(p, "fail-on", settings["fail-on"], FAIL_ON_VALUES)
    if "format" in settings:
        out["format"] = _string(p, "format", settings["format"])
    if "max-bytes-per-file" in settings:
        v = settings["max-bytes-per-file"]
        try:
            if isinstance(v, bool) or not isinstance(v, int | str):
                raise ValueError("an integer or a size such as \"2G\"")
            out["max_bytes_per_file"] = parse_size(str(v))
        except ValueError as exc:
            raise ConfigError(f"{p}: max-bytes-per-file: {exc}") from None
    if "baseline" in settings:
        out["baseline"] = base / _string(p, "baseline", settings["baseline"])
    return TeamConfig(**out)


def discover(run_dirs: Sequence[str | os.PathLike[str]], cwd: str | os.PathLike[str] | None = None
             ) -> TeamConfig | None:
    """The team config for an analysis of ``run_dirs``: the nearest one above the run
    directories (they must agree), else the nearest one above ``cwd``; None when there is none.

    Runs under two different configs raise :class:`ConfigError` (analyse them separately, or
    name one config explicitly): applying one team's gate to another's runs would be silent.
    """
    each = [find_config(d) for d in run_dirs]
    found = {str(c): c for c in each if c is not None}
    if len(found) > 1:
        raise ConfigError("the runs are under different team configs (" + ", ".join(sorted(found))
                          + "): analyse them separately or pass --config FILE")
    if found and None in each:
        raise ConfigError(f"only some of the runs are under the team config {next(iter(found))}: "
                          "analyse them separately or pass --config FILE")
    if found:
        return load_config(next(iter(found.values())))
    path = find_config(cwd if cwd is not None else os.getcwd())
    return load_config(path) if path is not None else None
