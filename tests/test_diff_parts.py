"""Unit tests of the parts `autopsy diff` compares: templates, config keys, environment, metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autopsy.compare import templates as tpl
from autopsy.compare.config_diff import compare_config, expected_to_vary, key_table
from autopsy.compare.environment import BANNERS, facts_from_env_file, facts_from_line, facts_from_wandb_metadata
from autopsy.compare.metrics import compare_metric
from autopsy.compare.related import related


@pytest.mark.parametrize(("a", "b"), [
    ("step  120/200 | loss 2.3411 | lr 3.000e-03 | 12.5 ms", "step   45/200 | loss 7.1 | lr 1.0e-04 | 9.1 ms"),
    ("2024-05-01 12:00:01,123 INFO saved /runs/a/ckpt/step_10.pt",
     "2024-06-11 08:10:59,001 INFO saved /x/b/c/step_99.pt"),
    (" 40%|████      | 80/200 [00:10<00:15, 7.9it/s]", " 95%|█████████▌| 190/200 [00:24<00:01, 7.7it/s]"),
    ("object at 0x7f3a2c1b9d60 freed", "object at 0x55d0aa10 freed"),
    ("[ckpt] saved checkpoints/step_20.pt", "[ckpt] saved checkpoints/step_120.pt"),  # fixtures/pairs, one slash
    ("Saving model checkpoint to out/checkpoint-500", "Saving model checkpoint to out/checkpoint-1000"),
])
def test_lines_that_differ_only_in_variable_parts_share_a_template(a: str, b: str) -> None:
    assert tpl.mask(a) == tpl.mask(b)


def test_different_messages_keep_different_templates() -> None:
    assert tpl.mask("UserWarning: 5 of 405 lines are longer than max_len=32") != tpl.mask("[train] done in 3.1s")
    assert tpl.mask("loss nan") != tpl.mask("loss 2.31")  # a NaN is not a number: it stays visible
    assert tpl.mask("host x86_64 Linux") != tpl.mask("host aarch64 Linux")  # no counter in x86_64
    assert not tpl.is_informative(tpl.mask("100/200 [00:01<00:01]"))
    assert tpl.is_progress(tpl.mask(" 40%|████      | 80/200 [00:10<00:15, 7.9it/s]"))


def test_log_lines_keeps_head_and_tail_with_exact_line_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tpl, "HEAD_LINES", 5)
    monkeypatch.setattr(tpl, "TAIL_LINES", 7)
    monkeypatch.setattr(tpl, "_CHUNK", 64)
    log = tmp_path / "train.log"
    log.write_bytes(b"".join(f"line {i}\n".encode() for i in range(1, 1001)) + b"last without newline")
    got = list(tpl.log_lines(log))
    assert [n for n, _ in got] == [1, 2, 3, 4, 5, *range(995, 1002)]
    assert all(text == f"line {n}" for n, text in got[:-1])
    assert got[-1] == (1001, "last without newline")


def test_log_lines_shows_the_last_redraw_of_a_progress_line(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"a\n 10%|#| 1/10\r 20%|##| 2/10\r\nb\n")
    assert [t for _, t in tpl.log_lines(log)] == ["a", " 20%|##| 2/10", "b"]


def test_log_lines_refuses_a_fifo(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        list(tpl.log_lines(fifo))


def _rows(**kv: object) -> list[dict[str, object]]:
    return [{"key": k.rsplit(".", 1)[-1], "raw_key": k, "value": v, "text": str(v), "path": "configs/train.yaml",
             "line": i + 1, "source": "yaml"} for i, (k, v) in enumerate(kv.items())]


def test_config_changed_moved_and_one_sided_keys() -> None:
    good = key_table(_rows(**{"optim.lr": 0.05, "checkpointing.save_total_limit": 2, "seed": 1, "data.gone": 1}))
    bad = key_table(_rows(**{"optim.lr": 0.5, "save_total_limit": 2, "seed": 2, "data.new": 3}))
    changes = {c.raw_key: c for c in compare_config([good], bad)}
    assert changes["optim.lr"].change == "changed" and changes["optim.lr"].ratio == pytest.approx(10)
    assert changes["save_total_limit"].change == "moved"
    assert changes["save_total_limit"].good_key == "checkpointing.save_total_limit"
    assert changes["data.gone"].change == "only_good" and changes["data.new"].change == "only_bad"
    assert changes["seed"].varies and not changes["optim.lr"].varies


def test_a_key_the_good_runs_disagree_on_is_not_a_change() -> None:
    g1, g2 = key_table(_rows(**{"data.num_workers": 4})), key_table(_rows(**{"data.num_workers": 8}))
    assert compare_config([g1, g2], key_table(_rows(**{"data.num_workers": 8}))) == []


def test_copies_of_one_config_in_every_checkpoint_collapse() -> None:
    rows = [{"key": "n_embd", "raw_key": "n_embd", "value": 32, "text": "32", "path": f"checkpoint-{s}/config.json",
             "line": 15, "source": "hf_config"} for s in (10, 20, 30)]
    table = key_table(rows)
    assert table[("hf_config", "n_embd")].texts == ["32"]


@pytest.mark.parametrize("key", ["seed", "training.seed", "output_dir", "run_name", "master_port", "wandb_project"])
def test_keys_expected_to_vary(key: str) -> None:
    assert expected_to_vary(key)


@pytest.mark.parametrize("key", ["optim.lr", "save_total_limit", "per_device_train_batch_size", "fp16"])
def test_keys_not_expected_to_vary(key: str) -> None:
    assert not expected_to_vary(key)


def test_related_keys_by_family() -> None:
    assert related("oom", "data.batch_size") and related("oom", "per_device_train_batch_size")
    assert related("disk", "checkpointing.save_total_limit") and not related("disk", "trainer.eval_steps")
    assert related("lr", "optim.warmup_steps") and related("lr", "max_steps") and not related("lr", "save_steps")
    assert not related("nonexistent", "anything")


@pytest.mark.parametrize(("category", "name", "pattern", "samples"), BANNERS)
def test_every_banner_pattern_matches_its_samples(category: str, name: str | None, pattern: object,
                                                  samples: tuple[str, ...]) -> None:
    for sample in samples:
        facts = list(facts_from_line(sample, "train.log:1"))
        assert any(f.category == category and (name is None or f.name == name) for f in facts), sample


def test_env_facts_from_files() -> None:
    freeze = "# comment\ntorch==2.3.0\nPackaging==24.2\nfoo @ file:///x\n"
    facts = {f.name: f for f in facts_from_env_file(freeze, "env-freeze.txt")}
    assert facts["torch"].value == "2.3.0" and facts["packaging"].where == "env-freeze.txt:3"
    assert "foo" not in facts
    meta = '{"python": "3.10.12 (main)", "gpu": "NVIDIA A100-SXM4-80GB", "gpu_count": 8, "cuda": "12.1"}'
    got = {f.name: f.value for f in facts_from_wandb_metadata(meta, "wandb-metadata.json")}
    assert got == {"python": "3.10.12", "gpu": "NVIDIA A100-SXM4-80GB", "gpu_count": "8", "cuda": "12.1"}
    assert list(facts_from_wandb_metadata("not json", "wandb-metadata.json")) == []


def _loss(seed: int, n: int = 60, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1) * 5
    return steps, 4.0 * np.exp(-steps / 150 * scale) + 1.0 + rng.normal(0, 0.05, n)


def test_two_seeds_stay_inside_the_band() -> None:
    d = compare_metric("loss", [_loss(1)], _loss(2))
    assert not d.diverged and d.points_compared == 60


def test_a_different_curve_diverges_where_it_leaves_the_band() -> None:
    steps, values = _loss(2)
    values = values.copy()
    values[30:] += 1.5  # from step 155 on the loss sits well above the good run
    d = compare_metric("loss", [_loss(1)], (steps, values))
    assert d.diverged and d.direction == "above" and 150 <= (d.step or 0) <= 165


def test_nan_where_the_good_run_is_finite_diverges_at_once() -> None:
    steps, values = _loss(2)
    values = values.copy()
    values[12] = np.nan
    d = compare_metric("loss", [_loss(1)], (steps, values))
    assert d.diverged and d.direction == "non-finite" and d.step == steps[12]


def test_cadence_and_length_differences_are_tolerated() -> None:
    g_steps, g_vals = _loss(1, n=120)
    b_steps, b_vals = _loss(2, n=60)
    d = compare_metric("loss", [(g_steps[::3], g_vals[::3])], (b_steps, b_vals))  # good logged 3x less often
    assert not d.diverged


def test_too_few_points_is_said_not_guessed() -> None:
    d = compare_metric("loss", [_loss(1, n=3)], _loss(2, n=3))
    assert not d.diverged and d.note.startswith("not compared")
