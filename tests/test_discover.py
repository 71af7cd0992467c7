"""Discovery: classification by name and sniffed bytes, bounded walks, hostile trees."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from autopsy.discover import WalkLimits, classify, discover, looks_binary, rank_from_path
from autopsy.model import ArtifactKind, ParseStatus

TFEVENTS_HEAD = struct.pack("<Q", 24) + b"\0" * 4 + b"\x09" + b"\0" * 8 + b"\x1a\x0dbrain.Event:2"


@pytest.mark.parametrize(
    ("path", "kind", "detail"),
    [
        ("train.log", ArtifactKind.LOG, None),
        ("nohup.out", ArtifactKind.LOG, None),
        ("slurm-123456.out", ArtifactKind.LOG, None),
        ("logs/abc/attempt_0/3/stderr.log", ArtifactKind.LOG, None),
        ("runs/Jan01/events.out.tfevents.1700000000.host.1.0", ArtifactKind.TFEVENTS, None),
        ("trainer_state.json", ArtifactKind.TRAINER_STATE, None),
        ("checkpoint-500/trainer_state.json", ArtifactKind.TRAINER_STATE, None),
        ("checkpoint-500/model.safetensors", ArtifactKind.CHECKPOINT_FILE, "safetensors"),
        ("checkpoint-500/optimizer.pt", ArtifactKind.CHECKPOINT_FILE, "pt"),
        ("checkpoint-500/training_args.bin", ArtifactKind.CHECKPOINT_FILE, "bin"),
        ("model.safetensors.index.json", ArtifactKind.CHECKPOINT_FILE, "index"),
        ("base_checkpoints/d8/meta_000250.json", ArtifactKind.CHECKPOINT_FILE, "meta"),
        ("config.json", ArtifactKind.CONFIG, "hf_config"),
        ("tokenizer.json", ArtifactKind.CONFIG, "tokenizer"),
        (".hydra/config.yaml", ArtifactKind.CONFIG, "hydra"),
        ("configs/train.yaml", ArtifactKind.CONFIG, None),
        ("args.json", ArtifactKind.CONFIG, "args_dump"),
        ("run.sh", ArtifactKind.LAUNCH_SCRIPT, None),
        ("job.sbatch", ArtifactKind.LAUNCH_SCRIPT, None),
        ("exit_code", ArtifactKind.EXIT_CODE, None),
        ("merges.txt", ArtifactKind.OTHER, None),
        ("vocab.json", ArtifactKind.OTHER, None),
    ],
)
def test_classify_by_name(path: str, kind: ArtifactKind, detail: str | None) -> None:
    assert classify(path, b"hello\n") == (kind, detail)


def test_event_file_named_txt_is_sniffed() -> None:
    assert classify("metrics.txt", TFEVENTS_HEAD)[0] is ArtifactKind.TFEVENTS


def test_binary_file_named_log_is_not_text() -> None:
    kind, detail = classify("train.log", bytes(range(256)) * 2)
    assert kind is ArtifactKind.OTHER and detail == "binary"


def test_utf16_log_is_text() -> None:
    head = "\ufeffstep 1 loss 2.0\n".encode("utf-16")
    assert not looks_binary(head)
    assert classify("train.log", head)[0] is ArtifactKind.LOG


@pytest.mark.parametrize(
    ("path", "rank"),
    [
        ("logs/x/attempt_0/3/stderr.log", 3),
        ("rank3.log", 3),
        ("log_rank_12.txt", 12),
        ("train-rank02.out", 2),
        ("train.log", None),
        ("frank.log", None),
    ],
)
def test_rank_from_path(path: str, rank: int | None) -> None:
    assert rank_from_path(path) == rank


def test_discover_walks_and_lists_everything(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text("step 1 | loss 2.0\n")
    (tmp_path / "checkpoint-10").mkdir()
    (tmp_path / "checkpoint-10" / "model.safetensors").write_bytes(b"\0" * 16)
    (tmp_path / "blob.dat").write_bytes(b"\0" * 100)
    found = {a.path: a for a in discover(tmp_path).artifacts}
    assert found["train.log"].kind is ArtifactKind.LOG
    assert found["checkpoint-10/model.safetensors"].kind is ArtifactKind.CHECKPOINT_FILE
    assert found["blob.dat"].status is ParseStatus.SKIPPED
    assert found["blob.dat"].size == 100


def test_symlink_loop_and_escape_are_not_followed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "a").mkdir(parents=True)
    (run / "a" / "loop").symlink_to(run)
    outside = tmp_path / "outside.log"
    outside.write_text("secret\n")
    (run / "escape.log").symlink_to(outside)
    (run / "train.log").write_text("hi\n")
    disc = discover(run)
    paths = {a.path: a for a in disc.artifacts}
    assert "train.log" in paths
    assert paths["escape.log"].status is ParseStatus.SKIPPED
    assert any("loop" in p for p in disc.problems)


def test_fifo_is_listed_but_never_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "train.log")
    (art,) = discover(tmp_path).artifacts
    assert art.status is ParseStatus.UNREADABLE
    assert "FIFO" in (art.note or "")


def test_depth_and_file_count_are_bounded(tmp_path: Path) -> None:
    deep = tmp_path
    for i in range(6):
        deep = deep / f"d{i}"
    deep.mkdir(parents=True)
    (deep / "x.log").write_text("x\n")
    disc = discover(tmp_path, WalkLimits(max_depth=3))
    assert disc.artifacts == ()
    assert any("deeper than 3" in p for p in disc.problems)
    for i in range(30):
        (tmp_path / f"f{i}.txt").write_text("x\n")
    disc = discover(tmp_path, WalkLimits(max_files=10))
    assert len(disc.artifacts) == 10
    assert disc.truncated


def test_unreadable_file_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Root reads files whatever their mode, so simulate EACCES at open() time.
    p = tmp_path / "train.log"
    p.write_text("x\n")
    real_open = os.open

    def deny(path, flags, *a, **k):  # type: ignore[no-untyped-def]
        if str(path).endswith("train.log"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", deny)
    (art,) = discover(tmp_path).artifacts
    assert art.status is ParseStatus.UNREADABLE


def test_directory_symlink_inside_the_run_is_walked_under_its_real_name(tmp_path: Path) -> None:
    # W&B keeps wandb/latest-run -> run-<id>; citations must name the real folder.
    real = tmp_path / "wandb" / "run-20240501_100000-abc123" / "files"
    real.mkdir(parents=True)
    (real / "output.log").write_text("step 1 | loss 2.0\n")
    (tmp_path / "wandb" / "latest-run").symlink_to("run-20240501_100000-abc123")
    found = {a.path: a for a in discover(tmp_path).artifacts}
    assert found["wandb/run-20240501_100000-abc123/files/output.log"].kind is ArtifactKind.LOG
    assert found["wandb/latest-run"].status is ParseStatus.SKIPPED
    assert "walked under that name" in (found["wandb/latest-run"].note or "")
    assert not any(p.startswith("wandb/latest-run/") for p in found)
