"""Run directories in the shapes real training jobs leave, for the end-to-end benchmark.

Each ``make_*`` function writes one run directory of about ``mb`` megabytes (deterministic
for a seed) and returns a short description. Shapes:

* ``hf``: HF Trainer stdout (tqdm redraws with ``\\r``, a metrics dict every 10 steps, eval
  bars and dicts every 2,000 steps, a CUDA OOM at the end): :mod:`gen_logs`.
* ``hf_noeval``: the same without eval bars and dicts.
* ``torchrun``: four ranks' output interleaved line by line with torchrun's ``[rankN]:``
  prefixes (step lines, warnings), rank 2 dying of a CUDA OOM, then torchrun's
  ChildFailedError report.
* ``lightning``: Lightning progress bars (``Epoch 3:  45%|...| 450/1000 [...,  5.42it/s,
  v_num=0, train_loss=2.310]``) redrawn with ``\\r``, a validation bar per epoch, a NaN loss
  at the end.
* ``keras``: Keras ``model.fit`` progress (``\\r``-redrawn ``45/1000 [=>....] - ETA: 1:23 -
  loss: 2.3112 - accuracy: 0.4512``), epoch summaries with val metrics, an OOM at the end.
* ``openworld``: one metric line per step in the styles of ad-hoc training scripts
  (``step=100 loss=2.31 lr=1e-4``, ``iter 100 | loss 2.31``, JSON lines, ``[12:00:01]
  epoch 1 step 100: train/loss=2.31, train/acc=0.51``), ending in a disk-full error.
* ``quiet``: an application log with few candidate lines (data-loader and service chatter,
  no progress bars or metrics), ending in a segfault.
* ``manyfiles``: a run directory with ``n`` small files (eval samples, per-shard JSON
  stats, per-worker logs, configs) besides one HF log.

Usage: python bench/gen_shapes.py SHAPE OUT_DIR [MB]
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from gen_logs import OOM_TAIL
from gen_logs import generate as generate_hf

CHUNK = 1 << 20


def _write(path: Path, lines: Iterator[str], mb: float, tail: str) -> int:
    """Write ``lines`` until about ``mb`` megabytes, then ``tail``; return the size."""
    target = int(mb * 1024 * 1024)
    # flush at the target when it is below a chunk: the check's scaled-down cases are 64-256 KB
    flush_at = min(CHUNK, max(target, 1))
    written = 0
    buf: list[str] = []
    size = 0
    with open(path, "w", encoding="utf-8", newline="") as fh:
        for line in lines:
            buf.append(line)
            size += len(line)
            if size >= flush_at:
                written += fh.write("".join(buf))
                buf.clear()
                size = 0
                if written >= target:
                    break
        written += fh.write("".join(buf) + tail)
    return path.stat().st_size


def _size(size: int) -> str:
    return f"{size / 1e6:.0f} MB" if size >= 1e6 else f"{size / 1e3:.0f} KB"


def make_hf(out: Path, mb: float, seed: int = 0) -> str:
    out.mkdir(parents=True, exist_ok=True)
    c = generate_hf(out / "train.log", mb, seed, evals=True)
    return f"HF Trainer stdout, {c['steps']:,} bar redraws, {c['dicts']:,} dicts, {c['eval_dicts']:,} eval dicts, OOM"


def make_hf_noeval(out: Path, mb: float, seed: int = 0) -> str:
    out.mkdir(parents=True, exist_ok=True)
    c = generate_hf(out / "train.log", mb, seed, evals=False)
    return f"HF Trainer stdout without eval, {c['steps']:,} bar redraws, {c['dicts']:,} dicts, OOM"


def make_torchrun(out: Path, mb: float, seed: int = 0) -> str:
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)

    def lines() -> Iterator[str]:
        step = 0
        loss = [9.0, 9.0, 9.0, 9.0]
        while True:
            step += 1
            for r in rng.sample(range(4), 4):
                loss[r] = max(0.5, loss[r] * 0.9995 + rng.gauss(0, 0.01))
                yield (f"[rank{r}]:step {step} | loss {loss[r]:.4f} | lr {3e-4 * (1 - step / 1e7):.3e} | "
                       f"grad_norm {rng.random() * 2:.3f} | tokens/s {90000 + rng.randint(0, 9999)}\n")
            if step % 500 == 0:
                yield (f"[rank{rng.randrange(4)}]:/opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py:"
                       "460: UserWarning: torch.utils.checkpoint: please pass in use_reentrant=True or "
                       "use_reentrant=False explicitly.\n")

    tail = "".join(f"[rank2]:{ln}\n" for ln in OOM_TAIL.splitlines()) + (
        "W1121 12:32:20.000000 140 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 141 "
        "closing signal SIGTERM\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\n"
        "train.py FAILED\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2026-11-21_12:32:22\n"
        "  host      : node-1\n"
        "  rank      : 2 (local_rank: 2)\n"
        "  exitcode  : 1 (pid: 143)\n"
        "  error_file: <N/A>\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
        "============================================================\n")
    size = _write(out / "torchrun.log", lines(), mb, tail)
    return f"4 ranks interleaved with [rankN]: prefixes, {_size(size)}, OOM on rank 2 + ChildFailedError"


def make_lightning(out: Path, mb: float, seed: int = 0) -> str:
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    per_epoch = 1000

    def lines() -> Iterator[str]:
        loss = 6.0
        epoch = 0
        while True:
            for i in range(1, per_epoch + 1):
                loss = max(0.3, loss * 0.9999 + rng.gauss(0, 0.01))
                pct = i * 100 // per_epoch
                body = "\u2588" * (pct // 10) + " " * (10 - pct // 10)
                yield (f"\rEpoch {epoch}: {pct:3d}%|{body}| {i}/{per_epoch} [{i // 300:02d}:{i % 60:02d}<"
                       f"00:{(per_epoch - i) // 20 % 60:02d}, {5 + rng.random():.2f}it/s, v_num=0, "
                       f"train_loss={loss:.3f}]")
            yield "\n"
            for j in range(1, 51):
                yield (f"\rValidation DataLoader 0: {j * 2:3d}%|{'#' * (j // 5):<10}| {j}/50 "
                       f"[00:0{j % 10}<00:00, 20.1it/s]")
            yield (f"\nEpoch {epoch}: 100%|{chr(0x2588) * 10}| {per_epoch}/{per_epoch} [03:20<00:00, 5.00it/s, "
                   f"v_num=0, train_loss={loss:.3f}, val_loss={loss + 0.1:.3f}]\n")
            epoch += 1

    tail = (f"\rEpoch 99:  12%|\u2588         | 120/{per_epoch} [00:24<03:00, 5.00it/s, v_num=0, train_loss=nan]\n"
            "`Trainer.fit` stopped: `max_epochs=100` reached.\n")
    size = _write(out / "lightning.log", lines(), mb, tail)
    return f"Lightning bars with postfix metrics, validation bars, {_size(size)}, NaN loss at the end"


def make_keras(out: Path, mb: float, seed: int = 0) -> str:
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    per_epoch = 1000

    def lines() -> Iterator[str]:
        loss = 2.5
        epoch = 1
        while True:
            yield f"Epoch {epoch}/1000\n"
            for i in range(1, per_epoch + 1):
                loss = max(0.1, loss * 0.9999 + rng.gauss(0, 0.005))
                done = i * 30 // per_epoch
                prog = "=" * max(done - 1, 0) + (">" if done < 30 else "=") + "." * (30 - done)
                yield (f"\r{i:4d}/{per_epoch} [{prog}] - ETA: {(per_epoch - i) // 60}:{(per_epoch - i) % 60:02d} - "
                       f"loss: {loss:.4f} - accuracy: {1 - loss / 3:.4f}")
            yield (f"\r{per_epoch}/{per_epoch} [{'=' * 30}] - 12s 12ms/step - loss: {loss:.4f} - accuracy: "
                   f"{1 - loss / 3:.4f} - val_loss: {loss + 0.05:.4f} - val_accuracy: {1 - loss / 2.9:.4f}\n")
            epoch += 1

    tail = ("2026-11-21 12:32:22.123456: W tensorflow/tsl/framework/bfc_allocator.cc:485] Allocator (GPU_0_bfc) "
            "ran out of memory trying to allocate 2.00GiB (rounded to 2147483648)requested by op MatMul\n"
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
            "shape[8192,65536] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n")
    size = _write(out / "keras.log", lines(), mb, tail)
    return f"Keras fit progress with \\r redraws and epoch summaries, {_size(size)}, TF OOM at the end"


def make_openworld(out: Path, mb: float, seed: int = 0) -> str:
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)

    def lines() -> Iterator[str]:
        step = 0
        loss = 8.0
        while True:
            step += 1
            loss = max(0.2, loss * 0.9999 + rng.gauss(0, 0.01))
            lr = 3e-4 * (1 - step / 1e8)
            style = step % 4
            if style == 0:
                yield f"step={step} loss={loss:.4f} lr={lr:.3e} grad_norm={rng.random() * 2:.3f}\n"
            elif style == 1:
                yield f"iter {step} | loss {loss:.4f} | lr {lr:.3e} | {50 + rng.random() * 10:.1f} ms/iter\n"
            elif style == 2:
                yield json.dumps({"step": step, "train/loss": round(loss, 4), "train/lr": lr}) + "\n"
            else:
                s = step % 86400
                yield (f"[{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}] epoch {step // 10000} step {step}: "
                       f"train/loss={loss:.4f}, train/acc={1 - loss / 9:.4f}\n")

    tail = ("Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n    save(model)\n"
            "OSError: [Errno 28] No space left on device\n")
    size = _write(out / "train.log", lines(), mb, tail)
    return f"open-world metric lines in four styles, {_size(size)}, disk full at the end"


def make_quiet(out: Path, mb: float, seed: int = 0) -> str:
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    msgs = ["INFO data.loader: prefetched shard {n} of 40960 from /data/corpus/shard-{n:05d}.tar ({k} records)",
            "DEBUG tokenizer: packed {k} sequences into {n} blocks",
            "INFO service.health: heartbeat ok from worker-{k} (queue depth {n})",
            "DEBUG cache: evicted {k} entries, {n} remain"]

    def lines() -> Iterator[str]:
        n = 0
        while True:
            n += 1
            yield msgs[n % 4].format(n=n, k=rng.randrange(1, 5000)) + "\n"

    tail = "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f (most recent call first):\n"
    size = _write(out / "app.log", lines(), mb, tail)
    return f"service/data-loader chatter with few candidate lines, {_size(size)}, segfault at the end"


def make_manyfiles(out: Path, mb: float, seed: int = 0, n: int = 10_000) -> str:
    """``n`` files in all: one HF log of ``mb`` MB and ``n - 1`` small files."""
    out.mkdir(parents=True, exist_ok=True)
    generate_hf(out / "train.log", mb, seed, evals=True)
    rest = n - 1
    kinds = (("samples", "sample_{i:05d}.txt", lambda i: f"prompt {i}\ncompletion: the answer is {i % 7}\n"),
             ("eval", "shard_{i:05d}.json", lambda i: json.dumps({"shard": i, "accuracy": (i % 100) / 100}) + "\n"),
             ("workers", "worker_{i:05d}.out", lambda i: f"worker {i} started\nworker {i} finished 128 batches\n"),
             ("configs", "cfg_{i:05d}.yaml", lambda i: f"seed: {i}\nlr: 0.0003\n"))
    for d, _, _ in kinds:
        (out / d).mkdir(exist_ok=True)
    for i in range(rest):
        d, name, body = kinds[i % len(kinds)]
        (out / d / name.format(i=i)).write_text(body(i))
    return f"{n:,} files: {rest:,} small (samples, eval JSON, worker logs, configs) + a {mb:g} MB HF log"


SHAPES: dict[str, Callable[..., str]] = {
    "hf": make_hf, "hf_noeval": make_hf_noeval, "torchrun": make_torchrun, "lightning": make_lightning,
    "keras": make_keras, "openworld": make_openworld, "quiet": make_quiet, "manyfiles": make_manyfiles,
}

if __name__ == "__main__":
    shape, dest = sys.argv[1], Path(sys.argv[2])
    print(SHAPES[shape](dest, float(sys.argv[3]) if len(sys.argv) > 3 else 100.0))
