"""CPU of one ``autopsy`` command in two checkouts, interleaved: before/after figures on a shared machine.

    PYTHONPATH=. python bench/ab_cpu.py OTHER_CHECKOUT [-n 8] -- analyze fixtures/runs/disk_full --format json

Alternates A (OTHER_CHECKOUT) and B (this checkout), ``-n`` fresh processes each of
``python -m autopsy ARGS`` (stdout discarded, bytecode on, a private cache directory per
checkout warmed by one untimed run first), and prints each side's least and median CPU
(user + system, ``os.wait4``) and wall time. The least CPU is the figure other processes
move least (what they add is never negative); compare it, on the same minutes only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one(code: Path, args: list[str], cache: str) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(code), AUTOPSY_CACHE_DIR=cache)
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "autopsy", *args], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    _, _, ru = os.wait4(p.pid, 0)
    return ru.ru_utime + ru.ru_stime, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("other", type=Path)
    ap.add_argument("-n", type=int, default=8)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    ns = ap.parse_args(argv[:cut])
    args = argv[cut + 1:]
    sides = {"A " + str(ns.other): ns.other.resolve(), "B " + str(ROOT): ROOT}
    figures: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
    with tempfile.TemporaryDirectory() as tmp:
        caches = {k: os.path.join(tmp, str(i)) for i, k in enumerate(sides)}
        for k, code in sides.items():
            one(code, args, caches[k])  # warm-up: bytecode, start-up caches
        for _ in range(ns.n):
            for k, code in sides.items():
                figures[k].append(one(code, args, caches[k]))
    print(f"autopsy {' '.join(args)}   ({ns.n} runs each, interleaved; load {os.getloadavg()[0]:.1f})")
    for k, runs in figures.items():
        cpu = [c for c, _ in runs]
        wall = [w for _, w in runs]
        print(f"  {k:50s} cpu min {min(cpu):6.3f} s  median {statistics.median(cpu):6.3f}   "
              f"wall min {min(wall):6.3f} median {statistics.median(wall):6.3f}")


if __name__ == "__main__":
    main()
