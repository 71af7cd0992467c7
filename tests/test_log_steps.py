"""Steps of HF dict lines printed without a progress bar, and the line a hit's time comes from."""

from __future__ import annotations

import json
import math
from pathlib import Path

from autopsy.parsers.logs import scan_text


def _dict_lines(n: int, nan_from: int | None = None, every: int = 10, total: int = 2000) -> list[str]:
    out = []
    for i in range(1, n + 1):
        loss = "nan" if nan_from is not None and i >= nan_from else f"{3.0 - i * 0.01:.4f}"
        out.append(f"{{'loss': {loss}, 'grad_norm': 1.5, 'learning_rate': 1e-05, 'epoch': {i * every / total:.4f}}}")
    return out


def _history(upto: int, every: int = 10, total: int = 2000) -> list[dict[str, float]]:
    return [{"loss": round(3.0 - (s // every) * 0.01, 4), "grad_norm": 1.5, "learning_rate": 1e-05,
             "epoch": float(f"{s / total:.4f}"), "step": s} for s in range(every, upto + 1, every)]


def _run_dir(tmp_path: Path, log: list[str], state: dict | None) -> Path:
    (tmp_path / "train.log").write_text("\n".join(log) + "\n")
    if state is not None:
        (tmp_path / "checkpoint-1000").mkdir()
        (tmp_path / "checkpoint-1000" / "trainer_state.json").write_text(json.dumps(state))
    return tmp_path


def _load(path: Path):  # type: ignore[no-untyped-def]
    from autopsy.run import LoadOptions, load_run

    return load_run(path, LoadOptions(now=2e9))


def test_dict_lines_without_a_bar_mark_their_steps_inferred() -> None:
    scan = scan_text("\n".join(_dict_lines(5)) + "\n")
    assert scan.steps_inferred
    assert [p.step for p in scan.series if p.tag == "loss"] == [1, 2, 3, 4, 5]  # order kept


def test_dict_lines_under_a_bar_or_with_own_step_are_not_inferred() -> None:
    bar = "\r 10%|█         | 10/100 [00:04<00:38,  2.36it/s]\r{'loss': 2.3, 'epoch': 0.1}\n"
    assert not scan_text(bar).steps_inferred
    assert not scan_text("{'loss': 2.3, 'step': 40}\n{'loss': 2.2, 'step': 50}\n").steps_inferred


def test_logging_steps_scales_the_ordinals(tmp_path: Path) -> None:
    state = {"global_step": 1000, "max_steps": 2000, "logging_steps": 10, "log_history": []}
    run = _load(_run_dir(tmp_path, _dict_lines(130, nan_from=120), state))
    loss = run.series("loss")
    assert loss["source"].iloc[0] == "log"
    assert list(loss["step"][:3]) == [10, 20, 30]
    assert int(loss["step"].iloc[-1]) == 1300
    assert run.logs[0].last_step == 1300 and not run.logs[0].steps_inferred


def test_epochs_matched_against_log_history_align_a_resumed_log(tmp_path: Path) -> None:
    # the log of a run resumed at step 500: its first dict is step 510, not 10
    log = _dict_lines(80)[50:]  # ordinals 1.. are steps 510..
    state = {"global_step": 1000, "max_steps": 2000, "logging_steps": 10, "log_history": _history(1000)}
    run = _load(_run_dir(tmp_path, log, state))
    steps = [p.step for p in run.logs[0].series if p.tag == "loss"]
    assert steps[:2] == [510, 520] and steps[-1] == 800


def test_epochs_give_the_interval_when_no_logging_steps(tmp_path: Path) -> None:
    state = {"global_step": 1000, "max_steps": 2000, "log_history": _history(1000)}
    run = _load(_run_dir(tmp_path, _dict_lines(120), state))
    steps = [p.step for p in run.logs[0].series if p.tag == "loss"]
    assert steps[:2] == [10, 20] and steps[-1] == 1200


def test_series_prefers_real_steps_over_unaligned_ordinals(tmp_path: Path) -> None:
    # no logging_steps and no epoch in common: the log's ordinals stay unaligned
    log = [f"{{'loss': {2.0 - i * 0.001:.4f}, 'learning_rate': 1e-05}}" for i in range(1, 200)]
    state = {"global_step": 1000, "max_steps": 2000, "log_history": [{"loss": 2.0, "step": s}
                                                                      for s in range(100, 1001, 100)]}
    run = _load(_run_dir(tmp_path, log, state))
    assert run.logs[0].steps_inferred
    loss = run.series("loss")
    assert set(loss["source"]) == {"trainer_state"} and int(loss["step"].iloc[-1]) == 1000


def test_nan_verdict_names_the_true_step(tmp_path: Path) -> None:
    from autopsy.api import analyze
    from autopsy.run import LoadOptions

    state = {"global_step": 1000, "max_steps": 2000, "logging_steps": 10, "log_history": _history(1000)}
    report = analyze(_run_dir(tmp_path, _dict_lines(130, nan_from=120), state), options=LoadOptions(now=2e9))
    nan = next(f for f in report.findings if f.rule == "loss.nonfinite")
    assert nan.step == 1200 and "step 1200" in nan.message
    assert not math.isnan(float(nan.facts["last_finite_value"]))
    assert nan.facts["last_finite_step"] == 1190
