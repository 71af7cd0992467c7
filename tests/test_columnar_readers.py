"""The columnar trainer_state path and the template CRC check give exactly what the plain paths give.

trainer_state: ``autopsy.parsers.ts_columns`` reads big regular histories straight into
columns; here it is forced on small files (MIN_BYTES = 0) and compared with ``json.load``
+ the per-value loop, on regular files (it must be taken) and on irregular ones (it must
hand over to the plain path, with the same result). TensorBoard: random bit flips in
records must be found by the vectorised template check exactly as by one crc32c call per
record.
"""

from __future__ import annotations

import json
import math
import random
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import write_tfevents

from autopsy.model import ParseStatus
from autopsy.parsers import tfrecord, ts_columns
from autopsy.parsers.tensorboard import read_scalars
from autopsy.parsers.trainer_state import LazyHistory, history_columns, read_trainer_state


def _plain(history: list[Any]) -> list[tuple[Any, ...]]:
    rows = []
    for entry in history:
        if not isinstance(entry, dict):
            continue
        for tag, value in entry.items():
            if tag == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            rows.append((tag, entry.get("step"), float(value)))
    return rows


def _same(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> bool:
    def eq(x: Any, y: Any) -> bool:
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            return True
        return bool(x == y) and (x is None) == (y is None)

    return len(a) == len(b) and all(all(eq(x, y) for x, y in zip(r, s, strict=True)) for r, s in zip(a, b, strict=True))


@pytest.fixture(params=[None, 1 << 10, 97], ids=["one-piece", "1k-pieces", "97-byte-pieces"])
def force_columnar(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """The columnar path on small files, whole or cut into pieces (97 bytes: about one entry a piece)."""
    monkeypatch.setattr(ts_columns, "MIN_BYTES", 0)
    if request.param is not None:
        monkeypatch.setattr(ts_columns, "PIECE_BYTES", request.param)


def _regular_history(rng: random.Random, n: int) -> list[dict[str, Any]]:
    odd = [math.nan, math.inf, -math.inf, None, True, False, 10**20, -3, 0, -0.0, 1e-300, -1.2345678901234567e-05,
           1.7976931348623157e308, 2**63 + 5]
    history: list[dict[str, Any]] = []
    for i in range(n):
        if i % 7 == 6:  # an eval entry, long keys sharing their first and last 8 bytes
            entry: dict[str, Any] = {"eval_loss": rng.random(), "eval_samples_per_second": rng.random() * 100,
                                     "eval_steps_per_second": rng.random(), "eval_sxmples_per_second": 1.5}
        else:
            entry = {"epoch": round(i / n, 4), "grad_norm": rng.random() * 3, "learning_rate": 2e-5 * (1 - i / n),
                     "loss": round(rng.random(), 4)}
        for k in list(entry):
            if rng.random() < 0.05:
                entry[k] = rng.choice(odd)
        entry["step"] = i + 1
        history.append(dict(sorted(entry.items())))
    return history


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("indent", [2, None])
def test_columnar_history_equals_json(tmp_path: Path, force_columnar: None, seed: int, indent: int | None) -> None:
    history = _regular_history(random.Random(seed), 300)
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"best_metric": None, "global_step": 300, "log_history": history,
                                "max_steps": 1000, "total_flos": 1e18}, indent=indent, sort_keys=True))
    ts = read_trainer_state(path, "trainer_state.json").value
    if ts_columns._orjson is None:
        # Without orjson the columnar path is off by design; the plain reader must still agree.
        assert not isinstance(ts.log_history, LazyHistory)
    else:
        assert isinstance(ts.log_history, LazyHistory)  # the fast path was taken
    with open(path) as fh:
        expected = json.load(fh)
    tags, steps, values = history_columns(ts.log_history)
    assert _same(list(zip(tags.tolist(), steps.tolist(), values.tolist(), strict=True)),
                 _plain(expected["log_history"]))
    assert ts.global_step == 300 and ts.max_steps == 1000 and ts.extra["total_flos"] == 1e18
    # the dicts, on demand, are the plain reader's (orjson, as before: ints past 64 bits become floats)
    assert len(ts.log_history) == len(expected["log_history"])
    assert [list(e) for e in ts.log_history] == [list(e) for e in expected["log_history"]]
    assert _same(_plain(list(ts.log_history)), _plain(expected["log_history"]))


@pytest.mark.parametrize("change", [
    lambda h: h[3].update(note="a string"),  # a string value
    lambda h: h[5].update(extra={"nested": 1}),  # a nested object
    lambda h: h[5].update(extra=[1, 2]),  # a nested array
    lambda h: h[8].pop("step"),  # an entry without a step
    lambda h: h[8].update(step=2.5),  # a fractional step
    lambda h: h[8].update(step=None),
    lambda h: h.append({}),  # an empty entry
    lambda h: h[2].update(loss=10**40),  # a value longer than any window
    lambda h: h[4].update({"k\\ey": 1.0}),  # an escape
    lambda h: h[4].update({"a,b": 1.0}),  # a key holding a structural byte
])
def test_irregular_history_takes_the_plain_path(tmp_path: Path, force_columnar: None, change: Any) -> None:
    history = _regular_history(random.Random(9), 40)
    change(history)
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 40, "log_history": history}, indent=2))
    ts = read_trainer_state(path, "trainer_state.json").value
    with open(path) as fh:
        expected = json.load(fh)["log_history"]
    tags, steps, values = history_columns(ts.log_history)
    assert _same(list(zip(tags.tolist(), steps.tolist(), values.tolist(), strict=True)), _plain(expected))


@pytest.mark.parametrize(("shape", "columnar"), [
    ("regular", True),
    ("escape_after_history", False),  # the no-escape precondition holds for the whole file, not only the array
    ("history_after_long_fields", False),  # "log_history" past PREFIX_MAX: not the Trainer's layout
    # 200 KB of blanks between two entries: inside one piece they are scanned, across reads more
    # than ENTRY_MAX of them is refused; either way the result is json's
    ("long_blank_run_between_entries", None),
    ("blank_run_before_the_end", False),  # the array's end is checked on its last 64 bytes, as on whole bytes
])
def test_the_stream_holds_the_file_wide_checks(tmp_path: Path, force_columnar: None, monkeypatch: pytest.MonkeyPatch,
                                               shape: str, columnar: bool | None) -> None:
    """The stream sees the file a block at a time; what the whole-bytes scan checked on the whole
    file (no backslash anywhere, the array's place, its end) must still hold, else the plain path."""
    monkeypatch.setattr(ts_columns, "PREFIX_MAX", 4 << 10)
    monkeypatch.setattr(ts_columns, "ENTRY_MAX", 8 << 10)
    history = _regular_history(random.Random(5), 60)
    state: dict[str, Any] = {"global_step": 60, "log_history": history, "trial_name": "run"}
    if shape == "escape_after_history":
        state["trial_name"] = 'a "quoted" name'
    if shape == "history_after_long_fields":
        state = {"best_model_checkpoint": "x" * (8 << 10), **state}
    text = json.dumps(state, indent=2)
    if shape == "long_blank_run_between_entries":
        text = text.replace("},\n    {", "}," + " " * (200 << 10) + "{", 1)
    if shape == "blank_run_before_the_end":
        text = text.replace("}\n  ],", "}" + " " * 3000 + "],", 1)
    path = tmp_path / "trainer_state.json"
    path.write_text(text)
    ts = read_trainer_state(path, "trainer_state.json").value
    if columnar is not None:
        assert isinstance(ts.log_history, LazyHistory) is columnar
    expected = json.loads(text)
    tags, steps, values = history_columns(ts.log_history)
    got = list(zip(tags.tolist(), steps.tolist(), values.tolist(), strict=True))
    assert _same(got, _plain(expected["log_history"]))
    assert ts.extra.get("trial_name") == expected["trial_name"]


def test_a_stream_longer_than_its_limit_is_left_to_the_plain_path(force_columnar: None) -> None:
    """A file that grew while it was read: more bytes than fstat said (the limit) is not scanned."""
    import io

    text = json.dumps({"global_step": 9, "log_history": _regular_history(random.Random(2), 9)}, indent=2).encode()
    assert ts_columns.scan_history_stream(io.BytesIO(text), len(text), len(text)) is not None
    assert ts_columns.scan_history_stream(io.BytesIO(text), len(text), len(text) - 1) is None


def test_repeated_key_keeps_json_semantics(tmp_path: Path, force_columnar: None) -> None:
    text = '{"log_history": [{"loss": 1.0, "loss": 2.0, "step": 1}, {"loss": 3.0, "step": 2}], "global_step": 2}'
    path = tmp_path / "trainer_state.json"
    path.write_text(text)
    ts = read_trainer_state(path, "trainer_state.json").value
    assert history_columns(ts.log_history)[2].tolist() == [2.0, 3.0]


def test_cut_short_file_is_salvaged_not_scanned(tmp_path: Path, force_columnar: None) -> None:
    history = _regular_history(random.Random(3), 50)
    text = json.dumps({"global_step": 50, "log_history": history, "max_steps": 100}, indent=2, sort_keys=True)
    path = tmp_path / "trainer_state.json"
    path.write_text(text[: len(text) // 2])
    parsed = read_trainer_state(path, "trainer_state.json")
    assert parsed.status == ParseStatus.TRUNCATED
    assert not isinstance(parsed.value.log_history, LazyHistory)
    assert 0 < len(parsed.value.log_history) < 50


@pytest.mark.skipif(not tfrecord.crc_available(), reason="crc32c not installed")
@pytest.mark.parametrize("tensor_style", [False, True])
def test_template_crc_check_equals_one_call_per_record(tmp_path: Path, tensor_style: bool) -> None:
    rng = random.Random(7 + tensor_style)
    for trial in range(12):
        rows = [(rng.choice(["loss", "train/lr", "t" * rng.randint(1, 40)]),
                 rng.choice([rng.randint(0, 300), rng.randint(0, 10**12)]),
                 rng.choice([rng.random(), math.nan, 1e30, -0.0]), 1.7e9 + rng.random() * 1e6) for _ in range(300)]
        path = write_tfevents(tmp_path / f"events.out.tfevents.{trial}.h", rows, tensor_style=tensor_style)
        data = bytearray(path.read_bytes())
        a = np.frombuffer(bytes(data), np.uint8)
        scan = tfrecord.scan_frames(bytes(data), a, max_record=len(data), check_crc=False)
        for v in rng.sample(range(len(scan.starts)), rng.randint(1, 5)):
            pos = int(scan.starts[v]) + tfrecord.HEADER + rng.randrange(int(scan.lengths[v]) + 4)
            data[pos] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
        a = np.frombuffer(bytes(data), np.uint8)
        truth = len(tfrecord.bad_data_crcs(bytes(data), a, scan.starts, scan.lengths))
        parsed = read_scalars(path, max_bytes=1 << 40, check_crc=True)
        assert parsed.note is not None and f"{truth} record(s) with a bad data CRC" in parsed.note, parsed.note
        assert len(parsed.value) == len(rows) - truth


def test_unaligned_words_read_every_offset() -> None:
    buf = np.arange(40, dtype=np.uint8)
    words = tfrecord._unaligned(buf, "<u4")
    assert [int(words[i]) for i in (0, 1, 7)] == [struct.unpack_from("<I", bytes(buf), i)[0] for i in (0, 1, 7)]


def test_lazy_history_keeps_no_bytes_and_rereads_only_the_same_file(tmp_path: Path, force_columnar: None) -> None:
    """The columns are all a LazyHistory holds (issue 14: memory follows the frame, not the text);
    its dicts come from the file read again, and a file changed since the read is refused, not
    silently mixed with columns read from another version of it."""
    import os

    history = _regular_history(random.Random(11), 60)
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 60, "log_history": history}, indent=2))
    ts = read_trainer_state(path, "trainer_state.json").value
    assert isinstance(ts.log_history, LazyHistory)
    assert not any(isinstance(v, bytes) and len(v) > 100 for v in vars(ts.log_history).values())
    expected = json.loads(path.read_text())["log_history"]  # orjson's dicts: ints past 64 bits become floats
    assert [list(e) for e in ts.log_history] == [list(e) for e in expected]
    assert _same(_plain(list(ts.log_history)), _plain(expected))

    again = read_trainer_state(path, "trainer_state.json").value
    text = path.read_text().replace('"step": 1\n', '"step": 9\n', 1)
    path.write_text(text)
    os.utime(path, ns=(1, 1))
    with pytest.raises(ValueError, match="changed since it was read"):
        list(again.log_history)
    assert len(again.log_history) == 60  # the columns still answer
