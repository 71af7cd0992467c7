"""The ``autopsy`` command: parse arguments, call the API, render, exit. Nothing else imports click.

Only click and the standard library modules click loads anyway are imported at module level,
so that ``autopsy --help`` costs little more than importing click; the model, the engine,
pandas and Jinja2 are imported inside the commands (``rules list``/``explain`` read the light
catalog index, see :mod:`autopsy.engine.catalog_index`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import click

from autopsy import __version__
from autopsy.cli_support import (
    MACHINE_FORMATS,
    Ticker,
    collect_run_dirs,
    parent_of_runs_hint,
    plain_table,
    progress_mode,
    team_card_errors,
    work_is_large,
)

if TYPE_CHECKING:
    from autopsy.engine.catalog_index import CatalogIndex
    from autopsy.engine.loader import Catalog
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
     runs are still analysed and reported), unreadable or malformed saved report,
     unknown --select/--ignore rule, a --rules card refused or misnamed
  3  internal error: autopsy itself crashed on a run (the other runs are still reported)
  When several apply, the highest code wins (3 over 2 over 1): a run that was not
  analysed must not pass for a clean one, nor hide behind a finding.
"""


class _Fail(Exception):
    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def _die(message: str, code: int = EXIT_USAGE) -> NoReturn:
    raise _Fail(message, code)


# --------------------------------------------------------------------------- helpers


def parse_size(text: str) -> int:
    """``1000``, ``512K``, ``64MB``, ``2GiB`` -> bytes (K/M/G/T are powers of 1024)."""
    t = text.strip().upper().replace(" ", "")
    for suffix in ("IB", "B"):
        if t.endswith(suffix) and len(t) > len(suffix) and t[-len(suffix) - 1] in "KMGT":
            t = t[: -len(suffix)]
            break
    mult = 1
    if t and t[-1] in "KMGT":
        mult = 1024 ** ("KMGT".index(t[-1]) + 1)
        t = t[:-1]
    try:
        value = float(t)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a size (e.g. 512M, 2G, 1000)") from None
    if value <= 0:
        raise click.BadParameter("must be positive")
    return int(value * mult)


def _size_option(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    return None if value is None else parse_size(value)


def _split_list(values: Sequence[str]) -> list[str] | None:
    items = [s.strip() for v in values for s in v.split(",") if s.strip()]
    return items or None


def expand_run_dirs(args: Sequence[str]) -> list[str]:
    """The run directories of ``args``; the first bad path is an error (see collect_run_dirs)."""
    dirs, problems = collect_run_dirs(args)
    if problems:
        _die(problems[0])
    if not dirs:
        _die("no run directory to analyse")
    return dirs


def _use_color(no_color: bool, output: str | None) -> bool:
    if no_color or output or "NO_COLOR" in os.environ:
        return False
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _load_catalog(rules: Sequence[str]) -> Catalog:
    """The catalog; a refused or misnamed card from ``--rules`` is an input error (exit 2)."""
    from autopsy.engine.loader import load_catalog

    catalog = load_catalog(tuple(rules))
    problems = team_card_errors(catalog, rules)
    if problems:
        for message in problems[:-1]:
            click.echo(f"autopsy: error: card refused: {message}", err=True)
        _die(f"card refused: {problems[-1]}")
    return catalog


def _catalog_index(rules: Sequence[str]) -> CatalogIndex:
    """What ``rules list``/``explain`` print: the cached built-in index, or a full load with ``--rules``.

    Both hold the same cards and refusals (the index is the full load's result, served only
    while no card, engine source or dependency changed); team cards are always loaded in full.
    """
    from autopsy.engine.catalog_index import CatalogIndex, builtin_index

    if not rules:
        return builtin_index()
    return CatalogIndex.from_catalog(_load_catalog(rules))


def _exit_code(reports: Sequence[Report], fail_on: str, worst_error: int) -> int:
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
           runs: Sequence[Any] | None = None) -> str:
    """The reports in one output format (one document for all runs)."""
    if fmt == "text":
        from autopsy.report.terminal import render_table, render_terminal, render_verdict

        if quiet:
            return "".join(render_verdict(r, color=color) + "\n" for r in reports)
        if len(reports) == 1:
            return render_terminal(reports[0], color=color)
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
            _die("--format html renders one run at a time; use json/jsonl/md for many")
        from autopsy.report.html import render_html

        return render_html(reports[0], runs[0] if runs else None)
    _die(f"unknown format {fmt!r}")  # pragma: no cover - click restricts the choices


def _emit(text: str, output: str | None, color: bool) -> None:
    if output and output != "-":
        from pathlib import Path

        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            _die(f"cannot write {output}: {exc.strerror or exc}")
        return
    click.echo(text, nl=False, color=color)


def _after(reports: Sequence[Report], *, fmt: str, output: str | None, github: bool, append: str | None,
           quiet: bool, catalog: Any) -> None:
    """Side outputs: GitHub annotations and step summary, ISSUES-log append."""
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY") or None
    if github or summary_path:
        from autopsy.report.github import annotation_lines, write_step_summary
        from autopsy.report.markdown import render_markdown_many
        from autopsy.report.terminal import render_verdict

        # Annotations go to stdout, where Actions reads workflow commands, unless stdout
        # carries a machine-readable document; then stderr (Actions reads both).
        to_stderr = fmt in MACHINE_FORMATS and not (output and output != "-")
        for line in annotation_lines(reports):
            click.echo(line, err=to_stderr)
        if summary_path:
            verdicts = "\n".join(f"- {render_verdict(r)}" for r in reports)
            try:
                write_step_summary(summary_path, "## autopsy\n\n" + verdicts + "\n\n"
                                   + render_markdown_many(list(reports), catalog))
            except OSError as exc:
                click.echo(f"autopsy: cannot write the step summary {summary_path}: {exc}", err=True)
    if append:
        from autopsy.report.append import append_entries
        from autopsy.report.markdown import render_entries

        entries = [e for r in reports for e in render_entries(r, catalog)]
        try:
            result = append_entries(append, entries)
        except OSError as exc:
            _die(f"cannot append to {append}: {exc.strerror or exc}")
        if not quiet:
            click.echo(f"autopsy: {append_message(len(result.added), len(result.skipped), append)}", err=True)


def append_message(added: int, skipped: int, log: str) -> str:
    """What ``--append`` did, in words (stderr)."""
    if added == 0:
        if skipped:
            return f"nothing new to append to {log} (fingerprint already present)"
        return f"nothing to append to {log} (no failure found)"
    text = f"{added} {'entry' if added == 1 else 'entries'} appended to {log}"
    return text + (f"; {skipped} already present" if skipped else "")


def _finish(reports: Sequence[Report], *, fmt: str, output: str | None, no_color: bool, quiet: bool,
            github: bool, append: str | None, fail_on: str, catalog: Any, worst_error: int,
            runs: Sequence[Any] | None = None) -> NoReturn:
    color = fmt == "text" and _use_color(no_color, output)
    if reports:
        _emit(render(reports, fmt, color=color, quiet=quiet, catalog=catalog, runs=runs), output, color)
        _after(reports, fmt=fmt, output=output, github=github, append=append, quiet=quiet, catalog=catalog)
    raise SystemExit(_exit_code(reports, fail_on, worst_error))


# -------------------------------------------------------------------------- commands

_format_option = click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
                              help="Output format. json: one object (an array for many runs); jsonl: one per line.")
_output_option = click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
                              help="Write the report to FILE instead of stdout.")
_fail_on_option = click.option("--fail-on", type=click.Choice(FAIL_ON, case_sensitive=False), default="none",
                               show_default=True, help="Exit 1 when a finding at or above this severity exists.")
_quiet_option = click.option("-q", "--quiet", is_flag=True, help="Text: only the one-line verdict per run.")
_github_option = click.option("--github", is_flag=True,
                              help="Emit GitHub Actions annotations (automatic step summary when "
                                   "GITHUB_STEP_SUMMARY is set).")
_append_option = click.option("--append", type=click.Path(dir_okay=False), default=None, metavar="ISSUES.md",
                              help="Append ISSUES-log entries to this file (atomic; the same failure only once).")
_no_color_option = click.option("--no-color", is_flag=True, help="No ANSI colour (also: NO_COLOR set, not a TTY).")


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES_HELP)
@click.version_option(__version__, "-V", "--version", prog_name="autopsy")
def main() -> None:
    """Post-mortem analyzer for ML training runs: root cause, evidence, recovery.

    \b
      autopsy analyze runs/exp42/
      autopsy analyze runs/* --format jsonl -o reports.jsonl
      autopsy analyze runs/exp42 --format md --append ISSUES.md
      autopsy rules explain disk.full
    """


def _guarded(fn: Any) -> Any:
    """Turn _Fail into a message on stderr and its exit code (click's own usage errors exit 2 too)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _Fail as exc:
            click.echo(f"autopsy: error: {exc}", err=True)
            raise SystemExit(exc.code) from None

    return wrapper


@main.command(epilog=EXIT_CODES_HELP)
@click.argument("run_dirs", nargs=-1, required=True, metavar="RUN_DIR...")
@_format_option
@_output_option
@click.option("--select", multiple=True, metavar="IDS", help="Only these rule ids or families (comma list).")
@click.option("--ignore", multiple=True, metavar="IDS", help="Skip these rule ids or families (comma list).")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(exists=True, file_okay=False),
              metavar="DIR", help="Add (or override) rule cards from DIR, each named <family>/<name>.yaml or "
                   "<id>.yaml; a refused card is an error (exit 2). Repeatable.")
@_fail_on_option
@_quiet_option
@_github_option
@_append_option
@click.option("--max-bytes-per-file", "max_bytes", callback=_size_option, default=None, metavar="SIZE",
              help="Read at most SIZE of each log or event file (e.g. 512M, 2G; default 8G); the rest is "
                   "reported as not read.")
@click.option("--check-crc/--no-check-crc", default=False, show_default=True,
              help="Verify the CRC of every TensorBoard record (slower; damaged records are reported).")
@_no_color_option
@_guarded
def analyze(run_dirs: tuple[str, ...], fmt: str, output: str | None, select: tuple[str, ...],
            ignore: tuple[str, ...], rules_dirs: tuple[str, ...], fail_on: str, quiet: bool, github: bool,
            append: str | None, max_bytes: int | None, check_crc: bool, no_color: bool) -> None:
    """Analyse one or more run directories (shell globs work, quoted or not)."""
    dirs, bad_paths = collect_run_dirs(run_dirs)
    from autopsy.api import analyze as api_analyze
    from autopsy.engine.runner import select_cards
    from autopsy.run import LoadOptions, RunError

    catalog = _load_catalog(rules_dirs)
    sel, ign = _split_list(select), _split_list(ignore)
    try:
        select_cards(catalog.cards.values(), sel, ign, aliases=catalog.aliases)
    except ValueError as exc:
        _die(str(exc))
    options = LoadOptions(check_crc=check_crc)
    if max_bytes:
        from dataclasses import replace


        options = replace(options, max_bytes_per_file=max_bytes)

    # Each bad path is one line now; the good runs are analysed and the exit code says 2.
    for message in bad_paths:
        click.echo(f"autopsy: error: {message}", err=True)
    for d in dirs:
        hint = parent_of_runs_hint(d)
        if hint:
            click.echo(f"autopsy: hint: {hint}", err=True)
    reports: list[Report] = []
    worst_error = EXIT_USAGE if bad_paths else EXIT_OK
    tty = _stderr_is_tty()
    mode = progress_mode(fmt, quiet=quiet, tty=tty, n_runs=len(dirs), large=tty and work_is_large(dirs))
    with click.progressbar(dirs, label="analysing", file=sys.stderr, show_pos=True,
                           item_show_func=lambda d: d or "") if mode == "bar" else _nullbar(dirs) as items:
        for d in items:
            try:
                with Ticker(d, stream=sys.stderr) if mode == "ticker" else _nullbar([]):
                    report = api_analyze(d, select=sel, ignore=ign, options=options, catalog=catalog)
                reports.append(report)
            except RunError as exc:
                click.echo(f"autopsy: error: {exc}", err=True)
                worst_error = max(worst_error, EXIT_USAGE)
            except Exception as exc:  # a bug in autopsy: report it, keep the other runs
                if os.environ.get("AUTOPSY_DEBUG"):
                    raise
                click.echo(f"autopsy: internal error analysing {d}: {type(exc).__name__}: {exc} "
                           "(set AUTOPSY_DEBUG=1 for the traceback)", err=True)
                worst_error = EXIT_INTERNAL
    runs = None
    if fmt == "html" and len(reports) == 1:
        from autopsy.run import load_run

        try:  # charts need the parsed series; the report alone renders without them
            runs = [load_run(reports[0].run.path, options)]
        except (RunError, OSError):
            runs = None
    _finish(reports, fmt=fmt, output=output, no_color=no_color, quiet=quiet, github=github, append=append,
            fail_on=fail_on, catalog=catalog, worst_error=worst_error, runs=runs)


class _nullbar:
    """No progress indicator: the items as they are."""

    def __init__(self, items: Sequence[str]) -> None:
        self.items = items

    def __enter__(self) -> Sequence[str]:
        return self.items

    def __exit__(self, *exc: object) -> None:
        return None


@main.command(epilog=EXIT_CODES_HELP)
@click.argument("saved", type=click.Path(dir_okay=False, allow_dash=True), metavar="SAVED.json")
@_format_option
@_output_option
@_fail_on_option
@_quiet_option
@_github_option
@_append_option
@_no_color_option
@_guarded
def report(saved: str, fmt: str, output: str | None, fail_on: str, quiet: bool, github: bool,
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
        _die(f"cannot read {saved}: {getattr(exc, 'strerror', None) or exc}")
    try:
        reports = reports_from_text(text)
    except ReportFormatError as exc:
        _die(f"{saved}: {exc}")
    _finish(reports, fmt=fmt, output=output, no_color=no_color, quiet=quiet, github=github, append=append,
            fail_on=fail_on, catalog=None, worst_error=EXIT_OK)


@main.group()
def rules() -> None:
    """The rule catalog: list the rules, explain one."""


@rules.command("list")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(exists=True, file_okay=False), metavar="DIR",
              help="Include rule cards from DIR.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per rule.")
@_guarded
def rules_list(rules_dirs: tuple[str, ...], as_json: bool) -> None:
    """Every rule: id, severity, status, summary."""
    catalog = _catalog_index(rules_dirs)
    rows = [c.summary() for c in sorted(catalog.cards.values(), key=lambda c: c.id)]
    if as_json:
        import json

        for row in rows:
            click.echo(json.dumps(row, ensure_ascii=False))
    else:
        table = plain_table(["ID", "SEVERITY", "STATUS", "SUMMARY"],
                            [[r["id"], r["severity"], r["status"], str(r["summary"]).strip()] for r in rows])
        click.echo("\n".join(table))
    for err in catalog.errors:  # built-in cards only: a refused team card stopped us above
        click.echo(f"autopsy: card refused: {err}", err=True)


@rules.command("explain")
@click.argument("rule_id")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(exists=True, file_okay=False), metavar="DIR",
              help="Include rule cards from DIR.")
@_guarded
def rules_explain(rule_id: str, rules_dirs: tuple[str, ...]) -> None:
    """A rule's documentation: summary, why it matters, how to confirm, what to do."""
    catalog = _catalog_index(rules_dirs)
    card = catalog.get(rule_id)
    if card is None:
        _die(f"unknown rule {rule_id!r}; `autopsy rules list` shows them")
    docs = card.docs
    out = [f"{card.id}: {card.title}",
           f"severity: {card.severity}   confidence: {card.confidence}   status: {card.status}",
           f"needs: {', '.join(card.needs) or '-'}"]
    if card.aliases:
        out.append(f"aliases: {', '.join(card.aliases)}")
    for title, key in (("Summary", "summary"), ("Why it matters", "why"), ("How to confirm", "confirm"),
                       ("What to do", "action")):
        if docs.get(key):
            out += ["", f"{title}:", *(f"  {line}" for line in str(docs[key]).strip().splitlines())]
    for title, key in (("Known false positives", "false_positives"), ("References", "references")):
        items = docs.get(key) or []
        if items:
            out += ["", f"{title}:", *(f"  - {item}" for item in items)]
    if card.supersedes or card.explains:
        out += ["", "Precedence:"]
        if card.supersedes:
            out.append(f"  primary over: {', '.join(card.supersedes)}")
        if card.explains:
            out.append(f"  explains: {', '.join(card.explains)}")
    if card.params:
        out += ["", "Parameters:", *(f"  {k}: {v}" for k, v in sorted(card.params.items()))]
    out += ["", f"card: {card.source}"]
    click.echo("\n".join(out))


if __name__ == "__main__":  # pragma: no cover
    main()
