"""Regression guard: the end-to-end cases, scaled down, timed beside the baseline's commit.

    PYTHONPATH=. python bench/check.py                 # ~30-60 s on 2 cores (see bench/README.md); no network
    PYTHONPATH=. python bench/check.py --against REV   # beside another commit than the baseline's
    PYTHONPATH=. python bench/check.py --code DIR      # time the autopsy tree in DIR (another checkout)
    PYTHONPATH=. python bench/check.py --budget 90     # more time for confirming suspects (default 55 s)
    PYTHONPATH=. python bench/check.py --update --code DIR  # new bench/baseline.json (say why in the commit)

What it runs: ``autopsy analyze CASE --format json -o FILE`` through the command's own entry point
(``autopsy.__main__.main``; the tree under test first on ``PYTHONPATH``, bytecode caching on as in an
installed package). Two long-lived worker processes, one per tree (the tree under test and the
baseline's commit, extracted from this repository with ``git archive``), each start by analysing
the smallest real run (``fixtures/runs/disk_full``): the CPU from the process's start to the end of
that analysis is the **fixed cost** every analysis pays (interpreter, imports, catalog, first calls).
Then the data cases, generated on the fly into a temporary directory (HF Trainer stdout beside
interleaved torchrun ranks, Lightning bars beside Keras progress and open-world metric lines, a log
with few candidate lines, a run directory of 150 small files, a trainer_state.json beside a
TensorBoard event file), are analysed **case by case, alternately in the two workers**: the two
figures of a case are taken seconds apart, on the same machine state. A case's figure is the CPU it
adds to the warm process (``getrusage`` of the process and of its waited-for children, i.e. a
forked half of a parallel scan), so a 2x slowdown of its own work reads as 2x, undiluted by the
fixed cost. Plus ``autopsy --help`` and ``autopsy rules list``, with and without their cache, in
fresh processes, alternating between the trees.

Why the baseline's code is re-run beside the tree, and not only its stored figures: on the shared
2-core VM this was built on, the machine's speed drifts by up to 2x within minutes, and one
analysis of a 130 KB log read anywhere between 0.08 and 0.9 s of CPU in consecutive passes of one
process (load 2-3). Runs of the two trees taken one right after the other see the same machine.
The stored figures are printed for reference.

Decision: each data case ``PASSES`` times per tree, each start-up case twice (the uncached ``rules
list``, ~1 s, once), the fixed cost once (the worker's start); each tree's figure is the least CPU
of its runs (what other processes add to a run is never negative: the minimum is the figure they
move least). A case more than 15% (and
20 ms) over the reference is a suspect: it is measured again in both trees, alternately, for as long
as the time budget allows (a suspect fixed cost starts fresh workers). Exit status 1 when a case's
figure is more than 25% over the reference's and more than 20 ms of CPU over it (a start-up case's
whole cost is 10-20 ms, below the resolution of this VM's CPU accounting), 0 otherwise. When the
baseline's commit is not in the repository (a shallow clone) the stored figures are the reference,
and the check says so. Not part of the test suite (no timed tests).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import e2e  # noqa: E402
from gen_shapes import SHAPES  # noqa: E402

BASELINE = HERE / "baseline.json"
TOLERANCE = 1.25  # a regression is a figure more than 25% over the reference
SUSPECT = 1.15  # above this after the first passes, a case is measured again while the budget lasts
# A regression must also cost this much more CPU: a start-up case takes 10-20 ms, and this VM's CPU
# accounting moves a process that short by several ms (python -c pass reads 8-16 ms), so 25% of it
# is below what can be measured.
MIN_DELTA_S = 0.02
BUDGET_S = 55.0  # wall seconds after which no suspect is measured again (the first passes always run)
# Each data case, per tree, before suspects are judged. Cases are small (0.1-0.3 s of CPU each on a
# quiet machine) and measured many times rather than large and measured twice: the least of several
# short runs is the figure least moved by the bursts of load that inflate single runs 2-10x here.
PASSES = 2
FIXTURE = ROOT / "fixtures" / "runs" / "disk_full"
FIXED = "fixed cost (fixtures/runs/disk_full)"
PHASES: dict[str, float] = {}  # wall seconds of each phase of this check, printed at the end
CACHE_ROOT = Path(tempfile.gettempdir())  # set by main() to a directory of the check's own (see use_tree)

# name -> [(shape, MB), ...]: shapes written side by side into one run directory (a run-level pass,
# e.g. the cards, is paid once per group): a 2x slowdown of one shape still moves its group's added
# CPU by a third or more.
LOG_CASES: dict[str, list[tuple[str, float]]] = {
    "hf + torchrun logs": [("hf", 0.0625), ("torchrun", 0.03)],
    "lightning + keras + open-world logs": [("lightning", 0.03), ("keras", 0.0625), ("openworld", 0.03)],
    "quiet log": [("quiet", 1)],
}

# A worker: analyses FIXTURE (its CPU from the process's start is the fixed-cost figure), then each
# run directory named on a line of stdin, printing the CPU that analysis added.
WORKER = r"""
import json, resource, sys, time
from autopsy.__main__ import main

def cpu():
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

def analyze(run_dir, out):
    sys.argv = ["autopsy", "analyze", run_dir, "--format", "json", "-o", out]
    try:
        main()
    except SystemExit as exc:
        if exc.code not in (0, 1, None):
            raise

launched, first, out = float(sys.argv[1]), sys.argv[2], sys.argv[3]
analyze(first, out)  # the fixed cost: imports, the catalog, pandas' first calls
print("@@FIRST@@" + json.dumps({"cpu": cpu(), "wall": time.time() - launched}), flush=True)
for line in sys.stdin:
    c, w = cpu(), time.perf_counter()
    analyze(line.rstrip("\n"), out)
    print("@@CASE@@" + json.dumps({"cpu": cpu() - c, "wall": time.perf_counter() - w}), flush=True)
"""


class Worker:
    """One warm process of the tree ``code``: its fixed cost on start, then one case at a time."""

    def __init__(self, code: Path, tmp: Path, tag: str) -> None:
        self.code = code
        self.err_path = tmp / f"worker-{tag}.err"
        self.err: IO[bytes] = open(self.err_path, "wb")  # closed in close()
        use_tree(code)
        # ``python -c`` puts the working directory first on sys.path, as ``-m`` does
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, repr(time.time()), str(FIXTURE), str(tmp / f"report-{tag}.json")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, env=e2e.env(), cwd=code, text=True)
        self.first = self._reply("@@FIRST@@")

    def _reply(self, tag: str) -> dict[str, float]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(tag):
                return json.loads(line[len(tag):])
        self.close()
        tail = self.err_path.read_text(errors="replace").strip()[-600:]
        raise RuntimeError(f"worker of {self.code} exited {self.proc.returncode}: {tail}")

    def case(self, run_dir: Path) -> dict[str, float]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{run_dir}\n")
        self.proc.stdin.flush()
        return self._reply("@@CASE@@")

    def close(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        self.proc.wait()
        self.err.close()


def build_cases(tmp: Path) -> dict[str, dict[str, Any]]:
    """Every case's run directory (generated; deterministic) and its yardstick command."""
    from gen_tfevents import generate as gen_tf
    from gen_trainer_state import generate as gen_state

    cases: dict[str, dict[str, Any]] = {FIXED: {"dir": FIXTURE, "desc": "the smallest real run", "kind": "fixed"}}
    for i, (name, shapes) in enumerate(LOG_CASES.items()):
        d = tmp / f"logs{i}"
        descs = [SHAPES[shape](d / shape, mb) for shape, mb in shapes]
        cases[name] = {"dir": d, "desc": "; ".join(descs), "kind": "data"}
    d = tmp / "manyfiles"
    cases["manyfiles"] = {"dir": d, "desc": SHAPES["manyfiles"](d, 1, n=150), "kind": "data"}
    d = tmp / "columnar"
    d.mkdir()
    gen_state(d / "trainer_state.json", 2_500)
    gen_tf(d / "tb", 5_000, 8, False)
    cases["trainer_state + tfevents"] = {"dir": d, "kind": "data",
                                         "desc": "trainer_state.json (2,500 entries) + event file (5,000 scalars)"}
    for case in cases.values():
        files = sorted(p for p in case["dir"].rglob("*") if p.is_file())
        case["bytes"] = sum(p.stat().st_size for p in files)
        case["ref_name"] = "grep -E"
        case["ref_cmd"] = ["grep", "-r", "-c", "-E", e2e.ere_pattern(), str(case["dir"])]
    return cases


def startup_cases() -> dict[str, dict[str, Any]]:
    base = [sys.executable, "-m", "autopsy"]
    out = {}
    for label, argv, env in (("autopsy --help", [*base, "--help"], {}),
                             ("autopsy rules list", [*base, "rules", "list"], {}),
                             ("autopsy --help (no cache)", [*base, "--help"], {"AUTOPSY_NO_CACHE": "1"}),
                             ("autopsy rules list (no cache)", [*base, "rules", "list"], {"AUTOPSY_NO_CACHE": "1"})):
        out[f"startup: {label}"] = {"cmd": argv, "env": env, "bytes": 0, "desc": label, "kind": "startup",
                                    "ref_name": "python -c pass", "ref_cmd": [sys.executable, "-c", "pass"]}
    return out


def run(argv: list[str], extra_env: dict[str, str] | None = None, code: Path | None = None) -> dict[str, float]:
    """One fresh process of ``argv`` with the autopsy tree ``code`` (default: the tree under test)."""
    if code is not None:
        use_tree(code)
        os.chdir(code)  # ``python -m`` puts the working directory before PYTHONPATH
    return e2e.run_once(argv, extra_env=extra_env)


def use_tree(code: Path) -> None:
    """Processes started from now on run the autopsy tree ``code`` with its own cache directory."""
    e2e.ROOT = code  # e2e.env() puts this tree first on PYTHONPATH
    # A private cache directory per tree, under the check's temporary directory: autopsy run from
    # another checkout meanwhile cannot invalidate the cached start-up cases' entries, and neither
    # can the other tree (one directory for both had each tree's run replace the other's entry
    # whenever their rules differ: the cached ``rules list`` then read 0.48 s instead of 0.05 s).
    os.environ["AUTOPSY_CACHE_DIR"] = str(CACHE_ROOT / str(abs(hash(str(code)))))


def export_tree(rev: str, dest: Path) -> Path | None:
    """The autopsy sources of commit ``rev`` of this repository, extracted into ``dest``; None if unavailable."""
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "autopsy", "rules", "pyproject.toml"],
                                 capture_output=True, check=True).stdout
        dest.mkdir(parents=True)
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return dest if (dest / "autopsy" / "__main__.py").is_file() else None


class Session:
    """The trees under comparison, their workers, and every figure taken so far."""

    def __init__(self, cases: dict[str, dict[str, Any]], code: Path, against: Path | None, tmp: Path) -> None:
        self.cases, self.tmp = cases, tmp
        # (key the figures go under, tree): the reference first, the tree under test second
        self.trees = [(key, tree) for key, tree in (("ref_runs", against), ("runs", code)) if tree is not None]
        self.workers: dict[str, Worker] = {}
        self.started = 0

    def start_workers(self) -> None:
        """A fresh worker per tree (closing any earlier one), one after the other; each adds a fixed-cost figure."""
        order = self.trees if self.started % 2 == 0 else self.trees[::-1]
        for key, tree in order:
            if key in self.workers:
                self.workers.pop(key).close()
            self.workers[key] = w = Worker(tree, self.tmp, f"{key}-{self.started}")
            self.cases[FIXED].setdefault(key, []).append(w.first)
        self.started += 1

    def data_pass(self, names: list[str], turn: int) -> None:
        """Each case in ``names`` once in each worker, alternately (who goes first alternates by ``turn``)."""
        for i, name in enumerate(names):
            order = self.trees if (turn + i) % 2 == 0 else self.trees[::-1]
            for key, _ in order:
                self.cases[name].setdefault(key, []).append(self.workers[key].case(self.cases[name]["dir"]))

    def startup_pass(self, names: list[str], turn: int) -> None:
        for i, name in enumerate(names):
            case = self.cases[name]
            order = self.trees if (turn + i) % 2 == 0 else self.trees[::-1]
            for key, tree in order:
                case.setdefault(key, []).append(run(case["cmd"], case.get("env"), tree))

    def close(self) -> None:
        for w in self.workers.values():
            w.close()
        self.workers.clear()


def least(runs: list[dict[str, float]] | None) -> float | None:
    # the least CPU of a case's runs: what other processes add is never negative, so the minimum is
    # the estimate least moved by them
    return min(r["cpu"] for r in runs) if runs else None


def reference(case: dict[str, Any], stored: float | None) -> float | None:
    """The judge: the same case in the reference tree, run beside this one; else the stored figure."""
    return least(case.get("ref_runs")) or stored


def over(now: float, before: float | None, factor: float) -> bool:
    return before is not None and now > max(factor * before, before + MIN_DELTA_S)


def warm_up(trees: list[Path], cases: dict[str, dict[str, Any]]) -> None:
    """Not measured: the bytecode of every module (an extracted tree has none; a changed one is stale),
    the built-in cards' cache and the cached start-up commands' caches, in each tree."""
    for tree in trees:
        run([sys.executable, "-c", "import compileall; compileall.compile_dir('autopsy', quiet=1)\n"
             "from autopsy.engine.loader import load_catalog; load_catalog()"], None, tree)
        for case in cases.values():
            if case["kind"] == "startup" and case.get("env") == {}:
                run(case["cmd"], case.get("env"), tree)


def measure(s: Session, names: list[str], passes: int, budget_end: float, update: bool,
            stored: dict[str, Any]) -> None:
    """The first passes of every case, then the suspects again while the budget lasts."""
    data = [n for n in names if s.cases[n]["kind"] == "data"]
    startup = [n for n in names if s.cases[n]["kind"] == "startup"]
    t = time.perf_counter()
    s.start_workers()
    PHASES["fixed cost (worker starts)"] = time.perf_counter() - t
    t = time.perf_counter()
    for turn in range(passes):
        s.data_pass(data, turn)
    PHASES[f"data cases ({passes} passes)"] = time.perf_counter() - t
    t = time.perf_counter()
    s.startup_pass(startup, 0)
    # a second run of the cheap start-up cases; the uncached ``rules list`` (~1 s) only as a suspect
    s.startup_pass([n for n in startup if min(r["wall"] for r in s.cases[n]["runs"]) < 0.5], 1)
    PHASES["start-up cases"] = time.perf_counter() - t
    t = time.perf_counter()
    turn = passes
    while not update:
        suspects = [n for n in names if over(least(s.cases[n]["runs"]) or 0.0,
                                               reference(s.cases[n], stored.get(n, {}).get("cpu")), SUSPECT)]
        # A suspect's pass costs about what its slowest run did, in each tree. The cheapest go first and
        # as many as fit in what is left of the budget: all-or-nothing left the 20 ms start-up suspects
        # unconfirmed whenever one slow case did not fit.
        left = budget_end - time.perf_counter()
        chosen = []
        for n in sorted(suspects, key=lambda n: max(r["wall"] for r in s.cases[n]["runs"])):
            cost = max(r["wall"] for r in s.cases[n]["runs"]) * len(s.trees)
            if cost <= left:
                chosen.append(n)
                left -= cost
        if not chosen:
            break
        if FIXED in chosen:
            s.start_workers()
        s.data_pass([n for n in chosen if n in data], turn)
        s.startup_pass([n for n in chosen if n in startup], turn)
        turn += 1
    PHASES["suspects measured again"] = time.perf_counter() - t
    s.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--update", action="store_true",
                    help="measure the tree alone (5 passes) and write its figures as the baseline")
    ap.add_argument("--code", type=Path, default=ROOT,
                    help="the autopsy source tree to time (default: this checkout)")
    ap.add_argument("--against", metavar="REV", default=None,
                    help="the commit to time beside it, interleaved (default: the baseline's commit)")
    ap.add_argument("--budget", type=float, default=BUDGET_S, metavar="S",
                    help=f"seconds after which suspects are not measured again (default {BUDGET_S:.0f})")
    a = ap.parse_args()
    code = a.code.resolve()
    if not (code / "autopsy" / "__main__.py").is_file():
        print(f"--code {code}: no autopsy package there", file=sys.stderr)
        return 2
    if not FIXTURE.is_dir():
        print(f"{FIXTURE}: missing (the fixed-cost case)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    load_start = os.getloadavg()
    base = json.loads(BASELINE.read_text()) if BASELINE.exists() and not a.update else {}
    stored: dict[str, Any] = base.get("cases", {})
    rev = a.against or base.get("commit")
    with tempfile.TemporaryDirectory(prefix="autopsy_check_") as t:
        tmp = Path(t)
        against = None if a.update or not rev else export_tree(rev, tmp / "against")
        if rev and not a.update and against is None:
            print(f"commit {rev} is not in this repository: judged against the baseline's figures only",
                  file=sys.stderr)
        global CACHE_ROOT
        CACHE_ROOT = tmp / "cache"
        t1 = time.perf_counter()
        cases = {**startup_cases(), **build_cases(tmp)}
        names = list(cases)
        PHASES["cases generated"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        warm_up([tree for tree in (code, against) if tree is not None], cases)
        PHASES["warm-up"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        for case in cases.values():
            case["ref"] = run(case["ref_cmd"], None, code)
        PHASES["yardsticks"] = time.perf_counter() - t1
        session = Session(cases, code, against, tmp)
        try:
            measure(session, names, 5 if a.update else PASSES, t0 + a.budget, a.update, stored)
        finally:
            session.close()
    elapsed = time.perf_counter() - t0
    bad = report(cases, names, stored, f"commit {rev[:12]}" if against is not None and rev else "baseline")
    load_end = os.getloadavg()
    print(f"\nload average {load_start[0]:.1f} at start, {load_end[0]:.1f} at end; {elapsed:.0f} s; code {code}")
    print("phases (wall s): " + ", ".join(f"{k} {v:.1f}" for k, v in PHASES.items()))
    if a.update:
        commit = _head(code)
        BASELINE.write_text(json.dumps({
            "measured": time.strftime("%Y-%m-%d %H:%M:%S"), "load": [load_start[0], load_end[0]],
            "python": sys.version.split()[0], "commit": commit, "runs_per_case": 5,
            "cases": {n: {"cpu": round(least(cases[n]["runs"]) or 0.0, 4)} for n in names}}, indent=1) + "\n")
        print(f"baseline written: {BASELINE} (commit {commit})")
        return 0
    if bad:
        print(f"regression over {TOLERANCE - 1:.0%}: {', '.join(bad)}")
        return 1
    print(f"no regression over {TOLERANCE - 1:.0%}")
    return 0


def report(cases: dict[str, dict[str, Any]], names: list[str], stored: dict[str, Any], what: str) -> list[str]:
    """Print the table; return the names of the cases over the tolerance."""
    print(f"{'case':40s} {'wall':>6s} {'vs yardstick (wall)':>27s} {'cpu':>7s} {what:>19s} {'ratio':>6s} "
          f"{'vs baseline.json':>16s}")
    bad = []
    for name in names:
        case = cases[name]
        wall = min(r["wall"] for r in case["runs"])
        cpu = least(case["runs"]) or 0.0
        ref = f"{wall / max(case['ref']['wall'], 1e-3):.0f}x {case['ref_name']}"
        b = stored.get(name, {}).get("cpu")
        before = reference(case, b)
        rel = cpu / before if before else None
        flag = ""
        if over(cpu, before, TOLERANCE):
            bad.append(name)
            flag = "  REGRESSION"
        shown = f"{name} *" if case["kind"] == "data" else name
        print(f"{shown:40s} {wall:5.2f}s {ref:>27s} {cpu:6.3f}s {before or 0:18.3f}s "
              f"{(f'{rel:.2f}' if rel is not None else 'new'):>6s} {(f'{cpu / b:.2f}' if b else 'new'):>16s}{flag}"
              f" ({len(case['runs'])} runs)")
    print("* what the case adds to an analysis in a warm process (the fixed cost is the disk_full case)")
    return bad


def _head(tree: Path) -> str | None:
    got = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True)
    return got.stdout.strip() or None


if __name__ == "__main__":
    sys.exit(main())
