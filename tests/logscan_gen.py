"""Generated training logs for the scanner's equivalence tests (fast path, parallel path).

Mixed on purpose: the HF shape the fast path is built for (tqdm bars redrawn with ``\\r``,
tqdm's blank redraw, metrics dicts) and everything that must make it step aside or that
carries state across lines: eval bars with another total, dicts with a NaN (a pattern
literal), with their own ``step``, JSON-quoted dicts, other key layouts, ``s/it`` and
``?it/s`` rates, rank prefixes, ANSI colours, step lines, timestamps (ISO and glog),
HF config sections, tracebacks (chained ones too) and torchrun ChildFailedError reports.
"""

from __future__ import annotations

import random

from autopsy.parsers.types import PatternSpec

SPECS = [
    PatternSpec("oom/cuda", r"CUDA out of memory\. Tried to allocate (?P<req>[\d.]+) (?P<unit>[KMG]iB)",
                ("CUDA out of memory",)),
    PatternSpec("nan/dict", r"'loss': nan", ("'loss': nan",)),
    PatternSpec("scale/x", r"reducing loss scale to (?P<scale>[\d.e+-]+)", ("reducing loss scale",)),
    PatternSpec("nccl/x", r"NCCL error in: (?P<where>\S+)", ("NCCL error",)),
    PatternSpec("disk/x", r"no space left on device", ("no space left",), ignore_case=True),
]

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/w/train.py", line 12, in <module>\n'
    "    main()\n"
    '  File "/w/train.py", line 9, in main\n'
    "    trainer.train()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has 1.2 GiB free.\n"
)
CHAINED = (
    "Traceback (most recent call last):\n"
    '  File "/w/a.py", line 3, in f\n'
    "    g()\n"
    "KeyError: 'x'\n"
    "\n"
    "During handling of the above exception, another exception occurred:\n"
    "\n"
    "Traceback (most recent call last):\n"
    '  File "/w/a.py", line 5, in f\n'
    "    raise RuntimeError('y')\n"
    "RuntimeError: y\n"
)
CHILD_FAILED = (
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
    "============================================================\n"
    "train.py FAILED\n"
    "------------------------------------------------------------\n"
    "Failures:\n"
    "  <NO_OTHER_FAILURES>\n"
    "------------------------------------------------------------\n"
    "Root Cause (first observed failure):\n"
    "[0]:\n"
    "  time      : 2024-05-01_12:10:00\n"
    "  host      : node1\n"
    "  rank      : 1 (local_rank: 1)\n"
    "  exitcode  : -9 (pid: 4242)\n"
    "  error_file: <N/A>\n"
    "  traceback : Signal 9 (SIGKILL) received by PID 4242\n"
    "============================================================\n"
)
HF_CONFIG = (
    "[INFO|trainer.py:2048] 2024-05-01 12:00:00,123 >> ***** Running training *****\n"
    "[INFO|trainer.py:2049] 2024-05-01 12:00:00,123 >>   Num examples = 1,000\n"
    "[INFO|trainer.py:2050] 2024-05-01 12:00:00,124 >>   Num Epochs = 3\n"
    "[INFO|trainer.py:2055] 2024-05-01 12:00:00,125 >>   Total optimization steps = {total}\n"
)


def _bar(n: int, total: int, rate: str, unit: str = "it/s", body: str = "\u2588") -> str:
    pct = n * 100 // total
    return f"{pct:3d}%|{body * (pct // 10):<10}| {n}/{total} [00:{n % 60:02d}<01:00, {rate}{unit}]"


def hf_log(seed: int, steps: int, *, total: int = 5000, timestamps: bool = True, noise: bool = True,
           tracebacks: bool = True) -> str:
    """An HF-Trainer-like log of ``steps`` steps with occasional everything-else."""
    rng = random.Random(seed)
    out = [HF_CONFIG.format(total=total)]
    loss = 5.0
    for step in range(1, steps + 1):
        rate = f"{rng.uniform(1, 9):5.2f}"
        unit = "it/s"
        r = rng.random()
        if noise and r < 0.02:
            rate, unit = f"{rng.uniform(1, 9):5.2f}", "s/it"
        elif noise and r < 0.03:
            rate = "?"
        for _ in range(1 + (step % 3 == 0)):
            out.append("\r" + _bar(step, total, rate, unit))
        if step % 4 == 0:
            loss = max(0.1, loss * 0.99 + rng.gauss(0, 0.02))
            lr = 2e-5 * (1 - step / total)
            if not noise or rng.random() < 0.85:
                out.append("\r" + " " * 40 + "\r")  # tqdm's blank redraw before tqdm.write
            else:
                out.append("\r")
            kind = rng.random() if noise else 1.0
            if kind < 0.03:
                out.append(f"{{'loss': nan, 'grad_norm': nan, 'learning_rate': {lr:.6e}, "
                           f"'epoch': {step / total:.4f}}}\n")
            elif kind < 0.05:
                out.append(f'{{"loss": {loss:.4f}, "grad_norm": {rng.random():.6f}, "learning_rate": {lr:.6e}, '
                           f'"epoch": {step / total:.4f}}}\n')
            elif kind < 0.07:
                out.append(f"{{'loss': {loss:.4f}, 'step': {step}, 'epoch': {step / total:.4f}}}\n")
            elif kind < 0.09:
                out.append(f"{{'loss': {loss:.4f}, 'learning_rate': {lr:.6e}, 'epoch': {step / total:.4f}}}\n")
            elif kind < 0.10:
                out.append(f"[rank1]: {{'loss': {loss:.4f}, 'epoch': {step / total:.4f}}}\n")
            else:
                out.append(f"{{'loss': {loss:.4f}, 'grad_norm': {rng.random() * 3:.6f}, "
                           f"'learning_rate': {lr:.6e}, 'epoch': {step / total:.4f}}}\n")
        if noise and step % 97 == 0:
            out.append("\n")
            for k in range(1, 6):
                out.append("\r" + _bar(k, 5, "15.20"))
            out.append(f"\n{{'eval_loss': {loss + 0.1:.4f}, 'eval_runtime': 1.5, 'epoch': {step / total:.4f}}}\n")
        if noise and step % 131 == 0:
            stamp = f"2024-05-01 12:{step // 60 % 60:02d}:{step % 60:02d},000" if timestamps else "later"
            out.append(f"\n[WARNING|trainer.py:1] {stamp} >> Gradient overflow. reducing loss scale to 32768.0\n")
        if noise and step % 173 == 0:
            out.append(f"\nstep {step} | loss {loss:.3f} | lr 1e-4 | dt: 120ms\n")
        if noise and step % 211 == 0:
            glog = f"W0501 12:{step // 60 % 60:02d}:{step % 60:02d}.123456  4242 ProcessGroupNCCL.cpp:1970]" \
                if timestamps else "W ProcessGroupNCCL.cpp:1970]"
            out.append(f"\n{glog} NCCL error in: ProcessGroupNCCL.cpp:1970\n")
        if noise and step % 251 == 0:
            out.append("\n\x1b[31mOSError: [Errno 28] No space left on device\x1b[0m\n")
        if tracebacks and step % 389 == 0:
            out.append("\n" + (CHAINED if step % 2 else TRACEBACK))
        if tracebacks and step % 577 == 0:
            out.append("\n" + CHILD_FAILED)
        if noise and step % 443 == 0:
            out.append("\n***** Running Evaluation *****\n  Num examples = 200\n***** Running training *****\n"
                       "  Num Epochs = 4\n")
    out.append("\n" + TRACEBACK)
    return "".join(out)
