"""``autopsy watch``: follow a live run directory (or launch and watch a command) and warn early."""

from __future__ import annotations

import os
import sys

import click

from autopsy.cli_output import EXIT_INTERNAL, FAIL_ON, die, guarded, say

WATCH_EXIT_HELP = """\b
Exit codes:
  0  the watch ended (Ctrl-C, --once, or the command exited 0) with no warning at or
     above --fail-on
  1  a warning (or, after a command, a post-mortem finding) at or above --fail-on
  2  usage error: bad option, RUN_DIR missing (directory mode), the command not found
  3  internal error: autopsy itself crashed
  N  wrapper mode: the command's own non-zero exit status (128+S when killed by signal S)"""


@click.command(epilog=WATCH_EXIT_HELP)
@click.argument("run_dir", metavar="RUN_DIR")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND...]")
@click.option("--log", "log_path", type=click.Path(dir_okay=False), default=None, metavar="PATH",
              help="Wrapper mode: also write the command's output (stdout and stderr) to PATH, and watch it. "
                   "Truncated first, like tee. Never chosen for you: without it the output is only shown.")
@click.option("--interval", type=click.FloatRange(min=0.05), default=10.0, show_default=True, metavar="SECONDS",
              help="Seconds between two looks at the run directory.")
@click.option("--once", is_flag=True, help="Look once (every rule on what is there now), print the warnings, exit.")
@click.option("-f", "--format", "fmt", type=click.Choice(["terminal", "jsonl"]), default="terminal",
              show_default=True,
              help="terminal: warnings on stderr and a live status line on a TTY; jsonl: one JSON event per "
                   "line on stdout (warning, update, notice, status, exit, report); the command's output then "
                   "goes to stderr.")
@click.option("--notify-cmd", default=None, metavar="CMD",
              help="Run CMD (with the shell) once per new warning, the finding as JSON on stdin "
                   "(notify-send, curl to a chat webhook, a pager). Never blocks the watch; a failure is "
                   "reported once.")
@click.option("--webhook", default=None, metavar="URL", help="POST each new warning as JSON to URL (http/https).")
@click.option("--fail-on", type=click.Choice(FAIL_ON, case_sensitive=False), default="none", show_default=True,
              help="Exit 1 when a warning (or a post-mortem finding) at or above this severity was seen.")
@click.option("--select", multiple=True, metavar="IDS", help="Only these rule ids or families (comma list).")
@click.option("--ignore", multiple=True, metavar="IDS", help="Skip these rule ids or families (comma list).")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(exists=True, file_okay=False), metavar="DIR",
              help="Add (or override) rule cards from DIR; their watch_* params tune the early warnings.")
@guarded
def watch(run_dir: str, command: tuple[str, ...], log_path: str | None, interval: float, once: bool, fmt: str,
          notify_cmd: str | None, webhook: str | None, fail_on: str, select: tuple[str, ...],
          ignore: tuple[str, ...], rules_dirs: tuple[str, ...]) -> None:
    """Follow a run directory while it trains and warn before it dies.

    Each look reads only what was appended since the last one, runs the early warnings
    (disk-fill forecast, checkpoints over the retention limit, NaN/Inf loss, spikes, plateau at
    chance, LR off its configured value, no new step, an empty log, tokenizer overflow,
    NCCL/gloo timeouts) and the rule catalog on what has arrived. Each warning is shown once,
    and again when its evidence changes. Nothing is written into RUN_DIR.

    With a command after --, autopsy launches it, passes its output through (and into
    --log PATH), watches RUN_DIR meanwhile, and when the command exits prints the full
    post-mortem and exits with the command's exit status.

    \b
      autopsy watch runs/exp42
      autopsy watch runs/exp42 --notify-cmd 'notify-send "training" "$(jq -r .finding.message)"'
      autopsy watch runs/exp42 --format jsonl --webhook https://hooks.example.com/T0/B0
      autopsy watch runs/exp42 --log train.log -- python train.py --config cfg.yaml
    """
    from autopsy.watch.session import Session

    if once and command:
        die("--once looks at a run directory; it takes no command")
    if log_path is not None and not command:
        die("--log names where a launched command's output goes: give the command after --")
    if not command and not os.path.isdir(run_dir):
        die(f"{run_dir}: " + ("not a directory" if os.path.exists(run_dir) else "no such directory"))
    try:
        loop = Session(run_dir, fmt=fmt, interval=interval, notify_cmd=notify_cmd, webhook=webhook, fail_on=fail_on,
                    select=[s for s in select if s] or None, ignore=[s for s in ignore if s] or None,
                    rules_dirs=rules_dirs)
    except ValueError as exc:
        die(str(exc))
    try:
        code = loop.run_once() if once else (loop.run_command(list(command), log_path) if command
                                             else loop.run_forever())
    except FileNotFoundError as exc:
        die(f"cannot run {command[0]!r}: {exc.strerror or exc}")
    except Exception as exc:
        if os.environ.get("AUTOPSY_DEBUG"):
            raise
        say(f"autopsy: internal error while watching: {type(exc).__name__}: {exc} "
            "(set AUTOPSY_DEBUG=1 for the traceback)")
        sys.exit(EXIT_INTERNAL)
    sys.exit(code)
