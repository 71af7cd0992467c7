"""``autopsy report``: re-render a saved JSON report without the run directory."""

from __future__ import annotations

import sys

import click

from autopsy.cli_output import (
    EXIT_CODES_HELP,
    EXIT_OK,
    append_option,
    die,
    fail_on_option,
    finish,
    format_option,
    github_option,
    guarded,
    no_color_option,
    output_option,
    quiet_option,
    verbose_option,
)


@click.command(epilog=EXIT_CODES_HELP)
@click.argument("saved", type=click.Path(dir_okay=False, allow_dash=True), metavar="SAVED.json")
@format_option
@output_option
@fail_on_option
@quiet_option
@verbose_option
@github_option
@append_option
@no_color_option
@guarded
def report(saved: str, fmt: str, output: str | None, fail_on: str, quiet: bool, verbose: bool, github: bool,
           append: str | None, no_color: bool) -> None:
    """Re-render a saved JSON report (json, array or jsonl) without the run directory."""
    from pathlib import Path

    from autopsy.report.json_report import ReportFormatError, reports_from_text

    try:
        if saved == "-":
            text = sys.stdin.read()
        else:
            text = Path(saved).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        die(f"cannot read {saved}: {getattr(exc, 'strerror', None) or exc}")
    try:
        reports = reports_from_text(text)
    except ReportFormatError as exc:
        die(f"{saved}: {exc}")
    finish(reports, fmt=fmt, output=output, no_color=no_color, quiet=quiet, github=github, append=append,
           fail_on=fail_on, catalog=None, worst_error=EXIT_OK, verbose=verbose)
