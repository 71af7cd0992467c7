"""Full-size hostile inputs (issue 7): time and peak RSS of a whole ``autopsy analyze``.

Usage: PYTHONPATH=. python bench/bench_hostile.py [--scale 1.0] [--only NAME] [--tmp DIR]

Cases (sizes at --scale 1.0; tests/test_bounds.py runs the same shapes scaled down):

- ``log_5gb``: a 5 GB HF-style log (dict lines, tqdm redraws, a traceback at the end),
  generated on the fly into the temp dir, analysed with the default limit (8 GiB: all read)
  and with ``--max-bytes-per-file 1G`` (partly read, said in the report);
- ``line_1gb``: one 1 GB line followed by a traceback;
- ``files_100k``: 100,000 small files in 500 folders next to a real failed run;
- ``safetensors_1tb``: a sparse 1 TB ``model.safetensors`` with a header length of 2^63, and
  one with a valid header claiming 2 TB of tensors;
- ``tfevents_2p60``: a real event file followed by a record whose length field says 2^60
  (with a correct length CRC, so only the length itself is absurd).

Each analysis runs in a fresh interpreter (``python -m autopsy analyze --format json``), so
the peak RSS is that process's own (``ru_maxrss`` of the child). Everything generated is
deleted afterwards. Prints one JSON line per case and a Markdown table at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autopsy.parsers.tfrecord import masked_crc  # noqa: E402

MB = 1 << 20
GB = 1 << 30
DICT_LINE = b"{'loss': 2.2512, 'grad_norm': 1.4375, 'learning_rate': 1.98e-05, 'epoch': 0.01}\n"
BAR = b" 12%|\xe2\x96\x88\xe2\x96\x8a        | 1200/10000 [03:12<23:31,  6.23it/s]\r"
TRACEBACK = (b'Traceback (most recent call last):\n  File "train.py", line 88, in <module>\n    main()\n'
             b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
             b"capacity of 79.15 GiB of which 1.06 GiB is free.\n")


def _write_log(path: Path, size: int) -> None:
    block = (DICT_LINE + BAR * 20) * 256
    with open(path, "wb") as fh:
        written = 0
        while written < size:
            fh.write(block)
            written += len(block)
        fh.write(TRACEBACK)


def _record(payload: bytes, length: int | None = None) -> bytes:
    head = struct.pack("<Q", len(payload) if length is None else length)
    return head + struct.pack("<I", masked_crc(head)) + payload + struct.pack("<I", masked_crc(payload))


def _age(root: Path) -> None:
    t = time.time() - 86_400
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            if not p.is_symlink():
                os.utime(p, (t, t))


def _analyze(run: Path, *extra: str) -> dict[str, object]:
    """Run the CLI in a child; return wall time, that child's own peak RSS (wait4) and what the report said."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "autopsy", "analyze", str(run), "--format", "json", *extra],
                                stdout=out, stderr=err, env={**os.environ, "PYTHONPATH": str(REPO)})
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode("utf-8", "replace")
    if proc.returncode not in (0, 1):
        return {"error": stderr[-2000:], "seconds": round(wall, 2)}
    report = json.loads(stdout)
    damaged = {a["path"]: f"{a['status']}: {a.get('note') or ''}"[:160] for a in report.get("artifacts", [])
               if a.get("status") not in ("ok", "skipped")}
    primary = next((f["rule"] for f in report.get("findings", []) if f.get("primary")), None)
    return {"seconds": round(wall, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "primary": primary, "damaged": damaged, "problems": report.get("problems", [])[:3]}


def _copy_failed_run(dst: Path) -> Path:
    shutil.copytree(REPO / "fixtures" / "runs" / "nan_loss", dst)
    return dst


def case_log_5gb(tmp: Path, scale: float) -> list[dict[str, object]]:
    run = tmp / "log_5gb"
    run.mkdir()
    size = int(5 * GB * scale)
    t0 = time.perf_counter()
    _write_log(run / "train.log", size)
    gen = time.perf_counter() - t0
    _age(run)
    full = _analyze(run)
    part = _analyze(run, "--max-bytes-per-file", "1G")
    gb = size / GB
    for r in (full, part):
        r["log_gb"] = round(gb, 2)
    full["gen_seconds"] = round(gen, 1)
    if isinstance(full.get("seconds"), float):
        full["gb_per_s"] = round(gb / full["seconds"], 2)  # type: ignore[operator]
    return [dict(case="log_5gb (all read)", **full), dict(case="log_5gb --max-bytes-per-file 1G", **part)]


def case_line_1gb(tmp: Path, scale: float) -> list[dict[str, object]]:
    run = tmp / "line_1gb"
    run.mkdir()
    with open(run / "train.log", "wb") as fh:
        fh.write(b"step 1 | loss 2.0\n")
        chunk = b"x" * (64 * MB)
        for _ in range(max(1, int(16 * scale))):
            fh.write(chunk)
        fh.write(b"\n" + TRACEBACK)
    _age(run)
    return [dict(case="line_1gb", line_gb=round(max(1, int(16 * scale)) * 64 / 1024, 2), **_analyze(run))]


def case_files_100k(tmp: Path, scale: float) -> list[dict[str, object]]:
    run = _copy_failed_run(tmp / "files_100k")
    n = int(100_000 * scale)
    per = 200
    for i in range(0, n, per):
        d = run / "data" / f"shard_{i // per:04d}"
        d.mkdir(parents=True)
        for j in range(min(per, n - i)):
            (d / f"sample_{j:04d}.npy").write_bytes(b"\x93NUMPY\x01\x00v\x00")
    _age(run)
    return [dict(case="files_100k", files=n, **_analyze(run))]


def case_safetensors_1tb(tmp: Path, scale: float) -> list[dict[str, object]]:
    run = _copy_failed_run(tmp / "safetensors_1tb")
    with open(run / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", 2**63))
        fh.truncate(10**12)
    header = json.dumps({"w": {"dtype": "U8", "shape": [2 * 10**12], "data_offsets": [0, 2 * 10**12]}}).encode()
    with open(run / "big.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header)
        fh.truncate(10**12)
    _age(run)
    return [dict(case="safetensors_1tb (2 sparse TB files)", **_analyze(run))]


def case_tfevents_2p60(tmp: Path, scale: float) -> list[dict[str, object]]:
    run = _copy_failed_run(tmp / "tfevents_2p60")
    ev = next((run / "tb").glob("events.out.tfevents.*"))
    with open(ev, "ab") as fh:
        fh.write(_record(b"\x09" + b"\x00" * 40, length=2**60))
    _age(run)
    return [dict(case="tfevents_2p60", **_analyze(run))]


CASES: dict[str, Callable[[Path, float], list[dict[str, object]]]] = {
    "log_5gb": case_log_5gb, "line_1gb": case_line_1gb, "files_100k": case_files_100k,
    "safetensors_1tb": case_safetensors_1tb, "tfevents_2p60": case_tfevents_2p60,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="size multiplier (0.01 for a smoke run)")
    ap.add_argument("--only", choices=sorted(CASES), action="append")
    ap.add_argument("--tmp", default=None, help="where to generate (default: the system temp dir)")
    args = ap.parse_args()
    rows = []
    for name in args.only or list(CASES):
        tmp = Path(tempfile.mkdtemp(prefix=f"autopsy-bench-{name}-", dir=args.tmp))
        try:
            for row in CASES[name](tmp, args.scale):
                print(json.dumps(row), flush=True)
                rows.append(row)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print("\n| case | seconds | peak RSS (MB) | primary | what the report says |\n|---|---|---|---|---|")
    for r in rows:
        said = "; ".join(f"{k} ({v})" for k, v in list(r.get("damaged", {}).items())[:2]) or "-"  # type: ignore[union-attr]
        print(f"| {r['case']} | {r.get('seconds')} | {r.get('peak_rss_mb')} | {r.get('primary')} | {said[:200]} |")


if __name__ == "__main__":
    main()
