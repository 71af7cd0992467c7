"""Regression guard: the end-to-end cases, scaled down, against in-run references and the baseline.

    PYTHONPATH=. python bench/check.py            # ~60 s on an idle 2-core machine; no network
    PYTHONPATH=. python bench/check.py --update   # rewrite bench/baseline.json (say why in the commit)

Runs ``bench/e2e.py --size check`` (every case generated on the fly into a temporary directory:
HF logs with and without eval dicts, interleaved torchrun ranks, Lightning, Keras, open-world
metric lines, a log with few candidate lines, a run directory of many small files, a
trainer_state.json, an event file, and start-up) and prints, for each case, autopsy's wall time
over its in-run reference (``grep -E`` for logs: the goals' yardstick) and its CPU time over the
guard reference (``e2e.CALIBRATION``: a fixed ~0.4 s of CPU-bound Python, regex and float
work like the scan's, run interleaved with autopsy in every case; ``python -c pass`` for the
start-up cases), then that guard ratio over the committed one in ``bench/baseline.json``.
CPU ratios to a reference measured in the same run cancel most of a shared machine's noise;
wall times do not. Exit status 1 when a case's guard ratio is more than 25% above its
baseline, 0 otherwise. Not part of the test suite (no timed tests).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import e2e  # noqa: E402

BASELINE = HERE / "baseline.json"
TOLERANCE = 1.25


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--update", action="store_true", help="write the measured guard ratios as the new baseline")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    e2e.WARMUP = False
    e2e.ONCE = {"ripgrep", "python re loop"}
    t0 = time.perf_counter()
    res = e2e.run_all("check", a.repeat, None, 0)
    base = json.loads(BASELINE.read_text())["cases"] if BASELINE.exists() else {}
    print(f"\n{'case':36s} {'vs ref (wall)':>22s} {'vs guard (cpu)':>28s} {'vs baseline':>12s}")
    bad = []
    for name, case in res["cases"].items():
        ratio = f"{case['ratio']:.1f}x {case['ref']}" if "ratio" in case else "-"
        guard = case.get("guard_ratio")
        g = f"{guard:.2f}x {case['guard']}" if guard is not None else "-"
        b = base.get(name, {}).get("guard_ratio")
        rel = guard / b if guard is not None and b else None
        flag = ""
        if rel is not None and rel > TOLERANCE:
            bad.append(name)
            flag = "  REGRESSION"
        rel_s = f"{rel:.2f}" if rel is not None else "new"
        print(f"{name:36s} {ratio:>22s} {g:>28s} {rel_s:>12s}{flag}")
    load = res["load_start"], res["load_end"]
    print(f"\nload average {load[0][0]:.1f} at start, {load[1][0]:.1f} at end; {time.perf_counter() - t0:.0f} s")
    if a.update:
        BASELINE.write_text(json.dumps({
            "measured": res["started"], "load": [load[0][0], load[1][0]], "python": res["python"],
            "cases": {n: {"guard_ratio": round(c["guard_ratio"], 4), "guard": c["guard"]}
                      for n, c in res["cases"].items() if "guard_ratio" in c}}, indent=1) + "\n")
        print(f"baseline written: {BASELINE}")
        return 0
    if bad:
        print(f"regression over {TOLERANCE - 1:.0%}: {', '.join(bad)}")
        return 1
    print("no regression over 25%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
