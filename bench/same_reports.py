"""Do two checkouts give the same JSON reports? (a speed change must not change a result)

    PYTHONPATH=. python bench/same_reports.py OTHER_CHECKOUT [RUN_DIR ...]   # default: fixtures/runs/*

Runs ``python -m autopsy analyze RUN_DIR --format json`` once with this checkout's code and once
with OTHER_CHECKOUT's (``git archive COMMIT | tar -x -C DIR`` makes one), each in a fresh
process with bytecode on and its own empty cache directory, and compares the two reports
byte for byte after dropping what depends on the moment of the analysis, not on the code:
``run.disk_at_analysis`` (the free space of the file system now), the retention forecast made
from it, and the free space quoted in the fix's text ("59.0 GB free when autopsy looked").
Exit 1 on any difference, with the first differing lines of each.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# moment-dependent keys, dropped wherever they occur: the volume's free space now, and the
# checkpoint.retention forecast derived from it
VOLATILE = ("disk_at_analysis", "forecast_fill_step", "forecast_saves_that_fit")
FREE_NOW = re.compile(r"[\d.,]+ [KMGTP]?i?B free when autopsy looked")


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def report_text(code: Path, run_dir: Path, cache: str) -> str:
    """The normalised JSON report of ``run_dir`` by the code in ``code`` (its exit code appended)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(code), AUTOPSY_CACHE_DIR=cache, COLUMNS="100")
    # relative path, from the run dir's parent: the report shows the path as given
    out = subprocess.run([sys.executable, "-m", "autopsy", "analyze", run_dir.name, "--format", "json"],
                         capture_output=True, text=True, env=env, cwd=run_dir.parent)
    try:
        body = json.dumps(_strip(json.loads(out.stdout)), indent=1, sort_keys=False, ensure_ascii=False)
    except ValueError:
        body = out.stdout
    body = FREE_NOW.sub("<free space> free when autopsy looked", body)
    return f"{body}\nexit {out.returncode}\n{out.stderr}"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    other = Path(argv[0]).resolve()
    dirs = [Path(d).resolve() for d in argv[1:]] or sorted(p for p in (ROOT / "fixtures" / "runs").iterdir()
                                                            if p.is_dir())
    differ = 0
    with tempfile.TemporaryDirectory() as c1, tempfile.TemporaryDirectory() as c2:
        for d in dirs:
            mine, theirs = report_text(ROOT, d, c1), report_text(other, d, c2)
            if mine == theirs:
                print(f"same     {d.name}")
                continue
            differ += 1
            print(f"DIFFERS  {d.name}")
            diff = difflib.unified_diff(theirs.splitlines(), mine.splitlines(), str(other), str(ROOT), lineterm="", n=1)
            for line in list(diff)[:30]:
                print(f"    {line}")
    print(f"{len(dirs) - differ}/{len(dirs)} reports identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
