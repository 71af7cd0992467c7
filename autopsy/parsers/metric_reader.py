"""The open-world text metric reader: known styles first, then a file's own recurring templates.

Two layers (DESIGN.md, "Reading the open world"):

* **Known styles** (:mod:`metric_styles`, declared in ``metric_styles.yaml``): Keras, HF
  ``***** eval metrics *****`` blocks, W&B ``Run summary:``, Caffe, fairseq, Megatron, YOLO
  tables, ``Epoch [3/10], Step [100/600]``... Their anchors are literals the log scanner
  searches for; a block or table style keeps the scanner reading every line until it closes.
* **Learnt templates**: :meth:`MetricReader.learn` reads the head of a file (up to
  ``LEARN_LINES`` lines / ``LEARN_BYTES``), masks every number, groups lines by the template
  left, and keeps a template that recurs (the same loss every epoch is a plateau, not a banner) and whose keys look like
  metrics (:func:`metric_like`): a style nobody listed is read as a series family. Each kept
  template gives the scanner one anchor (its longest metric-like key).

Besides those, a line with a step axis (``step``/``iter``/``epoch``..., a leading ``[N]`` round)
or a stated split (``Validation:``, ``Test set:``, a key naming a split's loss: ``Training loss=``)
and a metric-like key is read once. A line that looks like
a configuration dump (several ``key=text`` settings, ``Namespace(``) never is, and neither are
timestamps, versions, paths or progress-bar counters (masked by :mod:`metric_values`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from autopsy.metrics import DATA_TIME, EVAL_LOSS, LOSS, STEP_TIME, canonical_metric, split_of
from autopsy.parsers.metric_styles import Style, styles, vanished_keys
from autopsy.parsers.metric_values import (
    _BARE,
    _PROSE,
    clean_key,
    is_setting_key,
    is_step_key,
    mask,
    pairs,
    settings_dict_head,
    split_word,
    step_of,
    to_float,
    with_split,
)

LEARN_LINES = 4000
LEARN_BYTES = 1 << 20
MIN_REPEATS = 2
MAX_TEMPLATES = 16
TABLE_PATIENCE = 400  # lines without a row before a table style stops reading every line

_METRIC_WORD = re.compile(
    r"(?i)loss|acc|ppl|perplex|bleu|(?<![a-z])f1|auc|(?<![a-z])map|iou|error|score|reward|return|(?<![a-z])lr(?![a-z])"
    r"|learning.rate|norm|precision|recall|(?<![a-z])[wc]er(?![a-z])|rouge|(?<![a-z])kl(?![a-z])|entropy|nll|mse|mae"
    r"|dice|top-?[15]|psnr|ssim|(?<![a-z])fid(?![a-z])|bpb|bpc|xent|(?<![a-z])ce(?![a-z])"
)
# A loss named with a timing word ("target/runtime_xent", Neural Monkey's loss on the runtime decoder): a loss.
_LOSS_NAME = re.compile(r"(?i)loss|xent|nll|entropy")
# "key=text" settings, found from their "=" (see _settings): a key searched from every offset,
# "[\w.]+=...", took quadratic time on a 64 KB word (issue 14).
_CONFIG_EQ = re.compile(r"(?<=[\w.])=(?:['\"]|True\b|False\b|None\b|[A-Za-z])")
# settings, not measurements: a line assigning one of these is a configuration line
# (fairseq's "num_updates=371" on every line is its step counter, not a setting)
_CONFIG_KEY = re.compile(r"(?i)(?<![\w/])(?:max_|min_|num_|n_)(?!(?:updates|iter)\s*[=:])\w+\s*[=:]"
                         r"|(?<![\w/])(?:warmup\w*|schedul\w*|vocab\w*"
                         r"|seed|batch_size|epochs|hidden_size|d_model|params)\s*[=:]"
                         # the run's plan written "key value" ("... batch 8192, lr 0.05, max_steps 120"):
                         # a header, whose "batch 8192" is the batch size, not a position
                         r"|(?<![\w/])(?:max_(?:steps|iters?|epochs?)|num_(?:train_)?(?:steps|epochs)|total_steps)"
                         r"\s+\d")
# A number with a time or percent unit glued to it is a number too ("epochTime=24.2631s", "time = 1.9488s",
# CNTK): left unmasked, every line of such a file had its own template and none was learnt.
_NUMBERS = re.compile(r"(?<![A-Za-z_])" + _BARE + r"(?:ms|us|µs|min|s|%)?(?![A-Za-z_])")
# nouns naming a thing, not a measurement of it: "loss scaler 0" is the scaler's index, "VALID SET 0" the set's
_OBJECTS = frozenset({"scaler", "scheduler", "optimizer", "id", "idx", "index", "group", "rank", "fn", "function",
                      "set"})
_RANK_LABEL = re.compile(r"^(?:\[#\]|#:)\s+")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# A checkpoint loaded back states the epoch and loss it was saved at ("[Checkpoint] Loaded <- best_model.pth
# (epoch=20, val_loss=1.0521)", printed after training to evaluate the best model): history, not a step.
_RELOAD = re.compile(r"(?i)\b(?:(?:re)?loaded|restored|loading|restoring)\b.{0,200}?(?:checkpoint|ckpt|weights|model)")
# A split's loss named on a line that states no step ("Training loss=inf avg_cer=0.37", "Test loss: 0.31"):
# the scanner hands such lines over even when no template or style knows them (see _split_loss).
SPLIT_LOSS_ANCHORS = (b"rain loss", b"raining loss", b"alidation loss", b"alid loss", b"val loss", b"val_loss",
                      b"eval loss", b"eval_loss", b"est loss", b"test_loss")


@lru_cache(maxsize=4096)  # a log repeats its keys on every line
def metric_like(key: str) -> bool:
    """Does a key name a measured quantity (loss, accuracy, lr, a norm, a score...)? Not prose
    around a number ("reducing loss scale to", "Skipping step. Attempted loss scale") nor a
    bare split word ("Testing: 50%")."""
    words = key.lower().split()
    bare_split = len(words) == 1 and words[0].isalpha() and split_of(words[0]) != ""
    if not words or words[-1] in _PROSE or words[-1] in _OBJECTS or ". " in key or bare_split:
        return False
    return canonical_metric(key) is not None or bool(_METRIC_WORD.search(key)) or split_of(key) != ""


@lru_cache(maxsize=4096)
def timing_key(key: str) -> bool:
    """Seconds and clocks (``time``, ``data``, ``eta``, ``wall``): what they time is a style's
    knowledge (per step? since the start?), so the generic reader leaves them out. A key naming a loss is no
    clock, whatever word it carries ("target/runtime_xent")."""
    low = key.lower()
    if _LOSS_NAME.search(low):
        return False
    return canonical_metric(key) in (STEP_TIME, DATA_TIME) or any(w in low for w in ("time", "eta", "wall"))


def _settings(text: str) -> int:
    """How many ``key=text`` settings ``text`` holds, up to 2: the count of the non-overlapping
    matches of ``[\\w.]+=(?:['"]|True\\b|False\\b|None\\b|[A-Za-z])`` from left to right, read
    from each "=": one counts when the character before it is a key character that the previous
    setting did not take (its value may end right before the "=": "a=b=c" is one setting)."""
    count = end = 0
    for m in _CONFIG_EQ.finditer(text):
        if m.start() > end:
            count += 1
            end = m.end()
            if count == 2:
                break
    return count


def config_like(text: str) -> bool:
    """A configuration line: ``Namespace(``, two or more ``key=text``/``key=True`` settings, or a dict
    introduced as settings (``config: {...}``)."""
    if "Namespace(" in text or _settings(text) >= 2 or _CONFIG_KEY.search(text):
        return True
    brace = text.find("{")
    return brace > 0 and settings_dict_head(text, brace)


def template(text: str) -> str:
    """The line with its numbers (after masking timestamps etc.) replaced by ``#``."""
    # a launcher's rank label ("[3] ", "3: ") is stripped by the scanner before reading, not before learning
    return _RANK_LABEL.sub("", _NUMBERS.sub("#", mask(text)).strip())


@dataclass(frozen=True)
class Reading:
    """What one line gave: tags and values, the step axis (None: not on the line), the split."""

    values: tuple[tuple[str, float], ...]
    step: int | None
    split: str
    style: str  # a known style's name, "template" or "generic"
    step_total: int | None = None
    epoch_total: int | None = None
    epoch: int | None = None  # the epoch the line states (as printed), for the run's planned-epochs check


def within_epoch(epoch: int, epoch_total: int | None, step: int, step_total: int) -> bool:
    """Does ``step``/``step_total`` on a line that also states ``epoch`` count batches of that epoch?

    mmcv/mmengine (``Epoch [198/200] Iter [454/1487]``), the PyTorch examples (``Epoch [3/10], Step
    [100/600]``), YOLOv4-pytorch (``Epoch:[ 26/50],step:[42640/44640]``) and fairseq (``epoch 001:
    100 / 500``) all print the batch index within the epoch and the epoch's length. A global step
    beside an epoch counter sits where the epoch does in the run (``step/step_total`` within one
    epoch of ``epoch/epoch_total``): only then is it kept as global. Without a planned epoch
    count the ``N/M`` beside an epoch is read as the epoch's length, as the step-line parser does.
    """
    if epoch_total is None or epoch_total <= 0 or step_total <= 0:
        return True
    frac = step / step_total
    return not ((epoch - 1) / epoch_total - 1e-9 <= frac <= (epoch + 1) / epoch_total + 1e-9)


@lru_cache(maxsize=64)
def _any_anchor(anchors: tuple[str, ...]) -> Callable[[str], bool]:
    """Whether a text holds one of ``anchors`` (plain substrings), as one compiled search."""
    if not anchors:
        return lambda text: False
    rx = re.compile("|".join(re.escape(a) for a in sorted(set(anchors), key=len, reverse=True)))
    return lambda text: rx.search(text) is not None


class MetricReader:
    """Reads metric lines of one log; holds its learnt templates and the open block/table/epoch."""

    def __init__(self, known: tuple[Style, ...] | None = None) -> None:
        self.known = styles() if known is None else known
        self.enabled = self.known  # styles whose anchors the scanner searches for
        # (enabled, the enabled styles that can claim a step line): claims() runs on every step line
        self._claimers: tuple[tuple[Style, ...] | None, tuple[tuple[tuple[str, ...], re.Pattern[str]], ...],
                              Callable[[str], bool]] = (None, (), _any_anchor(()))
        self.templates: dict[str, tuple[str, ...]] = {}  # template -> its metric keys
        self.epoch: int | None = None  # from the last context line (Keras "Epoch 3/10")
        self.epoch_total: int | None = None  # the largest planned epoch count seen
        self.last_epoch: int | None = None  # the epoch of the last reading that stated one
        self.per_epoch = False  # a line's "N/M" beside its epoch was seen to count the epoch's batches
        # the last epoch-relative batch (epoch, n, of, printing cadence): is that epoch's loop unfinished?
        self.batch: tuple[int, int, int, int] | None = None
        self.block: tuple[Style, str] | None = None  # open block style and its split
        self.table: tuple[Style, list[str]] | None = None
        self.table_idle = 0
        self.wrap_step: int | None = None  # a wrapped style's step (its opener's), for its rows
        self.wrap_key: str | None = None  # a key whose value wrapped onto the next row
        self.key_after: dict[str, str] = {}  # a style's dropped key -> the key printed after it (vanished_keys)

    # ------------------------------------------------------------------ learning

    def learn(self, head: bytes, *, whole: bool) -> None:
        """Learn the templates of ``head``; ``whole``: the file is small enough that every style's
        anchors are searched for, else only those the head shows (the 1 GB logs stay fast)."""
        counts: dict[str, int] = {}
        first: dict[str, str] = {}
        for raw in head[:LEARN_BYTES].split(b"\n", LEARN_LINES)[:LEARN_LINES]:
            seg = raw.rsplit(b"\r", 1)[-1] if b"\r" in raw else raw
            if len(seg) > 400 or seg[:1] == b"{" or b"it/s" in seg or b"s/it" in seg:
                continue
            text = seg.decode("utf-8", "replace")
            if "\x1b" in text:
                text = _ANSI.sub("", text)
            if not any(c.isdigit() for c in text) or config_like(text):
                continue
            t = template(text)
            if "#" not in t:
                continue
            counts[t] = counts.get(t, 0) + 1
            if counts[t] == 1:
                first[t] = text
        for t, n in sorted(counts.items(), key=lambda kv: -kv[1]):
            if n < MIN_REPEATS or len(self.templates) >= MAX_TEMPLATES:
                continue
            keys = tuple(k for k, _ in pairs(first[t]) if metric_like(k) and not is_step_key(k))
            if keys:
                self.templates[t] = keys
        if not whole:
            self.enabled = tuple(s for s in self.known if any(a.encode() in head for a in s.anchors))

    def anchors(self) -> list[bytes]:
        """Literals whose lines the scanner must hand to :meth:`read`."""
        out = {a.encode() for s in self.enabled for a in s.anchors} | set(SPLIT_LOSS_ANCHORS)
        for keys in self.templates.values():
            out.add(max(keys, key=len).encode())
        return sorted(out)

    @property
    def active(self) -> bool:
        """A block or table is open: every line must be handed over until it closes."""
        return self.block is not None or self.table is not None

    @property
    def epoch_unfinished(self) -> bool:
        """The last epoch-relative batch printed leaves its epoch's loop unfinished: the next print
        (at the file's own cadence, ``Step [200/390]`` after ``[100/390]``) would still be in it."""
        return self.batch is not None and self.batch[0] == self.last_epoch and \
            self.batch[1] + self.batch[3] < self.batch[2]

    # ------------------------------------------------------------------ reading

    def _place(self, epoch: int | None, epoch_total: int | None, step: int | None,
               step_total: int | None) -> tuple[int | None, int | None]:
        """(step, planned steps) of a line: a batch index within an epoch becomes a global step
        (``epoch * step_total + step``, the epoch as printed: a constant shift for a 1-based count)
        whose planned total is unknown (the run's length is then ``epoch_total`` epochs). Once a
        file's lines are seen to count within the epoch they all do (in the last epoch the two
        readings agree)."""
        if epoch is None or step is None or not step_total:
            return step, step_total
        if self.per_epoch or within_epoch(epoch, epoch_total, step, step_total):
            self.per_epoch = True
            prev = self.batch
            cadence = step - prev[1] if prev is not None and prev[0] == epoch and step > prev[1] else \
                (prev[3] if prev is not None else 1)
            self.batch = (epoch, step, step_total, cadence)
            return epoch * step_total + step, None
        return step, step_total

    def claims(self, text: str) -> bool:
        """Does a known style that knows more than the line's ``key value`` pairs read this line? One that
        names its own values (``v_<tag>`` groups: VSE++'s ``Le`` is its loss) or reads a value from its
        absence (Megatron's vanished NaN loss, ``dropped_when_not_positive``): the step-line parser
        leaves the line to it."""
        enabled = self.enabled
        if self._claimers[0] is not enabled:  # ``enabled`` is reassigned by learn() and by the parallel scan
            claimers = tuple((s.anchors, s.match) for s in enabled if s.match is not None
                             and (s.value_groups or s.dropped_keys is not None))
            self._claimers = (enabled, claimers, _any_anchor(tuple(a for anchors, _ in claimers for a in anchors)))
        # one search for any claimer's anchor first: it runs on every step line, where none is the rule
        if not self._claimers[2](text):
            return False
        return any(any(a in text for a in anchors) and match.search(text) is not None
                   for anchors, match in self._claimers[1])

    def read(self, text: str) -> Reading | None:
        """The metrics of one line (already cleaned), or None."""
        if self.block is not None:
            got = self._block_row(text)
            if got is not False:
                return got if isinstance(got, Reading) else None
        if self.table is not None:
            got = self._table_row(text)
            if got is not None:
                return got
        for style in self.enabled:
            if any(a in text for a in style.anchors):
                r = self._style(style, text)
                if r is not False:
                    return r if isinstance(r, Reading) else None
        return self._generic(text)

    def _style(self, style: Style, text: str) -> Reading | bool | None:
        """A reading, None (the style took the line, nothing to read) or False (not this style)."""
        if style.kind in ("block", "table", "wrapped"):
            assert style.opener is not None
            m = style.opener.search(text)
            if m is None:
                return False
            if style.kind == "wrapped":
                return self._wrapped_opener(style, m)
            if style.kind == "block":
                self.block = (style, _split_name(m.groupdict().get("split") or style.split))
            else:
                self.table, self.table_idle = (style, _header_columns(m.group("columns"))), 0
            return None
        assert style.match is not None
        m = style.match.search(text)
        if m is None:
            return False
        g = {k: v for k, v in m.groupdict().items() if v is not None}
        if "epoch_total" in g:
            self.epoch_total = max(self.epoch_total or 0, int(g["epoch_total"]))
        if style.kind == "context":
            self.epoch = self.last_epoch = int(g["epoch"])
            return None
        body = g.get("body") or g.get("body2") or text
        split = _split_name(g.get("split") or style.split) or split_word(text)
        epoch = int(g["epoch"]) if "epoch" in g else (self.epoch if style.axis == "epoch" else None)
        step_total = int(g["step_total"]) if "step_total" in g else None
        step = int(g["step"]) if "step" in g and style.axis != "epoch" else None
        if step is not None and step_total is None and float(g.get("epoch_pct") or 0) > 0:
            step_total = round(step * 100 / float(g["epoch_pct"]))  # CNTK "Minibatch[1001-1500, 80.00%]": 1875
        if step is not None:
            step, step_total = self._place(epoch, int(g["epoch_total"]) if "epoch_total" in g else self.epoch_total,
                                      step, step_total)
        elif style.axis != "order":
            step = epoch
            if epoch is not None and self.per_epoch and self.batch is not None and self.batch[0] == epoch:
                step = epoch * self.batch[2] + self.batch[2]  # an epoch's summary after its batches: at its end

        values = ([(k, v) for k, v in pairs(body) if not is_step_key(k) and not is_setting_key(k)]
                  if style.reads_pairs else [])
        for group in style.value_groups:  # values printed before their names, or glued to the next word
            v = to_float(g[group]) if group in g else None
            if v is not None:
                values.append((group[2:], v))
        values += vanished_keys(style, values, self.key_after)
        if not values:
            return None
        if epoch is not None and split in ("", "train"):
            self.last_epoch = epoch
        return Reading(_tagged(values, split), step, split, style.name, step_total, self.epoch_total, epoch)

    def _wrapped_opener(self, style: Style, m: re.Match[str]) -> Reading | None:
        """A progress line whose ``key: value`` metrics continue on the indented rows under it
        (Rich wraps its metrics column): the step is the opener's, kept for the rows."""
        g = m.groupdict()
        step = None
        if g.get("epoch") and g.get("n") and g.get("total"):
            step = int(g["epoch"]) * int(g["total"]) + int(g["n"])
        self.block, self.wrap_step, self.wrap_key = (style, style.split), step, None
        values = self._wrapped_pairs(g.get("body") or "")
        return Reading(_tagged(values, style.split), step, style.split, style.name) if values else None

    def _wrapped_pairs(self, text: str) -> list[tuple[str, float]]:
        """``key: value`` tokens, a key's value possibly on the next row."""
        out = []
        for tok in text.split():
            if tok.endswith(":") and len(tok) > 1:
                self.wrap_key = clean_key(tok[:-1])
                continue
            key, self.wrap_key = self.wrap_key, None
            v = to_float(tok)
            if key and v is not None and metric_like(key) and not is_step_key(key):
                out.append((key, v))
        return out

    def _block_row(self, text: str) -> Reading | bool | None:
        assert self.block is not None
        style, split = self.block
        assert style.row is not None
        m = style.row.match(text)
        if m is None:
            self.block = None
            return False
        if style.kind == "wrapped":
            values = self._wrapped_pairs(m.group("rest"))
            return Reading(_tagged(values, split), self.wrap_step, split, style.name) if values else None
        v = to_float(m.group("value"))
        key = clean_key(m.group("key"))
        if v is None or is_step_key(key) or key.endswith(("_step", "/step")):
            return None
        if _CONFIG_KEY.match(key + "="):  # a summary's settings and counts ("wandb: n_params 24627840")
            return None
        return Reading(_tagged([(key, v)], split), None, split, style.name)

    def _table_row(self, text: str) -> Reading | None:
        assert self.table is not None
        style, columns = self.table
        assert style.row is not None
        m = style.row.match(text)
        if m is None:
            self.table_idle += 1
            if self.table_idle > TABLE_PATIENCE:
                self.table = None
            return None
        self.table_idle = 0
        if m.groupdict().get("epoch_total"):  # ultralytics "1/100"; fastai prints the epoch alone
            self.epoch_total = max(self.epoch_total or 0, int(m.group("epoch_total")))
        values = []
        for col, cell in zip(columns, m.group("cells").split(), strict=False):
            v = to_float(cell)
            if v is not None:
                values.append((col, v))
        if not values:
            return None
        self.last_epoch = int(m.group("epoch"))
        return Reading(tuple(values), self.last_epoch, "", style.name, None, self.epoch_total, self.last_epoch)

    def _generic(self, text: str) -> Reading | None:
        if not any(c.isdigit() for c in text) and "nan" not in text.lower() and "inf" not in text.lower():
            return None
        if config_like(text) or (("oad" in text or "estor" in text) and _RELOAD.search(text)):
            return None
        learnt = self.templates.get(template(text)) if self.templates else None
        pos = step_of(text)
        split = split_word(text)
        found = [(k, v) for k, v in pairs(text)
                 if not is_step_key(k) and not _ends_in_step_word(k) and metric_like(k) and not timing_key(k)]
        if not found:
            return None
        if learnt is None and pos.step is None and pos.epoch is None and not split \
                and ("{" in text or not any(_split_loss(k) for k, _ in found)):
            return None  # (a dict's keys are the dict readers' to judge: fairseq's JSON epoch stats)
        if pos.epoch_total:
            self.epoch_total = max(self.epoch_total or 0, pos.epoch_total)
        step, step_total = self._place(pos.epoch, pos.epoch_total or self.epoch_total, pos.step, pos.step_total)
        if step is None:
            step = pos.epoch
        if pos.epoch is not None and split in ("", "train"):
            self.last_epoch = pos.epoch
        return Reading(_tagged(found, split), step, split, "template" if learnt is not None else "generic",
                       step_total, self.epoch_total, pos.epoch)


# A table header naming a split's loss in two words (early fastai 1.0: "epoch train loss valid loss accuracy_thresh
# f2_opt"): one column, as the row has one cell for it.
_TWO_WORD_COLUMN = re.compile(r"(?i)\b(train|training|trn|valid|validation|val|test)\s+(loss)\b")


def _header_columns(header: str) -> list[str]:
    """A table header's column names."""
    return _TWO_WORD_COLUMN.sub(r"\1_\2", header).split()


_SPLITS = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val",
           "eval": "eval", "test": "test", "predict": "test"}


def _split_name(word: str) -> str:
    return _SPLITS.get(word.lower(), "") if word else ""


@lru_cache(maxsize=4096)
def _split_loss(key: str) -> bool:
    """A key naming the loss of a split ("Training loss", "val_loss", "eval-logloss"): a line stating it
    is read even without a step (DeepSpeech's one-line epoch report "Training loss=inf avg_cer=...")."""
    return split_of(key) != "" and canonical_metric(key) in (LOSS, EVAL_LOSS)


def _ends_in_step_word(key: str) -> bool:
    words = key.lower().split()
    return len(words) > 1 and is_step_key(words[-1])


def _tagged(values: list[tuple[str, float]], split: str) -> tuple[tuple[str, float], ...]:
    """Tags carry a split the line states when the key does not (``Validation: loss`` -> ``val_loss``)."""
    if not split or split == "train":
        return tuple(values)
    return tuple((with_split(k, split), v) for k, v in values)
