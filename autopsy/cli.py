"""The ``autopsy`` command: parse arguments, call the API, render, exit.

Only the ``autopsy.cli*`` modules import click: this one (the group and ``analyze``),
:mod:`autopsy.cli_report`, :mod:`autopsy.cli_rules` (the other commands) and
:mod:`autopsy.cli_output` (what they share: options, rendering, exit codes).
Only click and the standard library modules click loads anyway are imported at module level,
so that ``autopsy --help`` costs little more than importing click; the model, the engine,
pandas and Jinja2 are imported inside the commands (``rules list``/``explain`` read the light
catalog index, see :mod:`autopsy.engine.catalog_index`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from autopsy import __version__
from autopsy.cli_diff import diff
from autopsy.cli_output import (
    EXIT_CODES_HELP,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_USAGE,
    append_option,
    die,
    fail_on_option,
    finish,
    force_option,
    format_option,
    github_option,
    guarded,
    no_color_option,
    output_option,
    quiet_option,
    say,
    verbose_option,
)
from autopsy.cli_report import report
from autopsy.cli_rules import load_catalog, rules
from autopsy.cli_support import (
    Ticker,
    collect_run_dirs,
    parent_of_runs_hint,
    progress_mode,
    work_is_large,
)
from autopsy.cli_watch import watch

if TYPE_CHECKING:
    from autopsy.model import Report
    from autopsy.run import Run


# --------------------------------------------------------------------------- helpers


def parse_size(text: str) -> int:
    """``1000``, ``512K``, ``64MB``, ``2GiB`` -> bytes (K/M/G/T are powers of 1024)."""
    from autopsy.units import parse_size as parse

    try:
        return parse(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _size_option(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    return None if value is None else parse_size(value)


def _split_list(values: Sequence[str]) -> list[str] | None:
    items = [s.strip() for v in values for s in v.split(",") if s.strip()]
    return items or None


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


# -------------------------------------------------------------------------- commands


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES_HELP)
@click.version_option(__version__, "-V", "--version", prog_name="autopsy")
def main() -> None:
    """Post-mortem analyzer for ML training runs: root cause, evidence, recovery.

    \b
      autopsy analyze runs/exp42/
      autopsy analyze runs/* --format jsonl -o reports.jsonl
      autopsy analyze runs/exp42 --format md --append ISSUES.md
      autopsy rules explain disk.full
      autopsy diff runs/yesterday runs/today
      autopsy watch runs/exp42 --log train.log -- python train.py
    """


# the other commands live in their own modules; click lists commands by name, whatever the order here
main.add_command(diff)
main.add_command(report)
main.add_command(rules)
main.add_command(watch)


@main.command(epilog=EXIT_CODES_HELP)
@click.argument("run_dirs", nargs=-1, required=True, metavar="RUN_DIR...")
@format_option
@output_option
@click.option("--select", multiple=True, metavar="IDS", help="Only these rule ids or families (comma list).")
@click.option("--ignore", multiple=True, metavar="IDS", help="Skip these rule ids or families (comma list).")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(exists=True, file_okay=False),
              metavar="DIR", help="Add (or override) rule cards from DIR, each named <family>/<name>.yaml or "
                   "<id>.yaml; a refused card is an error (exit 2). Repeatable.")
@fail_on_option
@quiet_option
@verbose_option
@github_option
@append_option
@click.option("--max-bytes-per-file", "max_bytes", callback=_size_option, default=None, metavar="SIZE",
              help="Read at most SIZE of each log or event file (e.g. 512M, 2G; default 8G); the rest is "
                   "reported as not read.")
@click.option("--check-crc/--no-check-crc", default=False, show_default=True,
              help="Verify the CRC of every TensorBoard record (slower; damaged records are reported).")
@click.option("--baseline", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Accept the findings listed in FILE (by fingerprint): they are listed as accepted, not "
                   "reported, and fail no --fail-on gate.")
@click.option("--update-baseline", is_flag=True,
              help="Add every finding of this analysis to the --baseline file (created if missing; never "
                   "inside a run directory), then apply it.")
@click.option("--config", "config", type=click.Path(exists=True, dir_okay=False), default=None, metavar="FILE",
              help="Team defaults from FILE (.autopsy.toml or pyproject.toml [tool.autopsy]) instead of the "
                   "one found above the run directories or the working directory.")
@click.option("--no-config", is_flag=True, help="Ignore team config files.")
@force_option
@no_color_option
@guarded
def analyze(run_dirs: tuple[str, ...], fmt: str, output: str | None, select: tuple[str, ...],
            ignore: tuple[str, ...], rules_dirs: tuple[str, ...], fail_on: str, quiet: bool, verbose: bool,
            github: bool, append: str | None, max_bytes: int | None, check_crc: bool, baseline: str | None,
            update_baseline: bool, config: str | None, no_config: bool, force: bool, no_color: bool) -> None:
    """Analyse one or more run directories (shell globs work, quoted or not).

    Team defaults (rule dirs, select/ignore, --fail-on, format, baseline) are read from
    [tool.autopsy] in pyproject.toml or from .autopsy.toml, the nearest one above the run
    directories, else above the working directory; options given here win.
    """
    dirs, bad_paths = collect_run_dirs(run_dirs)
    from autopsy.cli_team import apply_baseline_file, team_settings

    team = team_settings(click.get_current_context(), dirs, config=config, no_config=no_config, quiet=quiet,
                         fmt=fmt, select=select, ignore=ignore, rules_dirs=rules_dirs, fail_on=fail_on,
                         max_bytes=max_bytes, baseline=baseline)
    fmt, select, ignore, rules_dirs = team.fmt, team.select, team.ignore, team.rules_dirs
    fail_on, max_bytes, baseline = team.fail_on, team.max_bytes, team.baseline
    from autopsy.api import analyze_run
    from autopsy.engine.runner import select_cards
    from autopsy.report.sanitize import term_name
    from autopsy.run import LoadOptions, RunError

    catalog = load_catalog(rules_dirs)
    sel, ign = _split_list(select), _split_list(ignore)
    try:
        select_cards(catalog.cards.values(), sel, ign, aliases=catalog.aliases)
    except ValueError as exc:
        die(str(exc))
    options = LoadOptions(check_crc=check_crc)
    if max_bytes:
        from dataclasses import replace


        options = replace(options, max_bytes_per_file=max_bytes)

    # Each bad path is one line now; the good runs are analysed and the exit code says 2.
    for message in bad_paths:
        say(f"autopsy: error: {message}")
    for d in dirs:
        hint = parent_of_runs_hint(d)
        if hint:
            say(f"autopsy: hint: {hint}")
    reports: list[Report] = []
    # The HTML report of one run draws its charts and log context from the parsed run: keep
    # the one the analysis built rather than reading the run again.
    keep_run = fmt == "html" and len(dirs) == 1
    runs: list[Run] | None = [] if keep_run else None
    worst_error = EXIT_USAGE if bad_paths else EXIT_OK
    tty = _stderr_is_tty()
    mode = progress_mode(fmt, quiet=quiet, tty=tty, n_runs=len(dirs), large=tty and work_is_large(dirs))
    bar = click.progressbar(dirs, label="analysing", file=sys.stderr, show_pos=True,
                            item_show_func=lambda d: term_name(d) if d else "") if mode == "bar" else None
    with bar if bar is not None else _nullbar(dirs) as items:
        for d in items:
            try:
                with Ticker(term_name(d), stream=sys.stderr) if mode == "ticker" else _nullbar([]):
                    report, run = analyze_run(d, select=sel, ignore=ign, options=options, catalog=catalog)
                reports.append(report)
                if runs is not None:
                    runs.append(run)
            except RunError as exc:
                say(f"autopsy: error: {exc}")
                worst_error = max(worst_error, EXIT_USAGE)
            except Exception as exc:  # a bug in autopsy: report it, keep the other runs
                if os.environ.get("AUTOPSY_DEBUG"):
                    raise
                say(f"autopsy: internal error analysing {d}: {type(exc).__name__}: {exc} "
                    "(set AUTOPSY_DEBUG=1 for the traceback)")
                worst_error = EXIT_INTERNAL
    reports = apply_baseline_file(reports, baseline, update=update_baseline, run_dirs=dirs, quiet=quiet)
    finish(reports, fmt=fmt, output=output, no_color=no_color, quiet=quiet, github=github, append=append,
           fail_on=fail_on, catalog=catalog, worst_error=worst_error, runs=runs, verbose=verbose, run_dirs=dirs,
           force=force)


class _nullbar:
    """No progress indicator: the items as they are."""

    def __init__(self, items: Sequence[str]) -> None:
        self.items = items

    def __enter__(self) -> Sequence[str]:
        return self.items

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":  # pragma: no cover
    main()
