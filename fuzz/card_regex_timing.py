"""Time every built-in card pattern on adversarial lines at growing sizes (issue 14).

The companion of ``parser_regex_timing.py`` (same shapes, same screening, same child-process
timeouts; see its docstring) for the card patterns the log scanner searches every candidate
line with. The static check (``autopsy.engine.regex_safety``) proves them free of nested and
adjacent overlapping quantifiers, but does not model the search's retry at every start
position, so a pattern such as ``[A-Za-z_]\\w*=`` passes it and is quadratic on a long word:
this measures what the check cannot see. Prefixes are the pattern's own prefilter literals (a
line reaches the regex only if it holds one). Patterns are compiled as the scanner compiles
them (the ``regex`` module, the card's ignore-case flag) and called with ``search``.

    PYTHONPATH=. python fuzz/card_regex_timing.py [KEY ...]   # e.g. io.not_found/file_not_found
"""

from __future__ import annotations

import json
import os
import sys
import time

from parser_regex_timing import TIMEOUT_S, Runner, screen


def _child(pattern: str, ignore_case: str) -> None:
    import regex

    rx = regex.compile(pattern, regex.IGNORECASE if ignore_case == "1" else 0)
    for line in sys.stdin:
        prefix, filler, tail, n = json.loads(line)
        text = prefix + filler * n + tail
        t0 = time.process_time()
        rx.search(text)
        print(json.dumps(time.process_time() - t0), flush=True)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        _child(argv[1], argv[2])
        return
    from autopsy.engine.loader import load_catalog
    from autopsy.engine.runner import select_cards

    catalog = load_catalog(())
    specs = catalog.patterns(select_cards(catalog.cards.values(), None, None, aliases=catalog.aliases))
    wanted = set(argv)
    n_bad = 0
    for spec in specs:
        if wanted and spec.key not in wanted:
            continue
        runner = Runner([sys.executable, __file__, "--child", spec.regex, "1" if spec.ignore_case else "0"])
        rows = screen(runner, ["", *spec.literals[:3]])
        bad = [r for r in rows if r["superlinear"]]
        worst = max(rows, key=lambda r: (len(r["times"]), max((t if t is not None else 1e9)
                                                                for t in r["times"].values())))
        shown = ", ".join(f"{n}: {'>' + str(int(TIMEOUT_S)) if t is None else f'{t:.4f}'}"
                          for n, t in worst["times"].items())
        n_bad += bool(bad)
        if bad or os.environ.get("VERBOSE"):
            print(f"{spec.key}: {len(bad)} of {len(rows)} shapes superlinear; worst {worst['prefix']!r} + "
                  f"{worst['filler']!r}*n + {worst['tail']!r}: {shown}", flush=True)
    print(f"{len(specs) if not wanted else len(wanted)} card patterns measured; {n_bad} with a superlinear shape")


if __name__ == "__main__":
    main(sys.argv[1:])
