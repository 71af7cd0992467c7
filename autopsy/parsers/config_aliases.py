"""Canonical config keys and the aliases training code uses for them.

Rules ask for one name (``run.config_value("save_steps")``) whatever the run called it:
HF ``TrainingArguments`` names are canonical; nanoGPT, nanochat, Lightning, torchtune,
DeepSpeed, Megatron and hand-written scripts use the aliases on the right. Matching is on
the leaf key (``training.optim.lr`` -> ``lr``), lower-cased, with ``-`` read as ``_``
(``--learning-rate``). A key that is no alias keeps its leaf name as its key.

| canonical | aliases |
|---|---|
| learning_rate | lr, max_lr, peak_lr, base_lr, optimizer.lr (leaf ``lr``), init_lr |
| min_lr | min_learning_rate, final_lr, lr_min, eta_min, end_lr, minimum_lr (not min_lr_ratio: a ratio) |
| warmup_steps | warmup, num_warmup_steps, warmup_iters, lr_warmup_steps, warmup_iterations |
| warmup_ratio | warmup_ratio, warmup_frac, warmup_fraction (and ``warmup`` when 0 < value < 1) |
| max_steps | num_iterations, total_steps, max_iters, train_steps, num_train_steps, max_train_steps, train_iters |
| save_steps | save_every, checkpoint_every, save_interval, ckpt_every, checkpointing_steps, save_freq |
| save_total_limit | keep_last_n, max_checkpoints, keep_checkpoint_max, save_top_k, keep_last |
| lr_scheduler_type | scheduler, lr_scheduler, lr_schedule, schedule, lr_decay_style, scheduler_type |
| vocab_size | vocab_size, n_vocab, padded_vocab_size |
| max_seq_len | model_max_length, max_length, seq_len, block_size, max_position_embeddings, n_positions, |
|   | sequence_length, context_length, max_seq_length, n_ctx, seq_length |
| per_device_train_batch_size | device_batch_size, batch_size, train_batch_size, micro_batch_size, |
|   | train_micro_batch_size_per_gpu |
| gradient_accumulation_steps | grad_accum_steps, gradient_accumulation, accumulate_grad_batches, grad_accum |
| num_train_epochs | epochs, num_epochs, max_epochs, n_epochs |
| logging_steps | log_every, log_interval, logging_interval, log_freq |
| output_dir | out_dir, output_path, save_dir, checkpoint_dir, ckpt_dir, default_root_dir |
| resume_from_checkpoint | resume, resume_from, ckpt_path, init_from, resume_checkpoint |
| fp16, bf16 | themselves (booleans) |

A few leaves only mean something with their section (the key's parent: ``train.steps``,
torchtitan's ``[training] steps``), so ``eval.steps`` or ``warmup.steps`` never read as the
run's length:

| section | leaf | canonical |
|---|---|---|
| train, training, trainer, optim | steps, iters, iterations | max_steps |
| warmup, lr_warmup | steps, iters | warmup_steps |
| checkpoint, checkpointing, ckpt, save | steps, every, interval, freq | save_steps |
| checkpoint, checkpointing, ckpt, save | keep_latest_k, keep | save_total_limit |
| log, logging | steps, every, interval, freq | logging_steps |
"""

from __future__ import annotations

from typing import Any

_TABLE: dict[str, tuple[str, ...]] = {
    "learning_rate": ("lr", "max_lr", "peak_lr", "base_lr", "init_lr"),
    "min_lr": ("min_learning_rate", "final_lr", "lr_min", "eta_min", "end_lr", "minimum_lr"),
    "warmup_steps": ("warmup", "num_warmup_steps", "warmup_iters", "lr_warmup_steps", "warmup_iterations",
                     "lr_warmup_iters"),
    "warmup_ratio": ("warmup_frac", "warmup_fraction", "lr_warmup_fraction"),
    "max_steps": ("num_iterations", "total_steps", "max_iters", "train_steps", "num_train_steps",
                  "max_train_steps", "train_iters", "num_steps"),
    "save_steps": ("save_every", "checkpoint_every", "save_interval", "ckpt_every", "checkpointing_steps",
                   "save_freq", "checkpoint_interval"),
    "save_total_limit": ("keep_last_n", "max_checkpoints", "keep_checkpoint_max", "save_top_k", "keep_last"),
    "lr_scheduler_type": ("scheduler", "lr_scheduler", "lr_schedule", "schedule", "lr_decay_style",
                          "scheduler_type"),
    "vocab_size": ("n_vocab", "padded_vocab_size"),
    "max_seq_len": ("model_max_length", "max_length", "seq_len", "block_size", "max_position_embeddings",
                    "n_positions", "sequence_length", "context_length", "max_seq_length", "n_ctx", "seq_length"),
    "per_device_train_batch_size": ("device_batch_size", "batch_size", "train_batch_size", "micro_batch_size",
                                    "train_micro_batch_size_per_gpu"),
    "gradient_accumulation_steps": ("grad_accum_steps", "gradient_accumulation", "accumulate_grad_batches",
                                    "grad_accum"),
    "num_train_epochs": ("epochs", "num_epochs", "max_epochs", "n_epochs"),
    "logging_steps": ("log_every", "log_interval", "logging_interval", "log_freq"),
    "output_dir": ("out_dir", "output_path", "save_dir", "checkpoint_dir", "ckpt_dir", "default_root_dir"),
    "resume_from_checkpoint": ("resume", "resume_from", "ckpt_path", "init_from", "resume_checkpoint"),
}

_SECTION_TABLE: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    (("train", "training", "trainer", "optim"), ("steps", "iters", "iterations"), "max_steps"),
    (("warmup", "lr_warmup"), ("steps", "iters"), "warmup_steps"),
    (("checkpoint", "checkpointing", "ckpt", "save"), ("steps", "every", "interval", "freq"), "save_steps"),
    (("checkpoint", "checkpointing", "ckpt", "save"), ("keep_latest_k", "keep"), "save_total_limit"),
    (("log", "logging"), ("steps", "every", "interval", "freq"), "logging_steps"),
)
SECTION_ALIASES: dict[tuple[str, str], str] = {
    (section, leaf): canon for sections, leaves, canon in _SECTION_TABLE for section in sections for leaf in leaves
}
ALIASES: dict[str, str] = {alias: canon for canon, names in _TABLE.items() for alias in names}
CANONICAL: frozenset[str] = frozenset(_TABLE) | {"fp16", "bf16"}


def normalise(raw_leaf: str) -> str:
    """``--Learning-Rate`` -> ``learning_rate``: the form aliases are matched in."""
    return raw_leaf.strip().lstrip("-").replace("-", "_").lower()


def canonical_key(raw_leaf: str, value: Any = None, *, parent: str | None = None) -> str:
    """The canonical key for a leaf key as written (unknown keys: the normalised leaf).

    ``parent`` is the section the leaf sits in (``train`` for ``train.steps``); a dotted key
    (``--optimizer.lr``, Hydra's ``train.steps=5``) gives its own last two parts.
    """
    leaf = normalise(raw_leaf)
    if "." in leaf:
        parts = leaf.split(".")
        leaf, parent = parts[-1], parts[-2]
    if parent is not None:
        canon = SECTION_ALIASES.get((normalise(parent), leaf))
        if canon is not None:
            return canon
    if leaf not in ALIASES and leaf not in CANONICAL:
        return raw_leaf.strip().lstrip("-").replace("-", "_")  # unknown: the leaf as written
    canon = ALIASES.get(leaf, leaf)
    if canon == "warmup_steps" and leaf == "warmup" and isinstance(value, float) and 0 < value < 1:
        return "warmup_ratio"  # "warmup: 0.03" is a fraction of the run, not 0 steps
    return canon
