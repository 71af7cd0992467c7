"""Candidate-line extraction and HF metric parsing: vectorised engines vs what the scanner does.

    python bench/bench_engines.py LOG   # needs pyarrow and polars (not autopsy dependencies)

Over the same log, CPU seconds (process time, so a shared machine's load counts less) of:

1. candidate lines (any of the 20 failure regexes' literals of ``bench_logs.PATTERNS``):
   * ``ahocorasick_rs`` over the raw bytes, then only the hit lines cut out (what the scanner does),
   * pyarrow: the lines as an Arrow string array, ``pyarrow.compute.match_substring_regex``,
   * polars: the lines as a Series, ``str.contains`` (Rust regex);
2. HF metric dicts (``{'loss': 2.31, ...}`` segments between ``\\r``/``\\n``): values parsed
   * by the scanner's pure-Python regex (``log_series._DICT_KV.findall`` + ``float`` per value),
   * by polars ``str.extract_all`` + cast to float over all dict segments at once,
   * by pyarrow ``extract_regex`` on a fixed key layout (one template, as ``log_fast`` learns).

Splitting the text into lines is counted on the Arrow/polars side (they need the lines as an
array); reading the file is not counted on either side.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_logs import PATTERNS  # noqa: E402


def cpu(fn):  # type: ignore[no-untyped-def]
    best = None
    out = None
    for _ in range(3):
        t = time.process_time()
        out = fn()
        dt = time.process_time() - t
        best = dt if best is None else min(best, dt)
    return best, out


def main() -> None:
    path = Path(sys.argv[1])
    data = path.read_bytes()
    mb = len(data) / 1e6
    literals = [lit for _, _, ls in PATTERNS for lit in ls]
    alternation = "|".join(re.escape(lit) for lit in literals)
    print(f"{path}: {mb:.0f} MB")

    import ahocorasick_rs as ac

    def aho() -> int:
        m = ac.BytesAhoCorasick([lit.encode() for lit in literals])
        lines = set()
        for _, start, _ in m.find_matches_as_indexes(data):
            a = data.rfind(b"\n", 0, start) + 1
            lines.add(a)
        return len(lines)

    import polars as pl
    import pyarrow as pa
    import pyarrow.compute as pc

    text = data.decode("utf-8", "replace")

    def arrow_cand() -> int:
        lines = pa.array(text.split("\n"))
        return int(pc.sum(pc.match_substring_regex(lines, alternation)).as_py() or 0)

    def polars_cand() -> int:
        s = pl.Series(text.split("\n"))
        return int(s.str.contains(alternation).sum())

    res = {}
    for name, fn in (("ahocorasick_rs on bytes (scanner's prefilter)", aho),
                     ("pyarrow match_substring_regex (incl. split)", arrow_cand),
                     ("polars str.contains (incl. split)", polars_cand)):
        dt, n = cpu(fn)
        res[name] = dt
        print(f"  candidates  {name:48s} {dt:7.3f} s CPU  {mb / dt:7.0f} MB/s  ({n} lines)")

    from autopsy.parsers.log_series import _DICT_KV

    segs = [s for s in re.split(r"[\r\n]", text) if s.startswith("{'")]
    print(f"  {len(segs):,} dict segments")

    def python_parse() -> int:
        n = 0
        for seg in segs:
            for _k, _q, quoted, bare in _DICT_KV.findall(seg):
                float(quoted or bare)
                n += 1
        return n

    num = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"

    def polars_parse() -> int:
        s = pl.Series(segs)
        vals = s.str.extract_all(r"'[A-Za-z_][\w/.\- ]*':\s*" + num).list.explode()
        nums = vals.str.extract(r":\s*(" + num + ")", 1).cast(pl.Float64, strict=False)
        return int(nums.len())

    def polars_all() -> int:  # split + filter + parse: the whole job from the text
        s = pl.Series(re.split(r"[\r\n]", text))
        d = s.filter(s.str.starts_with("{'"))
        vals = d.str.extract_all(r"'[A-Za-z_][\w/.\- ]*':\s*" + num).list.explode()
        return int(vals.str.extract(r":\s*(" + num + ")", 1).cast(pl.Float64, strict=False).len())

    tmpl = (r"^\{'loss': (" + num + r"), 'grad_norm': (" + num + r"), 'learning_rate': (" + num +
            r"), 'epoch': (" + num + r")\}")

    def arrow_template() -> int:
        arr = pa.array(segs)
        st = pc.extract_regex(arr, tmpl.replace("(" + num, "(?P<v0>" + num, 1)
                              .replace("(" + num, "(?P<v1>" + num, 1)
                              .replace("(" + num, "(?P<v2>" + num, 1)
                              .replace("(" + num, "(?P<v3>" + num, 1))
        st = st.filter(pc.is_valid(st))  # dicts of another layout (eval) go the general way
        return sum(len(pc.cast(st.field(i), pa.float64())) for i in range(4))

    for name, fn in (("scanner's regex findall + float (Python)", python_parse),
                     ("polars extract_all + cast", polars_parse),
                     ("pyarrow extract_regex, one key template", arrow_template),
                     ("polars: split + filter + parse from the text", polars_all)):
        dt, n = cpu(fn)
        print(f"  dict values {name:48s} {dt:7.3f} s CPU  {len(segs) / dt / 1e3:7.0f}k dicts/s  ({n:,} values)")


if __name__ == "__main__":
    main()
