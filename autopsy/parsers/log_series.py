"""Numeric series from log lines, without ``eval``: HF dicts, step lines, progress bars.

* HF Trainer dict lines (``{'loss': 2.34, 'grad_norm': 1.2, 'learning_rate': 1.9e-05,
  'epoch': 0.01}``, the double-quoted JSON variant, eval and final ``train_runtime`` dicts,
  ``nan``/``inf``/``NaN``/``Infinity`` values): one compiled regex pulls every
  ``'key': number`` pair; non-numeric values are skipped. A dict counts only when it has a
  metric-like key, so generation configs and other printed dicts stay out of the series.
* Step lines: nanochat (``step 00250/03520 (7.10%) | loss: 3.21 | lrm: 1.00 | dt: 120ms``),
  ``step 100 | loss 2.3 | lr 1e-4``, ``Step 100: loss=2.3``, nanoGPT (``iter 100: loss 2.3,
  time 12ms`` and ``step 250: train loss 4.2, val loss 4.3``), ``[step 100/1000] loss: 2.3``.
  The step keyword must stand alone (``warmup_steps: 100`` is not a step line) and at least
  one ``name value`` / ``name: value`` / ``name=value`` pair must follow. Values with a time
  unit are converted to seconds (``dt: 120.21ms`` -> 0.12021); ``4,361`` -> 4361.
* Progress bars (tqdm, accelerate, Lightning): ``n/total``, the rate as ``it/s`` or ``s/it``
  and Lightning's postfix metrics (``train_loss=2.3``).

Points are kept in columns by :class:`~autopsy.parsers.log_store.SeriesStore` (an HF log
holds about a million dict lines per GB).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

from autopsy.parsers.log_store import _NO_STEP, MAX_SERIES_POINTS, MAX_STEP, SeriesStore, point
from autopsy.parsers.metric_values import SOURCE_FILE, dict_split, settings_dict_head, with_split

__all__ = ["MAX_SERIES_POINTS", "MAX_STEP", "_NO_STEP", "SeriesStore", "point"]  # re-exported: they lived here

# ------------------------------------------------------------------------ HF dicts

_NUM = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|NaN|inf|Inf|Infinity)"
# Lightning's tqdm bar pads every float to five characters, non-finite ones too: "nan.0", "inf.0"
# (lightning.pytorch.callbacks.progress.tqdm_progress.Tqdm.format_num). Bar postfixes only.
_NUM_BAR = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|(?:nan|NaN|inf|Inf)(?:\.0)?|Infinity)"
# transformers >= 5 quotes every value ({'loss': '4.963', 'grad_norm': 'nan'}): a quoted value
# counts only when the whole string is a number, so {'run_name': 'exp-1'} stays out.
_DICT_KV = re.compile(
    r"""['"]([A-Za-z_][\w/.\- ]{0,80})['"]\s*:\s*"""
    r"""(?:(['"])(""" + _NUM + r""")\2|(?:tensor\(|np\.float\d*\()?(""" + _NUM + r"""))(?![\w.])"""
)
_METRIC_KEYS = frozenset({"loss", "learning_rate", "grad_norm", "epoch", "lr", "total_flos"})
# A step the dict states itself beats the one inferred from the progress bar; not a metric.
_STEP_KEYS = frozenset({"step", "global_step", "train/global_step", "trainer/global_step", "_step", "iteration"})


def _is_metric_key(key: str) -> bool:
    return (key in _METRIC_KEYS or key.startswith(("eval_", "train_", "test_", "train/", "eval/"))
            or key.endswith("_loss") or key.endswith("/loss"))


def parse_dict_record(text: str) -> tuple[list[str], list[float], int | None] | None:
    """(keys, values, step) of an HF / JSON metrics dict line, or None if not one.

    ``step`` is the dict's own ``'step'``/``'global_step'`` value (an integer), else None;
    step keys are not returned as metrics. The value patterns only admit strings
    ``float()`` accepts, so no try/except per value.
    """
    brace = text.find("{")
    if brace < 0 or (brace and settings_dict_head(text, brace)):
        return None
    pairs = _DICT_KV.findall(text, brace)
    if not pairs:
        return None
    keys: list[str] = []
    values: list[float] = []
    step: int | None = None
    metric = False
    for k, _, quoted, bare in pairs:
        v = float(quoted or bare)
        if k in _STEP_KEYS:
            if step is None and math.isfinite(v) and 0 <= v < MAX_STEP and v == int(v):
                step = int(v)
            continue
        if not metric and _is_metric_key(k):
            metric = True
        keys.append(k)
        values.append(v)
    if not metric:
        return None
    split = dict_split(text, brace)
    if split in ("val", "eval", "test"):  # a held-out record's "loss" is no training loss: val_loss
        keys = [with_split(k, split) for k in keys]
    return keys, values, step


# A dict segment laid out exactly as Python's repr (or json.dumps) prints it, with keys the
# scanner already parsed once: the scanner then reads its values with ONE ``fullmatch`` on
# the bytes instead of decoding, cleaning and ``findall``-ing it (a million lines per GB).
_NUM_B = _NUM.encode()
_TEMPLATE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_/.\-]{0,80}")
# substrings that would make the scanner treat the line as more than a dict (step line,
# progress-bar rate, config or ChildFailedError trigger): such keys get no template
_TEMPLATE_UNSAFE = ("step", "iter", "it/s", "s/it", "overriding", "failures")


@dataclass(frozen=True)
class DictTemplate:
    """A compiled bytes regex for one key layout of metrics dicts: ``{'k1': NUM, 'k2': NUM}``.

    A segment that ``rx.fullmatch``-es it parses to exactly what :func:`parse_dict_record`
    gives for it (same keys in order, ``float`` of the same digits, no own step): keys
    are plain identifiers (no quotes, spaces or step keys), values bare numbers.
    """

    rx: re.Pattern[bytes]
    keys: tuple[str, ...]
    is_train: bool  # "loss" in keys: counts as a training dict


def dict_template(keys: Sequence[str], quote: str) -> DictTemplate | None:
    """The template of a dict with these keys (as parsed), or None when the layout is unsafe."""
    if not keys or len(keys) > 64 or quote not in ("'", '"'):
        return None
    for k in keys:
        low = k.lower()
        if not _TEMPLATE_KEY.fullmatch(k) or k in _STEP_KEYS or any(u in low for u in _TEMPLATE_UNSAFE):
            return None
    q = re.escape(quote.encode())
    body = b", ".join(q + re.escape(k.encode()) + q + b": (" + _NUM_B + b")" for k in keys)
    return DictTemplate(re.compile(b"\\{" + body + b"\\}"), tuple(keys), "loss" in keys)


def parse_dict_line(text: str) -> tuple[list[str], list[float]] | None:
    """(keys, values) of the numeric pairs of a metrics dict line (see :func:`parse_dict_record`)."""
    rec = parse_dict_record(text)
    return None if rec is None else (rec[0], rec[1])


# ---------------------------------------------------------------------- step lines

_STEP_HEAD = re.compile(
    r"(?<![\w/.\-])(?:global[_ ]step|step|iter(?:ation)?)\s*+(?:[:=#]\s*+)?(\d{1,12})(?:\s*/\s*(\d{1,12}))?(?![\w.])",
    re.IGNORECASE,
)
# A key and its value may each be quoted, as a dict's repr prints them on PaddleDetection 1.x step lines
# ("iter: 20, lr: 0.000085, 'loss': 'nan', eta: ..."; PaddleDetection#5337, #1946).
# Paddle's stats logger pads every value with '{:x<6f}': a non-finite one prints as "nanxxx" / "-infxx"
# (PaddleOCR "CTCLoss: nanxxx, loss: nanxxx"; PaddleOCR#7057); the fill is no part of the number.
_STEP_KV = re.compile(
    r"([A-Za-z][\w/.\-]*(?: [A-Za-z][\w/\-]*)?)['\"]?(?:\s*[:=]\s*|\s+)['\"]?"
    r"([-+]?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+|(?:nan|NaN|inf|Inf)(?:x{1,3})?))"
    r"(ms|us|µs|min|s|m|h|%)?(?![\w.])"
)
_LETTER = re.compile(r"[A-Za-z]")
_KEY_RUN = re.compile(r"[\w/.\-]*")
_KEY_FIRST = re.compile(r"[A-Za-z_]")
_TIME_UNITS = {"ms": 1e-3, "us": 1e-6, "µs": 1e-6, "s": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0}
_NOT_TAGS = frozenset({"step", "iter", "iteration", "global_step", "global step", "epoch step", "eta"})
# mmengine (``Iter(train) [  10/5000]``, ``Epoch(train)  [2][ 50/500]``), mmcv 1.x runners
# (``Epoch [1][50/7330]``, ``Iter [50/5000]``) and the PyTorch ImageNet example
# (``Epoch: [0][  10/5005]``). val/test loops are not training steps.
_MM_HEAD = re.compile(
    r"(?<![\w])(?P<kind>Iter|Epoch)(?:\((?P<mode>\w+)\))?(?P<colon>:)?\s*"
    r"\[\s*(?P<a>\d{1,12})\s*(?:/\s*(?P<at>\d{1,12})\s*)?\]"
    r"(?:\s*\[\s*(?P<b>\d{1,12})\s*/\s*(?P<bt>\d{1,12})\s*\])?"
)
# An epoch counter on a step line ("epoch 2 | step 10/50", "Ep_3"): integers only
# ("'epoch': 0.52" is progress, not a counter).
_EPOCH_COUNTER = re.compile(r"(?i)(?<![a-z])ep(?:och)?[\s_:=#\[-]*(\d{1,9})(?![\d.])")


@dataclass(frozen=True)
class StepLine:
    step: int
    total: int | None
    values: tuple[tuple[str, float], ...]
    epoch: int | None = None  # an epoch counter printed on the line: ``step`` may restart each epoch


def _kv_matches(text: str, start: int, rx: re.Pattern[str] | None = None,
                first: re.Pattern[str] = _LETTER) -> Iterator[re.Match[str]]:
    """What ``rx.finditer(text, start)`` finds (``_STEP_KV``; ``_POSTFIX_KV`` with ``first``
    ``_KEY_FIRST``: the same argument holds), in linear time.

    A key's first word runs to the end of its run of key characters (``[\\w/.\\-]``: what
    follows must be a blank, ``:`` or ``=``), so a key that fails at the run's first letter
    fails at each later letter too: the search skips the run instead of retrying at every
    letter (finditer's retries made a 64 KB word quadratic: issue 14)."""
    pos, rx = start, rx or _STEP_KV
    while (lm := first.search(text, pos)) is not None:
        km = rx.match(text, lm.start())
        if km is not None:
            yield km
            pos = km.end()
        else:
            run = _KEY_RUN.match(text, lm.start())
            pos = run.end() if run is not None else lm.end()


def _is_tag(key: str) -> bool:
    # the same few keys on every step line of a file: decided once each (a hostile 64 KB "key" is not
    # kept: 4,096 of them would hold 256 MB)
    return _short_key_is_tag(key) if len(key) <= 64 else _key_is_tag(key)


def _key_is_tag(key: str) -> bool:
    return not (key.lower() in _NOT_TAGS or SOURCE_FILE.search(key))


_short_key_is_tag = lru_cache(maxsize=4096)(_key_is_tag)


def _values(text: str, start: int) -> list[tuple[str, float]]:
    values = []
    for km in _kv_matches(text, start):
        key = km.group(1).strip()
        if not _is_tag(key):
            continue
        raw = km.group(2).replace(",", "").rstrip("x")
        try:
            v = float(raw)
        except ValueError:
            continue
        unit = km.group(3)
        if unit in _TIME_UNITS and not math.isnan(v):
            v *= _TIME_UNITS[unit]
        values.append((key, v))
    return values


def _mm_step(m: re.Match[str]) -> tuple[int, int | None] | None:
    """(global step, planned steps) of an mmengine/mmcv head; None for val/test loops."""
    mode = m.group("mode")
    if mode is not None and mode.lower() != "train":
        return None
    a = int(m.group("a"))
    if m.group("b") is None:
        if m.group("kind") == "Epoch":
            return None  # "Epoch [3]" alone: an epoch summary, no step
        return a, int(m.group("at")) if m.group("at") else None
    b, per_epoch = int(m.group("b")), int(m.group("bt"))
    # mmengine/mmcv count epochs from 1; the PyTorch example ("Epoch: [0][...]") from 0
    done = a if m.group("colon") else max(a - 1, 0)
    total = int(m.group("at")) * per_epoch if m.group("at") else None
    return done * per_epoch + b, total if total is None or total < MAX_STEP else None


def _bare_loss(values: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """A step line's one-letter ``L`` is its loss (the objective's usual symbol: ``step=120/193 LR=4.97e-04
    L=1.2165 mfm=0.0026``) when no other key of the line names a loss."""
    if not any(k == "L" for k, _ in values) or any("loss" in k.lower() for k, _ in values):
        return values
    return [("loss" if k == "L" else k, v) for k, v in values]


def parse_step_line(text: str) -> StepLine | None:
    """A ``step N ... name value`` training line, or None."""
    if "[" in text and ("Iter" in text or "Epoch" in text):
        mm = _MM_HEAD.search(text)
        if mm is not None:
            got = _mm_step(mm)
            if got is None or got[0] >= MAX_STEP:  # 12-digit epochs x batches: no real step
                return None
            values = _values(text, mm.end())
            # "Epoch(train) [132][3/6]": the epoch counter, for how far the run got against its
            # planned epochs (the step is global already, so it never restarts)
            epoch = int(mm.group("a")) if mm.group("kind") == "Epoch" and mm.group("b") is not None else None
            return StepLine(got[0], got[1], tuple(values), epoch) if values else None
    m = _STEP_HEAD.search(text)
    if m is None:
        return None
    values = _bare_loss(_values(text, m.end()))
    if not values:
        return None
    total = int(m.group(2)) if m.group(2) else None
    epoch = None
    if "p" in text or "P" in text:
        em = _EPOCH_COUNTER.search(text)
        if em is not None:
            epoch = int(em.group(1))
            total = None  # "epoch 2 | step 10/50": 50 is likely the epoch's length, not the run's
    return StepLine(int(m.group(1)), total, tuple(values), epoch)


class EpochStepGuard:
    """Drops the step of step lines whose counter restarts every epoch.

    A line that shows an epoch counter may carry a per-epoch batch index as its "step".
    Once the epoch goes up while the step goes down, the file's steps are not global:
    from then on they are reported as unknown (None) rather than wrong.
    """

    def __init__(self) -> None:
        self.last: tuple[int, int] | None = None
        self.per_epoch = False

    def step(self, sl: StepLine) -> int | None:
        if sl.epoch is None:
            return None if self.per_epoch else sl.step
        last, self.last = self.last, (sl.epoch, sl.step)
        if not self.per_epoch and last is not None and sl.epoch > last[0] and sl.step < last[1]:
            self.per_epoch = True
        return None if self.per_epoch else sl.step


# --------------------------------------------------------------------- progress bars

# Linear on any line (issue 14: the unguarded form took cubic time on a line of blanks and
# quadratic on runs of digits or a "[" never closed). Each change keeps the matches of ordinary
# bars (checked against the old form on random bar-shaped text):
# - a description never ends in ":" or a blank (the lazy repeat stops before them);
# - it starts at the line's start or after "|", ":", a blank or "]" (a start inside a word was
#   covered by the word's start), and is at most 128 characters: a longer one is cut at such a
#   place within its last 128, which still holds the part that names the phase ("Epoch 3",
#   "Validation");
# - an empty description is not tried inside a run of ":"/blanks, nor a count inside a run of
#   digits: the run's first character was tried already and reaches the same ends;
# - runs that only a failure could give back are possessive (``*+``, ``++``).
_BAR = re.compile(
    r"(?:(?:(?<![:\s])|(?<![^|:\s\]])(?P<desc>[^|]{0,127}?[^|:\s]))[:\s]*+(?P<pct>\d{1,3})%\|[^|]*+\|\s*)?"
    r"(?<!\d)(?P<n>\d++)(?:/(?P<total>\d++))?(?:it)?\s*\[[^\],]*+"
    r"(?:,\s*(?P<rate>\d+(?:\.\d+)?|\?)\s*(?P<unit>it/s|s/it|" + r"[A-Za-z]{1,12}/s))?(?P<post>[^\]]*+)\]"
)
# tqdm's rate in the unit the bar was given (tqdm(unit="ex"): "24700.60ex/s"; "tok/s", "samples/s"), not it/s
_CUSTOM_UNIT = re.compile(r"\d(?:\s?)[A-Za-z]{1,12}/s[,\]]")
_POSTFIX_KV = re.compile(r"([A-Za-z_][\w/.\-]*)=(" + _NUM_BAR + r")(?![\w.])")
# Lightning's bar description ("Epoch 3: 45%|...") counts epochs from 0; "Epoch 1/10" does not.
_EPOCH = re.compile(r"\bEpoch\s+(\d+)\b(?!\s*/)")
# A bar described only as the epoch loop ("Epochs", "Epoch", "Training epochs"), with no epoch number.
_EPOCHS_ONLY = re.compile(r"(?i)\W*(?:train(?:ing)?\W+)?epochs?\W*$")
# Bars that are not the training loop: loading, preprocessing, evaluation, downloads.
_NOT_TRAINING = re.compile(
    r"load|map|download|generat|token|filter|eval|valid|predict|fetch|shard|test|extract|convert"
    r"|sav|upload|resolv|process|split|sanity|infer|sampl|writ|encod|dataset|example|batches",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Bar:
    n: int
    total: int | None
    rate: float | None
    unit: str | None  # "it/s" or "s/it", or the unit the bar was given ("ex/s", "tok/s")
    epoch: int | None
    training: bool  # False for loading/eval/preprocessing bars
    postfix: tuple[tuple[str, float], ...]
    epoch_known: bool = True  # False: an epoch counter of unknown base ("train_Ep_11", "Epoch 2/10")

    @property
    def step(self) -> int | None:
        """Global step: Lightning restarts ``n`` every epoch, so add whole epochs. A bar that
        shows some other epoch counter counts batches within the epoch: the global step is
        unknown (None) rather than the per-epoch index."""
        if self.epoch is not None:
            if not self.epoch_known:
                return None
            if self.total:
                step = self.epoch * self.total + self.n
                return step if step < MAX_STEP else None
        return self.n


def _padded_nonfinite(raw: str) -> str:
    """"nan.0" -> "nan" (Lightning's padding), other numbers unchanged."""
    return raw.split(".", 1)[0] if raw[-1:] == "0" and raw.lstrip("+-")[:1] in "nNiI" else raw


def _last_bar(text: str) -> re.Match[str] | None:
    best = None
    for m in _BAR.finditer(text):
        # a count past MAX_STEP is no step: not a bar (its int64 columns could not hold it)
        if (m.group("unit") or m.group("pct") is not None) and int(m.group("n")) < MAX_STEP:
            best = m
    return best


# A bar segment is parsed twice in a row (its postfix span for the metric reader, then the bar
# itself when the scanner advances to it): the last few texts are kept. Strings hash once.
@lru_cache(maxsize=8)
def _bar_of(text: str) -> tuple[Bar | None, tuple[int, int] | None, bool]:
    """(the bar, its postfix span when the bar parser owns it, whether anything outside the bar
    and its epoch counter holds a digit: only then can the metric reader find a value there)."""
    best = _last_bar(text)
    if best is None:
        return None, None, True
    bar = _bar_from(best)
    desc = best.group("desc") or ""
    rest = text[:best.start()] + _EPOCH.sub("", desc) + text[best.end():]
    digits = any(c in rest for c in "0123456789")
    # a bar whose global step is unknown (fairseq's "epoch 001: ...", an epoch of unknown base)
    # leaves its postfix to the metric reader, which reads such lines on the epoch axis
    owned = bar.training and bar.step is not None and best.group("post")
    return bar, (best.span("post") if owned else None), digits


def parse_bar(text: str) -> Bar | None:
    """The last progress bar drawn in ``text`` (a segment), or None."""
    return _bar_of(text)[0]


def custom_unit_bar(text: str) -> Bar | None:
    """A training bar counted in a unit of its own (``tqdm(unit="ex")``: ``606000/737924 [00:25<00:05,
    24700.60ex/s, cont=nan, loss=nan]``) whose postfix holds metrics at a known step, else None.

    The scanner finds it/s bars from their rate; these it reads from the segment, postfix only: the
    rate counts examples or tokens, not steps, and is no throughput to compare across runs."""
    if "/s" not in text or _CUSTOM_UNIT.search(text) is None:
        return None
    bar, span, _ = _bar_of(text)
    if bar is None or span is None or bar.unit in (None, "it/s", "s/it") or not bar.postfix:
        return None
    return bar


def without_bar_postfix(text: str) -> str:
    """``text`` without the postfix of its training bar (``[..., 5.4it/s, loss=2.1]``), which the
    bar's own parser reads (:meth:`log_context.BlockContext._rate_points`) at the bar's global
    step: read again by the metric reader it would be a second point, at the epoch as its step."""
    span = _bar_of(text)[1]
    return text if span is None else text[:span[0]] + text[span[1]:]


def bar_only(text: str) -> bool:
    """``text`` is a training bar whose metrics are all in its postfix (nothing else holds a
    digit): the bar's parser reads it whole, and the metric reader has nothing to find."""
    _, span, digits = _bar_of(text)
    return span is not None and not digits


def _bar_from(best: re.Match[str]) -> Bar:
    desc = best.group("desc") or ""
    em = _EPOCH.search(desc)
    epoch = int(em.group(1)) if em else None
    epoch_known = True
    if em is None and ("p" in desc or "P" in desc):
        em = _EPOCH_COUNTER.search(desc)
        if em is not None:
            epoch, epoch_known = int(em.group(1)), False
    rate_s = best.group("rate")
    rate = float(rate_s) if rate_s and rate_s != "?" else None
    post = []
    for km in _kv_matches(best.group("post") or "", 0, _POSTFIX_KV, _KEY_FIRST):
        if km.group(1) == "v_num":
            continue
        try:
            post.append((km.group(1), float(_padded_nonfinite(km.group(2)))))
        except ValueError:
            continue
    desc_rest = _EPOCH.sub("", desc)
    # An outer loop over epochs (``trange(epochs, desc="Epochs")``: "Epochs:   1%| 1/126 [00:59<2:03:53,
    # 59.47s/it]") counts epochs, not steps: its total is no step plan for the inner batch bar's steps.
    training = not _NOT_TRAINING.search(desc_rest) and not _EPOCHS_ONLY.match(desc)
    total = int(best.group("total")) if best.group("total") else None
    if total is not None and total >= MAX_STEP:
        total = None
    return Bar(int(best.group("n")), total, rate, best.group("unit"), epoch, training, tuple(post), epoch_known)
