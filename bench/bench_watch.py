"""Cost of ``autopsy watch`` on a long run: CPU seconds per poll and the share of one core.

The issue's goal: a 24-hour run with a 10 GB log, a poll every 10 s, under 2% of one core.
Simulated here at the same *rate* (bytes per poll = log size / polls): the run's log grows by
``--gb`` GB over ``--hours`` simulated hours, an HF-Trainer-style stdout (tqdm bars redrawn
with ``\\r`` every step, a metrics dict every 10 steps, a timestamped INFO line now and then),
a checkpoint directory saved every ``--save-minutes`` (sparse files: what the watcher reads of
a checkpoint is its listing and sizes, never its content). The watcher's clock is simulated
(``--interval`` seconds per poll), so every poll sees exactly one interval's worth of bytes;
each poll is timed with ``time.process_time`` (CPU of this process: the generator writes
between polls, never during one). ``--scale 0.1`` (the default) runs the first tenth of the
run at the full rate: per-poll cost depends on the bytes per poll, not on the run's length,
except the periodic full evaluations, whose cost grows with the series kept (bounded by the
scanner's 2M-point store); ``--scale 1`` runs the whole day.

Usage: PYTHONPATH=. python bench/bench_watch.py [--gb 10] [--hours 24] [--interval 10] [--scale 0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autopsy.watch import Watcher


class LogWriter:
    """Appends HF-style stdout with increasing steps, as a Trainer run prints it."""

    def __init__(self, path: Path, seed: int = 0) -> None:
        self.fh = open(path, "a", encoding="utf-8", newline="")
        self.rng = random.Random(seed)
        self.step = 0
        self.total = 10_000_000
        self.loss = 10.0

    def write(self, n_bytes: int) -> int:
        parts: list[str] = []
        size = 0
        while size < n_bytes:
            self.step += 1
            s = self.step
            pct = s * 100 // self.total
            line = (f"\r{pct:3d}%|{'#' * (pct // 10):<10}| {s}/{self.total} [01:02:03<10:11:12, "
                    f"{self.rng.uniform(2.0, 3.0):.2f}it/s]")
            if s % 10 == 0:
                self.loss = max(0.5, self.loss * 0.9995 + self.rng.uniform(-0.01, 0.01))
                line += (f"\n{{'loss': {self.loss:.4f}, 'grad_norm': {self.rng.uniform(0.5, 2.0):.4f}, "
                         f"'learning_rate': {3e-4 * (1 - s / self.total):.6e}, 'epoch': {s / 100_000:.4f}}}\n")
            if s % 5000 == 0:
                line += (f"[INFO|trainer.py:3920] 2026-01-01 12:00:00,000 >> Saving model checkpoint to "
                         f"out/checkpoint-{s}\n")
            parts.append(line)
            size += len(line)
        text = "".join(parts)
        self.fh.write(text)
        self.fh.flush()
        return len(text.encode("utf-8"))

    def close(self) -> None:
        self.fh.close()


def save_checkpoint(run: Path, step: int) -> None:
    d = run / "out" / f"checkpoint-{step}"
    d.mkdir(parents=True)
    for name, size in (("model.safetensors", 2 << 30), ("optimizer.pt", 4 << 30), ("scheduler.pt", 1064),
                       ("trainer_state.json", 0), ("rng_state.pth", 14_455)):
        with open(d / name, "wb") as fh:
            fh.truncate(size)  # sparse: listed and sized, never read
    (d / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=10.0, help="log size of the whole simulated run (GB)")
    ap.add_argument("--hours", type=float, default=24.0, help="length of the simulated run")
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between polls")
    ap.add_argument("--scale", type=float, default=0.1, help="share of the run simulated (at the full rate)")
    ap.add_argument("--save-minutes", type=float, default=30.0, help="checkpoint cadence")
    ap.add_argument("--evaluate-every", type=float, default=600.0, help="Watcher evaluate_every_s")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()

    polls_full = int(args.hours * 3600 / args.interval)
    polls = max(2, int(polls_full * args.scale))
    per_poll = int(args.gb * 1e9 / polls_full)
    save_every = max(1, int(args.save_minutes * 60 / args.interval))
    tmp = Path(tempfile.mkdtemp(prefix="autopsy_bench_watch_"))
    run = tmp / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"learning_rate": 3e-4, "save_steps": 5000, "max_steps": 10_000_000,
                                                 "save_total_limit": 3}))
    writer = LogWriter(run / "train.log")
    now = [1_800_000_000.0]
    try:
        w = Watcher(run, clock=lambda: now[0], evaluate_every_s=args.evaluate_every)
        cpu: list[float] = []
        eval_cpu: list[float] = []
        written = 0
        wall0 = time.perf_counter()
        for i in range(polls):
            written += writer.write(per_poll)
            if i and i % save_every == 0:
                save_checkpoint(run, writer.step)
            now[0] += args.interval
            evals = w.status.evaluations
            t = time.process_time()
            w.poll()
            dt = time.process_time() - t
            (eval_cpu if w.status.evaluations > evals else cpu).append(dt)
        wall = time.perf_counter() - wall0
        total_cpu = sum(cpu) + sum(eval_cpu)
        simulated = polls * args.interval
        res = {
            "polls": polls, "simulated_hours": round(simulated / 3600, 2), "bytes_per_poll": per_poll,
            "log_bytes": written, "checkpoints": len(w.ckpts.known), "evaluations": len(eval_cpu),
            "cpu_total_s": round(total_cpu, 3),
            "cpu_per_poll_ms": {
                "mean": round(1000 * total_cpu / polls, 2),
                "median_plain": round(1000 * statistics.median(cpu), 2) if cpu else None,
                "mean_plain": round(1000 * statistics.mean(cpu), 2) if cpu else None,
                "p99_plain": round(1000 * sorted(cpu)[int(0.99 * (len(cpu) - 1))], 2) if cpu else None,
                "mean_with_evaluation": round(1000 * statistics.mean(eval_cpu), 1) if eval_cpu else None,
                "max_with_evaluation": round(1000 * max(eval_cpu), 1) if eval_cpu else None},
            "cpu_plain_polls_s": round(sum(cpu), 3), "cpu_evaluation_polls_s": round(sum(eval_cpu), 3),
            "share_of_one_core_percent": round(100 * total_cpu / simulated, 3),
            "scan_rate_mb_per_cpu_s": round(written / 1e6 / sum(cpu), 1) if cpu and sum(cpu) else None,
            "warnings": [f.rule for f in w.findings], "wall_s": round(wall, 1),
            "load_average": os.getloadavg()[0],
        }
    finally:
        writer.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(res, indent=2))
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
