"""Named numbers on one text line: the pairs, the step axis and the split, in any printing style.

The building blocks of the open-world metric reader (:mod:`metric_reader`):

* :data:`NUM` spells a number every way training code prints one: ``0.5``, ``1.2E+00``, ``.5``,
  ``nan``, ``-nan``, ``NaN``, ``inf``, ``-inf``, ``Infinity``, ``tensor(0.5, device='cuda:0')``,
  ``np.float32(0.5)``, ``4,361``; :func:`to_float` reads what it matched.
* :func:`pairs` finds ``name value`` pairs whatever the separator: ``key: v``, ``key=v``,
  ``key v``, ``| key v |``, Keras ``loss: 0.1 - acc: 0.9``, ``'key': v`` / ``"key": "v"``, keys
  of up to three words (Megatron ``lm loss: 2.3E+00``, nanoGPT ``train loss 4.2``).
  Timestamps, dates, versions, paths and hex ids are masked first: their digits are no values.
* :func:`step_of` finds the step axis on the line (``step``, ``iter``, ``iteration``,
  ``global_step``, ``batch``, ``epoch``, ``N/M`` or ``N of M`` beside one of them, ``Epoch [3/10]``,
  CNTK's ``Epoch[ 2 of 15]``).
* :func:`split_word` finds a split stated by the line rather than its keys
  (``Epoch(val)``, ``Validation:``, ``Test set:``, ``***** eval metrics *****``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

# Value spellings. The tensor/np wrappers keep their number as group "v".
# A non-finite word may carry a format's fill: Paddle's stats logger (PaddleOCR, PaddleDetection)
# writes every value with '{:x<6f}', which pads "nan" to "nanxxx" and "-inf" to "-infxx" (a finite
# value is wider than 6 and gets no fill).
_PAD = r"(?:x{1,3})?"
# Microsoft's C runtime (MSVC before VS 2015) prints a quiet NaN as "1.#QNAN" (padded to the width: "1.#QNAN000",
# CNTK's "TrainLossPerSample =  1.#QNAN000;", CNTK#406), a signalling one as "1.#SNAN", an indeterminate result
# as "-1.#IND" and infinity as "1.#INF": tried before the plain number, which would read "1." of it as 1.0.
_MSVC = r"\d\.#(?:QNAN|SNAN|IND|INF)\d*"
_BARE = (r"[-+]?(?:" + _MSVC + r"|\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?"
         r"|(?:[Nn]a[Nn]|NAN|[Ii]nf(?:inity)?|INF)" + _PAD + ")")
NUM = (r"(?:tensor\(\s*|np\.float\d*\(\s*|array\(\s*)?['\"]?(?P<v>" + _BARE + r")['\"]?"
       r"(?:\s*,\s*(?:device|dtype|grad_fn|requires_grad)=[^)]*)?\)?")
# A value ends the token: "2.1.0", "12:30", "3/10" and "1e-4x" are not values; a full stop ending a sentence is no
# part of it (tiny-dnn's "train loss=2.09418. test loss=2.06644").
_END = r"(?![\w:/\-]|\.[\w.:/\-])"

# Files, file:line (solver.cpp:228). Tried from the start of a run of path characters only: a
# later start in the run reaches the same ends, and trying every "\b" inside it made "a.a.a..."
# quadratic (issue 14). A name glued to an earlier mask ("2024-01-01-run3.log",
# "v1.0.0/model_100.pt") starts a run once that mask is blanked: :func:`mask` searches again.
_FILE = (r"(?<![\w.\-])(?<![\w.\-]/)[\w.\-]+(?:/[\w.\-]+)*\.(?:py|pyc|cpp|cc|c|h|hpp|cu|pt|pth|ckpt|bin|json"
         r"|ya?ml|txt|log|csv|h5|npz|npy|pkl|safetensors|keras)(?::\d+)?\b")
_FILES = re.compile(_FILE)
# Masked before reading pairs: what has digits but is not a measured value.
_MASKS = re.compile(
    r"\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d)?(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)?"  # ISO dates and times
    r"|\b\d{1,2}:\d\d:\d\d(?:[.,]\d+)?"  # clock times, elapsed h:mm:ss
    r"|\b\d\d:\d\d\b(?!\s*[<,])"  # mm:ss (not tqdm's "00:12<00:30," which the bar reader takes)
    r"|\bv?\d+\.\d+\.\d+(?:[.\-+]\w+)*"  # versions 2.1.0, v1.13.1+cu117
    r"|(?<![\w/])(?:[A-Za-z]:\\|~/|\.{1,2}/|/)[^\s,;'\"|()\]]*"  # absolute or ./ paths
    r"|" + _FILE + r"|\b(?:INFO|DEBUG|WARNING|WARN|ERROR|CRITICAL|TRACE|NOTICE)\b"  # log levels glued to a key
    # addresses, hashes; not the digits after a decimal point ("loss:2.4166030883789062" is a float)
    r"|\b0x[0-9a-fA-F]+|(?<!\.)\b[0-9a-f]{12,}\b"
    # a progress bar's percentage before its bar ("train loss:  82%|████▏ |": tqdm), not the value of its description
    r"|\b\d{1,3}%\|"
)
# key [sep] value. A key is an identifier (with ./- inside) or up to three words; the separator
# is ":", "=", " = " or whitespace (Megatron "lm loss: ", fairseq "| loss 7.2 |").
# A key word may be possessive (LightGBM "valid_0's binary_logloss", "training's auc"); no key word is a
# non-finite value (xgb.cv "logloss:nan+nan cv-train-logloss:nan" is two pairs, not a key "nan cv-...").
_PAIR = re.compile(
    r"(?<![\w.])(?!(?:nan|NaN|NAN|inf|Inf|INF)" + _PAD + r"\b)(?P<k>[A-Za-z_][\w./\-]*(?:'s)?(?:\[[\w/]+\])?"
    r"(?:[ ](?!(?:nan|NaN|NAN|inf|Inf|INF)" + _PAD + r"\b)[A-Za-z_][\w./\-]*(?:'s)?){0,3})['\"]?"
    r"(?:\s*\((?P<kunit>ms|s|sec|%)\))?(?:\s*[:=]\s*|\s+)"  # not \s*(?:[:=]|\s)\s*: quadratic on long blanks
    + NUM + r"(?P<unit>ms|us|µs|min|s|%)?" + _END
)
_TIME_UNITS = {"ms": 1e-3, "us": 1e-6, "µs": 1e-6, "s": 1.0, "min": 60.0}

# Step-axis words; the value after them (or "N/M") is a position, not a metric.
STEP_WORDS = frozenset({"step", "steps", "global_step", "global step", "iter", "iters", "iteration", "it",
                        "batch", "epoch", "ep", "update", "updates", "num_updates", "train_step", "_step",
                        "trainer/global_step", "train/global_step", "train/step", "total_steps", "n_iter"})
_EPOCH_WORDS = frozenset({"epoch", "ep"})
# blanks, ":" and "[" each once, possessive (issue 14: "\s*[:=#]?\s*\[?\s*" was cubic on blanks)
_POSITION = re.compile(
    r"(?i)(?<![\w/])(?P<w>global[_ ]step|step|iter(?:ation)?|it|batch|epoch|ep|update)\b\s*+(?:[:=#]\s*+)?"
    r"(?:\[\s*+)?(?P<n>\d{1,12})\s*(?:(?:/|of\s)\s*(?P<t>\d{1,12})\s*)?\]?(?![\d.])"
)


# A boosting round or logging index in brackets opening the line, before a tab or a key: XGBoost
# "[43]\ttrain-logloss:0.33", LightGBM "[365]\tvalid_0's auc: 0.61", CLU "[400] steps_per_second=".
# Also inside a quoted or table-cell line ("> [1]\t...", "13129.7s | 202 | [365]\t..."). A launcher's
# "[3] " rank label is stripped before the reader sees the line (log_text.clean).
_ROUND = re.compile(r"(?:^|[|>])\s*\[(?P<n>\d{1,9})\](?:\t|[ ]+(?=[A-Za-z_][\w.\-']*\s*[:=]))")


@dataclass(frozen=True)
class Position:
    """Where a line sits: ``step`` (or iteration/batch), ``epoch``, and the planned totals."""

    step: int | None = None
    step_total: int | None = None
    epoch: int | None = None
    epoch_total: int | None = None


def to_float(raw: str) -> float | None:
    """The value of a matched number; ``-nan`` is nan, ``nanxxx`` (a format's fill) is nan, ``4,361`` is 4361,
    MSVC's ``1.#QNAN000`` / ``-1.#IND`` are nan and ``1.#INF`` is inf."""
    s = raw.replace(",", "")
    if "#" in s:  # MSVC's "1.#QNAN000", "-1.#IND", "1.#INF00"
        if "INF" in s:
            return -math.inf if s.startswith("-") else math.inf
        return math.nan
    if s[-1:] == "x":  # a fill after a non-finite word ("nanxxx"); a finite number never matches with one
        s = s.rstrip("x")
    low = s.lower().lstrip("+-")
    if low == "nan":
        return math.nan
    if low in ("inf", "infinity"):
        return -math.inf if s.startswith("-") else math.inf
    try:
        return float(s)
    except ValueError:
        return None


@lru_cache(maxsize=8)
def mask(text: str) -> str:
    """``text`` with timestamps, dates, versions, paths and hashes blanked (same length).

    Cached for the last few lines: the reader masks one line up to four times (its template,
    its step, its split, its pairs), and on a progress bar redrawn every step that was half
    the cost of reading it."""
    masked, n = _MASKS.subn(_blank, text)
    return _FILES.sub(_blank, masked) if n else masked


def _blank(m: re.Match[str]) -> str:
    return " " * len(m.group())


# One cell of a "|"-separated line holding one pair: the key is all before the value (Megatron's
# "number of nan iterations:   0", "elapsed time per iteration (ms): 1234.5").
_CELL = re.compile(r"\s*(?P<k>[A-Za-z_][\w.\-/]*(?:\s+[A-Za-z_][\w.\-/]*)*?)"
                   r"(?:\s*\((?P<kunit>ms|s|sec|%)\))?(?:\s*[:=]\s+|\s+)" + NUM
                   + r"(?P<unit>ms|us|µs|min|s|%)?\s*")


def pairs(text: str, start: int = 0, *, masked: bool = False) -> list[tuple[str, float]]:
    """Every ``name value`` pair of ``text`` from ``start``, masked values left out, units read
    (``120ms`` -> 0.12 s; ``%`` kept as printed). Step-axis pairs are included: see :func:`step_of`.
    A key ending in a prose word ("number of" before "nan iterations") is no key. ``masked``: the
    text is :func:`mask`'s output already."""
    if not masked:
        text = mask(text) if any(c.isdigit() for c in text) else text
    out: list[tuple[str, float]] = []
    if text.count("|", start) >= 2:
        for cell in text[start:].split("|"):
            m = _CELL.fullmatch(cell)
            if m is not None:
                _add(out, m)
            elif cell.strip():
                out.extend(pairs(cell, masked=True))
        return out
    for m in _pair_matches(text, start):
        _add(out, m)
    return out


_PAIR_START = re.compile(r"(?<![\w.])[A-Za-z_]")
_NONFINITE_WORD = re.compile(r"(?:nan|NaN|NAN|inf|Inf|INF)" + _PAD + r"\b")
_KEY_RUN = re.compile(r"[\w./\-]*")


def _pair_matches(text: str, start: int) -> Iterator[re.Match[str]]:
    """What ``_PAIR.finditer(text, start)`` finds, in linear time.

    A key's first word runs to the end of its run of key characters (what may follow it, a
    quote, "[", a blank, "(" or a separator, is none), so a start that fails fails at every
    later start in the run too, unless the look-ahead refusing "nan"/"inf" words refused it:
    the search skips the run instead of retrying inside it ("a-a-a-..." was quadratic, 64 KB
    of it ran for hours: issue 14)."""
    pos = start
    while (sm := _PAIR_START.search(text, pos)) is not None:
        p = sm.start()
        m = _PAIR.match(text, p)
        if m is not None:
            yield m
            pos = m.end()
        elif _NONFINITE_WORD.match(text, p):
            pos = p + 1
        else:
            run = _KEY_RUN.match(text, p)
            pos = run.end() if run is not None else p + 1


# "train.py:42", "trainer.cc:118": the source location a logging format prints (rich's log handler
# on the right, ``%(filename)s:%(lineno)d``), not a metric.
SOURCE_FILE = re.compile(r"\.(?:py|pyx|c|cc|cpp|cu|h|hpp|rs|go|js|ts|java|lua|scala)$")


def _add(out: list[tuple[str, float]], m: re.Match[str]) -> None:
    v = to_float(m.group("v"))
    key = clean_key(m.group("k"))
    if v is None or not key or key.split()[-1].lower() in _PROSE or SOURCE_FILE.search(key):
        return
    unit = m.group("unit") or m.group("kunit")
    if unit in _TIME_UNITS and not math.isnan(v):
        v *= _TIME_UNITS[unit]
    out.append((key, v))


_PROSE = frozenset({"with", "the", "a", "an", "and", "of", "at", "for", "is", "was", "to", "in", "on", "by",
                    "finished", "done", "end", "after", "current", "new", "got", "has", "are", "its", "from",
                    "than", "into", "over", "per", "as", "be", "will"})


# A rate unit printed after its value ("6.25 updates/sec perplexity=355.6": Sockeye, MXNet's Speedometer) is the
# earlier value's unit, not the first word of the next key.
_RATE_UNIT = re.compile(r"(?i)[a-z]+/(?:s|sec|second)")


def clean_key(key: str) -> str:
    """A key as a tag: trailing separators dropped, inner whitespace single, leading prose words and
    rate units dropped ("finished with train loss" -> "train loss", "updates/sec perplexity" -> "perplexity")."""
    words = key.strip(" '\"-|:=").split()
    while len(words) > 1 and (words[0].lower() in _PROSE or _RATE_UNIT.fullmatch(words[0])):
        words.pop(0)
    return " ".join(words)


def is_step_key(key: str) -> bool:
    return key.lower() in STEP_WORDS


# settings a trainer repeats on its metric lines (NeMo's "| global_batch_size: 1 |", Megatron's
# "| global batch size: 32 |"): the run's configuration, not a measurement of it
_SETTING_KEY = re.compile(r"(?i)(?:^|[\s_/.])(?:batch[\s_]size|seed|vocab\w*|world[\s_]size|seq(?:uence)?[\s_]len\w*)$")


def is_setting_key(key: str) -> bool:
    return bool(_SETTING_KEY.search(key))


def step_of(text: str) -> Position:
    """The step and epoch a line states (with ``N/M`` totals), first mention of each wins."""
    step = step_total = epoch = epoch_total = None
    masked = mask(text)
    for m in _POSITION.finditer(masked):
        word = m.group("w").lower()
        n = int(m.group("n"))
        t = int(m.group("t")) if m.group("t") else None
        if word in _EPOCH_WORDS:
            if epoch is None:
                epoch, epoch_total = n, t
        elif step is None:
            step, step_total = n, t
    if step is None and "[" in masked:
        r = _ROUND.search(masked)
        if r is not None:
            step = int(r.group("n"))
    return Position(step, step_total, epoch, epoch_total)


_SPLIT_CONTEXT = re.compile(
    r"(?i)(?:\((?P<paren>train|val|valid|eval|test)\)"  # mmengine Epoch(val)
    # a split word opening the line, after a logger's timestamp prefix ("2020-11-13 09:33:31,062 - VALID SET 0
    # LOSS:0.1780": the set's index before the keys states the split too)
    r"|^(?:[\d\-/:,.\s\[\]T]*?\s[-|]\s)?\W*(?P<head>train(?:ing)?|val(?:id|idation|idating)?|eval(?:uation|uating)?"
    r"|test(?:ing)?)(?:\s+set(?:\s+\d+\s)?)?\s*(?:[:\]|]|(?<=\d\s))"
    # HF Trainer's metrics blocks; a run of stars is tried from its first star only (a later start
    # reaches the same ends: without the guard, a line of 64 KB of stars took quadratic time)
    r"|(?<!\*)\*{3,}\s*(?P<hf>train|eval|test|predict)\s+metrics\s*\*{3,})"
)
_SPLIT_NAMES = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val",
                "validating": "val", "eval": "eval", "evaluation": "eval", "evaluating": "eval", "test": "test",
                "testing": "test", "predict": "test"}


# A logged record that names its split in a field of its own: mmcv's JSON log lines
# ({"mode": "val", "epoch": 24, "iter": 9162, ...}), torchaudio's MetricLogger ({"name": "validation", ...}),
# a "split" / "phase" / "stage" field of other loops. The value must be a split word, so
# {"name": "resnet50"} states none.
_DICT_SPLIT = re.compile(
    r"""(?i)['"](?:mode|split|phase|stage|name)['"]\s*:\s*['"](?P<word>train(?:ing)?|val(?:id|idation)?"""
    r"""|eval(?:uation)?|test(?:ing)?)['"]"""
)


def dict_split(text: str, start: int = 0) -> str:
    """The split a dict's own field states (``{"mode": "val", ...}`` -> "val"), or ""."""
    m = _DICT_SPLIT.search(text, start)
    return _SPLIT_NAMES.get(m.group("word").lower(), "") if m is not None else ""


def with_split(key: str, split: str) -> str:
    """The tag of ``key`` read on a line or record that states ``split`` (``loss`` on a validation line ->
    ``val_loss``). A key naming its own split keeps it; so do the position and the optimizer's state,
    which are no measurement on a split's data (epoch, iter, lr: mmcv's val records repeat them)."""
    from autopsy.metrics import EPOCH, LR, LR_MULTIPLIER, canonical_metric, split_of

    if not split or split == "train" or split_of(key) or key.lower() in STEP_WORDS \
            or canonical_metric(key) in (EPOCH, LR, LR_MULTIPLIER):
        return key
    return f"{split}_{key}"


def split_word(text: str) -> str:
    """The split a line states outside its keys ("" when none): ``Epoch(val) [1][50/50]``,
    ``Validation: loss 0.3``, ``Test set: Average loss: 0.05``, ``***** eval metrics *****``,
    a dict's split field (``{"mode": "val", ...}``: :func:`dict_split`)."""
    m = _SPLIT_CONTEXT.search(text)
    if m is None:
        return dict_split(text) if "{" in text else ""
    word = (m.group("paren") or m.group("head") or m.group("hf") or "").lower()
    return _SPLIT_NAMES.get(word, "")


# A dict the line introduces as settings (W&B's debug.log ``config: {'learning_rate': 0.05, ...}``,
# ``hparams = {...}``, ``args: {...}``) is a configuration dump, not a logged step.
_CONFIG_HEAD = re.compile(r"(?i)(?<![a-z])(?:config|configuration|hparams|hyper_?param(?:eter)?s|args|arguments"
                          r"|settings|kwargs|training_args)\s*+(?:[:=]\s*+)?$")


def settings_dict_head(text: str, brace: int) -> bool:
    """True when the words before the dict at ``brace`` name it as settings (``config: {``)."""
    return bool(_CONFIG_HEAD.search(text, 0, brace))
