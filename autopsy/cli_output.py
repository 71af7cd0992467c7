"""What every ``autopsy`` command shares: exit codes, output options, rendering, the exit.

A command parses its own inputs, then hands the reports to :func:`finish`, which renders
them in the chosen format, writes them (stdout or ``-o``), produces the side outputs
(GitHub annotations and step summary, ``--append`` to an ISSUES log) and exits with the
code :data:`EXIT_CODES_HELP` documents. :class:`CliFail` (raised by :func:`die`) is an
input error that :func:`guarded` turns into one line on stderr and its exit code.
Like :mod:`autopsy.cli`, only click and the standard library at module level.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import click

from autopsy.cli_support import MACHINE_FORMATS

if TYPE_CHECKING:
    from autopsy.model import Report

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3

FORMATS = ("text", "md", "json", "jsonl", "sarif", "junit", "html")
FAIL_ON = ("none", "info", "warning", "error", "critical")

EXIT_CODES_HELP = """\b
Exit codes:
  0  analysis ran; no finding at or above --fail-on (default: never fail on findings)
  1  a finding at or above --fail-on exists (e.g. --fail-on error)
  2  usage or input error: bad option, missing or non-directory RUN_DIR (the other
     runs are still analysed and reported), a RUN_DIR with nothing autopsy can read,
     unreadable or malformed saved report, unknown --select/--ignore rule, a --rules
     card refused or misnamed
  3  internal error: autopsy itself crashed on a run (the other runs are still reported)
  When several apply, the highest code wins (3 over 2 over 1): a run that was not
  analysed must not pass for a clean one, nor hide behind a finding.
"""


class CliFail(Exception):
    """An input error: its message goes to stderr, its code is the exit status."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def die(message: str, code: int = EXIT_USAGE) -> NoReturn:
    raise CliFail(message, code)


def terminal_width(output: str | None) -> int | None:
    """The text report's width: the terminal's when it is narrower than 100 columns, else the default."""
    if output is not None or not sys.stdout.isatty():
        return None
    import shutil

    cols = shutil.get_terminal_size((100, 24)).columns
    return cols if 40 <= cols < 100 else None


def use_color(no_color: bool, output: str | None) -> bool:
    if no_color or output or "NO_COLOR" in os.environ:
        return False
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False



def exit_code(reports: Sequence[Report], fail_on: str, worst_error: int) -> int:
    """The highest code that applies: 3 internal error, 2 input error (a run with nothing autopsy
    can read is one: it was not analysed, so it must not pass a --fail-on gate), 1 a finding."""
    from autopsy.report.common import nothing_readable

    if any(nothing_readable(r) is not None for r in reports):
        worst_error = max(worst_error, EXIT_USAGE)
    if worst_error:
        return worst_error
    if fail_on != "none":
        from autopsy.model import Severity

        threshold = Severity.parse(fail_on)
        if any(f.severity >= threshold for r in reports for f in r.findings):
            return EXIT_FINDINGS
    return EXIT_OK


# ------------------------------------------------------------------------- rendering


def render(reports: Sequence[Report], fmt: str, *, color: bool, quiet: bool, catalog: Any = None,
           runs: Sequence[Any] | None = None, verbose: bool = False, width: int | None = None) -> str:
    """The reports in one output format (one document for all runs)."""
    if fmt == "text":
        from autopsy.report.terminal import render_table, render_terminal, render_verdict

        if quiet:
            return "".join(render_verdict(r, color=color) + "\n" for r in reports)
        if len(reports) == 1:
            return render_terminal(reports[0], color=color, verbose=verbose,
                                   **({"width": width} if width is not None else {}))
        return render_table(reports, color=color)
    if fmt == "md":
        from autopsy.report.markdown import render_markdown_many

        return render_markdown_many(list(reports), catalog)
    if fmt == "json":
        import json

        from autopsy.report.json_report import report_to_dict, report_to_json

        if len(reports) == 1:
            return report_to_json(reports[0]) + "\n"
        return json.dumps([report_to_dict(r) for r in reports], indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    if fmt == "jsonl":
        from autopsy.report.json_report import reports_to_jsonl

        return reports_to_jsonl(reports)
    if fmt == "sarif":
        from autopsy.report.sarif import render_sarif

        return render_sarif(reports, catalog)
    if fmt == "junit":
        from autopsy.report.junit import render_junit

        return render_junit(reports)
    if fmt == "html":
        if len(reports) != 1:
            die("--format html renders one run at a time; use json/jsonl/md for many")
        from autopsy.report.html import render_html

        return render_html(reports[0], runs[0] if runs else None)
    die(f"unknown format {fmt!r}")  # pragma: no cover - click restricts the choices


def say(message: str) -> None:
    """One line on stderr. Names and messages that carry run text (file and directory names,
    error strings) have their control characters and undecodable bytes made visible."""
    from autopsy.report.sanitize import term_name

    try:
        click.echo(term_name(message), err=True)
    except OSError:  # stderr itself is gone: nothing left to tell
        pass


def in_actions(github: bool) -> bool:
    """Whether stdout is read by GitHub Actions for workflow commands."""
    return github or os.environ.get("GITHUB_ACTIONS") == "true"


def _stdout_gone(exc: OSError) -> NoReturn:
    """stdout failed (full disk, closed pipe): one line, exit 2, and no second complaint at exit."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    die(f"cannot write the report to stdout: {exc.strerror or exc}")


def emit(text: str, output: str | None, color: bool, *, fmt: str = "text", github: bool = False,
         run_dirs: Sequence[str] = (), force: bool = False) -> None:
    """The rendered document to ``-o`` (checked, atomic) or stdout; write errors exit 2."""
    from autopsy.report.sanitize import gh_stdout, valid_utf8

    text = valid_utf8(text, json_doc=fmt in ("json", "jsonl", "sarif"))
    if output and output != "-":
        from autopsy.cli_targets import TargetRefused, resolve_target, write_atomic

        try:
            real = resolve_target(output, what="the report", run_dirs=run_dirs, force=force)
            write_atomic(real, text.encode("utf-8"))
        except TargetRefused as exc:
            die(str(exc))
        except OSError as exc:
            die(f"cannot write {output}: {exc.strerror or exc}")
        return
    if in_actions(github):
        text = gh_stdout(text, fmt)
    try:
        click.echo(text, nl=False, color=color)
        sys.stdout.flush()
    except OSError as exc:
        _stdout_gone(exc)


def side_outputs(reports: Sequence[Report], *, fmt: str, output: str | None, github: bool, append: str | None,
                 quiet: bool, catalog: Any, run_dirs: Sequence[str] = (), force: bool = False) -> None:
    """Side outputs: GitHub annotations and step summary, ISSUES-log append."""
    from autopsy.report.sanitize import valid_utf8

    summary_path = os.environ.get("GITHUB_STEP_SUMMARY") or None
    if github or summary_path:
        from autopsy.report.github import annotation_lines, write_step_summary
        from autopsy.report.markdown import render_markdown_many
        from autopsy.report.terminal import render_verdict

        # Annotations go to stdout, where Actions reads workflow commands, unless stdout
        # carries a machine-readable document; then stderr (Actions reads both).
        to_stderr = fmt in MACHINE_FORMATS and not (output and output != "-")
        try:
            for line in annotation_lines(reports):
                click.echo(valid_utf8(line), err=to_stderr)
        except OSError as exc:
            _stdout_gone(exc)
        if summary_path:
            from autopsy.cli_targets import TargetRefused, resolve_target

            verdicts = "\n".join(f"- {render_verdict(r)}" for r in reports)
            try:
                real = resolve_target(summary_path, what="the step summary", run_dirs=run_dirs, force=force)
                write_step_summary(str(real), valid_utf8("## autopsy\n\n" + verdicts + "\n\n"
                                                         + render_markdown_many(list(reports), catalog)))
            except (OSError, TargetRefused) as exc:
                say(f"autopsy: cannot write the step summary {summary_path}: {exc}")
    if append:
        from autopsy.cli_targets import TargetRefused, resolve_target
        from autopsy.report.append import append_entries
        from autopsy.report.markdown import render_entries

        entries = [(fp, valid_utf8(text)) for r in reports for fp, text in render_entries(r, catalog)]
        try:
            real = resolve_target(append, what="the ISSUES-log entries", run_dirs=run_dirs, force=force)
            result = append_entries(real, entries)
        except TargetRefused as exc:
            die(str(exc))
        except OSError as exc:
            die(f"cannot append to {append}: {exc.strerror or exc}")
        if not quiet:
            say(f"autopsy: {append_message(len(result.added), len(result.skipped), append)}")


def append_message(added: int, skipped: int, log: str) -> str:
    """What ``--append`` did, in words (stderr)."""
    if added == 0:
        if skipped:
            return f"nothing new to append to {log} (this run's failure is already in the log)"
        return f"nothing to append to {log} (no failure found)"
    text = f"{added} {'entry' if added == 1 else 'entries'} appended to {log}"
    return text + (f"; {skipped} already present" if skipped else "")


def finish(reports: Sequence[Report], *, fmt: str, output: str | None, no_color: bool, quiet: bool,
           github: bool, append: str | None, fail_on: str, catalog: Any, worst_error: int,
           runs: Sequence[Any] | None = None, verbose: bool = False, run_dirs: Sequence[str] = (),
           force: bool = False) -> NoReturn:
    color = fmt == "text" and use_color(no_color, output)
    if reports:
        # `--format md --append LOG` without -o: the entries went into LOG; printing them
        # again would only be pasted twice. The one-line append message says what happened.
        if not (append and fmt == "md" and not output):
            emit(render(reports, fmt, color=color, quiet=quiet, catalog=catalog, runs=runs, verbose=verbose,
                        width=terminal_width(output)), output, color, fmt=fmt, github=github, run_dirs=run_dirs,
                 force=force)
        side_outputs(reports, fmt=fmt, output=output, github=github, append=append, quiet=quiet, catalog=catalog,
                     run_dirs=run_dirs, force=force)
    raise SystemExit(exit_code(reports, fail_on, worst_error))




# ---------------------------------------------------------------------------- options

format_option = click.option("-f", "--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
                              help="Output format. json: one object (an array for many runs); jsonl: one per line.")
output_option = click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
                              help="Write the report to FILE instead of stdout.")
fail_on_option = click.option("--fail-on", type=click.Choice(FAIL_ON, case_sensitive=False), default="none",
                               show_default=True, help="Exit 1 when a finding at or above this severity exists.")
quiet_option = click.option("-q", "--quiet", is_flag=True, help="Text: only the one-line verdict per run.")
verbose_option = click.option("-v", "--verbose", is_flag=True,
                              help="Text: every fact, all evidence and why each rule could not be checked.")
github_option = click.option("--github", is_flag=True,
                              help="Emit GitHub Actions annotations (automatic step summary when "
                                   "GITHUB_STEP_SUMMARY is set).")
append_option = click.option("--append", type=click.Path(dir_okay=False), default=None, metavar="ISSUES.md",
                              help="Append ISSUES-log entries to this file (atomic; the same failure only once).")
force_option = click.option("--force", is_flag=True,
                             help="Allow -o/--append targets inside a run directory being analysed.")
no_color_option = click.option("--no-color", is_flag=True, help="No ANSI colour (also: NO_COLOR set, not a TTY).")


def guarded(fn: Any) -> Any:
    """Turn CliFail into a message on stderr and its exit code (click's own usage errors exit 2 too)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except CliFail as exc:
            say(f"autopsy: error: {exc}")
            raise SystemExit(exc.code) from None

    return wrapper
