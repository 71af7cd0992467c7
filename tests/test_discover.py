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
        # training logs committed as markdown (gaggenwaschke/NoProp logs/log_cifar100.md,
        # dhairyag/ImageNet1k_ResNet50 log_output.md); docs are not logs
        ("logs/log_cifar100.md", ArtifactKind.LOG, None),
        ("log_output.md", ArtifactKind.LOG, None),
        ("README-logs.md", ArtifactKind.LOG, None),
        ("README.md", ArtifactKind.OTHER, None),
        ("CHANGELOG.md", ArtifactKind.OTHER, None),
        ("summary_model.md", ArtifactKind.OTHER, None),
        ("logging.md", ArtifactKind.OTHER, None),
    ],
)
def test_classify_by_name(path: str, kind: ArtifactKind, detail: str | None) -> None:
    # a .bin is judged by its first bytes too (a raw token array is data): give it a torch zip's
    head = b"PK\x03\x04" + bytes(26) if path.endswith(".bin") else b"hello\n"
    assert classify(path, head) == (kind, detail)


def test_event_file_named_txt_is_sniffed() -> None:
    assert classify("metrics.txt", TFEVENTS_HEAD)[0] is ArtifactKind.TFEVENTS


def test_binary_file_named_log_is_not_text() -> None:
    kind, detail = classify("train.log", bytes(range(256)) * 2)
    assert kind is ArtifactKind.OTHER and detail == "binary"


def test_keras3_progbar_with_backspaces_is_text() -> None:
    # Keras 3's Progbar erases each redraw with one backspace per column (fixtures/runs/keras_progbar_nan)
    redraw = ("\r\x1b[1m1/7\x1b[0m \x1b[32m━━\x1b[0m\x1b[37m━━━━━━━━━━━━━━━━━━\x1b[0m \x1b[1m9s\x1b[0m 2s/step"
              " - loss: 989.9342 - mae: 24.8975")
    head = ("Epoch 1/4\n" + (redraw + "\b" * 60) * 20).encode()
    assert not looks_binary(head)
    assert classify("console.log", head)[0] is ArtifactKind.LOG
    # other C0 controls in the same proportion are still binary
    assert looks_binary(head.replace(b"\b", b"\x01"))


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


def test_a_link_out_of_the_run_reads_the_same_whether_its_target_exists_or_not(tmp_path: Path) -> None:
    # W&B's logs/debug-core.log -> ~/.cache/wandb/logs/core-debug-<time>.log: present on the machine
    # that trained, absent on the one analysing a copy. Both are "outside the run", never "broken".
    run = tmp_path / "run"
    run.mkdir()
    present = tmp_path / "cache" / "core-debug-present.log"
    present.parent.mkdir()
    present.write_text("core\n")
    (run / "debug-core.log").symlink_to(present)
    (run / "debug-core-2.log").symlink_to(tmp_path / "cache" / "core-debug-absent.log")
    (run / "dangling.log").symlink_to("nowhere.log")  # inside the run, and broken
    found = {a.path: a for a in discover(run).artifacts}
    for name in ("debug-core.log", "debug-core-2.log"):
        assert found[name].status is ParseStatus.SKIPPED
        assert found[name].note == "symlink that points outside the run directory (not followed)"
    assert found["dangling.log"].status is ParseStatus.UNREADABLE
    assert found["dangling.log"].note == "broken symlink"


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


def test_links_read_under_their_target_name_are_not_files_left_unread(tmp_path: Path) -> None:
    # W&B leaves wandb/latest-run and wandb/debug.log as links into the run folder: reading the
    # target is reading them, so the verdict must not say "files not fully read" for them
    import autopsy
    from autopsy.report.common import clean_verdict, notable_artifacts

    real = tmp_path / "wandb" / "run-20240501_100000-abc123"
    (real / "logs").mkdir(parents=True)
    (real / "logs" / "debug.log").write_text("2024-05-01 10:00:00,000 INFO wandb.init called\n")
    (real / "files").mkdir()
    (real / "files" / "output.log").write_text("step 1 | loss 2.0\nstep 2 | loss 1.9\n")
    (tmp_path / "wandb" / "latest-run").symlink_to("run-20240501_100000-abc123")
    (tmp_path / "wandb" / "debug.log").symlink_to("run-20240501_100000-abc123/logs/debug.log")
    (real / "logs" / "debug-core.log").symlink_to("/nonexistent/outside/core-debug.log")
    report = autopsy.analyze(tmp_path)
    listed = [a.path for a, _ in notable_artifacts(report)]
    assert "wandb/latest-run" not in listed and "wandb/debug.log" not in listed
    # a link out of the run is not read at all: that one is still listed
    assert listed == ["wandb/run-20240501_100000-abc123/logs/debug-core.log"]
    assert "1 file not fully read" in clean_verdict(report)[1]


@pytest.mark.parametrize("name,head,kind", [
    # nanoGPT's data/<dataset>/train.bin: uint16 token ids (generated: fixtures/runs/nanogpt_clean)
    ("data/tiny_char/train.bin", bytes([17, 0, 4, 0, 1, 0, 22, 0, 9, 0] * 20), ArtifactKind.OTHER),
    ("data/owt/val.bin", bytes(range(1, 200)), ArtifactKind.OTHER),
    # weights and state under .bin: torch zip, legacy torch pickle, safetensors, GGML
    ("pytorch_model.bin", b"PK\x03\x04\x00\x00\x08\x08" + bytes(40), ArtifactKind.CHECKPOINT_FILE),
    ("checkpoint_1/optimizer.bin", b"\x80\x02\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19.", ArtifactKind.CHECKPOINT_FILE),
    ("adapter_model.bin", b"\x10\x01\x00\x00\x00\x00\x00\x00{\"__metadata__\"", ArtifactKind.CHECKPOINT_FILE),
    ("ggml-model-q4_0.bin", b"ggjt\x01\x00\x00\x00", ArtifactKind.CHECKPOINT_FILE),
    # a zeroed or empty one is a damaged checkpoint file, judged as such
    ("checkpoint-100/pytorch_model.bin", bytes(512), ArtifactKind.CHECKPOINT_FILE),
    ("checkpoint-100/pytorch_model.bin", b"", ArtifactKind.CHECKPOINT_FILE),
])
def test_a_bin_file_is_a_checkpoint_only_when_it_starts_like_one(name: str, head: bytes, kind: ArtifactKind) -> None:
    assert classify(name, head)[0] is kind
