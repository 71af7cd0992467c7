"""The TensorBoard reader against TensorBoard's own writer and accumulator, and on damage."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pytest
from builders import write_tfevents
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autopsy.model import ParseStatus
from autopsy.parsers import tfrecord
from autopsy.parsers.tb_proto import decode_event
from autopsy.parsers.tensorboard import read_scalars

BIG = 1 << 40


def _rows(n_steps: int = 40) -> list[tuple[str, int, float]]:
    rows = []
    for s in range(n_steps):
        for k, tag in enumerate(("train/loss", "train/lr", "grad_norm", "eval/loss")):
            rows.append((tag, s * 10, math.sin(s + k) * 3 + 0.125 * k))
    return rows


def _expected(rows: list[tuple[str, int, float]]) -> tuple[list[str], list[int], list[float]]:
    return [r[0] for r in rows], [r[1] for r in rows], [float(np.float32(r[2])) for r in rows]


@pytest.mark.parametrize("tensor_style", [False, True])
def test_reads_every_scalar_exactly(tmp_path: Path, tensor_style: bool) -> None:
    rows = [*_rows(), ("odd", 0, 1.5), ("odd", -7, -2.0), ("odd", 2 ** 40, math.inf), ("odd", 3, math.nan)]
    path = write_tfevents(tmp_path / "events.out.tfevents.1.h", rows, tensor_style=tensor_style)
    parsed = read_scalars(path, max_bytes=BIG)
    assert parsed.status is ParseStatus.OK, parsed.note
    df = parsed.value
    assert list(df.columns) == ["tag", "step", "wall_time", "value"]
    assert str(df["step"].dtype) == "int64" and str(df["value"].dtype) == "float64"
    tags, steps, values = _expected(rows)
    assert df["tag"].tolist() == tags
    assert df["step"].tolist() == steps
    np.testing.assert_array_equal(df["value"].to_numpy(), np.array(values))
    np.testing.assert_array_equal(df["wall_time"].to_numpy(), np.array([1_700_000_000.0 + s for s in steps]))


def test_matches_tensorboard_event_accumulator(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    rows = _rows(300)
    path = write_tfevents(tmp_path / "events.out.tfevents.2.h", rows)
    acc = EventAccumulator(str(path), size_guidance={SCALARS: 0})
    acc.Reload()
    theirs = sorted((tag, e.step, e.wall_time, e.value) for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag))
    df = read_scalars(path, max_bytes=BIG).value
    ours = sorted(zip(df["tag"], df["step"], df["wall_time"], df["value"], strict=True))
    assert ours == theirs


def test_tf2_metadata_only_on_first_event_and_other_plugins(tmp_path: Path) -> None:
    """TF2 writes plugin metadata once per tag; tensors of other plugins are not scalars."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.plugins.scalar import summary_v2
    from tensorboard.summary.writer.record_writer import RecordWriter
    from tensorboard.util import tensor_util

    path = tmp_path / "events.out.tfevents.3.h"
    with open(path, "wb") as fh:
        w = RecordWriter(fh)
        for step in range(6):
            s = summary_v2.scalar_pb("loss", 1.0 / (step + 1))
            if step:
                s.value[0].ClearField("metadata")
            w.write(event_pb2.Event(wall_time=5.0, step=step, summary=s).SerializeToString())
            other = summary_pb2.Summary(value=[summary_pb2.Summary.Value(
                tag="hist_like", tensor=tensor_util.make_tensor_proto(np.float32(step)),
                metadata=summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(
                    plugin_name="histograms")))])
            w.write(event_pb2.Event(wall_time=5.0, step=step, summary=other).SerializeToString())
            img = summary_pb2.Summary(value=[summary_pb2.Summary.Value(
                tag="img", image=summary_pb2.Summary.Image(height=1, width=1, encoded_image_string=b"x"))])
            w.write(event_pb2.Event(wall_time=5.0, step=step, summary=img).SerializeToString())
    df = read_scalars(path, max_bytes=BIG).value
    assert set(df["tag"]) == {"loss"}
    assert df["step"].tolist() == list(range(6))
    np.testing.assert_allclose(df["value"], [1.0 / (s + 1) for s in range(6)], rtol=1e-6)


def test_merged_summary_with_several_values_and_no_wall_time(tmp_path: Path) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    path = tmp_path / "events.out.tfevents.4.h"
    with open(path, "wb") as fh:
        w = RecordWriter(fh)
        for step in range(1, 8):
            s = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="a", simple_value=step),
                                           summary_pb2.Summary.Value(tag="b", simple_value=-step)])
            w.write(event_pb2.Event(step=step, summary=s).SerializeToString())  # wall_time 0: not written
    df = read_scalars(path, max_bytes=BIG).value
    assert df["tag"].tolist() == ["a", "b"] * 7
    assert df["value"].tolist() == [v for s in range(1, 8) for v in (s, -s)]
    assert df["wall_time"].isna().all()


def test_large_file_many_chunks_and_varied_tags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autopsy.parsers import tensorboard

    monkeypatch.setattr(tensorboard, "CHUNK_BYTES", 4096)  # force many chunk boundaries
    rows = [(f"t{k % 13}/{'x' * (k % 5)}", s, float(s * 13 + k)) for s in range(200) for k in range(13)]
    path = write_tfevents(tmp_path / "events.out.tfevents.5.h", rows)
    parsed = read_scalars(path, max_bytes=BIG)
    assert parsed.status is ParseStatus.OK
    tags, _steps, values = _expected(rows)
    assert parsed.value["tag"].tolist() == tags and parsed.value["value"].tolist() == values


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.0.h"
    path.write_bytes(b"")
    parsed = read_scalars(path, max_bytes=BIG)
    assert parsed.status is ParseStatus.OK and parsed.note == "empty event file" and len(parsed.value) == 0


def test_missing_file_is_unreadable(tmp_path: Path) -> None:
    parsed = read_scalars(tmp_path / "nope", max_bytes=BIG)
    assert parsed.status is ParseStatus.UNREADABLE and parsed.value is None


def test_truncated_at_many_offsets_keeps_complete_records(tmp_path: Path) -> None:
    rows = _rows(10)
    path = write_tfevents(tmp_path / "full", rows)
    data = path.read_bytes()
    full = read_scalars(path, max_bytes=BIG).value
    # frame ends: offsets at which a cut loses nothing of the records before it
    ends, pos = [], 0
    while pos < len(data):
        pos += 16 + struct.unpack_from("<Q", data, pos)[0]
        ends.append(pos)
    cut_path = tmp_path / "cut"
    for cut in sorted({1, 7, 12, 13, 40, len(data) // 3, len(data) // 2, len(data) - 1, len(data) - 5, *ends[:3]}):
        cut_path.write_bytes(data[:cut])
        parsed = read_scalars(cut_path, max_bytes=BIG)
        complete = sum(1 for e in ends if e <= cut)
        n_scalars = max(0, complete - 1)  # the first record is file_version
        assert len(parsed.value) == n_scalars, cut
        assert parsed.value.equals(full.iloc[:n_scalars]), cut
        if cut in ends:
            assert parsed.status is ParseStatus.OK
        else:
            assert parsed.status is ParseStatus.TRUNCATED and "byte offset" in (parsed.note or ""), cut


@pytest.mark.skipif(not tfrecord.crc_available(), reason="crc32c not installed")
def test_bad_data_crc_skips_that_record_only(tmp_path: Path) -> None:
    rows = _rows(10)
    path = write_tfevents(tmp_path / "ev", rows)
    data = bytearray(path.read_bytes())
    # flip the last byte of the 5th record's payload (its float value)
    pos = 0
    for _ in range(5):
        pos += 16 + struct.unpack_from("<Q", data, pos)[0]
    length = struct.unpack_from("<Q", data, pos)[0]
    data[pos + 12 + length - 1] ^= 0x01
    path.write_bytes(bytes(data))
    parsed = read_scalars(path, max_bytes=BIG)
    assert parsed.status is ParseStatus.TRUNCATED
    assert f"first at byte offset {pos}" in (parsed.note or "")
    assert len(parsed.value) == len(rows) - 1
    unchecked = read_scalars(path, max_bytes=BIG, check_crc=False)
    assert unchecked.status is ParseStatus.OK and len(unchecked.value) == len(rows)


@pytest.mark.skipif(not tfrecord.crc_available(), reason="crc32c not installed")
@pytest.mark.parametrize("tensor_style", [False, True])
@pytest.mark.parametrize("where", ["wall", "step", "value", "tag", "crc"])
def test_vectorised_crc_catches_each_byte(tmp_path: Path, tensor_style: bool, where: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The by-reference CRC check must flag a flipped bit wherever it is, like a per-record check."""
    per_record: list[int] = []
    original = tfrecord.bad_data_crcs

    def spy(buf: bytes, a: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        per_record.append(len(starts))
        return original(buf, a, starts, lengths)

    monkeypatch.setattr(tfrecord, "bad_data_crcs", spy)
    rows = [(tag, s * 300, float(s)) for s in range(30) for tag in ("loss", "lr")]
    path = write_tfevents(tmp_path / "ev", rows, tensor_style=tensor_style)
    data = bytearray(path.read_bytes())
    pos = 0
    for _ in range(18):  # record 18: an "lr" event in the middle of its group
        pos += 16 + struct.unpack_from("<Q", data, pos)[0]
    length = struct.unpack_from("<Q", data, pos)[0]
    payload = pos + 12
    tag_at = data.index(b"lr", payload)
    value_at = decode_event(bytes(data), payload, payload + length)[2][0].slot + 1
    offset = {"wall": payload + 3, "step": payload + 10, "value": value_at, "tag": tag_at,
              "crc": payload + length + 1}[where]
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))
    parsed = read_scalars(path, max_bytes=BIG)
    assert parsed.status is ParseStatus.TRUNCATED, where
    assert f"1 record(s) with a bad data CRC skipped (first at byte offset {pos})" in (parsed.note or "")
    assert len(parsed.value) == len(rows) - 1
    assert sum(per_record) <= 4  # file_version, the odd one out: the rest were checked by reference


def test_absurd_length_field(tmp_path: Path) -> None:
    path = write_tfevents(tmp_path / "ev", _rows(3))
    data = path.read_bytes()
    header = struct.pack("<Q", 1 << 60)
    header += struct.pack("<I", tfrecord.masked_crc(header)) if tfrecord.crc_available() else b"\0" * 4
    path.write_bytes(data + header + b"\x09" * 100)
    for crc in (True, False):
        parsed = read_scalars(path, max_bytes=BIG, check_crc=crc)
        assert parsed.status is ParseStatus.TRUNCATED
        assert f"byte offset {len(data)}" in (parsed.note or "")
        assert len(parsed.value) == 12


def test_bad_length_crc_stops(tmp_path: Path) -> None:
    if not tfrecord.crc_available():
        pytest.skip("crc32c not installed")
    path = write_tfevents(tmp_path / "ev", _rows(5))
    data = bytearray(path.read_bytes())
    pos = 16 + struct.unpack_from("<Q", data, 0)[0]
    pos += 16 + struct.unpack_from("<Q", data, pos)[0]  # third record
    data[pos + 9] ^= 0xFF
    path.write_bytes(bytes(data))
    parsed = read_scalars(path, max_bytes=BIG)
    assert parsed.status is ParseStatus.TRUNCATED and f"byte offset {pos}" in (parsed.note or "")
    assert len(parsed.value) == 1


def test_max_bytes_reads_only_a_prefix(tmp_path: Path) -> None:
    path = write_tfevents(tmp_path / "ev", _rows(50))
    parsed = read_scalars(path, max_bytes=2000)
    assert parsed.status is ParseStatus.TRUNCATED and "max bytes" in (parsed.note or "")
    assert 0 < len(parsed.value) < 200


def test_big_non_scalar_record_is_skipped(tmp_path: Path) -> None:
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    path = tmp_path / "ev"
    with open(path, "wb") as fh:
        w = RecordWriter(fh)
        w.write(event_pb2.Event(wall_time=1.0, graph_def=b"g" * (3 * 1024 * 1024)).SerializeToString())
    write_tfevents(tmp_path / "tail", _rows(2), file_version=False)
    path.write_bytes(path.read_bytes() + (tmp_path / "tail").read_bytes())
    parsed = read_scalars(path, max_bytes=BIG)
    assert parsed.status is ParseStatus.OK and len(parsed.value) == 8


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
def test_no_byte_string_crashes(tmp_path: Path, blob: bytes) -> None:
    path = tmp_path / "fuzz"
    path.write_bytes(blob)
    parsed = read_scalars(path, max_bytes=BIG)
    assert parsed.status in (ParseStatus.OK, ParseStatus.TRUNCATED)
    assert list(parsed.value.columns) == ["tag", "step", "wall_time", "value"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_real_files_never_crash(tmp_path: Path, data: st.DataObject) -> None:
    base = tmp_path / "base"
    if not base.exists():
        write_tfevents(base, _rows(4), tensor_style=True)
    raw = bytearray(base.read_bytes())
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    path = tmp_path / "mut"
    path.write_bytes(bytes(raw[: data.draw(st.integers(0, len(raw)))]))
    for crc in (True, False):
        parsed = read_scalars(path, max_bytes=BIG, check_crc=crc)
        assert parsed.value is not None
