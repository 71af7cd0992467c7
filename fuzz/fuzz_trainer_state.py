"""Fuzz trainer_state.json reading (autopsy.parsers.trainer_state) and the series built from it."""

from __future__ import annotations

import atheris

with atheris.instrument_imports():
    from _common import run, scratch_file

    from autopsy.model import ParseStatus
    from autopsy.parsers.numbers import INT_MAX
    from autopsy.parsers.trainer_state import history_columns, read_trainer_state


def test_one(data: bytes) -> None:
    path = scratch_file("trainer_state.json", data)
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
    history_columns(state.log_history)  # the series the rules read: must not raise


if __name__ == "__main__":
    run(test_one)
