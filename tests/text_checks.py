"""What rendered text must not carry: shared by the sanitising tests (report samples, hostile runs)."""

from __future__ import annotations

import re

# C0/C1 control characters (newline and tab allowed) and the bidi overrides/isolates
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f\u202a-\u202e\u2066-\u2069]")


def outside_fences(md: str) -> list[str]:
    """Lines of Markdown outside fenced code blocks, with inline code spans removed."""
    out, fence = [], None
    for line in md.splitlines():
        m = re.match(r"^(`{3,})", line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if re.fullmatch(rf"{fence}`*\s*", line):
                fence = None
            continue
        out.append(re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", line))
    assert fence is None, "a code fence was never closed"
    return out
