"""Fuzz trainer_state.json reading (autopsy.parsers.trainer_state) and the series built from it.

An input whose first byte is even is read with the columnar path forced on (``MIN_BYTES = 0``:
fuzz inputs are far below the 1 MiB where it starts), so the byte scan, the LazyHistory and
its re-read are fuzzed too; every state then goes through the scalars frame the rules read
(categorical columns from tag codes) and the epoch -> step map.
"""

from __future__ import annotations

import atheris

with atheris.instrument_imports():
    from _common import run, scratch_file

    from autopsy.model import ParseStatus
    from autopsy.parsers import ts_columns
    from autopsy.parsers.numbers import INT_MAX
    from autopsy.parsers.trainer_state import LazyHistory, history_columns, read_trainer_state
    from autopsy.run_frames import scalars_frame
    from autopsy.step_align import history_epoch_steps

_MIN_BYTES = ts_columns.MIN_BYTES


def test_one(data: bytes) -> None:
    path = scratch_file("trainer_state.json", data)
    ts_columns.MIN_BYTES = 0 if data[:1] and data[0] % 2 == 0 else _MIN_BYTES
    parsed = read_trainer_state(path, "trainer_state.json")
    if parsed.status not in (ParseStatus.OK, ParseStatus.TRUNCATED, ParseStatus.UNREADABLE, ParseStatus.SKIPPED):
        raise AssertionError(f"unexpected status {parsed.status}")
    state = parsed.value
    if state is None:
        return
    for name in ("global_step", "max_steps", "save_steps", "logging_steps", "eval_steps", "train_batch_size"):
        v = getattr(state, name)
        if v is not None and not -INT_MAX <= v <= INT_MAX:
            raise AssertionError(f"{name} out of range: {v}")
    _tags, _steps, values = history_columns(state.log_history)  # the series the rules read: must not raise
    frame = scalars_frame((), state, ())
    if len(frame) != len(values):
        raise AssertionError(f"frame has {len(frame)} rows for {len(values)} values")
    history_epoch_steps([state])
    if isinstance(state.log_history, LazyHistory):  # the dicts, from the file read again (unchanged here)
        if len(list(state.log_history)) != len(state.log_history):
            raise AssertionError("LazyHistory's dicts and its entry count differ")


if __name__ == "__main__":
    run(test_one)
