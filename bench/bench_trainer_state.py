"""Benchmark: a 200k-entry trainer_state.json into a long DataFrame, autopsy vs json.load + pandas.

    PYTHONPATH=. python bench/bench_trainer_state.py [PATH] [--entries 200000] [--repeat 5]

Generates PATH with bench/gen_trainer_state.py when missing. Reference: ``json.load`` +
``pandas.DataFrame(state["log_history"])`` (a wide frame, what people write by hand).
autopsy: ``read_trainer_state`` + ``history_columns`` + the long (tag, step, wall_time,
value) frame, i.e. what ``Run.scalars`` does for it. pandas is imported before the
clock in both. Target: autopsy <= 0.6x the reference.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import run_snippet

REFERENCE = """
with open(PATH) as fh:
    state = json.load(fh)
df = pd.DataFrame(state["log_history"])
info = {"rows": len(df), "values": int(df.drop(columns=["step"]).notna().sum().sum())}
"""
AUTOPSY = """
ts = read_trainer_state(Path(PATH), "trainer_state.json").value
tags, steps, values = history_columns(ts.log_history)
df = pd.DataFrame({"tag": tags, "step": steps, "wall_time": math.nan, "value": values})
info = {"rows": len(df), "values": len(df)}
"""
SETUP = ("import json, math\nfrom pathlib import Path\nimport pandas as pd\nimport numpy\n"
         "from autopsy.parsers.trainer_state import read_trainer_state, history_columns\nPATH = {path!r}")


def measure(path: Path, repeat: int = 5) -> dict[str, Any]:
    setup = SETUP.format(path=str(path))
    ref = run_snippet(REFERENCE, setup=setup, repeat=repeat)
    ours = run_snippet(AUTOPSY, setup=setup, repeat=repeat)
    res: dict[str, Any] = {"file_mb": path.stat().st_size / 1e6, "json.load + pandas.DataFrame": ref,
                           "autopsy": ours}
    if ref and ours:
        res["ratio"] = ours["seconds"] / ref["seconds"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", type=Path, default=Path("/tmp/autopsy_bench/trainer_state.json"))
    ap.add_argument("--entries", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if not args.path.exists():
        from gen_trainer_state import generate

        args.path.parent.mkdir(parents=True, exist_ok=True)
        print("generated", generate(args.path, args.entries))
    res = measure(args.path, args.repeat)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
