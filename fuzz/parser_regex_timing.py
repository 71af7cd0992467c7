"""Time the parsers' module-level regexes on adversarial lines at growing sizes (issue 14).

Not a test (speed never is): a measurement whose figures go in ``fuzz/README.md``. For every
pattern in ``PATTERNS`` (module, name, how the parser calls it), every line of the shape
``prefix + filler * n + tail`` is timed in a child process, each measurement with a hard
timeout (the ``re`` engine cannot be interrupted, so the child is killed: the harness never
hangs). Times are the child's CPU seconds, steadier than wall time on a shared machine. The
fillers and tails are the characters the static check
(:func:`autopsy.engine.regex_safety.regex_problems`) names as pumpable, plus the pattern's own
literals as prefixes. Screening runs every shape at n=300 and n=1200; the two shapes whose
time grows fastest (ratio over 8 for a 4x longer line) are then timed at 1000, 4000, 16000
and 65536 (``MAX_SEGMENT_BYTES``).

    PYTHONPATH=. python fuzz/parser_regex_timing.py [NAME ...]   # e.g. log_series._STEP_KV
"""

from __future__ import annotations

import importlib
import json
import os
import select
import subprocess
import sys
import time
from typing import Any

# (module, pattern, call, prefixes): call is how the parser applies it ("match", "search",
# "finditer", "findall", "sub", "fullmatch"), or "fn:NAME" / "fn:NAME,0": the module's function
# that applies it, called as NAME(text) / NAME(text, 0) (the same function before and after a
# fix that replaced or wrapped the pattern); bytes patterns get the line encoded. Left out, as bounded by their caller:
# log_context._BAR_FAST (searched in at most 85 bytes), log_fast._BAR_AT (matched within
# _BAR_LOOKBACK + 5 = 85 bytes: timed here on whole lines all the same), ts_columns._CLOSES (on the
# last 65 bytes of the array).
PATTERNS: list[tuple[str, str, str, list[str]]] = [
    ("launch_script", "_SBATCH", "match", ["#SBATCH --x ", "#SBATCH --x=a", "#SBATCH --x a"]),
    ("launch_script", "_NUMBER", "match", ["1", "-1."]),
    ("log_child_failures", "_SECTION", "match", ["", "Failures", "Failures:"]),
    ("log_child_failures", "_ROW", "match", ["", "[0]", "[0]:"]),
    ("log_child_failures", "_FIELD", "match", ["", "time", "time:"]),
    ("log_config", "_OVERRIDE", "match", ["Overriding: a = x"]),
    ("log_config", "_ASSIGN", "match", ["a = x", "a = x #"]),
    ("log_context", "_BAR_NODESC", "match", ["", "50%"]),
    ("log_fast", "_BAR_AT", "match", ["50%|", "50%|1/2 [", "50%|1/2 [00:01, "]),
    ("log_series", "_STEP_HEAD", "search", ["step", "step:"]),
    ("log_series", "_STEP_KV", "fn:_values,0", ["", "loss", "loss:", "a b", "a 1"]),
    ("log_series", "_BAR", "fn:_last_bar", ["", "train: 50%|", "50%|x|", "1/2 ["]),
    ("log_series", "_DICT_KV", "finditer", ["'a': ", "'a': '"]),
    ("log_series", "_POSTFIX_KV", "finditer", ["a="]),
    ("log_text", "KERAS_BAR", "match", ["", "1/2 "]),
    ("log_text", "_KERAS_REDRAW", "match", ["", "1/2 ", "\x1b[1m"]),
    ("log_tracebacks", "_FLAT_EXC", "search", ["", "ValueError", "a.ValueError:", "ValueError: a"]),
    ("log_tracebacks", "_FRAME", "match", ["", 'File "a", line 1, in f']),
    ("log_tracebacks", "_IPY_ARROW", "match", ["->", "-> 1"]),
    ("log_tracebacks", "_NEW_RECORD", "match", [""]),
    ("metric_reader", "_CONFIG_LIKE", "fn:config_like", [""]),
    ("metric_reader", "_NUMBERS", "sub", ["", "1"]),
    ("metric_values", "_MASKS", "fn:mask", ["", "1.2.3", "a/b", "2024-01-01"]),
    ("metric_values", "_PAIR", "finditer", ["loss: ", "a "]),
    ("metric_values", "_POSITION", "finditer", ["step", "step:", "step ["]),
    ("metric_values", "_CELL", "fullmatch", ["", "a", "a b", "a (ms)", "a: "]),
    ("metric_values", "_SPLIT_CONTEXT", "search", ["", "***", "train"]),
    ("metric_values", "_CONFIG_HEAD", "search", ["config", "config:"]),
    ("ts_columns", "_OPENS", "match", [""]),
]
FILLERS = [" ", "\t", "a", "A", "0", "1a", "a ", "a=", "a:", ":", ".", "a.", "*", "=", "|", "/", "-",
           "0,", "[", "a b", "0.", "a/", "a-", "a1", "_", "%|", "1/1 ", "\x1b[1m", "=>"]
TAILS = ["", "\x01", ":", "]", " "]
SCREEN = (300, 1200)
GROW = (1000, 4000, 16000, 65536)
TIMEOUT_S = 30.0
GROW_SHAPES = 2
MAX_TIMEOUTS = 3  # screening measurements past 10 s before a pattern's screening stops


def _call(rx: Any, call: str, text: Any, mod: Any = None) -> None:
    if call.startswith("fn:"):
        name, _, zero = call[3:].partition(",")
        getattr(mod, name)(*((text, 0) if zero else (text,)))
    elif call == "match":
        rx.match(text)
    elif call == "search":
        rx.search(text)
    elif call == "fullmatch":
        rx.fullmatch(text)
    elif call == "finditer":
        for _ in rx.finditer(text):
            pass
    elif call == "findall":
        rx.findall(text)
    elif call == "sub":
        rx.sub(lambda m: " " * len(m.group()), text)


def _child(mod: str, name: str, call: str) -> None:
    module = importlib.import_module(f"autopsy.parsers.{mod}")
    rx = getattr(module, name, None)  # None: replaced by the function the call names
    for line in sys.stdin:
        prefix, filler, tail, n = json.loads(line)
        text: Any = prefix + filler * n + tail
        if rx is not None and isinstance(rx.pattern, bytes):
            text = text.encode()
        t0 = time.process_time()
        _call(rx, call, text, module)
        print(json.dumps(time.process_time() - t0), flush=True)


class Runner:
    """One child per pattern (``args``: its command line), restarted after a killed (timed-out)
    measurement. The child reads ``[prefix, filler, tail, n]`` lines and answers CPU seconds."""

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.proc: subprocess.Popen[str] | None = None

    def time(self, task: tuple[str, str, str, int], timeout: float) -> float | None:
        if self.proc is None:
            self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(task) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout + 5)  # + the child's start
        if not ready:
            self.close()
            return None
        return float(json.loads(self.proc.stdout.readline()))

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def measure(mod: str, name: str, call: str, prefixes: list[str]) -> list[dict[str, Any]]:
    return screen(Runner([sys.executable, __file__, "--child", mod, name, call]), prefixes)


def screen(runner: Runner, prefixes: list[str]) -> list[dict[str, Any]]:
    """Every shape at the screening sizes, then the worst superlinear ones (or the slowest) grown."""
    rows: list[dict[str, Any]] = []
    try:
        timeouts = 0
        for prefix in prefixes:
            for filler in FILLERS:
                for tail in TAILS:
                    if timeouts >= MAX_TIMEOUTS:  # hopeless already: stop screening this pattern
                        break
                    times: dict[int, float | None] = {}
                    for n in SCREEN:
                        times[n] = runner.time((prefix, filler, tail, n), 10.0)
                        if times[n] is None:
                            break
                    timeouts += any(t is None for t in times.values())
                    a, b = times.get(SCREEN[0]), times.get(SCREEN[1])
                    superlinear = b is None or (a is not None and b > 1e-3 and b > 8 * max(a, 1e-6))
                    rows.append({"prefix": prefix, "filler": filler, "tail": tail, "times": times,
                                 "superlinear": superlinear})
        # the worst few superlinear shapes at the larger sizes (each up to TIMEOUT_S)
        bad = sorted((r for r in rows if r["superlinear"]),
                     key=lambda r: -(r["times"][SCREEN[1]] if r["times"].get(SCREEN[1]) is not None else 1e9))
        if not bad:  # linear: the slowest shape at every size, for the record
            bad = [max(rows, key=lambda r: r["times"][SCREEN[1]])]
        for r in bad[:GROW_SHAPES]:
            t = r["times"].get(SCREEN[1])
            for n in GROW:
                t = None if t is None else runner.time((r["prefix"], r["filler"], r["tail"], n), TIMEOUT_S)
                r["times"][n] = t
    finally:
        runner.close()
    return rows


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        _child(*argv[1:4])
        return
    wanted = set(argv)
    for mod, name, call, prefixes in PATTERNS:
        if wanted and f"{mod}.{name}" not in wanted:
            continue
        rows = measure(mod, name, call, prefixes)
        worst = max(rows, key=lambda r: (len(r["times"]), max((t if t is not None else 1e9)
                                                                for t in r["times"].values())))
        bad = [r for r in rows if r["superlinear"]]
        shown = ", ".join(f"{n}: {'>' + str(int(TIMEOUT_S)) if t is None else f'{t:.4f}'}"
                          for n, t in worst["times"].items())
        print(f"{mod}.{name} ({call}): {len(bad)} of {len(rows)} shapes superlinear; worst "
              f"{worst['prefix']!r} + {worst['filler']!r}*n + {worst['tail']!r}: {shown}", flush=True)
        if os.environ.get("VERBOSE"):
            for r in bad:
                print("   ", json.dumps(r), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
