"""Which configuration keys and environment facts can cause which failure families.

Data, used to rank differences: a config key related to the bad run's primary finding ranks
above one that is not. Matched against the words of a key's dotted path (``optim.lr`` has
the words ``optim`` and ``lr``; ``per_device_train_batch_size`` has ``batch`` among them).
"""

from __future__ import annotations

import re

RELATED_KEY_WORDS: dict[str, frozenset[str]] = {
    "oom": frozenset({"batch", "micro", "accumulation", "seq", "len", "length", "block", "context", "positions",
                      "hidden", "embd", "d_model", "layers", "layer", "fp16", "bf16", "precision", "checkpointing",
                      "workers", "prefetch", "image", "img", "resolution", "crop", "cache", "offload", "zero"}),
    "loss": frozenset({"lr", "learning", "rate", "warmup", "fp16", "bf16", "precision", "clip", "grad", "norm",
                       "decay", "eps", "epsilon", "beta1", "beta2", "momentum", "optimizer", "optim", "scale",
                       "init", "batch"}),
    "lr": frozenset({"lr", "learning", "warmup", "scheduler", "schedule", "decay", "gamma", "cosine", "linear",
                     "max_steps", "total_steps", "num_train_epochs", "max_epochs", "epochs", "train_iters"}),
    "disk": frozenset({"save", "keep", "checkpoint", "checkpointing", "save_total_limit"}),
    "checkpoint": frozenset({"save", "total", "limit", "keep", "checkpoint", "checkpointing", "resume", "every"}),
    "tokenizer": frozenset({"max", "len", "length", "truncation", "seq", "block", "vocab", "tokenizer", "padding",
                            "positions"}),
    "dist": frozenset({"world", "size", "nproc", "nnodes", "nccl", "backend", "timeout", "master", "ddp", "fsdp",
                       "zero", "deepspeed", "bucket"}),
    "data": frozenset({"workers", "dataset", "data", "prefetch", "pin", "shuffle", "batch", "path"}),
    "run": frozenset({"max_steps", "epochs", "num_train_epochs", "max_epochs", "time", "timeout", "max_time"}),
}
# Families whose cause is typically the environment (a library or driver version).
ENVIRONMENT_FAMILIES = frozenset({"env", "cuda", "code"})
# Metric divergence -> the families whose config keys can cause it.
METRIC_FAMILIES = {"loss": "loss", "eval_loss": "loss", "grad_norm": "loss", "lr": "lr", "throughput": "data"}

_SPLIT = re.compile(r"[._\-\s/\[\]]+")


def key_words(raw_key: str) -> set[str]:
    """The words of a dotted key, and its whole leaf (``save_total_limit`` is also one word)."""
    key = raw_key.lower().lstrip("-")
    leaf = key.rsplit(".", 1)[-1]
    return {w for w in _SPLIT.split(key) if w} | {leaf}


def related(family: str, raw_key: str) -> bool:
    words = RELATED_KEY_WORDS.get(family)
    return words is not None and bool(key_words(raw_key) & words)
