"""``autopsy report``: re-render a saved JSON report without the run directory."""

from __future__ import annotations

import os
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

MAX_SAVED_BYTES = 32 * 2**20  # a saved report of a large run is a few MB


def _read_saved(path: str) -> bytes:
    """At most ``MAX_SAVED_BYTES + 1`` bytes of a regular file (a FIFO or device is refused, not waited on)."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            from autopsy.cli_targets import file_kind

            die(f"cannot read {path}: it is {file_kind(st.st_mode)}, not a regular file")
        chunks = []
        left = MAX_SAVED_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


@click.command(epilog=EXIT_CODES_HELP)
@click.argument("saved", type=click.Path(dir_okay=False, allow_dash=True), metavar="SAVED.json")
@format_option
@output_option
@fail_on_option
@quiet_option
@verbose_option
@github_option
@append_option
@click.option("--baseline", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Accept the findings listed in FILE (by fingerprint), as analyze --baseline does.")
@no_color_option
@guarded
def report(saved: str, fmt: str, output: str | None, fail_on: str, quiet: bool, verbose: bool, github: bool,
           append: str | None, baseline: str | None, no_color: bool) -> None:
    """Re-render a saved JSON report (json, array or jsonl) without the run directory."""
    from autopsy.report.json_report import ReportFormatError, reports_from_text

    try:
        if saved == "-":
            data = sys.stdin.buffer.read(MAX_SAVED_BYTES + 1)
        else:
            data = _read_saved(saved)
        if len(data) > MAX_SAVED_BYTES:
            die(f"{saved}: larger than {MAX_SAVED_BYTES // 2**20} MB: not an autopsy report")
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        die(f"cannot read {saved}: {getattr(exc, 'strerror', None) or exc}")
    try:
        reports = reports_from_text(text)
    except ReportFormatError as exc:
        die(f"{saved}: {exc}")
    if baseline is not None:
        from autopsy.cli_team import apply_baseline_file

        reports = apply_baseline_file(reports, baseline, update=False, run_dirs=(), quiet=quiet)
    finish(reports, fmt=fmt, output=output, no_color=no_color, quiet=quiet, github=github, append=append,
           fail_on=fail_on, catalog=None, worst_error=EXIT_OK, verbose=verbose)
