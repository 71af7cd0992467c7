"""Shared by the bench scripts: time a snippet in a fresh process (so peak RSS is its own)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

_RUNNER = """
import gc, json, resource, sys, time
sys.path.insert(0, {root!r}); sys.path.insert(0, {bench!r})
{setup}
gc.collect()
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
t = time.perf_counter()
{code}
dt = time.perf_counter() - t
{after}
print("@@RESULT@@" + json.dumps({{"seconds": dt, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
      "rss_before": rss0, "info": globals().get("info")}}))
"""


def run_snippet(code: str, *, setup: str = "", after: str = "", repeat: int = 5,
                timeout: float = 900) -> dict[str, Any] | None:
    """Median seconds (and max peak RSS) of ``code`` over ``repeat`` fresh processes.

    ``setup`` runs before the clock starts (imports the reference tool needs, so both
    sides are timed without import cost); ``after`` runs once it stopped and may set
    ``info`` (JSON-able) to report counts (so may the snippet, when that is cheap).
    Returns None (and prints why) if the snippet fails.
    """
    src = _RUNNER.format(root=str(ROOT), bench=str(ROOT / "bench"), setup=setup, code=code, after=after)
    times: list[float] = []
    rss: list[int] = []
    info: Any = None
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    for _ in range(repeat):
        try:
            out = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            print(f"    timed out after {timeout:.0f} s", file=sys.stderr)
            return None
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("@@RESULT@@")), None)
        if out.returncode != 0 or line is None:
            print(f"    failed: {out.stderr.strip().splitlines()[-3:]}", file=sys.stderr)
            return None
        r = json.loads(line[len("@@RESULT@@"):])
        times.append(r["seconds"])
        rss.append(r["peak_rss"])
        info = r["info"]
    return {"seconds": statistics.median(times), "min": min(times), "runs": len(times),
            "peak_rss_mb": max(rss) / 2**20, "info": info}


def load_avg() -> tuple[float, float, float]:
    return os.getloadavg()
