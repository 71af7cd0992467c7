"""How a run ended and when it last made progress: the run-state helpers of the run rules.

Shared by :mod:`autopsy.checks.run` (log.empty, run.stalled, run.incomplete) and
:mod:`autopsy.checks.checkpoint`. They never compare clocks they cannot trust: in-log
timestamps are left out (a naive timestamp may be in another time zone); TensorBoard wall
times and file mtimes are unix seconds and may be compared with each other and with the
analysis time, mtimes only while ``run.clock`` says they are the run's own.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import numpy as np
import regex

from autopsy.checks.common import tb_chain
from autopsy.checks.hang import ctrl_c_marked
from autopsy.checks.run_progress import trained_after as trained_after
from autopsy.checks.run_progress import went_on_after as went_on_after
from autopsy.clock import ERROR_LINE, TERMINATION_LINE
from autopsy.model import ArtifactKind, Evidence
from autopsy.parsers.types import Checkpoint, LogScan, Traceback
from autopsy.run import Run

# Exit statuses that mean "stopped from outside" rather than "failed": SIGTERM (143, -15 as
# Python's subprocess reports it, 15 as torchrun's signal number) and SIGINT (130, -2).
TERMINATION_EXIT_CODES = frozenset({143, -15, 15, 130, -2})
# Exceptions that are how a stop request surfaces in Python, not errors of the program (Lightning
# raises SIGTERMException from its signal connector when it is told to stop on SIGTERM).
TERMINATION_EXCEPTIONS = ("KeyboardInterrupt", "SignalException", "SystemExit", "SIGTERMException")
# An exception whose message says a process of the run was ended by SIGTERM or SIGINT: torch's
# DataLoader ("DataLoader worker (pid 4020138) is killed by signal: Terminated.", from
# torch/utils/data/_utils/signal_handling.py, the signal's strsignal name) when the process group is
# stopped from outside (scancel, a kill, a time limit's SIGTERM). The stop, not a crash: the workers
# die with the main process. SIGKILL ("Killed") and faults ("Segmentation fault", "Bus error") are not.
_SIGNAL_STOP_MESSAGE = regex.compile(r"\bkilled by signal: (?:Terminated|Interrupt)\b")


def is_signal_stop(tb: Traceback) -> bool:
    """A traceback that is how an outside SIGTERM/SIGINT surfaced: a termination exception, or an
    exception saying a process of the run was killed by one (the DataLoader's report of its workers)."""
    return (tb.exc_type.rsplit(".", 1)[-1] in TERMINATION_EXCEPTIONS
            or bool(tb.exc_type and _SIGNAL_STOP_MESSAGE.search(tb.message)))


# What a training program prints once its loop is over: it ended by itself, not cut short. Read only
# in a log's last lines. ("Training completed in 1191.66 seconds", "Finish training: the best ...",
# "=====Training Finished.", "Training complete!", "done training in 812.3 seconds" (fairseq),
# "`Trainer.fit` stopped: `max_epochs=10` reached." (Lightning), "Optimization Finished!" (TF examples),
# "Optimization Done." (Caffe), "10 epochs completed in 1.234 hours." (ultralytics))
COMPLETION_LINE = regex.compile(
    r"(?i:\b(?:training|fine-?tuning)\s+(?:is\s+|has\s+)?(?:completed?|finished|done|ended)\b"
    r"|\b(?:finish(?:ed)?|done|end(?: of)?|completed?)\s+(?:the\s+)?training\b(?!\s+steps?\b)"
    r"|\boptimization (?:finished|done)\b|(?<!\d)\d+ epochs completed in\b)"
    r"|`Trainer\.fit` stopped: `max_(?:epochs|steps)=\d+` reached"
)


def completion_line(run: Run) -> Evidence | None:
    """The last line of a log's tail saying training finished, or None."""
    for scan in run.logs:
        for lineno, line in reversed(scan.tail):
            if COMPLETION_LINE.search(line) and not ERROR_LINE.search(line.strip()):
                return _tail_evidence(scan, lineno, line)
    return None


_THREAD_ENTRY = frozenset({"_bootstrap_inner", "_bootstrap"})


def _thread_traceback(tb: Traceback) -> bool:
    """Printed by ``threading.excepthook``: the outermost frame is the thread's entry in threading.py."""
    return bool(tb.frames) and tb.frames[0].function in _THREAD_ENTRY and \
        tb.frames[0].file.replace("\\", "/").endswith("threading.py")


def thread_errors_after_finish(run: Run) -> tuple[str, int] | None:
    """(log, line) of the line saying training finished, when every traceback that log prints after it
    is a thread's (or a bare header of one interleaved with it); else None.

    An exception that escapes a ``threading.Thread`` ends that thread only ("Exception in thread
    Thread-1:", outermost frame ``_bootstrap_inner``); the interpreter goes on. After "End
    training....", a tensorboardX or logging writer thread that finds its queue closed at interpreter
    exit ("OSError: handle is closed") did not end the run: the run had ended. A thread's traceback
    before any such line (a thread that ran the loop, a loader thread whose death left it waiting), or
    a main-thread traceback after it (the final save failing), is still an ending.
    """
    done = completion_line(run)
    if done is None or done.path is None or done.line is None:
        return None
    later = [tb for tb in run.all_tracebacks if tb.path == done.path and tb.line_start > done.line]
    if any(_thread_traceback(tb) for tb in later) and all(
            _thread_traceback(tb) or (not tb.frames and not tb.exc_type) for tb in later):
        return done.path, done.line
    return None


def after_finish(cutoff: tuple[str, int] | None, path: str | None, line: int | None) -> bool:
    """``line`` of log ``path`` comes after the cutoff :func:`thread_errors_after_finish` found."""
    return cutoff is not None and path == cutoff[0] and line is not None and line > cutoff[1]


@dataclass(frozen=True)
class Signal:
    """One trace of how the run ended: an error, an external termination, or an exit status."""

    kind: str  # "traceback", "child_failure", "exit_code", "error_line", "termination"
    text: str
    evidence: Evidence
    termination: bool  # stopped from outside (SIGTERM, time limit, preemption), not a failure


def _tail_evidence(scan: LogScan, lineno: int, line: str) -> Evidence:
    return Evidence(path=scan.path, line=lineno, excerpt=line.strip()[:300], rank=scan.rank)


# end_signals per run: four rules ask, and each asking searched every tail line of every log again
# (a run of thousands of small logs spent ~0.2 s on it). A Run's parsed views never change once read.
_SIGNALS: weakref.WeakKeyDictionary[Run, list[Signal]] = weakref.WeakKeyDictionary()


def end_signals(run: Run) -> list[Signal]:
    """Every recorded trace of the run ending: tracebacks, child failures, exit codes, tail lines.

    Not the tracebacks and error lines of background threads printed after the log said training
    finished (:func:`thread_errors_after_finish`): the run had ended by then.
    """
    try:
        cached = _SIGNALS.get(run)
    except TypeError:  # a stand-in without weak references (tests): computed each time
        return _end_signals(run)
    if cached is None:
        cached = _SIGNALS[run] = _end_signals(run)
    return list(cached)


def _end_signals(run: Run) -> list[Signal]:
    cutoff = thread_errors_after_finish(run)
    return [s for s in _all_end_signals(run) if not after_finish(cutoff, s.evidence.path, s.evidence.line)]


def _all_end_signals(run: Run) -> list[Signal]:
    out: list[Signal] = []
    for tb in run.all_tracebacks:
        term = is_signal_stop(tb) or (not tb.exc_type and ctrl_c_marked(run, tb))
        out.append(Signal("traceback", f"{tb.exc_type}: {tb.message}"[:300],
                          Evidence(path=tb.path, line=tb.line_start, line_end=tb.line_end,
                                   excerpt=f"{tb.exc_type}: {tb.message}"[:300], rank=tb.rank), term))
    for cf in run.all_child_failures:
        code = cf.exitcode
        term = code is not None and code in TERMINATION_EXIT_CODES
        out.append(Signal("child_failure", f"rank {cf.rank} exitcode {code}",
                          Evidence(path=cf.path, line=cf.line, excerpt=f"exitcode: {code}", rank=cf.rank), term))
    for path, code in run.exit_codes:
        if code == 0:
            continue
        out.append(Signal("exit_code", f"exit code {code}", Evidence(path=path, excerpt=str(code)),
                          code in TERMINATION_EXIT_CODES))
    # the header lines of tracebacks cut before their exception line that a stop marks (hang.marked_stop)
    stop_heads = {(tb.path, tb.line_start) for tb in run.all_tracebacks if not tb.exc_type and ctrl_c_marked(run, tb)}
    # every line of a traceback that is an outside stop surfacing (is_signal_stop: KeyboardInterrupt, a
    # SignalException, workers killed by SIGTERM), its header and exception lines included: read again from
    # the tail, they are that stop's traceback, not a second, unexplained error
    stop_spans = [(t.path, t.line_start, t.line_end) for tb in run.all_tracebacks if is_signal_stop(tb)
                  for t in tb_chain(tb)]
    for scan in run.logs:
        for lineno, line in scan.tail:
            if TERMINATION_LINE.search(line):  # the lines autopsy.clock reads to tell that a process ended
                out.append(Signal("termination", line.strip()[:300], _tail_evidence(scan, lineno, line), True))
            elif ERROR_LINE.search(line.strip()):
                # "^CTraceback (most recent call last):", or a header right below torchrun's relay of the
                # user's SIGINT: the header of a stop's traceback, not of a crash
                stop = line.lstrip().startswith("^C") or (scan.path, lineno) in stop_heads or any(
                    p == scan.path and a <= lineno <= b for p, a, b in stop_spans)
                out.append(Signal("error_line", line.strip()[:300], _tail_evidence(scan, lineno, line), stop))
    return out


def exited_cleanly(run: Run) -> bool:
    return any(code == 0 for _, code in run.exit_codes)


def progress_artifact_mtime(run: Run) -> tuple[float | None, str | None]:
    """Newest mtime among event files, trainer_state, metric tables and checkpoint files, with its path.

    (None, None) when mtimes are not the run's own (a copy or a clone: ``run.clock``).
    """
    best: tuple[float | None, str | None] = (None, None)
    for art in run.discovery.artifacts:
        # a metric table (Lightning's metrics.csv, mmengine's scalars.json, SB3's progress.csv) is
        # rewritten or appended at every log interval: its mtime is the last logged step's, too
        if art.kind in (ArtifactKind.TFEVENTS, ArtifactKind.TRAINER_STATE, ArtifactKind.CHECKPOINT_FILE,
                        ArtifactKind.METRICS):
            t = run.clock.mtime(art)
            if t is not None and (best[0] is None or t > best[0]):
                best = (t, art.path)
    return best


def epoch_progress_time(run: Run) -> tuple[float | None, str]:
    """When the last step was logged, in unix seconds a clock can be compared with.

    Tracker wall times first (TensorBoard events, MLflow's metric files, a table's Unix-time
    column: Unix seconds written by the training process itself), else the newest progress
    artifact mtime when mtimes are the run's own (``run.clock``). Log timestamps are left out:
    they may be naive local time.
    """
    df = run.scalars
    tb = df[~df["source"].isin(("log", "trainer_state")) & df["wall_time"].notna()]
    if len(tb):
        i = tb["wall_time"].idxmax()
        return float(tb["wall_time"][i]), f"{tb['source'][i]} wall time"
    mtime, path = progress_artifact_mtime(run)
    if mtime is not None:
        return mtime, f"mtime of {path}"
    return None, ""


def seconds_since_progress(run: Run) -> float | None:
    """How long the run has made no step, at analysis time; None when unknown.

    Infinite when no clock tells and the run cannot be live (``run.clock.live`` is false:
    a copy, a clone, or a process known to have ended): nothing will write to it again.
    """
    t, _ = epoch_progress_time(run)
    if t is not None:
        return max(0.0, run.now - t)
    return None if run.clock.live else math.inf


def cadence_seconds(run: Run) -> float | None:
    """Median seconds between consecutive logged steps, from TensorBoard or log wall times."""
    df = run.scalars
    rows = df[df["wall_time"].notna() & df["step"].notna()]
    if rows.empty:
        return None
    best: float | None = None
    for _, grp in rows.groupby(["source", "path"], observed=True):
        per_step = grp.groupby("step")["wall_time"].min().sort_index()
        if len(per_step) < 3:
            continue
        d = np.diff(per_step.to_numpy())
        d = d[d > 0]
        if d.size:
            med = float(np.median(d))
            best = med if best is None else min(best, med)
    return best


def reached_plan(run: Run) -> bool:
    """The run's last step reached its planned length (``run.max_steps``).

    A loop ``for step in range(max_steps)`` that logs its loop index numbers its steps from 0:
    its last step is ``max_steps - 1`` when every planned step ran (MLflow ``log_metric(step=i)``,
    ``wandb.log(step=i)``, a SummaryWriter). That counts as reached when a metric series of the
    run starts at step 0 and ends at that last step.
    """
    last, planned = run.last_step, run.max_steps
    if last is None or planned is None:
        return False
    if last >= planned:
        return True
    if last != planned - 1:
        return False
    if _hf_epochs_ran(run, planned):
        return True
    df = run.scalars
    if df.empty:
        return False
    rows = df[df["step"].notna()]
    for _, grp in rows.groupby(["source", "path", "tag"], observed=True):
        steps = grp["step"]
        if int(steps.min()) == 0 and int(steps.max()) == last:
            return True
    return False


def _hf_epochs_ran(run: Run, planned: int) -> bool:
    """HF Trainer planned its length in epochs and its epoch counter reached the last one, one step short.

    When ``num_train_epochs`` sets the length, the Trainer computes ``max_steps`` from the
    dataloader's length and gradient accumulation; with a last partial accumulation per epoch
    the loop ends one optimizer step short of that product (``global_step`` 27419 of
    ``max_steps`` 27420, ``epoch`` 9.9996 of 10). Read only when that trainer_state's own
    ``max_steps`` is the plan and its epoch counter is within one step of ``num_train_epochs``:
    with an explicit ``max_steps`` the Trainer rounds ``num_train_epochs`` up, so the counter
    stays a fraction of an epoch short and this does not apply.
    """
    ts = run.trainer_state
    if ts is None or ts.max_steps != planned or ts.global_step != planned - 1:
        return False
    if ts.epoch is None or not ts.num_train_epochs or ts.num_train_epochs <= 0:
        return False
    one_step = ts.num_train_epochs / planned  # one optimizer step, in epochs
    return ts.epoch >= ts.num_train_epochs - 1.5 * one_step


@dataclass(frozen=True)
class EpochPlan:
    """The run's length in epochs when no step count is planned: how far it got, what was planned."""

    last: int  # the last epoch reached, as its source numbers it (0- or 1-based)
    planned: int
    last_source: str
    planned_source: str
    unfinished: bool = False  # the log's last epoch-relative counter stops short of that epoch's end

    @property
    def reached(self) -> bool:
        """The last planned epoch ran. Loops count epochs from 0 (Keras' CSVLogger, Lightning's
        ``epoch`` column, ``for epoch in range(n)``) or from 1 (``Epoch 3/60``, ultralytics): the last
        one is ``planned - 1`` or ``planned``, so either counts (a loop one short is not judged),
        unless the log's batch counter stops inside that epoch."""
        return self.last >= self.planned - 1 and not self.unfinished


def epoch_plan(run: Run) -> EpochPlan | None:
    """The planned epochs (config ``num_train_epochs``/``epochs``/``max_epochs``, else a log's
    ``Epoch 3/60``) and the last epoch reached (a table's epoch axis, an ``epoch`` column, a log's
    epoch counter); None when either is unknown."""
    planned: tuple[int, str] | None = None
    entry = run.config_value("num_train_epochs")
    if entry is not None and isinstance(entry.value, (int, float)) and not isinstance(entry.value, bool) \
            and math.isfinite(entry.value) and 0 < entry.value < 1e9:
        planned = (math.ceil(entry.value), f"{entry.raw_key} = {entry.text} ({entry.path})")
    else:
        seen = [(s.max_epochs_seen, s.path) for s in run.logs if s.max_epochs_seen]
        if seen:
            n, path = max(seen)
            planned = (n, f"'Epoch N/{n}' in {path}")
    if planned is None:
        return None
    logs = [s for s in run.logs if s.last_epoch_seen is not None]
    lasts: list[tuple[int, str]] = [(s.last_epoch_seen, s.path) for s in logs if s.last_epoch_seen is not None]
    lasts += [(m.epochs_done, m.path) for m in run.metric_files if m.epochs_done is not None]
    df = run.scalars
    files = df[df["source"] != "log"]
    col = files[files["tag"].str.lower() == "epoch"]["value"].dropna()
    col = col[np.isfinite(col) & (col >= 0) & (col < 1e9)]
    if len(col):
        lasts.append((math.floor(float(col.max())), "its 'epoch' column"))
    # a series its tracker logs once per epoch (Lightning's train_loss_epoch, Keras' epoch_loss, an
    # MLflow "loss on epoch"): its count of distinct points is the epochs done
    for tag in [t for t in files["tag"].unique() if _names_epoch(t)]:
        grp = files[files["tag"] == tag]
        n = grp["step"].nunique() if grp["step"].notna().any() else len(grp)
        if n:
            lasts.append((int(n), f"{n} values of '{tag}'"))
    if not lasts:
        return None
    last, source = max(lasts)
    unfinished = any(s.last_epoch_unfinished and s.last_epoch_seen == last for s in logs)
    return EpochPlan(last, planned[0], source, planned[1], unfinished)


def _names_epoch(tag: str) -> bool:
    """A tag naming a per-epoch value (``train_loss_epoch``, ``epoch_loss``, ``MAE on epoch``), not the
    epoch counter itself nor a per-step one (``loss_step``)."""
    words = _WORDS.split(str(tag).lower())
    return "epoch" in words and len([w for w in words if w]) > 1 and "step" not in words


_WORDS = regex.compile(r"[^a-z0-9]+")


def interrupted_save(run: Run) -> Checkpoint | None:
    """The run's newest checkpoint when it is incomplete (not one still being written): the save a stop cut."""
    cps = [c for c in run.checkpoint_list if not c.in_progress]
    stepped = [c for c in cps if c.step is not None]
    if stepped:
        newest = max(stepped, key=lambda c: c.step or 0)
    elif len(cps) == 1:  # one file overwritten in place at every save (nanoGPT's ckpt.pt): no step once cut
        newest = cps[0]
    elif len({_DIGITS.sub("N", c.path) for c in cps}) == 1:
        # A numbered series with no step inside (accelerate's checkpoint_0, checkpoint_1, ...): its numbers
        # are the save order. Names that are not one series (best.pt, last.pt) give no order.
        newest = max(cps, key=lambda c: [int(n) for n in _DIGITS.findall(c.path)])
    else:
        return None
    return newest if not newest.valid else None


_DIGITS = regex.compile(r"\d+")
