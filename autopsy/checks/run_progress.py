"""Whether training went on in a log after a given line: the caught-error test of the crash and run rules."""

from __future__ import annotations

import numpy as np

from autopsy.parsers.log_store import MAX_STEP, SeriesStore
from autopsy.run import Run


def _steps_and_lines(series: object) -> tuple[np.ndarray, np.ndarray]:
    """A log's series points as (steps, line numbers); a step-less point as a sentinel below -MAX_STEP.

    (a SeriesStore keeps its columns as arrays; a plain list of points is read point by point)
    """
    if isinstance(series, SeriesStore):
        return np.asarray(series.step, dtype=np.int64), np.asarray(series.lineno, dtype=np.int64)
    points = list(series)  # type: ignore[call-overload]
    return (np.asarray([p.step if p.step is not None else -MAX_STEP for p in points], dtype=np.int64),
            np.asarray([p.lineno for p in points], dtype=np.int64))


def trained_after(run: Run, path: str | None, line: int | None) -> bool:
    """True when the log ``path`` logged a training step past the one reached at ``line``, on a later line.

    A kill or error line that training went on after did not end the run: the process it names was a
    helper (a checkpoint converter, an evaluation child process), or the error was caught.
    """
    if path is None or line is None:
        return False
    scan = next((s for s in run.logs if s.path == path), None)
    if scan is None or scan.last_step is None or not len(scan.series):
        return False
    steps, lines = _steps_and_lines(scan.series)
    known = steps > -MAX_STEP
    before, after = steps[known & (lines <= line)], steps[known & (lines > line)]
    return bool(len(after)) and (not len(before) or int(after.max()) > int(before.max()))


def went_on_after(run: Run, path: str, line: int, step: int | None, min_steps_after: int) -> bool:
    """True when training went on in the log ``path`` after ``line`` (an error there was caught, not fatal).

    With the step at ``line`` known: at least ``min_steps_after`` more steps were logged. With no step
    logged before it: at least ``min_steps_after`` distinct steps after it. A single step after a
    traceback is not progress: it is a progress bar's last redraw as the exception unwound through
    the loop (" 20%|██ | 24/120 [1:03:31<4:14:06, 158.81s/it]" below a rank's TypeError).
    """
    if min_steps_after <= 0:
        return False
    scan = next((s for s in run.logs if s.path == path), None)
    if scan is None or scan.last_step is None:
        return False
    if step is not None:
        return scan.last_step >= step + min_steps_after
    steps, lines = _steps_and_lines(scan.series)
    after = steps[(steps > -MAX_STEP) & (lines > line)]
    if not len(after):
        # steps counted outside the series (a bar's own counter): the old reading, any step past min_steps_after
        return scan.last_step >= min_steps_after and not len(steps)
    return len(np.unique(after)) >= min_steps_after
