"""Start-up CPU of the CLI next to ``python -c pass``: min over N fresh processes (os.wait4).

    PYTHONPATH=. python bench/startup_cpu.py [N]       # N = 10
    AUTOPSY_NO_CACHE=1 PYTHONPATH=. python bench/startup_cpu.py   # the uncached figures

CPU time (user + system of the child) is what a loaded machine distorts least; wall is beside it.
PYTHONDONTWRITEBYTECODE is dropped so the modules' bytecode is used, as in an installed package.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def measure(cmd: list[str], n: int, env: dict[str, str]) -> tuple[float, float]:
    best_cpu = best_wall = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        _, _, ru = os.wait4(p.pid, 0)
        best_wall = min(best_wall, time.perf_counter() - t)
        best_cpu = min(best_cpu, ru.ru_utime + ru.ru_stime)
    return best_cpu, best_wall


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    py = sys.executable
    cases = [("python -c pass", [py, "-c", "pass"]),
             ("python -c 'import click'", [py, "-c", "import click"]),
             ("autopsy --help", [py, "-m", "autopsy", "--help"]),
             ("autopsy rules list", [py, "-m", "autopsy", "rules", "list"])]
    base = None
    for name, cmd in cases:
        cpu, wall = measure(cmd, n, env)
        base = base or cpu
        print(f"{name:26s} cpu {cpu * 1000:7.1f} ms ({cpu / base:4.1f}x)  wall {wall * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
