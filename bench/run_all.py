"""Every reader side by side with the tool people use today, in ONE run; writes bench/results.json.

    PYTHONPATH=. python bench/run_all.py [--data /tmp/autopsy_bench] [--repeat 5] [--quick] [--scale]

Generates what is missing under ``--data`` (a 1 GB HF-style log, 1M-scalar event files
in simple_value and tensor style, a 200k-entry trainer_state.json, 1 TB of sparse
checkpoints), then measures each reference tool and autopsy on the same input, each in a
fresh process (peak RSS is its own), medians of ``--repeat`` for autopsy and the fast
references and one run of the slow ones (tbparse, EventAccumulator, the Python line loop,
``ast.literal_eval``). Ratios come from this one run, so a busy machine moves both sides.
``--scale`` adds bench/bench_scale.py (100 MB / 1 GB / 5 GB logs, 1M / 5M events).
``--quick`` uses a 200 MB log and 2 repeats (a smoke run; not for the README table).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _timing import ROOT, load_avg, run_snippet
from bench_logs import PATTERNS

RESULTS = ROOT / "bench" / "results.json"


# ------------------------------------------------------------------ inputs


def ensure_inputs(data: Path, log_mb: int) -> dict[str, Path]:
    data.mkdir(parents=True, exist_ok=True)
    paths = {"log": data / f"hf_{log_mb}mb.log", "trainer_state": data / "trainer_state.json",
             "tb": data / "tb1m"}
    if not paths["log"].exists():
        from gen_logs import generate

        print("generating", paths["log"], generate(paths["log"], log_mb), flush=True)
    if not paths["trainer_state"].exists():
        from gen_trainer_state import generate as gen_ts

        print("generating", paths["trainer_state"], gen_ts(paths["trainer_state"]), flush=True)
    if not (paths["tb"] / "tensor").exists():
        subprocess.run([sys.executable, str(ROOT / "bench" / "gen_tfevents.py"), str(paths["tb"])], check=True)
    return paths


# ------------------------------------------------------------------ sections


def bench_tensorboard(tb_dir: Path, repeat: int, slow_repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for style in ("simple", "tensor"):
        path = next((tb_dir / style).glob("events.out.tfevents.*"))
        setup = f"PATH = {str(path)!r}\nimport pandas as pd, numpy\n"
        res: dict[str, Any] = {"file_mb": path.stat().st_size / 1e6}
        res["raw read"] = run_snippet("data = open(PATH, 'rb').read()", setup=setup, repeat=repeat)
        for crc in (True, False):
            res[f"autopsy (crc {'on' if crc else 'off'})"] = run_snippet(
                f"df = read_scalars(PATH, max_bytes=1 << 40, check_crc={crc}).value\n"
                "info = {'rows': len(df), 'df_mb': df.memory_usage(deep=True).sum() / 2**20}",
                setup=setup + "from autopsy.parsers.tensorboard import read_scalars\n", repeat=repeat)
        res["EventAccumulator + DataFrame"] = run_snippet(
            "acc = pea.EventAccumulator(PATH, size_guidance={'scalars': 0, 'tensors': 0}); acc.Reload()\n"
            "rows = [(t, e.step, e.wall_time, float(tensor_util.make_ndarray(e.tensor_proto).item()))\n"
            "        for t in acc.Tags()['tensors'] for e in acc.Tensors(t)]\n"
            "df = pd.DataFrame(rows, columns=['tag', 'step', 'wall_time', 'value']); info = {'rows': len(df)}",
            setup=setup + "from tensorboard.backend.event_processing import plugin_event_accumulator as pea\n"
                          "from tensorboard.util import tensor_util\n", repeat=slow_repeat)
        attr = "tensors" if style == "tensor" else "scalars"
        res["tbparse SummaryReader"] = run_snippet(
            f"df = SummaryReader(PATH, extra_columns={{'wall_time'}}).{attr}; info = {{'rows': len(df)}}",
            setup=setup + "from tbparse import SummaryReader\n", repeat=slow_repeat)
        ours = res["autopsy (crc on)"]
        for ref in ("tbparse SummaryReader", "EventAccumulator + DataFrame"):
            if ours and res.get(ref):
                res[f"speedup vs {ref}"] = res[ref]["seconds"] / ours["seconds"]
        if ours and res["autopsy (crc off)"]:
            res["crc cost"] = ours["seconds"] / res["autopsy (crc off)"]["seconds"] - 1
            base = res["raw read"]["peak_rss_mb"] - res["file_mb"] if res["raw read"] else 0
            res["peak_rss_over_df"] = (ours["peak_rss_mb"] - max(base, 0)) / ours["info"]["df_mb"]
        out[style] = res
    return out


def _grep_pattern() -> str:
    import re

    # the rules' own regexes, in POSIX ERE: named groups become plain groups, (?i) is dropped
    parts = [re.sub(r"\(\?P<\w+>", "(", rx).replace("(?:", "(").replace("(?i)", "")
             .replace(r"[\d", "[0-9").replace(r"\d", "[0-9]").replace(r"\S", "[^ ]").replace(r"\.", "[.]")
             for _, rx, _ in PATTERNS]
    return "|".join(parts)


def time_cmd(argv: list[str], repeat: int, env: dict[str, str] | None = None) -> dict[str, Any] | None:
    if shutil.which(argv[0]) is None:
        return None
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        r = subprocess.run(argv, capture_output=True, env=env)
        times.append(time.perf_counter() - t)
    return {"seconds": statistics.median(times), "min": min(times), "runs": repeat,
            "info": {"stdout": r.stdout.decode()[:100].strip(), "rc": r.returncode}}


SCAN = """
specs = [PatternSpec(k, r, tuple(lits)) for k, r, lits in PATTERNS]
compiled = compile_patterns(specs, use_accelerator={accel})
scan = scan_log(Path(PATH), "train.log", compiled, max_bytes=1 << 40, rank=None)
"""
# counted after the clock stopped: dict lines straight from the bytes (the series may be thinned)
SCAN_INFO = """
with open(PATH, "rb") as fh:
    n_dict = sum(c.count(b"{'loss'") + c.count(b"{'eval_loss'") for c in iter(lambda: fh.read(1 << 24), b""))
info = {"lines": scan.n_lines, "points": len(scan.series), "engine": compiled.finder.engine, "dict_lines": n_dict,
        "hits": {k: v.count for k, v in scan.hits.items()}, "tracebacks": len(scan.tracebacks),
        "last_step": scan.last_step, "note": scan.note}
"""
SCAN_SETUP = ("PATH = {path!r}\nfrom pathlib import Path\nfrom bench_logs import PATTERNS\n"
              "from autopsy.parsers.logs import compile_patterns, scan_log\n"
              "from autopsy.parsers.types import PatternSpec\n")
LINE_LOOP = """
rxs = [regex.compile(r) for _, r, _ in PATTERNS]
n = 0
with open(PATH, encoding="utf-8", errors="replace", newline="") as fh:
    for line in fh:
        for rx in rxs:
            if rx.search(line):
                n += 1
info = {"matches": n}
"""
LITERAL_EVAL = """
n = 0
with open(PATH, "rb") as fh:
    for raw in fh:
        for seg in raw.split(b"\\r"):
            if seg.startswith(b"{'"):
                d = ast.literal_eval(seg.decode().strip())
                n += 1
info = {"dict_lines": n}
"""


def bench_logs(log: Path, small_log: Path, repeat: int, slow_repeat: int) -> dict[str, Any]:
    size = log.stat().st_size
    res: dict[str, Any] = {"file_mb": size / 1e6}
    setup = SCAN_SETUP.format(path=str(log))
    res["raw read"] = run_snippet("with open(PATH, 'rb') as fh:\n    while fh.read(8 << 20): pass",
                                  setup=setup, repeat=repeat)
    env = dict(os.environ, LC_ALL="C")
    res["grep -c -E (20 regexes, C locale)"] = time_cmd(["grep", "-c", "-E", _grep_pattern(), str(log)], repeat, env)
    res["ripgrep -c (20 regexes)"] = time_cmd(["rg", "-c", "-e", _grep_pattern(), str(log)], repeat, env)
    res["autopsy scan_log (accelerator)"] = run_snippet(SCAN.format(accel=True), setup=setup, after=SCAN_INFO,
                                                        repeat=repeat)
    res["autopsy scan_log (pure re fallback)"] = run_snippet(SCAN.format(accel=False), setup=setup,
                                                             after=SCAN_INFO, repeat=max(1, repeat // 2))
    res["Python regex, loop over lines"] = run_snippet(LINE_LOOP, setup=setup + "import regex\n", repeat=slow_repeat)
    ours = res["autopsy scan_log (accelerator)"]
    if ours:
        res["autopsy MB/s"] = size / 1e6 / ours["seconds"]
        if ours["info"].get("dict_lines"):
            res["autopsy dict lines/s (whole scan)"] = ours["info"]["dict_lines"] / ours["seconds"]
        g = res["grep -c -E (20 regexes, C locale)"]
        if g:
            res["autopsy / grep"] = ours["seconds"] / g["seconds"]
    # ast.literal_eval per dict line: too slow for the 1 GB file, measured on the small one
    small_setup = SCAN_SETUP.format(path=str(small_log))
    lit = run_snippet(LITERAL_EVAL, setup=small_setup + "import ast\n", repeat=slow_repeat)
    if lit:
        lit["lines_per_s"] = lit["info"]["dict_lines"] / lit["seconds"]
        lit["file_mb"] = small_log.stat().st_size / 1e6
    res["ast.literal_eval per dict line (small log)"] = lit
    return res


def bench_checkpoints(data: Path, repeat: int) -> dict[str, Any]:
    root = data / "ckpt_1tb"
    shutil.rmtree(root, ignore_errors=True)
    from bench_checkpoints import build

    build(root, 10, 100.0)  # 10 x 100 GB sparse model.safetensors + zips + trainer_state
    code = ("arts = discover(ROOT).artifacts\n"
            "cps = find_checkpoints(ROOT, arts, now=time.time() + 3600, in_progress_seconds=120)\n"
            "info = {'checkpoints': len(cps), 'files': sum(len(c.files) for c in cps),"
            " 'tb': sum(c.bytes for c in cps) / 1e12, 'valid': all(c.valid for c in cps)}")
    setup = (f"import time\nfrom pathlib import Path\nROOT = Path({str(root)!r})\n"
             "from autopsy.discover import discover\nfrom autopsy.parsers.checkpoints import find_checkpoints\n")
    r = run_snippet(code, setup=setup, repeat=repeat)
    res: dict[str, Any] = {"autopsy discover + find_checkpoints": r}
    if r:
        res["ms_per_file"] = r["seconds"] * 1e3 / r["info"]["files"]
    dense = data / "dense_256mb.bin"
    with open(dense, "wb") as fh:
        fh.write(os.urandom(1 << 20) * 256)
    res["reading a dense 256 MB file"] = run_snippet(
        f"with open({str(dense)!r}, 'rb') as fh:\n    while fh.read(1 << 24): pass", repeat=repeat)
    dense.unlink()
    shutil.rmtree(root, ignore_errors=True)
    return res


# ------------------------------------------------------------------ table


def _s(r: dict[str, Any] | None) -> str:
    return "n/a" if not r else f"{r['seconds']:.3f} s"


def _rss(r: dict[str, Any] | None) -> str:
    return "" if not r or "peak_rss_mb" not in r else f"{r['peak_rss_mb']:.0f} MiB"


def table(results: dict[str, Any]) -> str:
    rows = ["| input | reference tool | reference time | autopsy | autopsy time | ratio | autopsy peak RSS |",
            "|---|---|---|---|---|---|---|"]
    tb = results.get("tensorboard", {})
    for style, label in (("simple", "TensorBoard 1M simple_value"), ("tensor", "TensorBoard 1M TF2 tensors")):
        r = tb.get(style)
        if not r:
            continue
        ours = r.get("autopsy (crc on)")
        for ref in ("tbparse SummaryReader", "EventAccumulator + DataFrame"):
            ratio = r.get(f"speedup vs {ref}")
            rows.append(f"| {label}, {r['file_mb']:.0f} MB | {ref} | {_s(r.get(ref))} | read_scalars (crc on) | "
                        f"{_s(ours)} | {ratio:.0f}x faster |" if ratio else f"| {label} | {ref} | n/a | | | | |")
            rows[-1] += f" {_rss(ours)} |" if ratio else ""
        off = r.get("autopsy (crc off)")
        rows.append(f"| {label} | raw read | {_s(r.get('raw read'))} | crc off | {_s(off)} | "
                    f"crc costs {100 * r.get('crc cost', float('nan')):.0f}% | "
                    f"{_rss(off)} (peak/df {r.get('peak_rss_over_df', float('nan')):.1f}x) |")
    lg = results.get("logs")
    if lg:
        ours = lg.get("autopsy scan_log (accelerator)")
        label = f"text log {lg['file_mb']:.0f} MB, HF style, 20 patterns"
        for ref in ("grep -c -E (20 regexes, C locale)", "ripgrep -c (20 regexes)", "Python regex, loop over lines",
                    "raw read"):
            rr = lg.get(ref)
            ratio = f"{ours['seconds'] / rr['seconds']:.2f}x the time" if rr and ours else "n/a"
            rows.append(f"| {label} | {ref} | {_s(rr)} | scan_log (whole analysis) | {_s(ours)} | {ratio} | "
                        f"{_rss(ours)} |")
        fb = lg.get("autopsy scan_log (pure re fallback)")
        rows.append(f"| {label} | | | scan_log, pure `re` fallback | {_s(fb)} | "
                    f"{lg['file_mb'] / fb['seconds'] if fb else 0:.0f} MB/s | {_rss(fb)} |")
        lit = lg.get("ast.literal_eval per dict line (small log)")
        if lit and ours and lg.get("autopsy dict lines/s (whole scan)"):
            rows.append(f"| HF dict lines | ast.literal_eval per line | {lit['lines_per_s']:,.0f} lines/s | "
                        f"dict lines / whole scan time | {lg['autopsy dict lines/s (whole scan)']:,.0f} lines/s | "
                        f"{lg['autopsy dict lines/s (whole scan)'] / lit['lines_per_s']:.1f}x | |")
        rows.append(f"| {label} | | | throughput | {lg.get('autopsy MB/s', 0):.0f} MB/s | target 400 MB/s | |")
    ts = results.get("trainer_state")
    if ts:
        ref, ours = ts.get("json.load + pandas.DataFrame"), ts.get("autopsy")
        rows.append(f"| trainer_state.json 200k entries, {ts['file_mb']:.0f} MB | json.load + pandas.DataFrame | "
                    f"{_s(ref)} | read_trainer_state + long frame | {_s(ours)} | {ts.get('ratio', 0):.2f}x the time "
                    f"| {_rss(ours)} |")
    ck = results.get("checkpoints")
    if ck:
        r = ck.get("autopsy discover + find_checkpoints")
        d = ck.get("reading a dense 256 MB file")
        if r:
            rows.append(f"| {r['info']['checkpoints']} checkpoints, {r['info']['files']} files, "
                        f"{r['info']['tb']:.1f} TB sparse | reading a dense 256 MB file | {_s(d)} | "
                        f"discover + find_checkpoints | {_s(r)} | {ck['ms_per_file']:.3f} ms/file | {_rss(r)} |")
    st = results.get("startup")
    if st:
        base = st["python -c pass"]
        for name in ("autopsy --help", "autopsy rules list"):
            rows.append(f"| start-up | python -c pass | {base['seconds'] * 1e3:.0f} ms | {name} | "
                        f"{st[name]['seconds'] * 1e3:.0f} ms | {st[name]['x_python']:.1f}x | |")
        pandas_t = st["python -c 'import pandas'"]["seconds"]
        an = next((k for k in st if k.startswith("autopsy analyze")), None)
        if an:
            rows.append(f"| small run end to end | python -c 'import pandas' | {pandas_t * 1e3:.0f} ms | {an} | "
                        f"{st[an]['seconds'] * 1e3:.0f} ms | {st[an]['seconds'] / pandas_t:.1f}x | |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("/tmp/autopsy_bench"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--slow-repeat", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--scale", action="store_true")
    ap.add_argument("--only", default="tensorboard,logs,trainer_state,checkpoints,startup")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    repeat = 2 if args.quick else args.repeat
    log_mb = 200 if args.quick else 1024
    paths = ensure_inputs(args.data, log_mb)
    small = args.data / "hf_100mb.log"
    if not small.exists():
        from gen_logs import generate

        generate(small, 100)
    only = set(args.only.split(","))
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                           "platform": platform.platform(), "load_before": load_avg()},
                               "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    if args.out.exists():  # keep sections not re-measured this time
        old = json.loads(args.out.read_text())
        results.update({k: v for k, v in old.items() if k not in only and k not in results})
    from bench_startup import measure as startup
    from bench_trainer_state import measure as trainer_state

    steps = {
        "tensorboard": lambda: bench_tensorboard(paths["tb"], repeat, args.slow_repeat),
        "logs": lambda: bench_logs(paths["log"], small, repeat, args.slow_repeat),
        "trainer_state": lambda: trainer_state(paths["trainer_state"], repeat),
        "checkpoints": lambda: bench_checkpoints(args.data, repeat),
        "startup": lambda: startup(11 if not args.quick else 3),
    }
    for name, fn in steps.items():
        if name in only:
            t = time.perf_counter()
            print(f"== {name}", flush=True)
            results[name] = fn()
            print(f"   {time.perf_counter() - t:.0f} s; load {load_avg()[0]:.1f}", flush=True)
    if args.scale:
        from bench_scale import run_scale

        results["scale"] = run_scale(args.data, repeat=1)
    results["machine"]["load_after"] = load_avg()
    args.out.write_text(json.dumps(results, indent=2, default=str))
    print(table(results))
    if "scale" in results:
        from bench_scale import scale_table

        print(scale_table(results["scale"]))


if __name__ == "__main__":
    main()
