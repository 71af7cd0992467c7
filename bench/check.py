"""Regression guard: the end-to-end cases, scaled down, against in-run references and the baseline.

    PYTHONPATH=. python bench/check.py              # ~45 s on a quiet 2-core machine; no network
    PYTHONPATH=. python bench/check.py --code DIR   # time the autopsy tree in DIR (another checkout)
    PYTHONPATH=. python bench/check.py --update     # rewrite bench/baseline.json (say why in the commit)

What it runs: ``autopsy analyze CASE --format json`` in a fresh process (``python -m autopsy``
with the tree under test first on ``PYTHONPATH``, bytecode caching on as in an installed
package) on cases generated on the fly into a temporary directory: the smallest real run
(``fixtures/runs/disk_full``: the fixed cost every analysis pays), HF Trainer stdout, interleaved
torchrun ranks, Lightning bars, Keras progress, open-world metric lines, a log with few
candidate lines, a run directory of 300 small files, and a trainer_state.json beside a
TensorBoard event file; plus ``autopsy --help`` and ``autopsy rules list`` with and without
their cache. For each case it prints autopsy's wall time over its in-run yardstick (``grep -E``
with the same failure patterns for logs; ``python -c pass`` for start-up), then autopsy's CPU
seconds (user + system, children included) over the baseline's.

Why CPU seconds against the baseline, and not a ratio to a reference run beside it: on the
shared 2-core VM this was built on, CPU accounting is erratic (a fixed pure-Python workload
reads 0.16 s in one run and 0.73 s in the next, seconds apart), and a short reference's noise
added to autopsy's made the ratio noisier (coefficient of variation 0.3-0.7) than autopsy's own
CPU time (0.12-0.15). The machine's speed still matters, so a calibration (``import pandas``
and a fixed regex-and-float loop: the kind of work the analysis does) runs four times through
the check; when its median is more than 25% away from the baseline's, every CPU figure is
divided by that factor, and the check says so.

Decision: one run per case; a case more than 15% over its baseline is measured twice more and
judged on the median of its three runs; exit status 1 when a case's median is more than 25% over
its baseline, 0 otherwise. The baseline is the median of five runs per case (``--update``,
about four minutes), so its own noise is small. Not part of the test suite (no timed tests).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import e2e  # noqa: E402
from gen_shapes import SHAPES  # noqa: E402

BASELINE = HERE / "baseline.json"
TOLERANCE = 1.25  # a regression is a median more than 25% over the baseline
SUSPECT = 1.15  # above this after one run, a case is measured twice more
MACHINE_DRIFT = 1.25  # calibration this far from the baseline's: normalise by it
FIXTURE = ROOT / "fixtures" / "runs" / "disk_full"

CALIBRATION = "import pandas, yaml, json, regex\n" + e2e.CALIBRATION

# name -> (shape, MB)
LOG_CASES: dict[str, tuple[str, float]] = {
    "hf": ("hf", 2),
    "torchrun": ("torchrun", 1),
    "lightning": ("lightning", 0.5),
    "keras": ("keras", 1),
    "openworld": ("openworld", 0.5),
    "quiet": ("quiet", 8),
}


def build_cases(tmp: Path) -> dict[str, dict[str, Any]]:
    """Every case's run directory (generated; deterministic) and its yardstick command."""
    from gen_tfevents import generate as gen_tf
    from gen_trainer_state import generate as gen_state

    cases: dict[str, dict[str, Any]] = {}
    if FIXTURE.is_dir():
        cases["fixed cost (fixtures/runs/disk_full)"] = {"dir": FIXTURE, "desc": "the smallest real run"}
    for name, (shape, mb) in LOG_CASES.items():
        d = tmp / name
        cases[name] = {"dir": d, "desc": SHAPES[shape](d, mb)}
    d = tmp / "manyfiles"
    cases["manyfiles"] = {"dir": d, "desc": SHAPES["manyfiles"](d, 2, n=300)}
    d = tmp / "columnar"
    d.mkdir()
    gen_state(d / "trainer_state.json", 10_000)
    gen_tf(d / "tb", 20_000, 8, False)
    cases["columnar"] = {"dir": d, "desc": "trainer_state.json (10,000 entries) + event file (20,000 scalars)"}
    for case in cases.values():
        files = sorted(p for p in case["dir"].rglob("*") if p.is_file())
        case["bytes"] = sum(p.stat().st_size for p in files)
        case["cmd"] = e2e.analyze_cmd(case["dir"])
        case["ref_name"] = "grep -E"
        case["ref_cmd"] = ["grep", "-r", "-c", "-E", e2e.ere_pattern(), str(case["dir"])]
    return cases


def startup_cases() -> dict[str, dict[str, Any]]:
    base = [sys.executable, "-m", "autopsy"]
    out = {}
    for label, argv, env in (("autopsy --help", [*base, "--help"], {}),
                             ("autopsy rules list", [*base, "rules", "list"], {}),
                             ("autopsy --help (no cache)", [*base, "--help"], {"AUTOPSY_NO_CACHE": "1"}),
                             ("autopsy rules list (no cache)", [*base, "rules", "list"], {"AUTOPSY_NO_CACHE": "1"})):
        out[f"startup: {label}"] = {"cmd": argv, "env": env, "bytes": 0, "desc": label,
                                    "ref_name": "python -c pass", "ref_cmd": [sys.executable, "-c", "pass"]}
    return out


def run(argv: list[str], extra_env: dict[str, str] | None = None) -> dict[str, float]:
    return e2e.run_once(argv, extra_env=extra_env)


def calibrate(samples: list[float]) -> None:
    samples.append(run([sys.executable, "-c", CALIBRATION])["cpu"])


def measure_case(case: dict[str, Any], n: int) -> None:
    case.setdefault("runs", [])
    for _ in range(n):
        case["runs"].append(run(case["cmd"], case.get("env")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--update", action="store_true", help="measure 5 runs per case and write them as the baseline")
    ap.add_argument("--code", type=Path, default=ROOT,
                    help="the autopsy source tree to time (default: this checkout)")
    a = ap.parse_args()
    code = a.code.resolve()
    if not (code / "autopsy" / "__main__.py").is_file():
        print(f"--code {code}: no autopsy package there", file=sys.stderr)
        return 2
    e2e.ROOT = code  # e2e.env() puts this tree first on PYTHONPATH
    os.chdir(code)  # and ``python -m`` puts the working directory before PYTHONPATH
    t0 = time.perf_counter()
    load_start = os.getloadavg()
    base = json.loads(BASELINE.read_text()) if BASELINE.exists() and not a.update else {}
    base_cases: dict[str, Any] = base.get("cases", {})
    runs_each = 5 if a.update else 1
    cal: list[float] = []
    with tempfile.TemporaryDirectory(prefix="autopsy_check_") as t:
        # A private cache directory: autopsy run from another checkout or environment meanwhile
        # cannot invalidate the cached start-up cases' entries in the middle of the check.
        os.environ["AUTOPSY_CACHE_DIR"] = str(Path(t) / "cache")
        cases = {**startup_cases(), **build_cases(Path(t))}
        names = list(cases)
        # warm-up, not measured: the start-up caches, and the bytecode of a tree just changed
        for case in cases.values():
            if (case.get("env") == {}) or case.get("dir") == FIXTURE:
                run(case["cmd"], case.get("env"))
        calibrate(cal)
        for i, name in enumerate(names):
            case = cases[name]
            n = runs_each * (3 if name.startswith("startup") else 1)  # start-up is cheap and twitchy
            measure_case(case, n)
            case["ref"] = run(case["ref_cmd"])
            if i in (len(names) // 3, 2 * len(names) // 3):
                calibrate(cal)
        calibrate(cal)
        factor = 1.0
        if base.get("calibration_cpu"):
            drift = statistics.median(cal) / base["calibration_cpu"]
            if not 1 / MACHINE_DRIFT <= drift <= MACHINE_DRIFT:
                factor = drift
        for name in names:  # confirm a suspect before calling it a regression
            b = base_cases.get(name, {}).get("cpu")
            case = cases[name]
            if b and case["runs"][0]["cpu"] / factor > SUSPECT * b:
                measure_case(case, 2)
    elapsed = time.perf_counter() - t0
    print(f"{'case':40s} {'wall':>7s} {'vs yardstick (wall)':>28s} {'cpu':>7s} {'baseline':>8s} "
          f"{'vs baseline':>11s}")
    bad = []
    for name in names:
        case = cases[name]
        wall = statistics.median(r["wall"] for r in case["runs"])
        cpu = statistics.median(r["cpu"] for r in case["runs"])
        case["cpu"] = cpu
        ref = f"{wall / max(case['ref']['wall'], 1e-3):.0f}x {case['ref_name']}"
        b = base_cases.get(name, {}).get("cpu")
        rel = cpu / factor / b if b else None
        flag = ""
        if rel is not None and rel > TOLERANCE:
            bad.append(name)
            flag = "  REGRESSION"
        runs = f" ({len(case['runs'])} runs)" if len(case["runs"]) > 1 and not a.update else ""
        print(f"{name:40s} {wall:6.2f}s {ref:>28s} {cpu:6.2f}s {b or 0:7.2f}s "
              f"{(f'{rel:.2f}' if rel is not None else 'new'):>11s}{flag}{runs}")
    cal_med = statistics.median(cal)
    print(f"\ncalibration cpu median {cal_med:.2f} s over {len(cal)} runs"
          + (f"; baseline {base['calibration_cpu']:.2f} s" if base.get("calibration_cpu") else ""))
    if factor != 1.0:
        print(f"the machine is {factor:.2f}x as slow as when the baseline was taken: CPU figures divided by it")
    load_end = os.getloadavg()
    print(f"load average {load_start[0]:.1f} at start, {load_end[0]:.1f} at end; {elapsed:.0f} s; code {code}")
    if a.update:
        BASELINE.write_text(json.dumps({
            "measured": time.strftime("%Y-%m-%d %H:%M:%S"), "load": [load_start[0], load_end[0]],
            "python": sys.version.split()[0], "code": str(code), "runs_per_case": runs_each,
            "calibration_cpu": round(cal_med, 4),
            "cases": {n: {"cpu": round(cases[n]["cpu"], 4)} for n in names}}, indent=1) + "\n")
        print(f"baseline written: {BASELINE}")
        return 0
    if bad:
        print(f"regression over {TOLERANCE - 1:.0%}: {', '.join(bad)}")
        return 1
    print(f"no regression over {TOLERANCE - 1:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
