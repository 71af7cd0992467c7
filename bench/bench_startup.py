"""Start-up and small-run latency: the CLI must answer about as fast as Python itself.

    PYTHONPATH=. python bench/bench_startup.py [--repeat 11] [--run fixtures/runs/disk_full]

Each command runs as a fresh process (``python -m autopsy`` with this checkout on
``PYTHONPATH``; an installed ``autopsy`` script starts the same way); the figure is the
median wall time. ``python -c pass`` and ``python -c 'import pandas'`` are the yardsticks:
the target is ``--help`` and ``rules list`` within 3x of ``python -c pass``, and a small
fixture run analysed end to end (discovery, every parser, every rule, text report) under 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("PYTHONSTARTUP", None)
    return env


def time_cmd(argv: list[str], repeat: int) -> dict[str, float]:
    """Median / min wall seconds of ``argv`` as a fresh process; the first run warms the page cache."""
    env = _env()
    subprocess.run(argv, env=env, capture_output=True, cwd=ROOT)
    times = []
    rc = 0
    for _ in range(repeat):
        t = time.perf_counter()
        rc = subprocess.run(argv, env=env, capture_output=True, cwd=ROOT).returncode
        times.append(time.perf_counter() - t)
    return {"seconds": statistics.median(times), "min": min(times), "rc": rc}


def measure(repeat: int = 11, run_dir: str = "fixtures/runs/disk_full") -> dict[str, dict[str, float]]:
    py = sys.executable
    cmds = {
        "python -c pass": [py, "-c", "pass"],
        "python -c 'import pandas'": [py, "-c", "import pandas"],
        "python -c 'import click'": [py, "-c", "import click"],  # the CLI framework alone
        "autopsy --help": [py, "-m", "autopsy", "--help"],
        "autopsy rules list": [py, "-m", "autopsy", "rules", "list"],
        f"autopsy analyze {run_dir}": [py, "-m", "autopsy", "analyze", run_dir],
    }
    out = {name: time_cmd(argv, repeat if "analyze" not in name else max(3, repeat // 2))
           for name, argv in cmds.items()}
    base = out["python -c pass"]["seconds"]
    for r in out.values():
        r["x_python"] = r["seconds"] / base
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--run", default="fixtures/runs/disk_full", help="a small run directory (relative to the repo)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    res = measure(args.repeat, args.run)
    for name, r in res.items():
        print(f"{name:45s} {r['seconds'] * 1000:7.1f} ms (min {r['min'] * 1000:6.1f})  "
              f"{r['x_python']:5.1f}x python -c pass  rc={r['rc']}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
