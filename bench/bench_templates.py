"""Log templating for `autopsy diff`: masking (autopsy.compare.templates) against drain3.

    python bench/bench_templates.py [--drain3-python PATH]   (drain3 in another venv: pip install drain3)

Inputs: every real log shipped in fixtures/ (runs, corpus) concatenated, and a 20 MB HF-style
log from bench/gen_logs.py. For each: wall time in a fresh process and the number of groups.
Also reports, on the real logs, how often drain3 puts lines of *different* masked templates in
one group (it merges by token similarity, e.g. `loss nan` with `loss 2.31`, or two warnings
that share most words) — merges that would hide a new line in the bad run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MASK_CODE = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from autopsy.compare.templates import TemplateStats, log_lines, mask, is_informative
t0 = time.perf_counter()
groups = {{}}
n = 0
for _, text in log_lines(Path(sys.argv[1])):
    n += 1
    if text.strip():
        t = mask(text)
        if is_informative(t):
            groups[t] = groups.get(t, 0) + 1
print(json.dumps({{"seconds": time.perf_counter() - t0, "lines": n, "groups": len(groups)}}))
"""

DRAIN_CODE = r"""
import json, sys, time
from pathlib import Path
from drain3 import TemplateMiner
from drain3.template_miner_config import TemplateMinerConfig
sys.path.insert(0, {root!r})
from autopsy.compare.templates import log_lines, mask, is_informative
cfg = TemplateMinerConfig()
cfg.profiling_enabled = False
miner = TemplateMiner(config=cfg)
t0 = time.perf_counter()
n = 0
cluster_of = {{}}
for _, text in log_lines(Path(sys.argv[1])):
    n += 1
    if text.strip():
        r = miner.add_log_message(text)
        cluster_of.setdefault(r["cluster_id"], set()).add(mask(text))
seconds = time.perf_counter() - t0
mixed = sum(1 for s in cluster_of.values() if len(s) > 1)
print(json.dumps({{"seconds": seconds, "lines": n, "groups": len(miner.drain.clusters),
                  "groups_mixing_templates": mixed}}))
"""


def _run(python: str, code: str, path: Path) -> dict[str, float]:
    out = subprocess.run([python, "-c", code.format(root=str(ROOT)), str(path)], capture_output=True, text=True,
                         check=True, timeout=3600)
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--drain3-python", default=None, help="interpreter with drain3 installed")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        real = Path(tmp) / "real.log"
        with real.open("wb") as out:
            for p in sorted((ROOT / "fixtures").rglob("*")):
                if p.is_file() and p.suffix in (".log", ".out", ".txt") and "pairs" not in p.parts:
                    out.write(p.read_bytes().rstrip(b"\n") + b"\n")
        synthetic = Path(tmp) / "hf.log"
        subprocess.run([sys.executable, str(ROOT / "bench" / "gen_logs.py"), str(synthetic), "20"], check=True,
                       capture_output=True)
        for name, path in (("real fixture logs", real), ("HF-style 20 MB", synthetic)):
            size = path.stat().st_size / 2**20
            m = _run(sys.executable, MASK_CODE, path)
            line = (f"{name} ({size:.1f} MiB, {m['lines']:.0f} lines): masking {m['seconds']:.2f} s, "
                    f"{m['groups']:.0f} groups")
            if args.drain3_python:
                d = _run(args.drain3_python, DRAIN_CODE, path)
                line += (f"; drain3 {d['seconds']:.2f} s ({d['seconds'] / max(m['seconds'], 1e-9):.1f}x), "
                         f"{d['groups']:.0f} groups, {d['groups_mixing_templates']:.0f} of them mixing "
                         "lines of different masked templates")
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
