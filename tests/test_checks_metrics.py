"""Unit tests of the loss.* and lr.* checks, and of the metric names they read, on fake runs (see fake_runs)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fake_runs import card, check, fake_run, rows

from autopsy.engine.runner import resolve_check
from autopsy.engine.types import NotEvaluated
from autopsy.model import Severity
from autopsy.run import Run

# ----------------------------------------------------------------------------- loss.nonfinite


def test_nonfinite_reports_first_bad_step_and_values_before(tmp_path: Path) -> None:
    steps = list(range(10, 310, 10))
    vals = [2.0 - 0.01 * i for i in range(25)] + [5.0, 40.0, float("nan"), float("nan"), float("nan")]
    run = fake_run(tmp_path, tb={"train/loss": rows(steps, vals)})
    [f] = check("loss.nonfinite", run)
    assert f.facts["first_step"] == 280 and f.facts["first_value"] == "nan"
    assert f.facts["values_before"][-1] == [270, 40.0]
    assert f.facts["recovered"] is False and f.severity is Severity.ERROR
    assert "rising from" in f.message


def test_nonfinite_ignores_fp16_grad_norm_skips(tmp_path: Path) -> None:
    steps = list(range(1, 101))
    loss = [3.0 - 0.01 * i for i in range(100)]
    gn = [float("inf") if s in (2, 3) else 1.0 for s in steps]
    run = fake_run(tmp_path, tb={"loss": rows(steps, loss), "grad_norm": rows(steps, gn)})
    assert check("loss.nonfinite", run) == []


def test_nonfinite_grad_norm_reported_per_source(tmp_path: Path) -> None:
    steps = list(range(1, 101))
    loss = [3.0 - 0.01 * i for i in range(90)] + [float("nan")] * 10
    gn = [1.0] * 85 + [float("inf")] * 15
    run = fake_run(tmp_path, tb={"loss": rows(steps, loss), "grad_norm": rows(steps, gn)})
    found = {f.facts["metric"]: f for f in check("loss.nonfinite", run)}
    assert set(found) == {"loss", "grad_norm"}
    assert found["grad_norm"].facts["first_step"] == 86 and found["loss"].facts["first_step"] == 91


def test_nonfinite_not_evaluated_without_series(tmp_path: Path) -> None:
    with pytest.raises(NotEvaluated):
        check("loss.nonfinite", fake_run(tmp_path))


# ----------------------------------------------------------------------------- loss.spike


def test_spike_unrecovered(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    steps = list(range(1, 401))
    gn = list(1.0 + 0.1 * rng.random(400))
    gn[200] = 80.0
    loss = [3.0 - 0.002 * i + 0.02 * rng.random() for i in range(200)] + [4.5 + 0.02 * rng.random() for _ in range(200)]
    run = fake_run(tmp_path, tb={"loss": rows(steps, loss), "grad_norm": rows(steps, gn)})
    [f] = check("loss.spike", run)
    assert f.facts["step"] == 201 and f.facts["ratio"] > 50
    assert f.facts["recovered"] is False and f.facts["n_unrecovered"] == 1


def test_spike_isolated_recovered_is_quiet(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    steps = list(range(1, 401))
    gn = list(1.0 + 0.1 * rng.random(400))
    gn[200] = 80.0
    loss = [3.0 - 0.002 * i + 0.02 * rng.random() for i in range(400)]
    run = fake_run(tmp_path, tb={"loss": rows(steps, loss), "grad_norm": rows(steps, gn)})
    assert check("loss.spike", run) == []


def test_spike_noisy_grad_norm_is_quiet(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    steps = list(range(1, 501))
    gn = list(np.exp(rng.normal(0, 0.5, 500)))  # heavy but ordinary noise: max ~ 5x median
    loss = [3.0 - 0.002 * i + 0.1 * rng.random() for i in range(500)]
    run = fake_run(tmp_path, tb={"loss": rows(steps, loss), "grad_norm": rows(steps, gn)})
    assert check("loss.spike", run) == []


# ----------------------------------------------------------------------------- loss.plateau


def _plateau_run(tmp_path: Path, values: Sequence[float], config: dict[str, Any] | None = None) -> Run:
    steps = [10 * (i + 1) for i in range(len(values))]
    return fake_run(tmp_path, tb={"train/loss": rows(steps, values)}, config=config)


def test_plateau_chance_level(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    lnv = math.log(50257)
    vals = [lnv + 0.05 * rng.standard_normal() for _ in range(200)]
    [f] = check("loss.plateau", _plateau_run(tmp_path, vals, {"vocab_size": 50257}))
    assert f.facts["mode"] == "chance" and f.facts["ln_vocab"] == pytest.approx(lnv, rel=1e-4)
    assert f.facts["vocab_source"] == "configs/train.yaml:1"


def test_plateau_stuck_without_vocab(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    vals = [2.3 + 0.1 * rng.standard_normal() for _ in range(200)]
    [f] = check("loss.plateau", _plateau_run(tmp_path, vals))
    assert f.facts["mode"] == "stuck"


def test_plateau_converged_run_is_quiet(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    vals = [10.8 * math.exp(-i / 15) + 2.0 + 0.05 * rng.standard_normal() for i in range(300)]
    assert check("loss.plateau", _plateau_run(tmp_path, vals, {"vocab_size": 50257})) == []
    assert check("loss.plateau", _plateau_run(tmp_path, vals)) == []


def test_plateau_noisy_but_improving_is_quiet(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    vals = [3.0 - 0.003 * i + 0.4 * rng.standard_normal() for i in range(300)]
    assert check("loss.plateau", _plateau_run(tmp_path, vals)) == []


def test_plateau_too_short_not_evaluated(tmp_path: Path) -> None:
    with pytest.raises(NotEvaluated):
        check("loss.plateau", _plateau_run(tmp_path, [3.0] * 5))


# fastText#604: the JSON progress lines' loss (each value printed twice) late in training, at 93.4-95.2%.
_FASTTEXT_LOSS = [0.553745, 0.552313, 0.552313, 0.550984, 0.550984, 0.549661, 0.549661, 0.548467, 0.548467,
                  0.547216, 0.547216, 0.545741, 0.545741, 0.544671, 0.544671]


def _plateau_findings(run: Run) -> list[Any]:
    try:
        return check("loss.plateau", run)
    except NotEvaluated:
        return []


@pytest.mark.parametrize(("progress", "judged"), [
    ([93.4, 93.4, 93.4, 93.4, 94.1, 94.1, 94.3, 94.3, 94.6, 94.6, 94.6, 94.6, 95.2, 95.2, 95.2], False),
    ([1.2 + 0.1 * i for i in range(15)], True),  # the same loss from a run's first percent is judged
])
def test_never_improved_not_judged_past_a_logged_progress_of_10_percent(
        tmp_path: Path, progress: list[float], judged: bool) -> None:
    steps = list(range(len(_FASTTEXT_LOSS)))
    run = fake_run(tmp_path, tb={"loss": rows(steps, _FASTTEXT_LOSS), "progress": rows(steps, progress)})
    got = _plateau_findings(run)
    assert [f.facts["mode"] for f in got] == (["never_improved"] if judged else [])


# ----------------------------------------------------------------------------- lr.floor


def _cosine(n: int, peak: float, floor: float, warm: int = 10) -> list[float]:
    out = []
    for i in range(n):
        if i < warm:
            out.append(peak * (i + 1) / warm)
        else:
            p = (i - warm) / max(1, n - 1 - warm)
            out.append(peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p))))
    return out


def test_lr_floor_cosine_with_floor(tmp_path: Path) -> None:
    steps = [10 * (i + 1) for i in range(100)]
    lr = _cosine(100, 2e-4, 0.1)
    run = fake_run(tmp_path, tb={"learning_rate": rows(steps, lr)},
                   config={"learning_rate": 2e-4, "lr_scheduler_type": "cosine", "min_lr": 0.0},
                   trainer_max_steps=1000)
    [f] = check("lr.floor", run)
    assert f.facts["ratio"] == pytest.approx(0.1, rel=0.05)
    assert f.facts["configured_min_source"] == "configs/train.yaml:3"


def test_lr_floor_scheduler_default_zero(tmp_path: Path) -> None:
    steps = [10 * (i + 1) for i in range(100)]
    run = fake_run(tmp_path, tb={"lr": rows(steps, _cosine(100, 1e-3, 0.1))},
                   config={"lr_scheduler_type": "cosine"}, trainer_max_steps=1000)
    [f] = check("lr.floor", run)
    assert f.facts["configured_min_ratio"] == 0.0 and f.facts["schedule_type"] == "cosine"


def test_lr_floor_intended_min_is_quiet(tmp_path: Path) -> None:
    steps = [10 * (i + 1) for i in range(100)]
    run = fake_run(tmp_path, tb={"lr": rows(steps, _cosine(100, 1e-3, 0.1))},
                   config={"learning_rate": 1e-3, "min_lr": 1e-4, "lr_scheduler_type": "cosine"},
                   trainer_max_steps=1000)
    assert check("lr.floor", run) == []


def test_lr_floor_decay_to_zero_is_quiet(tmp_path: Path) -> None:
    steps = [10 * (i + 1) for i in range(100)]
    run = fake_run(tmp_path, tb={"lr": rows(steps, _cosine(100, 1e-3, 0.0))},
                   config={"lr_scheduler_type": "cosine"}, trainer_max_steps=1000)
    assert check("lr.floor", run) == []


def test_lr_floor_nanochat_lrm(tmp_path: Path) -> None:
    steps = list(range(0, 1000, 10))
    lrm = [1.0 if s < 600 else max(0.1, 1.0 - (s - 600) / 300) for s in steps]
    run = fake_run(tmp_path, tb={"lrm": rows(steps, lrm)}, config={"final_lr_frac": 0.0}, trainer_max_steps=1000)
    [f] = check("lr.floor", run)
    assert f.facts["metric"] == "lr_multiplier" and f.facts["observed_floor"] == pytest.approx(0.1)


def test_lr_floor_unknown_end_not_evaluated(tmp_path: Path) -> None:
    steps = [10 * (i + 1) for i in range(50)]
    run = fake_run(tmp_path, tb={"lr": rows(steps, _cosine(100, 1e-3, 0.0)[:50])})
    with pytest.raises(NotEvaluated):
        check("lr.floor", run)


# ----------------------------------------------------------------------------- lr.mismatch


def test_lr_mismatch_warmup_longer_than_run(tmp_path: Path) -> None:
    steps = list(range(1, 201))
    lr = [2e-4 * s / 400_000 for s in steps]  # warmup of 400k steps: 1e-7 at step 200
    run = fake_run(tmp_path, tb={"train/learning_rate": rows(steps, lr)},
                   config={"learning_rate": 2e-4, "warmup_steps": 400_000}, trainer_max_steps=50_000)
    [f] = check("lr.mismatch", run)
    assert f.facts["configured"] == 2e-4 and f.facts["observed_max"] == pytest.approx(1e-7)
    assert f.facts["warmup_longer_than_run"] is True
    assert f.facts["configured_source"] == "configs/train.yaml:1"


def test_lr_mismatch_scale(tmp_path: Path) -> None:
    steps = list(range(1, 201))
    run = fake_run(tmp_path, tb={"lr": rows(steps, [3e-6] * 200)}, config={"learning_rate": 3e-4},
                   trainer_max_steps=200)
    [f] = check("lr.mismatch", run)
    assert f.facts["ratio"] == pytest.approx(0.01)
    assert "warmup_longer_than_run" not in f.facts


def test_lr_mismatch_matching_lr_is_quiet(tmp_path: Path) -> None:
    steps = list(range(1, 201))
    run = fake_run(tmp_path, tb={"lr": rows(steps, _cosine(200, 3e-4, 0.0))},
                   config={"learning_rate": 3e-4, "warmup_steps": 10}, trainer_max_steps=200)
    assert check("lr.mismatch", run) == []


def test_lr_mismatch_without_config_not_evaluated(tmp_path: Path) -> None:
    run = fake_run(tmp_path, tb={"lr": rows(range(1, 20), [1e-4] * 19)})
    with pytest.raises(NotEvaluated):
        check("lr.mismatch", run)



def test_all_my_cards_load_and_resolve() -> None:
    for rid in ("loss.nonfinite", "loss.spike", "loss.plateau", "lr.floor", "lr.mismatch", "checkpoint.retention",
                "checkpoint.corrupt", "checkpoint.gap", "log.empty", "run.stalled", "run.incomplete",
                "dist.straggler", "dist.divergence", "data.stall"):
        c = card(rid)
        assert c.id == rid and callable(resolve_check(c.check or ""))


@pytest.mark.parametrize(("tag", "metric"), [
    ("lr_mult", "lr_multiplier"), ("lr_scale", "lr_multiplier"), ("lrm", "lr_multiplier"),
    ("train/lr_multiplier", "lr_multiplier"), ("lr", "lr"), ("lr_group0", "lr"), ("lr-AdamW", "lr"),
    ("train/learning_rate", "lr"), ("time", "step_time"), ("data_time", "data_time"), ("total_time", None),
])
def test_canonical_metric_multiplier_and_mmengine_time(tag: str, metric: str | None) -> None:
    from autopsy.metrics import canonical_metric

    assert canonical_metric(tag) == metric
