"""Placing the text of a chart so that no two labels overprint.

The SVG is laid out server-side, before any font is known, so text widths are estimated
from per-character classes with generous widths (an upper bound for the common system sans
fonts, DejaVu Sans included, which is the widest of them): a label may end up with a little
air around it, never on top of another. The browser tests measure the real boxes.

* Labels of step markers, windows and non-finite stretches sit in rows above the plot, each
  at its step; a label that would collide with one in a row goes to the next row, and the
  top margin grows with the rows used (nothing is ever dropped or spilled into the plot).
* Labels of horizontal levels sit inside the plot beside their line; the next level that
  would collide moves below its line, to the right end, or down until it is free.
"""

from __future__ import annotations

from dataclasses import dataclass

# Advance widths in em, per character class, for the semibold labels.
_NARROW = set("ijlI|!.,:;'`()[]{} ")
_WIDE = set("mwMW@%")
_EM_NARROW, _EM_LOWER, _EM_DIGIT, _EM_UPPER, _EM_WIDE, _EM_OTHER = 0.36, 0.64, 0.66, 0.78, 0.98, 0.72
WIDTH_MARGIN = 1.06  # measured in Chromium with DejaVu Sans: real widths are 0.94-1.02 of the table's
ASCENT_EM, DESCENT_EM = 0.95, 0.28  # a text box around its baseline (DejaVu Sans: 0.93 + 0.26)
ROW_EM = 1.4  # a label row is this tall
GAP_EM = 0.7  # horizontal space kept between two labels of one row


def text_width(text: str, font: float) -> float:
    """Estimated width of ``text`` in user units at ``font`` size (an upper bound in practice)."""
    em = 0.0
    for ch in text:
        if ch in _NARROW:
            em += _EM_NARROW
        elif ch in _WIDE:
            em += _EM_WIDE
        elif ch.isdigit():
            em += _EM_DIGIT
        elif ch.islower():
            em += _EM_LOWER
        elif ch.isupper():
            em += _EM_UPPER
        else:
            em += _EM_OTHER
    return em * font * WIDTH_MARGIN


def fit(text: str, font: float, room: float) -> str:
    """``text`` cut with an ellipsis so that it fits ``room`` (the whole text stays in <title>)."""
    if text_width(text, font) <= room:
        return text
    cut = text
    while cut and text_width(cut + "…", font) > room:
        cut = cut[:-1]
    return cut.rstrip() + "…" if cut else ""


@dataclass
class TopLabel:
    """A label above the plot, at step position ``x``."""

    x: float
    text: str
    label_x: float = 0.0
    row: int = 0
    anchor_end: bool = False
    left: float = 0.0  # estimated box, for the row packing and the tests of it
    right: float = 0.0


def place_rows(labels: list[TopLabel], font: float, lo: float, hi: float) -> int:
    """Give each label a row and an anchor inside [lo, hi]; returns the number of rows used.

    A label starts just right of its step, or ends just left of it when it would pass ``hi``,
    and is pushed inside [lo, hi] when even that does not fit. Rows are filled greedily in
    step order, so the labels of close markers stack instead of overprinting."""
    gap = GAP_EM * font
    rows_end: list[float] = []
    for lab in sorted(labels, key=lambda la: la.x):
        lab.text = fit(lab.text, font, hi - lo)
        w = text_width(lab.text, font)
        left = lab.x + 3
        if left + w > hi:
            left = lab.x - 3 - w
        left = min(max(left, lo), hi - w)
        lab.left, lab.right = left, left + w
        lab.anchor_end = left + w <= lab.x  # wholly left of its step: anchored at its end
        lab.label_x = round(left + w if lab.anchor_end else left, 1)
        row = next((i for i, end in enumerate(rows_end) if end + gap <= left), len(rows_end))
        if row == len(rows_end):
            rows_end.append(left + w)
        rows_end[row] = left + w
        lab.row = row
    return len(rows_end)


@dataclass
class LevelLabel:
    """A label of a horizontal level at ``y``, inside the plot."""

    y: float
    text: str
    label_x: float = 0.0
    label_y: float = 0.0
    anchor_end: bool = False


def place_levels(labels: list[LevelLabel], font: float, left: float, right: float, top: float,
                 bottom: float) -> None:
    """Put level labels beside their lines inside the plot box, none over another."""
    placed: list[tuple[float, float, float, float]] = []  # (x0, x1, y0, y1) boxes
    for lab in sorted(labels, key=lambda la: la.y):
        lab.text = fit(lab.text, font, right - left - 8)
        w = text_width(lab.text, font)
        # baseline candidates: above the line, below it, at the left end, then the right end
        above, below = lab.y - 3 - font * DESCENT_EM, lab.y + 3 + font * ASCENT_EM
        candidates = [(left + 4, above, False), (left + 4, below, False), (right - 4, above, True),
                      (right - 4, below, True)]
        chosen = None
        for x, base, end in candidates:
            box = _box(x, base, w, font, end)
            if top <= box[2] and box[3] <= bottom and not any(_hit(box, p) for p in placed):
                chosen = (x, base, end, box)
                break
        if chosen is None:  # every spot is taken: walk down from the line to the first free one
            base = max(lab.y - 4, top + font * ASCENT_EM + 1)
            box = _box(left + 4, base, w, font, False)
            while any(_hit(box, p) for p in placed):
                base += font * (ASCENT_EM + DESCENT_EM) + 2
                box = _box(left + 4, base, w, font, False)
            chosen = (left + 4, base, False, box)
        lab.label_x, lab.label_y, lab.anchor_end = round(chosen[0], 1), round(chosen[1], 1), chosen[2]
        placed.append(chosen[3])


def _box(x: float, base: float, w: float, font: float, end: bool) -> tuple[float, float, float, float]:
    """The text box of a label (1 unit of air around it)."""
    x0 = x - w if end else x
    return (x0 - 1, x0 + w + 1, base - font * ASCENT_EM - 1, base + font * DESCENT_EM + 1)


def _hit(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]
