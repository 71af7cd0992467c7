"""Fast paths give exactly what the simple reference paths give.

Not covered elsewhere: tests/test_logs_prefilter.py compares the literal prefilter (with
and without the Aho-Corasick accelerator) to a per-line regex scan, and
tests/test_parse_tensorboard.py compares simple_value files to TensorBoard's
EventAccumulator. Here: TF2 tensor scalars against EventAccumulator, the columnar
trainer_state and log-series frames against the per-value loops they replace, and the
scanner's HF dict-line series against ``ast.literal_eval`` of every dict line.
"""

from __future__ import annotations

import ast
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import write_tfevents

from autopsy.parsers.logs import compile_patterns, scan_log
from autopsy.parsers.numbers import INT_MAX
from autopsy.parsers.tensorboard import read_scalars
from autopsy.parsers.trainer_state import history_columns, read_trainer_state
from autopsy.run_frames import _log_series_frame

BIG = 1 << 40
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))


def _nan_eq(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def _same_rows(ours: list[tuple[Any, ...]], theirs: list[tuple[Any, ...]]) -> bool:
    return len(ours) == len(theirs) and all(
        len(x) == len(y) and all(_nan_eq(a, b) for a, b in zip(x, y, strict=True))
        for x, y in zip(ours, theirs, strict=True))


def test_tensor_scalars_match_event_accumulator(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    from tensorboard.util import tensor_util

    rng = random.Random(1)
    rows = [(tag, s, rng.uniform(-5, 5), 1_700_000_000.0 + s / 3)
            for s in range(200) for tag in ("train/loss", "lr", "eval/acc") if s % (1 + len(tag) % 3) == 0]
    path = write_tfevents(tmp_path / "events.out.tfevents.1.h", rows, tensor_style=True)
    acc = pea.EventAccumulator(str(path), size_guidance={"tensors": 0})
    acc.Reload()
    theirs = sorted((t, e.step, e.wall_time, float(tensor_util.make_ndarray(e.tensor_proto).item()))
                    for t in acc.Tags()["tensors"] for e in acc.Tensors(t))
    df = read_scalars(path, max_bytes=BIG).value
    ours = sorted(zip(df["tag"], df["step"].tolist(), df["wall_time"].tolist(), df["value"].tolist(), strict=True))
    assert len(theirs) == len(rows)
    assert ours == theirs


def _plain_history(log_history: list[Any]) -> list[tuple[Any, ...]]:
    """What Run.scalars did before history_columns: a tuple per numeric value."""
    rows = []
    for entry in log_history:
        if not isinstance(entry, dict):
            continue
        step = entry.get("step")
        if type(step) in (int, float) and not -INT_MAX <= step <= INT_MAX:
            step = None  # a step beyond int64 (10**20, 1e20) or NaN is no step
        for tag, value in entry.items():
            if tag == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            rows.append((tag, step, float(value)))
    return rows


@pytest.mark.parametrize("seed", range(3))
def test_history_columns_equal_plain_loop(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    shapes = [("epoch", "grad_norm", "learning_rate", "loss", "step"), ("epoch", "eval_loss", "eval_runtime", "step"),
              ("loss", "epoch"), ("train_runtime", "total_flos", "step", "train_loss")]
    odd = [None, True, False, "x", 3, -2, float("nan"), float("inf"), 10**20, 1.5]
    history: list[Any] = []
    for i in range(400):
        keys = rng.choice(shapes)
        entry = {k: (rng.choice(odd) if rng.random() < 0.1 else rng.random()) for k in keys}
        if "step" in entry and rng.random() < 0.9:
            entry["step"] = i
        history.append(entry)
    history.insert(7, "not a dict")
    tags, steps, values = history_columns(history)
    ours = list(zip(tags.tolist(), steps.tolist(), values.tolist(), strict=True))
    assert _same_rows(ours, _plain_history(history))
    # and through the reader (orjson, NaN literals written by json.dumps)
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 400, "log_history": history[:7] + history[8:]}, indent=2))
    ts = read_trainer_state(path, "trainer_state.json").value
    with open(path) as fh:
        plain = _plain_history(json.load(fh)["log_history"])
    tags, steps, values = history_columns(ts.log_history)
    assert _same_rows(list(zip(tags.tolist(), steps.tolist(), values.tolist(), strict=True)), plain)


def test_history_columns_empty() -> None:
    tags, steps, values = history_columns([])
    assert len(tags) == len(steps) == len(values) == 0
    assert len(history_columns([{"step": 1}, {"note": "x"}])[2]) == 0


def test_log_series_frame_equals_points(tmp_path: Path) -> None:
    from gen_logs import generate

    path = tmp_path / "train.log"
    generate(path, 0.3, seed=3)
    with open(path, "ab") as fh:  # rank-prefixed and step lines: ranks and steps vary
        fh.write(b"[rank1]: step 5 | loss 2.5 | lr 1e-4\n[rank0]:{'loss': nan, 'epoch': 0.1}\n")
    for rank in (None, 4):
        scan = scan_log(path, "train.log", compile_patterns(()), max_bytes=BIG, rank=rank)
        assert len(scan.series) > 100
        df = _log_series_frame(scan)
        ours = [(t, None if s is None or s is pd_na() else int(s), None if math.isnan(w) else w, v,
                 None if r is None or r is pd_na() else int(r))
                for t, s, w, v, r in zip(df["tag"], df["step"].astype(object), df["wall_time"], df["value"],
                                         df["rank"].astype(object), strict=True)]
        plain = [(p.tag, p.step, p.wall_time, p.value, p.rank if p.rank is not None else scan.rank)
                 for p in scan.series]
        assert _same_rows(ours, plain)


def pd_na() -> Any:
    import pandas as pd

    return pd.NA


def test_hf_dict_series_equal_literal_eval(tmp_path: Path) -> None:
    """Every numeric value of every HF dict line, as ``ast.literal_eval`` reads it."""
    from gen_logs import generate

    path = tmp_path / "train.log"
    generate(path, 0.5, seed=5)
    scan = scan_log(path, "train.log", compile_patterns(()), max_bytes=BIG, rank=None)
    dict_tags = set()
    expected = []
    for lineno, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        for seg in raw.split(b"\r"):
            if seg.startswith(b"{'"):
                d = ast.literal_eval(seg.decode())
                dict_tags.update(d)
                expected.extend((lineno, k, float(v)) for k, v in d.items())
    assert len(expected) > 500
    ours = sorted((p.lineno, p.tag, p.value) for p in scan.series if p.tag in dict_tags)
    assert ours == sorted(expected)
    np.testing.assert_array_equal(sorted(p.lineno for p in scan.series if p.tag == "loss"),
                                  sorted({ln for ln, k, _ in expected if k == "loss"}))


def _history_file(tmp_path: Path, seed: int) -> Path:
    rng = random.Random(seed)
    history: list[dict[str, Any]] = []
    epoch = 0.0
    for step in range(1, 3001):
        epoch += 0.001 if rng.random() < 0.8 else 0.0  # some epochs shared by two steps: left out
        history.append({"epoch": round(epoch, 4), "grad_norm": rng.random(), "learning_rate": 1e-4,
                        "loss": rng.random(), "step": step})
        if step % 500 == 0:
            history.append({"epoch": round(epoch, 4), "eval_loss": rng.random(), "step": step})
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 3000, "log_history": history}, indent=2, sort_keys=True))
    return path


def _plain_epoch_steps(history: list[dict[str, Any]]) -> dict[float, int]:
    """The per-value loop history_epoch_steps replaced."""
    out: dict[float, int] = {}
    shared: set[float] = set()
    for entry in history:
        if "epoch" in entry and entry.get("step") is not None:
            key, step = round(float(entry["epoch"]), 9), int(entry["step"])
            if out.setdefault(key, step) != step:
                shared.add(key)
    return {k: v for k, v in out.items() if k not in shared}


@pytest.mark.parametrize("columnar", [True, False])
def test_epoch_steps_and_scalars_from_columns_equal_the_plain_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   columnar: bool) -> None:
    from autopsy.parsers import ts_columns
    from autopsy.parsers.trainer_state import LazyHistory
    from autopsy.run_frames import scalars_frame
    from autopsy.step_align import history_epoch_steps

    path = _history_file(tmp_path, 5)
    monkeypatch.setattr(ts_columns, "MIN_BYTES", 1 if columnar else 1 << 40)
    ts = read_trainer_state(path, "trainer_state.json").value
    assert isinstance(ts.log_history, LazyHistory) is columnar
    history = json.loads(path.read_text())["log_history"]
    want = _plain_epoch_steps(history)
    assert 1000 < len(want) < 3000  # shared epochs were left out, the others kept
    assert history_epoch_steps([ts]) == want
    df = scalars_frame((), ts, ())
    plain = [(k, e["step"], float(v)) for e in history for k, v in e.items() if k != "step"]
    assert list(zip(df["tag"].astype(str), df["step"].astype(int), df["value"], strict=True)) == plain
    assert set(df.loc[df["tag"] == "loss", "split"]) == {"train"} and set(df.loc[df["tag"] == "epoch", "split"]) == {""}
    assert set(df.loc[df["tag"] == "eval_loss", "metric"]) == {"eval_loss"}
