"""``autopsy diff``: compare the run that died with the run(s) that worked."""

from __future__ import annotations

import os

import click

from autopsy.cli_output import (
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_USAGE,
    die,
    emit,
    guarded,
    no_color_option,
    output_option,
    use_color,
)

DIFF_EXIT_HELP = """\b
Exit codes:
  0  the diff was made (whatever it found; --fail-if-different changes that)
  1  with --fail-if-different: a difference beyond noise was found
  2  a run directory is missing or unreadable, or the arguments are wrong
  3  internal error: autopsy itself crashed"""


@click.command(epilog=DIFF_EXIT_HELP)
@click.argument("runs", nargs=-1, required=True, metavar="GOOD... BAD")
@click.option("--against", "against", default=None, metavar="BAD",
              help="The bad run; every positional RUN is then a good run (autopsy diff G1 G2 --against BAD).")
@click.option("-f", "--format", "fmt", type=click.Choice(["terminal", "md", "json", "html"]), default="terminal",
              show_default=True, help="Output format.")
@output_option
@click.option("-v", "--verbose", is_flag=True, help="List every difference of every kind, not the first few.")
@click.option("--fail-if-different", is_flag=True,
              help="Exit 1 when the runs differ beyond noise (a CI gate against a reference run).")
@no_color_option
@guarded
def diff(runs: tuple[str, ...], against: str | None, fmt: str, output: str | None, verbose: bool,
         fail_if_different: bool, no_color: bool) -> None:
    """Rank what differs between good run(s) and a bad run: config, environment, log lines, metrics.

    \b
      autopsy diff runs/yesterday runs/today
      autopsy diff runs/ok1 runs/ok2 --against runs/broken --format md
    """
    if against is None:
        if len(runs) < 2:
            die("diff needs a good run and a bad run (autopsy diff GOOD BAD, or GOOD... --against BAD)")
        goods, bad = list(runs[:-1]), runs[-1]
    else:
        goods, bad = list(runs), against
    missing = [p for p in (*goods, bad) if not os.path.isdir(p)]
    if missing:
        die("; ".join(f"{p}: not a directory" for p in missing))
    from autopsy.compare import diff as run_diff
    from autopsy.run import RunError

    try:
        result = run_diff(goods, bad)
    except RunError as exc:
        die(str(exc), EXIT_USAGE)
    except Exception as exc:  # a bug in autopsy: say so, with the documented code
        if os.environ.get("AUTOPSY_DEBUG"):
            raise
        die(f"internal error comparing runs: {type(exc).__name__}: {exc} (set AUTOPSY_DEBUG=1 for the traceback)",
            EXIT_INTERNAL)
    if fmt == "json":
        from autopsy.report.diff_json import render_json

        text = render_json(result)
    elif fmt == "md":
        from autopsy.report.diff_text import render_markdown

        text = render_markdown(result)
    elif fmt == "html":
        from autopsy.report.diff_html import render_html

        text = render_html(result)
    else:
        from autopsy.report.diff_text import render_terminal

        text = render_terminal(result, verbose=verbose)
    emit(text, output, use_color(no_color, output))
    raise SystemExit(1 if fail_if_different and not result.agree else EXIT_OK)
