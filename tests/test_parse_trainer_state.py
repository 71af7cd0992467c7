"""trainer_state.json: HF's own format (NaN literals, sorted keys), damage, salvage."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from autopsy.model import ParseStatus
from autopsy.parsers import trainer_state as ts_mod
from autopsy.parsers.trainer_state import read_trainer_state


def _state(n: int = 5, nan_at: int | None = None) -> dict:
    history = []
    for i in range(1, n + 1):
        loss = math.nan if nan_at is not None and i >= nan_at else 2.0 / i
        history.append({"epoch": i / n, "grad_norm": 1.5, "learning_rate": 1e-4, "loss": loss, "step": i * 10})
    return {"best_global_step": None, "best_metric": None, "best_model_checkpoint": "out/checkpoint-20",
            "epoch": 1.0, "eval_steps": 500, "global_step": n * 10, "is_world_process_zero": True,
            "log_history": history, "logging_steps": 10, "max_steps": 1000, "num_train_epochs": 3,
            "save_steps": 500, "total_flos": 1.5e12, "train_batch_size": 8, "trial_name": None}


def _write(path: Path, obj: dict) -> Path:
    # exactly how transformers' TrainerState.save_to_json writes it
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    return path


def test_fields_and_extra(tmp_path: Path) -> None:
    p = _write(tmp_path / "trainer_state.json", _state())
    parsed = read_trainer_state(p, "trainer_state.json")
    assert parsed.status is ParseStatus.OK
    ts = parsed.value
    assert (ts.global_step, ts.max_steps, ts.save_steps, ts.logging_steps, ts.eval_steps, ts.train_batch_size) == (
        50, 1000, 500, 10, 500, 8)
    assert ts.num_train_epochs == 3.0 and ts.epoch == 1.0 and ts.best_model_checkpoint == "out/checkpoint-20"
    assert len(ts.log_history) == 5 and ts.log_history[0]["step"] == 10
    assert ts.extra["total_flos"] == 1.5e12 and "log_history" not in ts.extra
    assert ts.path == "trainer_state.json"


@pytest.mark.parametrize("use_orjson", [True, False])
def test_nan_and_infinity_literals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_orjson: bool) -> None:
    if not use_orjson:
        monkeypatch.setattr(ts_mod, "_orjson", None)
    state = _state(6, nan_at=4)
    state["log_history"][0]["grad_norm"] = math.inf
    state["log_history"][1]["grad_norm"] = -math.inf
    p = _write(tmp_path / "trainer_state.json", state)
    assert "NaN" in p.read_text() and "-Infinity" in p.read_text()
    ts = read_trainer_state(p, "x").value
    assert math.isnan(ts.log_history[5]["loss"]) and ts.log_history[0]["grad_norm"] == math.inf
    assert ts.log_history[1]["grad_norm"] == -math.inf


@pytest.mark.parametrize("frac", [0.3, 0.5, 0.8, 0.95])
def test_truncated_file_salvages_complete_entries(tmp_path: Path, frac: float) -> None:
    state = _state(40)
    text = json.dumps(state, indent=2, sort_keys=True)
    p = tmp_path / "trainer_state.json"
    cut = int(len(text) * frac)
    p.write_text(text[:cut])
    parsed = read_trainer_state(p, "trainer_state.json")
    assert parsed.status is ParseStatus.TRUNCATED and "cut short" in (parsed.note or "")
    ts = parsed.value
    # fields sorted before log_history survive; entries are complete dicts in order
    assert ts.global_step == 400 and ts.epoch == 1.0 and ts.eval_steps == 500
    n_complete = text[:cut].count("\n    }")
    assert len(ts.log_history) == n_complete
    assert [e["step"] for e in ts.log_history] == [10 * (i + 1) for i in range(n_complete)]


@pytest.mark.parametrize("content,status", [
    (b"", ParseStatus.UNREADABLE),
    (b"   \n", ParseStatus.UNREADABLE),
    (b"[1, 2, 3]", ParseStatus.UNREADABLE),
    (b"\x00\xff garbage {", ParseStatus.UNREADABLE),
    (b'{"global_step": 5, "log_history": []}', ParseStatus.OK),
])
def test_bad_json(tmp_path: Path, content: bytes, status: ParseStatus) -> None:
    p = tmp_path / "trainer_state.json"
    p.write_bytes(content)
    parsed = read_trainer_state(p, "trainer_state.json")
    assert parsed.status is status
    if status is not ParseStatus.OK:
        assert parsed.note


def test_wrong_types_are_lenient(tmp_path: Path) -> None:
    p = tmp_path / "trainer_state.json"
    p.write_text(json.dumps({"global_step": "12", "max_steps": 1.0e3, "save_steps": True, "epoch": "x",
                             "log_history": [{"loss": 1.0}, 5, "x"], "best_model_checkpoint": 3}))
    ts = read_trainer_state(p, "t").value
    assert ts.global_step == 12 and ts.max_steps == 1000 and ts.save_steps is None and ts.epoch is None
    assert ts.log_history == ({"loss": 1.0},) and ts.best_model_checkpoint is None


def test_missing_file(tmp_path: Path) -> None:
    parsed = read_trainer_state(tmp_path / "nope.json", "nope.json")
    assert parsed.status is ParseStatus.UNREADABLE and parsed.value is None
