"""Benchmark: checkpoint validation is constant in the bytes of the checkpoints.

    PYTHONPATH=. python bench/bench_checkpoints.py [--dir /tmp/ckbench] [--checkpoints 10] [--gb-each 100]

Builds HF-style ``checkpoint-N/`` directories whose files are sparse (a 100 GB
``model.safetensors`` takes no disk), an ``optimizer.pt`` zip and the small files, then
times ``find_checkpoints`` over all of them (medians of 5) and reports the time per file.
For contrast it times reading the real bytes of one small dense safetensors file.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from builders import torch_like_zip_entries, write_safetensors, write_zip

from autopsy.discover import discover
from autopsy.parsers.checkpoints import find_checkpoints


def build(root: Path, n: int, gb_each: float) -> None:
    n_floats = int(gb_each * 1e9 / 4)
    for k in range(n):
        d = root / f"checkpoint-{(k + 1) * 500}"
        write_safetensors(d / "model.safetensors", {"lm_head.weight": ["F32", [n_floats // 2]],
                                                    "embed.weight": ["F32", [n_floats - n_floats // 2]]})
        write_zip(d / "optimizer.pt", torch_like_zip_entries())
        write_zip(d / "scheduler.pt", torch_like_zip_entries())
        write_zip(d / "rng_state.pth", torch_like_zip_entries())
        (d / "trainer_state.json").write_text(json.dumps({"global_step": (k + 1) * 500}, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/ckbench"))
    ap.add_argument("--checkpoints", type=int, default=10)
    ap.add_argument("--gb-each", type=float, default=100.0)
    args = ap.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    build(args.dir, args.checkpoints, args.gb_each)
    arts = discover(args.dir).artifacts
    times = []
    for _ in range(5):
        t = time.perf_counter()
        cps = find_checkpoints(args.dir, arts, now=time.time() + 3600, in_progress_seconds=120)
        times.append(time.perf_counter() - t)
    total = sum(c.bytes for c in cps)
    n_files = sum(len(c.files) for c in cps)
    med = statistics.median(times)
    print(f"{len(cps)} checkpoints, {n_files} files, {total / 1e12:.2f} TB (sparse): "
          f"{med * 1e3:.1f} ms total, {med / n_files * 1e3:.3f} ms per file; all valid: {all(c.valid for c in cps)}")
    dense = write_safetensors(args.dir / "dense.safetensors", {"w": ["F32", [50_000_000]]})
    with open(dense, "r+b") as fh:  # make it dense so reading costs real I/O
        fh.seek(8 + 64)
        fh.write(b"\1" * (200_000_000 - 200))
    t = time.perf_counter()
    with open(dense, "rb") as fh:
        while fh.read(1 << 24):
            pass
    print(f"reading a dense 200 MB safetensors: {(time.perf_counter() - t) * 1e3:.1f} ms (header check does not)")
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
