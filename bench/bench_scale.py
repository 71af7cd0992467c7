"""Scaling: time must grow linearly with the bytes read (logs 100 MB / 1 GB / 5 GB; 1M / 5M events).

    PYTHONPATH=. python bench/bench_scale.py [--data /tmp/autopsy_bench] [--sizes-mb 100,1024,5120]

The logs are bench/gen_logs.py output; the 5 GB one is the 1 GB one repeated (generation
runs at ~20 MB/s, copying at disk speed). Event files come from bench/gen_tfevents.py.
Each point is one fresh process (time, peak RSS); the table shows MB/s per size, which
is flat when scaling is linear, and peak RSS, which must stay flat for logs. Files
larger than 1 GB are deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import ROOT, run_snippet

SCAN = """
specs = [PatternSpec(k, r, tuple(lits)) for k, r, lits in PATTERNS]
scan = scan_log(Path(PATH), "train.log", compile_patterns(specs), max_bytes=1 << 40, rank=None)
info = {"lines": scan.n_lines, "points": len(scan.series)}
"""
SETUP = ("PATH = {path!r}\nfrom pathlib import Path\nfrom bench_logs import PATTERNS\n"
         "from autopsy.parsers.logs import compile_patterns, scan_log\nfrom autopsy.parsers.types import PatternSpec\n")
TB = """
df = read_scalars(PATH, max_bytes=1 << 40).value
info = {"rows": len(df), "df_mb": df.memory_usage(deep=True).sum() / 2**20}
"""


def _log(data: Path, mb: int) -> Path:
    path = data / f"hf_{mb}mb.log"
    if path.exists():
        return path
    from gen_logs import generate

    if mb <= 1024:
        generate(path, mb)
        return path
    base = _log(data, 1024)
    with open(path, "wb") as out:
        for _ in range(round(mb / 1024)):
            with open(base, "rb") as fh:
                shutil.copyfileobj(fh, out, 16 << 20)
    return path


def _events(data: Path, n: int) -> Path:
    d = data / f"tb{n // 1_000_000}m"
    if not (d / "tensor").exists():
        subprocess.run([sys.executable, str(ROOT / "bench" / "gen_tfevents.py"), str(d), "--scalars", str(n)],
                       check=True)
    return d


def run_scale(data: Path, sizes_mb: tuple[int, ...] = (100, 1024, 5120),
              events: tuple[int, ...] = (1_000_000, 5_000_000), repeat: int = 1) -> dict[str, Any]:
    data.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"logs": {}, "tensorboard": {}}
    for mb in sizes_mb:
        path = _log(data, mb)
        r = run_snippet(SCAN, setup=SETUP.format(path=str(path)), repeat=repeat, timeout=3600)
        if r:
            r["file_mb"] = path.stat().st_size / 1e6
            r["mb_per_s"] = r["file_mb"] / r["seconds"]
        out["logs"][str(mb)] = r
        print(f"   log {mb} MB: {r and round(r['seconds'], 2)} s", flush=True)
    for n in events:
        d = _events(data, n)
        for style in ("simple", "tensor"):
            path = next((d / style).glob("events.out.tfevents.*"))
            r = run_snippet(TB, setup=f"PATH = {str(path)!r}\nimport pandas, numpy\n"
                            "from autopsy.parsers.tensorboard import read_scalars\n", repeat=max(repeat, 3))
            if r:
                r["file_mb"] = path.stat().st_size / 1e6
                r["events_per_s"] = r["info"]["rows"] / r["seconds"]
            out["tensorboard"][f"{n // 1_000_000}M {style}"] = r
            print(f"   events {n} {style}: {r and round(r['seconds'], 2)} s", flush=True)
    for mb in sizes_mb:
        if mb > 1024:
            (data / f"hf_{mb}mb.log").unlink(missing_ok=True)
    for n in events:
        if n > 1_000_000:
            shutil.rmtree(data / f"tb{n // 1_000_000}m", ignore_errors=True)
    return out


def scale_table(res: dict[str, Any]) -> str:
    rows = ["| input | size | time | throughput | peak RSS |", "|---|---|---|---|---|"]
    for _mb, r in res.get("logs", {}).items():
        if r:
            rows.append(f"| HF-style log | {r['file_mb']:.0f} MB | {r['seconds']:.2f} s | {r['mb_per_s']:.0f} MB/s | "
                        f"{r['peak_rss_mb']:.0f} MiB |")
    for name, r in res.get("tensorboard", {}).items():
        if r:
            rows.append(f"| event file {name} | {r['file_mb']:.0f} MB | {r['seconds']:.2f} s | "
                        f"{r['events_per_s'] / 1e6:.2f} M events/s | {r['peak_rss_mb']:.0f} MiB "
                        f"(df {r['info']['df_mb']:.0f} MiB) |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("/tmp/autopsy_bench"))
    ap.add_argument("--sizes-mb", default="100,1024,5120")
    ap.add_argument("--events", default="1000000,5000000")
    args = ap.parse_args()
    res = run_scale(args.data, tuple(int(x) for x in args.sizes_mb.split(",")),
                    tuple(int(x) for x in args.events.split(",")))
    print(json.dumps(res, indent=2))
    print(scale_table(res))


if __name__ == "__main__":
    main()
