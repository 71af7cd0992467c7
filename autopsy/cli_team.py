"""``autopsy analyze``'s team config and baseline: the glue between click and the library.

The logic lives in :mod:`autopsy.team_config` (finding and checking the config) and
:mod:`autopsy.baseline` (reading, applying and updating a baseline); this module only decides
which value wins (the command line over the config: a parameter whose source is click's
default takes the config's value) and turns their errors into exit 2.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from autopsy.cli_output import FORMATS, die, say

if TYPE_CHECKING:
    from autopsy.model import Report
    from autopsy.team_config import TeamConfig


@dataclass
class Settings:
    """The analyze settings after the team config is applied."""

    fmt: str
    select: tuple[str, ...]
    ignore: tuple[str, ...]
    rules_dirs: tuple[str, ...]
    fail_on: str
    max_bytes: int | None
    baseline: str | None
    config: TeamConfig | None


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP, None)


def team_settings(ctx: click.Context, dirs: Sequence[str], *, config: str | None, no_config: bool,
                  quiet: bool, **given: Any) -> Settings:
    """Merge the team config (``--config FILE``, or the one found above the runs or the cwd)
    into the command line's values; say on stderr which file was used (unless ``quiet``)."""
    from autopsy.team_config import ConfigError, discover, load_config

    cfg = None
    if not no_config:
        try:
            cfg = load_config(config) if config else discover(dirs)
        except ConfigError as exc:
            die(f"team config: {exc}")
    s = Settings(fmt=given["fmt"], select=given["select"], ignore=given["ignore"], rules_dirs=given["rules_dirs"],
                 fail_on=given["fail_on"], max_bytes=given["max_bytes"], baseline=given["baseline"], config=cfg)
    if cfg is None:
        return s
    if not quiet:
        say(f"autopsy: team config {cfg.path}")
    if cfg.format is not None and not _given(ctx, "fmt"):
        if cfg.format not in FORMATS:
            die(f"team config: {cfg.path}: format must be one of {', '.join(FORMATS)}, not {cfg.format!r}")
        s.fmt = cfg.format
    if cfg.select is not None and not _given(ctx, "select"):
        s.select = cfg.select
    if cfg.ignore is not None and not _given(ctx, "ignore"):
        s.ignore = cfg.ignore
    if cfg.fail_on is not None and not _given(ctx, "fail_on"):
        s.fail_on = cfg.fail_on
    if cfg.max_bytes_per_file is not None and not _given(ctx, "max_bytes"):
        s.max_bytes = cfg.max_bytes_per_file
    if cfg.baseline is not None and not _given(ctx, "baseline"):
        s.baseline = str(cfg.baseline)
    s.rules_dirs = tuple(str(d) for d in cfg.rules) + tuple(given["rules_dirs"])  # team cards, then yours
    return s


def apply_baseline_file(reports: list[Report], path: str | None, *, update: bool, run_dirs: Sequence[str],
                        quiet: bool) -> list[Report]:
    """``--update-baseline``: add every finding of ``reports`` to the baseline at ``path``
    (never inside a run directory); then hide the findings it accepts."""
    from autopsy.baseline import BaselineError, apply_baseline, load_baseline, updated_baseline
    from autopsy.cli_targets import TargetRefused, resolve_target, write_atomic

    if path is None:
        if update:
            die("--update-baseline needs a baseline file: --baseline FILE, or baseline = \"...\" in the team config")
        return reports
    if update:
        try:
            real = resolve_target(path, what="the baseline", run_dirs=run_dirs)
            existing = load_baseline(real) if os.path.exists(real) else None
        except (TargetRefused, BaselineError) as exc:
            die(str(exc))
        text, added, kept = updated_baseline(reports, existing)
        try:
            real.parent.mkdir(parents=True, exist_ok=True)  # ci/autopsy-baseline.json in a fresh checkout
            write_atomic(real, text.encode("utf-8"))
        except OSError as exc:
            die(f"cannot write the baseline {path}: {exc.strerror or exc}")
        if not quiet:
            say(f"autopsy: baseline {path}: {added} finding{'s' if added != 1 else ''} added, {kept} kept")
    try:
        baseline = load_baseline(path)
    except BaselineError as exc:
        die(str(exc))
    return [apply_baseline(r, baseline) for r in reports]
