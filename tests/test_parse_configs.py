"""Config flattening: keys, canonical aliases, lines, launch scripts, damage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autopsy.model import ArtifactKind, ParseStatus
from autopsy.parsers.config_aliases import canonical_key
from autopsy.parsers.configs import MAX_ENTRIES, read_config
from autopsy.parsers.types import ConfigEntry


def _read(tmp_path: Path, name: str, text: str, kind: ArtifactKind = ArtifactKind.CONFIG,
          detail: str | None = None):
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return read_config(p, name, kind, detail)


def _by_key(entries: list[ConfigEntry]) -> dict[str, ConfigEntry]:
    return {e.key: e for e in entries}


def test_yaml_nested_with_lines_and_aliases(tmp_path: Path) -> None:
    text = ("model:\n  block_size: 1024\n  vocab_size: 50304\n"
            "optimizer:\n  lr: 6.0e-4\n  betas: [0.9, 0.95]\n"
            "training:\n  save_every: 500   # steps\n  save_total_limit: 3\n  warmup: 0.03\n"
            "  min_lr: 1e-5\n  schedule: cosine\n  tag: '123'\n")
    parsed = _read(tmp_path, "configs/train.yaml", text)
    assert parsed.status is ParseStatus.OK
    e = _by_key(parsed.value)
    assert e["learning_rate"].raw_key == "optimizer.lr" and e["learning_rate"].value == 6.0e-4
    assert e["learning_rate"].line == 5 and e["learning_rate"].path == "configs/train.yaml"
    assert e["max_seq_len"].value == 1024 and e["max_seq_len"].line == 2
    assert e["save_steps"].value == 500 and e["save_steps"].line == 8 and e["save_steps"].text == "500"
    assert e["save_total_limit"].value == 3 and e["save_total_limit"].line == 9
    assert e["warmup_ratio"].value == 0.03
    assert e["min_lr"].value == 1e-5  # YAML 1.1 reads 1e-5 as a string; training code means a number
    assert e["lr_scheduler_type"].value == "cosine"
    assert e["betas"].value == [0.9, 0.95]
    assert e["tag"].value == "123"  # quoted: stays a string
    assert all(x.source == "yaml" for x in parsed.value)


def test_yaml_alias_bomb_is_capped(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, y, z, w, v, u, t, s, r]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    lines.append("boom: {k: *a9}")
    parsed = _read(tmp_path, "bomb.yaml", "\n".join(lines) + "\n")
    assert parsed.status is ParseStatus.TRUNCATED
    assert len(parsed.value) <= MAX_ENTRIES


def test_yaml_merge_keys_and_multi_docs(tmp_path: Path) -> None:
    text = "base: &b\n  lr: 0.1\nrun:\n  <<: *b\n  batch_size: 4\n---\nmax_steps: 99\n"
    e = _by_key(_read(tmp_path, "c.yml", text).value)
    assert e["per_device_train_batch_size"].value == 4
    assert e["max_steps"].value == 99 and e["max_steps"].line == 7
    assert any(x.raw_key == "run.lr" for x in _read(tmp_path, "c.yml", text).value)


@pytest.mark.parametrize("text", ["a: [1, 2\n", "a: b: c\n", "\t- x\n:", "key: !!python/object:os.system x\n"])
def test_bad_yaml(tmp_path: Path, text: str) -> None:
    parsed = _read(tmp_path, "bad.yaml", text)
    assert parsed.status in (ParseStatus.UNREADABLE, ParseStatus.TRUNCATED, ParseStatus.OK)
    if parsed.status is not ParseStatus.OK:
        assert parsed.note and "YAML" in parsed.note


def test_unsafe_yaml_tag_is_not_constructed(tmp_path: Path) -> None:
    parsed = _read(tmp_path, "x.yaml", "cmd: !!python/object/apply:os.system ['touch pwned']\nlr: 1\n")
    assert not (tmp_path / "pwned").exists()
    assert _by_key(parsed.value)["learning_rate"].value == 1


def test_json_lines_and_hf_config(tmp_path: Path) -> None:
    cfg = {"architectures": ["GPT2LMHeadModel"], "n_positions": 1024, "vocab_size": 50257,
           "task_specific_params": {"text-generation": {"max_length": 50}}, "n_embd": 768}
    parsed = _read(tmp_path, "config.json", json.dumps(cfg, indent=2), detail="hf_config")
    e = {x.raw_key: x for x in parsed.value}
    assert e["vocab_size"].source == "hf_config" and e["vocab_size"].line == 6
    assert e["n_positions"].key == "max_seq_len" and e["n_positions"].line == 5
    assert e["task_specific_params.text-generation.max_length"].line == 9
    assert e["architectures"].value == ["GPT2LMHeadModel"]


def test_args_dump_and_bad_json(tmp_path: Path) -> None:
    parsed = _read(tmp_path, "args.json", '{"lr": 3e-4, "save_every": 100}', detail="args_dump")
    e = _by_key(parsed.value)
    assert e["learning_rate"].source == "args_dump" and e["save_steps"].value == 100
    bad = _read(tmp_path, "x.json", '{"lr": 3e-4, ')
    assert bad.status is ParseStatus.UNREADABLE and "JSON" in (bad.note or "")


def test_tokenizer_files(tmp_path: Path) -> None:
    tok = {"version": "1.0", "added_tokens": [{"id": 5, "content": "<|eos|>"}, {"id": 6, "content": "<pad>"}],
           "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4}, "merges": []}}
    parsed = _read(tmp_path, "tokenizer.json", json.dumps(tok, indent=1), detail="tokenizer")
    assert [(x.key, x.value, x.source) for x in parsed.value] == [("vocab_size", 7, "tokenizer")]
    tc = {"model_max_length": 1000000000000000019884624838656, "added_tokens_decoder": {"5": {"content": "x"}},
          "tokenizer_class": "GPT2Tokenizer"}
    e = _by_key(_read(tmp_path, "tokenizer_config.json", json.dumps(tc), detail="tokenizer").value)
    assert e["max_seq_len"].value is None  # transformers' "no limit" sentinel
    assert "content" not in e  # added_tokens_decoder skipped
    tc["model_max_length"] = 2048
    assert _by_key(_read(tmp_path, "tokenizer_config.json", json.dumps(tc), detail="tokenizer").value)[
        "max_seq_len"].value == 2048


LAUNCH = """#!/bin/bash
#SBATCH --job-name=gpt
#SBATCH --time=04:00:00
#SBATCH --nodes 2
export PYTHONUNBUFFERED=1
export NCCL_DEBUG=INFO
# a comment --lr=5
nohup torchrun --nproc_per_node=8 train.py \\
    --learning_rate 3e-4 \\
    --save-every=1000 --bf16 \\
    --max_steps 5000 --warmup_steps -1 > train.log 2>&1 &
"""


def test_launch_script(tmp_path: Path) -> None:
    parsed = _read(tmp_path, "run.sh", LAUNCH, kind=ArtifactKind.LAUNCH_SCRIPT)
    e = _by_key(parsed.value)
    assert all(x.source == "launch_flag" for x in parsed.value)
    assert e["sbatch_time"].value == "04:00:00" and e["sbatch_time"].line == 3
    assert e["sbatch_nodes"].value == 2
    assert e["PYTHONUNBUFFERED"].value == 1 and e["NCCL_DEBUG"].value == "INFO"
    assert e["learning_rate"].value == 3e-4 and e["learning_rate"].line == 9 and e["learning_rate"].raw_key == \
        "--learning_rate"
    assert e["save_steps"].value == 1000 and e["save_steps"].line == 10
    assert e["bf16"].value is True
    assert e["max_steps"].value == 5000 and e["warmup_steps"].value == -1 and e["max_steps"].line == 11
    assert e["nproc_per_node"].value == 8
    assert e["launch_uses_nohup"].value is True and e["python_unbuffered"].value is True
    assert e["launch_command"].line == 8 and "train.py" in e["launch_command"].value
    assert "train.log" not in e["launch_command"].value
    assert "5" not in [str(x.value) for x in parsed.value if x.line == 7]


def test_launch_without_unbuffered(tmp_path: Path) -> None:
    e = _by_key(_read(tmp_path, "go.sh", "python train.py --lr=0.1\n", kind=ArtifactKind.LAUNCH_SCRIPT).value)
    assert e["python_unbuffered"].value is False and e["launch_uses_nohup"].value is False
    e = _by_key(_read(tmp_path, "go2.sh", "python -u train.py --lr 0.1\n", kind=ArtifactKind.LAUNCH_SCRIPT).value)
    assert e["python_unbuffered"].value is True and e["learning_rate"].value == 0.1


def test_hydra_source_and_empty(tmp_path: Path) -> None:
    parsed = _read(tmp_path, ".hydra/config.yaml", "optim:\n  lr: 0.01\n", detail="hydra")
    assert parsed.value[0].source == "hydra" and parsed.value[0].key == "learning_rate"
    empty = _read(tmp_path, "e.yaml", "")
    assert empty.value == [] and empty.status is ParseStatus.OK


@pytest.mark.parametrize("raw,canon", [("lr", "learning_rate"), ("--Learning-Rate", "learning_rate"),
                                       ("max_iters", "max_steps"), ("keep_last_n", "save_total_limit"),
                                       ("device_batch_size", "per_device_train_batch_size"),
                                       ("eta_min", "min_lr"), ("n_embd", "n_embd"), ("NCCL_DEBUG", "NCCL_DEBUG")])
def test_alias_table(raw: str, canon: str) -> None:
    assert canonical_key(raw) == canon


def test_toml(tmp_path: Path) -> None:
    e = _by_key(_read(tmp_path, "cfg.toml", "[train]\nlr = 0.5\nmax_steps = 10\n").value)
    assert e["learning_rate"].value == 0.5 and e["learning_rate"].line == 2 and e["max_steps"].line == 3


def test_wandb_config_values_keep_their_names(tmp_path: Path) -> None:
    # W&B's files/config.yaml wraps each value: {desc: null, value: ...}
    p = tmp_path / "config.yaml"
    p.write_text("wandb_version: 1\n\n_wandb:\n  desc: null\n  value:\n    cli_version: 0.16.6\n"
                 "learning_rate:\n  desc: null\n  value: 2.0e-05\nper_device_train_batch_size:\n"
                 "  desc: null\n  value: 8\n")
    entries = {e.key: e for e in read_config(p, "config.yaml", ArtifactKind.CONFIG, None).value}
    assert entries["learning_rate"].value == 2e-05 and entries["learning_rate"].line == 7
    assert entries["per_device_train_batch_size"].value == 8
    assert "value" not in entries
