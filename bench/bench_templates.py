"""Log templating for `autopsy diff`: masking (autopsy.compare.templates) against drain3.

    python bench/bench_templates.py [--drain3-python PATH] [--repeat N]
        (drain3 lives in another venv: python -m venv /tmp/drainvenv && /tmp/drainvenv/bin/pip install drain3)

Three measures, each method in a fresh process reading lines with the diff's own reader
(``templates.log_lines``) so only the grouping differs:

1. time and group count on every real log shipped in fixtures/ (runs, corpus, realdata,
   staging; pairs left out), concatenated, and on a 20 MB HF-style log from bench/gen_logs.py;
2. agreement of the two groupings on the real logs, line by line: the adjusted Rand index
   (1.0 = the same partition), how many drain3 clusters mix lines of different masked
   templates (drain3 merged what masking keeps apart: `loss nan` with `loss 2.31`) and how
   many masked templates drain3 splits over several clusters;
3. what the diff needs: for each fixture pair (fixtures/pairs/), the good run's train.log is
   grouped, then the bad run's; a group first seen in the bad run is "new". Reported: how
   many new groups each method finds and whether the line that carries the pair's cause
   (CAUSE below) is in a new group. With drain3 a bad line can be absorbed by a good run's
   cluster (its template generalises): the cause is then invisible to the diff.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# One program for both methods: prints per-line group ids (as ints) and the grouping time.
GROUP_CODE = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from autopsy.compare.templates import log_lines, mask
method = sys.argv[1]
paths = [Path(p) for p in sys.argv[2:]]
lines = [[text for _, text in log_lines(p)] for p in paths]  # read first: only grouping is timed
ids, starts = [], []
t0, c0 = time.perf_counter(), time.process_time()
if method == "mask":
    table = {{}}
    for part in lines:
        starts.append(len(ids))
        for text in part:
            if text.strip():
                ids.append(table.setdefault(mask(text), len(table)))
    groups = len(table)
elif method == "digits":  # the naive baseline: every run of digits is one mask, nothing else
    import re
    digits, table = re.compile(r"\d+"), {{}}
    for part in lines:
        starts.append(len(ids))
        for text in part:
            if text.strip():
                ids.append(table.setdefault(digits.sub("<N>", " ".join(text.split())), len(table)))
    groups = len(table)
else:
    from drain3 import TemplateMiner
    from drain3.template_miner_config import TemplateMinerConfig
    cfg = TemplateMinerConfig()
    cfg.profiling_enabled = False
    miner = TemplateMiner(config=cfg)
    for part in lines:
        starts.append(len(ids))
        for text in part:
            if text.strip():
                ids.append(miner.add_log_message(text)["cluster_id"])
    groups = len(miner.drain.clusters)
seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
texts = [t for part in lines for t in part if t.strip()] if len(ids) < 200000 else []
print(json.dumps({{"seconds": seconds, "cpu": cpu, "lines": len(ids), "groups": groups, "ids": ids, "starts": starts,
                  "masked": [mask(t) for t in texts], "texts": texts}}))
"""

# The line in each pair's bad train.log that carries the cause (fixtures/pairs/README: what happened).
CAUSE = {"new_warning": "longer than max_len", "lib_version": "LegacyVersion",
         "batch_oom": "DefaultCPUAllocator"}


def _group(python: str, method: str, paths: list[Path]) -> dict:
    out = subprocess.run([python, "-c", GROUP_CODE.format(root=str(ROOT)), method, *map(str, paths)],
                         capture_output=True, text=True, check=True, timeout=3600)
    return json.loads(out.stdout)


def _comb2(n: int) -> float:
    return n * (n - 1) / 2


def adjusted_rand(a: list[int], b: list[int]) -> float:
    """Adjusted Rand index of two labelings of the same items (Hubert and Arabie), from counts."""
    n = len(a)
    both = sum(_comb2(c) for c in Counter(zip(a, b, strict=True)).values())
    sa = sum(_comb2(c) for c in Counter(a).values())
    sb = sum(_comb2(c) for c in Counter(b).values())
    expected = sa * sb / _comb2(n) if n > 1 else 0.0
    top = (sa + sb) / 2 - expected
    return 1.0 if top == 0 else (both - expected) / top


def _timed(python: str, method: str, path: Path, repeat: int) -> tuple[dict, list[dict]]:
    runs = [_group(python, method, [path]) for _ in range(repeat)]
    return runs[0], runs


def _fmt(runs: list[dict]) -> str:
    cpu, wall = [r["cpu"] for r in runs], [r["seconds"] for r in runs]
    return (f"CPU {statistics.median(cpu):.3f} s (min {min(cpu):.3f}, max {max(cpu):.3f}), "
            f"wall {statistics.median(wall):.3f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drain3-python", default=None, help="interpreter with drain3 installed")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per method and input (median shown)")
    args = ap.parse_args()
    methods = [("mask", sys.executable), ("digits", sys.executable)]
    methods += [("drain3", args.drain3_python)] if args.drain3_python else []
    with tempfile.TemporaryDirectory() as tmp:
        real = Path(tmp) / "real.log"
        with real.open("wb") as out:
            for p in sorted((ROOT / "fixtures").rglob("*")):
                if (p.is_file() and not p.is_symlink() and p.suffix in (".log", ".out", ".txt")
                        and "pairs" not in p.parts and "data" not in p.parts):
                    out.write(p.read_bytes().rstrip(b"\n") + b"\n")
        synthetic = Path(tmp) / "hf.log"
        subprocess.run([sys.executable, str(ROOT / "bench" / "gen_logs.py"), str(synthetic), "20"], check=True,
                       capture_output=True)
        print(f"## 1. time and groups (grouping only, lines already read; median of {args.repeat} runs; CPU time "
              "is the figure to compare on a shared machine)")
        results: dict[str, dict[str, dict]] = {}
        for name, path in (("real fixture logs", real), ("HF-style 20 MB", synthetic)):
            size = path.stat().st_size / 2**20
            for method, python in methods:
                r, runs = _timed(python, method, path, args.repeat)
                results.setdefault(name, {})[method] = r
                print(f"{name} ({size:.1f} MiB, {r['lines']} non-blank lines): {method}: {_fmt(runs)}, "
                      f"{r['groups']} groups", flush=True)
        print("\n## 2. agreement with masking on the real fixture logs")
        for other in [name for name, _ in methods if name != "mask"]:
            m, d = results["real fixture logs"]["mask"], results["real fixture logs"][other]
            masked = m["masked"]
            by_cluster: dict[int, set[str]] = {}
            by_template: dict[str, set[int]] = {}
            for cid, tpl in zip(d["ids"], masked, strict=True):
                by_cluster.setdefault(cid, set()).add(tpl)
                by_template.setdefault(tpl, set()).add(cid)
            merged = [c for c, s in by_cluster.items() if len(s) > 1]
            split = [t for t, s in by_template.items() if len(s) > 1]
            lines_in_merged = sum(1 for cid in d["ids"] if cid in set(merged))
            print(f"{other}: adjusted Rand index against mask {adjusted_rand(m['ids'], d['ids']):.3f}; "
                  f"{len(merged)} of its {len(by_cluster)} groups mix masked templates ({lines_in_merged} of "
                  f"{len(masked)} lines); {len(split)} of {len(by_template)} masked templates split over "
                  "several of its groups")
            for cid in sorted(merged, key=lambda c: -len(by_cluster[c]))[:2]:
                seen: dict[str, str] = {}
                for i, tpl, t in zip(d["ids"], masked, d["texts"], strict=True):
                    if i == cid:
                        seen.setdefault(tpl, t)
                print(f"  e.g. one {other} group holds lines of the masked templates: "
                      + " | ".join(repr(t[:90]) for t in list(seen)[:2]))
        print("\n## 3. new groups in the bad run of each fixture pair (good train.log first, then bad)")
        for pair in sorted(p.name for p in (ROOT / "fixtures" / "pairs").iterdir() if p.is_dir()):
            logs = [ROOT / "fixtures" / "pairs" / pair / side / "train.log" for side in ("good", "bad")]
            if not all(p.is_file() for p in logs):
                continue
            cells = []
            for method, python in methods:
                r = _group(python, method, logs)
                cut = r["starts"][1]
                good_ids = set(r["ids"][:cut])
                new = {i for i in r["ids"][cut:] if i not in good_ids}
                cell = f"{method}: {len(new)} new"
                needle = CAUSE.get(pair)
                if needle is not None:
                    hit = [i for i, t in zip(r["ids"][cut:], r["texts"][cut:], strict=True) if needle in t]
                    cell += ", cause line new" if hit and all(i in new for i in hit) else ", cause line MISSED"
                cells.append(cell)
            print(f"{pair}: " + "; ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
