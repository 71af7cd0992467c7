"""Generate a synthetic HF-Trainer-style training log for the log-scanner benchmark.

The shape follows what ``python train.py > train.log 2>&1`` leaves behind for an HF
``Trainer`` run: a few timestamped ``transformers`` logging lines, then a tqdm bar redrawn
with ``\\r`` every step (tqdm writes ``\\r`` even when stderr is a file), a metrics dict
written through ``tqdm.write`` every ``logging_steps``, an eval bar and eval dict every
``eval_steps``, occasional warnings, and a CUDA OOM traceback at the end.

Usage: python bench/gen_logs.py OUT_PATH [SIZE_MB]   (default 200 MB)
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

HEADER = """[INFO|trainer.py:2048] 2024-05-01 12:00:00,123 >> ***** Running training *****
[INFO|trainer.py:2049] 2024-05-01 12:00:00,123 >>   Num examples = 1,000,000
[INFO|trainer.py:2050] 2024-05-01 12:00:00,124 >>   Num Epochs = 3
[INFO|trainer.py:2051] 2024-05-01 12:00:00,124 >>   Instantaneous batch size per device = 8
[INFO|trainer.py:2055] 2024-05-01 12:00:00,125 >>   Total optimization steps = {total:,}
"""

OOM_TAIL = """Traceback (most recent call last):
  File "/home/user/train.py", line 212, in <module>
    main()
  File "/home/user/train.py", line 201, in main
    trainer.train()
  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 1859, in train
    return inner_training_loop(
  File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1511, in _wrapped_call_impl
    return self._call_impl(*args, **kwargs)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB \
of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.94 GiB memory in use.
"""


def bar(n: int, total: int, elapsed: int, rate: float) -> str:
    pct = n * 100 // total
    filled = pct // 10
    body = "\u2588" * filled + " " * (10 - filled)
    remaining = int((total - n) / rate) if rate else 0
    return (f"\r{pct:3d}%|{body}| {n}/{total} [{elapsed // 60:02d}:{elapsed % 60:02d}<"
            f"{remaining // 60:02d}:{remaining % 60:02d}, {rate:5.2f}it/s]")


def generate(path: Path, size_mb: float, seed: int = 0, evals: bool = True) -> dict[str, int]:
    """Write the log; ``evals=False`` leaves out the eval bars and dicts."""
    rng = random.Random(seed)
    target = int(size_mb * 1024 * 1024)
    total = 10_000_000
    counts = {"steps": 0, "dicts": 0, "eval_dicts": 0, "warnings": 0}
    with open(path, "w", encoding="utf-8", newline="") as fh:
        written = fh.write(HEADER.format(total=total))
        loss = 10.0
        step = 0
        buf: list[str] = []
        while written < target - 2000:
            step += 1
            rate = 2.0 + rng.random() * 3
            # tqdm redraws: sometimes twice per step (mininterval), always once
            for _ in range(1 + (step % 3 == 0)):
                buf.append(bar(step, total, step // 3, rate))
            if step % 10 == 0:
                loss = max(0.5, loss * 0.999 + rng.gauss(0, 0.02))
                lr = 2e-5 * (1 - step / total)
                buf.append("\r" + " " * 60 + "\r")
                buf.append(f"{{'loss': {loss:.4f}, 'grad_norm': {rng.random() * 3:.6f}, "
                           f"'learning_rate': {lr:.6e}, 'epoch': {step / total * 3:.4f}}}\n")
                counts["dicts"] += 1
            if evals and step % 2000 == 0:
                buf.append("\n")
                for k in range(1, 21):
                    buf.append(f"\r{k * 5:3d}%|{'#' * (k // 2):<10}| {k}/20 [00:0{k % 10}<00:00, 15.20it/s]")
                buf.append(f"\n{{'eval_loss': {loss + 0.1:.4f}, 'eval_runtime': 12.3, "
                           f"'eval_samples_per_second': 81.3, 'eval_steps_per_second': 1.6, "
                           f"'epoch': {step / total * 3:.4f}}}\n")
                counts["eval_dicts"] += 1
            if step % 5000 == 0:
                buf.append("\n[WARNING|trainer.py:3012] 2024-05-01 13:00:00,000 >> Gradient overflow. "
                           "Skipping step, loss scaler 0 reducing loss scale to 32768.0\n")
                counts["warnings"] += 1
            if len(buf) > 2000:
                written += fh.write("".join(buf))
                buf.clear()
        written += fh.write("".join(buf) + "\n" + OOM_TAIL)
        counts["steps"] = step
    counts["bytes"] = path.stat().st_size
    return counts


if __name__ == "__main__":
    out = Path(sys.argv[1])
    mb = float(sys.argv[2]) if len(sys.argv) > 2 else 200.0
    print(generate(out, mb))
