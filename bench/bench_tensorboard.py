"""Benchmark: every scalar of an event file into a DataFrame, autopsy vs TensorBoard vs tbparse.

    python bench/gen_tfevents.py /tmp/tbbench            # 1M scalars, simple and tensor style
    PYTHONPATH=. python bench/bench_tensorboard.py /tmp/tbbench [--repeat 5] [--baseline-repeat 1]

Each measurement runs in a fresh subprocess (so peak RSS is that reader's own); times are
medians. Ratios are computed within this one run so a noisy machine does not move them.
tbparse is measured only when installed (``pip install tbparse``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

_SNIPPETS = {
    "raw read": "data = open(PATH, 'rb').read(); n = len(data)",
    "autopsy (crc on)": ("from autopsy.parsers.tensorboard import read_scalars\n"
                         "df = read_scalars(PATH, max_bytes=1 << 40, check_crc=True).value; n = len(df)"),
    "autopsy (crc off)": ("from autopsy.parsers.tensorboard import read_scalars\n"
                          "df = read_scalars(PATH, max_bytes=1 << 40, check_crc=False).value; n = len(df)"),
    "EventAccumulator + DataFrame": (
        "from tensorboard.backend.event_processing import plugin_event_accumulator as pea\n"
        "from tensorboard.util import tensor_util\n"
        "acc = pea.EventAccumulator(PATH, size_guidance={'scalars': 0, 'tensors': 0}); acc.Reload()\n"
        "rows = [(t, e.step, e.wall_time, float(tensor_util.make_ndarray(e.tensor_proto).item()))\n"
        "        for t in acc.Tags()['tensors'] for e in acc.Tensors(t)]\n"
        "df = pd.DataFrame(rows, columns=['tag', 'step', 'wall_time', 'value']); n = len(df)"),
    "tbparse SummaryReader.scalars": (
        "from tbparse import SummaryReader\n"
        "df = SummaryReader(PATH, extra_columns={'wall_time'}).{attr}; n = len(df)"),
}

_RUNNER = """
import gc, resource, sys, time
import pandas as pd
PATH = {path!r}
gc.collect()
t = time.perf_counter()
{code}
dt = time.perf_counter() - t
print(dt, n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def measure(name: str, path: Path, repeat: int, tensor_style: bool) -> dict[str, float] | None:
    code = _SNIPPETS[name]
    if "tbparse" in name:
        try:
            import tbparse  # noqa: F401
        except ImportError:
            return None
        code = code.replace("{attr}", "tensors" if tensor_style else "scalars")
    times, rss, n = [], [], 0
    for _ in range(repeat):
        src = _RUNNER.format(path=str(path), code=code)
        out = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(f"  {name}: failed: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            return None
        dt, n_s, rss_s = out.stdout.split()
        times.append(float(dt))
        rss.append(int(rss_s))
        n = int(n_s)
    return {"seconds": statistics.median(times), "rows": n, "peak_rss_mb": max(rss) / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path, help="output folder of gen_tfevents.py")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline-repeat", type=int, default=1, help="repeats for the slow baselines")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    results = {}
    for style in ("simple", "tensor"):
        path = next((args.dir / style).glob("events.out.tfevents.*"))
        size = path.stat().st_size
        print(f"\n{style}: {path.name} ({size / 1e6:.1f} MB)")
        res = {}
        for name in _SNIPPETS:
            slow = "autopsy" not in name and name != "raw read"
            r = measure(name, path, args.baseline_repeat if slow else args.repeat, style == "tensor")
            if r is None:
                continue
            res[name] = r
            print(f"  {name:32s} {r['seconds']:8.3f} s  {r['rows']:>9d} rows  peak RSS {r['peak_rss_mb']:7.1f} MB")
        ours = res.get("autopsy (crc on)", {}).get("seconds")
        for name, r in res.items():
            if ours and "autopsy" not in name and name != "raw read":
                print(f"  autopsy (crc on) is {r['seconds'] / ours:.1f}x faster than {name}")
        if "autopsy (crc off)" in res and ours:
            off = res["autopsy (crc off)"]["seconds"]
            print(f"  CRC checking costs {100 * (ours - off) / off:.0f}% over crc off")
        results[style] = res
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
