"""Benchmark the streaming log scanner on a generated HF-style log.

Usage: PYTHONPATH=. python bench/bench_logs.py [LOG_PATH] [SIZE_MB]
Generates LOG_PATH with bench/gen_logs.py when missing, then reports MB/s and peak RSS of
``scan_log`` (ahocorasick_rs accelerator and the pure ``re`` fallback), the HF dict-line
rate, and ``grep -c -E`` with the same literals as a yardstick. Each timing runs in a fresh
subprocess so peak RSS is the scanner's own.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# ~20 failure patterns in the style of the rule cards (regex + prefilter literals)
PATTERNS = [
    ("oom.cuda/torch2", r"CUDA out of memory\. Tried to allocate (?P<req>\d+(?:\.\d+)?) (?P<unit>[KMG]iB)",
     ["CUDA out of memory"]),
    ("oom.cuda/oom_error", r"torch\.(?:cuda\.)?OutOfMemoryError", ["OutOfMemoryError"]),
    ("oom.host/killed", r"^Killed$", ["Killed"]),
    ("oom.host/sigkill", r"Signal 9 \(SIGKILL\) received by PID (?P<pid>\d+)", ["SIGKILL"]),
    ("dist.nccl_timeout", r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+)",
     ["Watchdog caught collective"]),
    ("dist.nccl_error", r"NCCL error in: (?P<where>\S+)", ["NCCL error"]),
    ("dist.child_failed", r"ChildFailedError", ["ChildFailedError"]),
    ("disk.full", r"No space left on device", ["No space left on device"]),
    ("disk.quota", r"Disk quota exceeded", ["Disk quota exceeded"]),
    ("loss.nan_dict", r"'loss': nan", ["'loss': nan"]),
    ("loss.scale", r"reducing loss scale to (?P<scale>[\d.e+-]+)", ["reducing loss scale"]),
    ("cuda.illegal", r"an illegal memory access was encountered", ["illegal memory access"]),
    ("cuda.assert", r"device-side assert triggered", ["device-side assert"]),
    ("cuda.ecc", r"uncorrectable ECC error encountered", ["ECC error"]),
    ("cuda.xid", r"NVRM: Xid \(PCI:(?P<pci>[^)]+)\): (?P<xid>\d+)", ["NVRM: Xid"]),
    ("tok.overflow", r"Token indices sequence length is longer than the specified maximum sequence length",
     ["Token indices sequence length"]),
    ("crash.segfault", r"Segmentation fault", ["Segmentation fault"]),
    ("crash.index", r"IndexError: index out of range in self", ["index out of range in self"]),
    ("dist.timeout", r"(?i)timed out after (?P<ms>\d+) ?milliseconds", ["timed out after"]),
    ("ckpt.save_fail", r"Error while saving checkpoint|PytorchStreamWriter failed writing file",
     ["Error while saving", "PytorchStreamWriter failed"]),
]


def _child(path: str, accel: bool) -> None:
    from autopsy.parsers.logs import compile_patterns, scan_log
    from autopsy.parsers.types import PatternSpec

    specs = [PatternSpec(k, r, tuple(lits)) for k, r, lits in PATTERNS]
    compiled = compile_patterns(specs, use_accelerator=accel)
    t0 = time.perf_counter()
    c0 = time.process_time()
    scan = scan_log(Path(path), "train.log", compiled, max_bytes=1 << 40, rank=None)
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    n_dict = len({p.lineno for p in scan.series if p.tag == "loss"})
    print(json.dumps({"seconds": dt, "cpu": cpu, "peak_rss": rss, "bytes": scan.bytes_read, "lines": scan.n_lines,
                      "series": len(scan.series), "dict_lines": n_dict, "tracebacks": len(scan.tracebacks),
                      "hits": {k: v.count for k, v in scan.hits.items()}, "last_step": scan.last_step,
                      "engine": compiled.finder.engine}))


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/autopsy_bench_hf.log")
    size_mb = float(sys.argv[2]) if len(sys.argv) > 2 else 200.0
    if not path.exists():
        from gen_logs import generate

        print("generating", path, generate(path, size_mb))
    size = path.stat().st_size
    t0 = time.perf_counter()
    with open(path, "rb") as fh:
        while fh.read(8 << 20):
            pass
    raw = time.perf_counter() - t0
    print(f"file: {path} {size / 1e6:.0f} MB; raw read {raw:.2f} s")
    for accel in (True, False):
        out = subprocess.run([sys.executable, __file__, "--child", str(path), str(int(accel))],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout)
        print(f"scan_log engine={r['engine']:14s} {r['seconds']:.2f} s wall ({r['cpu']:.2f} s CPU, "
              f"{size / 1e6 / r['cpu']:.0f} MB/s of CPU)  {size / 1e6 / r['seconds']:.0f} MB/s  "
              f"peak RSS {r['peak_rss'] / 2**20:.0f} MiB  lines {r['lines']:,}  series {r['series']:,}  "
              f"dict lines {r['dict_lines']:,} ({r['dict_lines'] / r['seconds']:,.0f}/s of total scan time)  "
              f"tracebacks {r['tracebacks']}  last_step {r['last_step']}")
        print("   hits:", r["hits"])
    if shutil.which("grep"):
        lits = "|".join(lit for _, _, ls in PATTERNS for lit in ls)
        t0 = time.perf_counter()
        subprocess.run(["grep", "-c", "-E", lits.replace("(", r"\(").replace(")", r"\)"), str(path)],
                       env={"LC_ALL": "C"}, capture_output=True)
        g = time.perf_counter() - t0
        print(f"grep -c -E (C locale, literals only): {g:.2f} s  {size / 1e6 / g:.0f} MB/s")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3] == "1")
    else:
        main()
