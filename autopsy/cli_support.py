"""What the ``autopsy`` command checks around an analysis: its inputs, team cards, progress.

* :func:`collect_run_dirs`: the run directories to analyse and one message per bad path
  (a missing path, a file such as a README matched by ``runs/*``), so one bad path never
  stops the others from being analysed.
* :func:`parent_of_runs_hint`: ``autopsy analyze runs/`` on a folder that holds several
  runs would merge them into one report; say so (the analysis still runs as asked).
* :func:`team_card_errors`: cards from ``--rules`` that the loader refused, or whose path
  does not mirror their id: a refused team rule must fail the command, not pass CI quietly.
* :func:`progress_mode` and :class:`Ticker`: a bar over many runs, an elapsed-time
  indicator for one large run; on a terminal only, never in machine formats.

Light on purpose (``autopsy --help`` imports :mod:`autopsy.cli`): at module level only the
standard library modules that click imports anyway (``glob`` and ``pathlib`` are imported
where used).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pathlib import Path

    from autopsy.engine.loader import Catalog

PROGRESS_MIN_RUNS = 3
PROGRESS_MIN_BYTES = 256 * 1024**2  # below this an analysis takes about a second: no indicator
MACHINE_FORMATS = ("json", "jsonl", "sarif", "junit", "html")


# ---------------------------------------------------------------------------- inputs


def collect_run_dirs(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(directories to analyse, one message per path that cannot be analysed).

    Paths are kept as given; globs the shell did not expand (quoted, Windows) are expanded
    here, keeping only directories.
    """
    import glob

    dirs: list[str] = []
    problems: list[str] = []
    for arg in args:
        if not os.path.exists(arg) and glob.has_magic(arg):
            matches = sorted(m for m in glob.glob(arg) if os.path.isdir(m))
            if not matches:
                problems.append(f"{arg}: no run directory matches this pattern")
            dirs.extend(matches)
        elif not os.path.exists(arg):
            problems.append(f"{arg}: no such directory")
        elif not os.path.isdir(arg):
            # Most often a README or a notes file matched by an unquoted `runs/*`.
            problems.append(f"{arg}: not a directory, skipped (a trailing slash, `runs/*/`, matches only "
                            "directories)")
        else:
            dirs.append(arg)
    return dirs, problems


# Patterns as source text, compiled by `re.match` on first use (its cache keeps them): compiling
# them at import cost ~2 ms of every `autopsy --help`.
# Strong signs that a directory is a run root of its own (configs alone are not: a sweep
# folder often holds its shared config).
_RUN_FILE = (r"(?i)^(?:.*\.(?:log|out|err)|nohup\.out|slurm-.*|trainer_state\.json|"
              r".*tfevents.*|exit_?code(?:\.txt)?|returncode)$")
_RUN_SUBDIR = r"(?i)^(?:checkpoints?|checkpoint[-_]\d+|ckpts?|logs?|tb|tensorboard|runs)$"
# Sub-directories that are parts of one run, not runs: per-rank logs, checkpoints, tb splits.
_PART_OF_A_RUN = (
    r"(?i)^(?:\d+|(?:rank|node|worker|host|proc|gpu|device|attempt)[_\-.]?\d+|checkpoints?|checkpoint[-_]?\d+|"
    r"ckpts?|global_step[-_]?\d+|step[-_]?\d+|epoch[-_]?\d+|iter(?:ation)?[-_]?\d+|logs?|tb|tensorboard|"
    r"events|configs?|conf|train|training|eval|evaluation|val|valid|validation|test|outputs?|wandb|\..*)$")
_MAX_SUBDIRS = 500  # a huge folder: look no further than this many entries


def _entries(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return [e for _, e in zip(range(_MAX_SUBDIRS), it, strict=False)]
    except OSError:
        return []


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=True)
    except OSError:
        return False


def _has_run_files(entries: Sequence[os.DirEntry[str]]) -> bool:
    return any(re.match(_RUN_FILE, e.name) and not _is_dir(e) for e in entries)


def _looks_like_run_root(path: str) -> bool:
    entries = _entries(path)
    return _has_run_files(entries) or any(re.match(_RUN_SUBDIR, e.name) and _is_dir(e) for e in entries)


def parent_of_runs_hint(run_dir: str) -> str | None:
    """A one-line hint when ``run_dir`` holds no run artifacts itself but several runs."""
    entries = _entries(run_dir)
    if _has_run_files(entries):
        return None
    runs = [e for e in entries if _is_dir(e) and not re.match(_PART_OF_A_RUN, e.name) and _looks_like_run_root(e.path)]
    if len(runs) < 2:
        return None
    shown = run_dir.rstrip("/\\") or run_dir
    return f"{shown} holds {len(runs)} run directories; analyse them with `autopsy analyze {shown}/*/`"


# -------------------------------------------------------------------------- team cards


def team_card_errors(catalog: Catalog, rules_dirs: Sequence[str]) -> list[str]:
    """Messages for the cards of ``rules_dirs`` that were refused or are misnamed (none: all good).

    Built-in cards are the project's own: their errors stay in the report as rule errors.
    """
    from pathlib import Path

    from autopsy.engine.loader import load_catalog

    if not rules_dirs:
        return []
    builtin = {str(e) for e in load_catalog(()).errors}  # cached: parsed once per process
    messages = [str(e) for e in catalog.errors if str(e) not in builtin]
    roots = [Path(d) for d in rules_dirs]
    for card in catalog.cards.values():
        source = Path(card.source)
        for root in roots:
            try:
                rel = source.relative_to(root)
            except ValueError:
                continue
            message = _path_mismatch(card.id, rel)
            if message:
                messages.append(f"{source}: id: {message}")
            break
    return messages


def _path_mismatch(card_id: str, rel: Path) -> str | None:
    """Why ``rel`` (relative to its rules dir) does not name card ``card_id``; None when it does.

    A team directory may be flat: ``<id>.yaml`` anywhere, or ``<family>/<name>.yaml`` like
    the built-in ``rules/`` tree. The mirror lets a reader find a card from its id.
    """
    family, _, name = card_id.partition(".")
    if rel.stem == card_id or (rel.stem == name and rel.parent.name == family):
        return None
    return (f"{card_id!r} does not match the file's path; name it {family}/{name}{rel.suffix} or "
            f"{card_id}{rel.suffix} (under the --rules directory)")


def plain_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart (``rules list``); as ``report.common.plain_table``,
    which the command does not import because that module pulls in the whole model."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for r in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return out


# ---------------------------------------------------------------------------- progress


def progress_mode(fmt: str, *, quiet: bool, tty: bool, n_runs: int, large: bool) -> str | None:
    """``"bar"`` over many runs, ``"ticker"`` for one or two large ones, None for no indicator."""
    if fmt in MACHINE_FORMATS or quiet or not tty or not large:
        return None
    return "bar" if n_runs >= PROGRESS_MIN_RUNS else "ticker"


def work_is_large(dirs: Sequence[str]) -> bool:
    """Many runs, or more bytes than a moment's work (stops walking once that is clear)."""
    if len(dirs) >= PROGRESS_MIN_RUNS:
        return True
    total = 0
    for d in dirs:
        for root, _dirs, files in os.walk(d):
            for name in files:
                try:
                    total += os.lstat(os.path.join(root, name)).st_size
                except OSError:
                    continue
                if total >= PROGRESS_MIN_BYTES:
                    return True
    return False


class Ticker:
    """``analysing runs/big ... 12s`` redrawn on one terminal line while a run is analysed.

    The analysis gives no progress callback (threading one through every parser would cost
    more than it is worth), so this shows that work goes on and for how long. A daemon
    thread redraws the line; leaving the context erases it.
    """

    def __init__(self, label: str, *, stream: TextIO, interval: float = 0.5) -> None:
        self.label = label
        self.stream = stream
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._start = 0.0

    def _draw(self) -> None:
        frames = "|/-\\"
        elapsed = time.monotonic() - self._start
        frame = frames[int(elapsed / self.interval) % len(frames)]
        self.stream.write(f"\r\x1b[K{frame} analysing {self.label} ... {elapsed:.0f}s")
        self.stream.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._draw()

    def __enter__(self) -> Ticker:
        self._start = time.monotonic()
        self._draw()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.stream.write("\r\x1b[K")
        self.stream.flush()
