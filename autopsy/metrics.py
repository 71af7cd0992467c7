"""Canonical metric names for the many ways runs spell the same series.

Rules ask for ``loss`` or ``lr``; TensorBoard says ``train/loss``, trainer_state says
``loss``, nanochat says ``lrm``. ``canonical_metric`` maps a raw tag to one canonical name
(or ``None`` when the tag is not one rules know); ``split_of`` says which data split a tag
is measured on (``eval_loss`` -> "eval", ``val/acc`` -> "val", ``train_loss`` -> "train").
"""

from __future__ import annotations

import re
from functools import lru_cache

LOSS = "loss"
EVAL_LOSS = "eval_loss"
LR = "lr"
LR_MULTIPLIER = "lr_multiplier"
GRAD_NORM = "grad_norm"
THROUGHPUT = "throughput"  # samples/s, tokens/s or it/s: higher is faster
STEP_TIME = "step_time"  # seconds per step: lower is faster
DATA_TIME = "data_time"  # seconds per step spent waiting for data
LOSS_SCALE = "loss_scale"
EPOCH = "epoch"

# The loss named by what it computes: log loss (XGBoost, LightGBM, CatBoost: "logloss", "binary_logloss",
# "multi_logloss", "mlogloss", "log loss"), cross-entropy (OpenNMT "xent", Marian "cross-entropy",
# "ce-mean-words").
_LOSS_NAMES = r"(binary_|multi_|m)?logloss|log[ _]loss|xent|cross[_\- ]?entropy|ce[_\-]mean(?:[_\-]words)?"

# Order matters: the first pattern that matches the (lower-cased, prefix-stripped) tag wins.
_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), name)
    for p, name in (
        (r"^(eval|val|valid|validation|test)[_/ ]?(loss|nll|ce)$", EVAL_LOSS),
        (r"^(eval|val|validation)_?bpb$", EVAL_LOSS),
        # The loss under the names other toolkits give it, after an evaluation set's name: XGBoost
        # "eval-logloss" / xgb.cv "cv-test-logloss", LightGBM "valid_0's binary_logloss", Marian
        # "[valid] cross-entropy" / "ce-mean-words", AVSR "Val.Loss", fairseq-style "dev_loss".
        (r"^(cv[_\-])?(eval|val|valid|validation|test|dev)(_\d+)?('s)?[_/ .\-]?(" + _LOSS_NAMES + r"|loss|nll)$",
         EVAL_LOSS),
        # "ce": cross-entropy as CNTK's BrainScript names its criterion ("ce = 2.30255688 * 16000")
        (r"^(train[_/ ]?)?(loss|train_loss|total_loss|lm_loss|ce_loss|nll|ce|loss_step|loss_epoch)$", LOSS),
        # ... and after the training set's ("train-logloss", "training's multi_logloss", "Tr.Loss"),
        # or alone (OpenNMT "xent", LightGBM's old CLI "log loss").
        (r"^(cv[_\-])?((train|training|tr|trn)('s)?[_/ .\-]?)?(" + _LOSS_NAMES + r")$", LOSS),
        (r"^(cv[_\-])?(train|training|tr|trn)('s)?[_/ .\-]?(loss|nll)$", LOSS),
        (r"^(train[_/ ]?)?smooth(ed)?[_ ]?loss$", LOSS),
        # Before LR: "lr_mult" / "lr_scale" would otherwise match LR's "lr_\w+" (per-group LRs).
        (r"^(train[_/ ]?)?lr[_ ]?(m|mult|multiplier|scale|factor)$", LR_MULTIPLIER),
        (r"^(train[_/ ]?)?(learning_rate|lr|lr-\w+|lr_\w+|learning rate)$", LR),
        (r"^(train[_/ ]?)?(grad_norm|gradient_norm|grad-norm|gnorm|total_norm|grad norm)$", GRAD_NORM),
        (r"^(train[_/ ]?)?(samples_per_second|train_samples_per_second|tokens_per_second|tok/s|tokens/s|it/s"
         r"|samples/s|tok_per_sec|throughput|tok/sec|tokens/sec|samples/sec|tokens_per_sec)$", THROUGHPUT),
        # "time": mmengine/MMDetection's per-iteration seconds ("time: 1.0199  data_time: 0.8144").
        (r"^(train[_/ ]?)?(step_time|s/it|time_per_step|iter_time|dt|batch_time|elapsed_per_step|time)$", STEP_TIME),
        (r"^(train[_/ ]?)?(data_time|data_wait|dataloader_time|data)$", DATA_TIME),
        (r"^(loss_scale|scale|grad_scale)$", LOSS_SCALE),
        (r"^epoch$", EPOCH),
    )
)
_PREFIX = re.compile(r"^(train|training|trainer|metrics|charts|scalars)[/.]")
# Chainer's Reporter names a value by the link that reported it: "main/" is the model under training
# ("main/loss"), and an Evaluator prefixes its own name ("validation/main/loss"); ESPnet1 and ChainerRL log
# through it too. The link name is dropped, the evaluator's kept: "loss", "validation/loss".
_CHAINER_LINK = re.compile(r"^((?:validation|val|eval|test)/)?main/(?=\w)")
_AGGREGATE = re.compile(r"^(mean|avg|average|averaged)[ _](?=\w)")
# ... also after the split it was measured on: "val_average loss" (a split-stated line's "average loss",
# torchaudio's {"name": "validation", "average loss": ...}), "validation mean loss"
_SPLIT_AGGREGATE = re.compile(r"^((?:eval|val|valid|validation|test|train|training)[_/ ])(?:mean|avg|average|averaged)"
                              r"[ _](?=\w)")


@lru_cache(maxsize=4096)
def canonical_metric(tag: str) -> str | None:
    """The canonical metric of a raw tag (``train/learning_rate`` -> ``lr``), or None."""
    t = tag.strip().lower()
    if not t:
        return None
    stripped = _PREFIX.sub("", _CHAINER_LINK.sub(r"\1", t))
    # an aggregate over the epoch's batches names the same metric ("Mean Training loss", "average loss")
    mean = _SPLIT_AGGREGATE.sub(r"\1", _AGGREGATE.sub("", stripped))
    for candidate in (t, stripped, stripped.replace("/", "_"), mean):
        for pattern, name in _RULES:
            if pattern.match(candidate):
                return name
    return None


TRAIN, EVAL, VAL, TEST = "train", "eval", "val", "test"
SPLITS = (TRAIN, EVAL, VAL, TEST)
_SPLIT_WORDS = {
    "train": TRAIN, "training": TRAIN, "trn": TRAIN, "tr": TRAIN,  # AVSR "Tr.Loss"
    "eval": EVAL, "evaluation": EVAL, "evaluate": EVAL,
    "val": VAL, "valid": VAL, "validation": VAL, "validate": VAL, "dev": VAL,
    "test": TEST, "testing": TEST, "tst": TEST,
}
_WORDS = re.compile(r"[a-z]+")
# "cv": xgb.cv's fold mean ("cv-test-logloss")
_CONTAINERS = frozenset({"metrics", "charts", "scalars", "epoch", "step", "iter", "loss", "mean", "avg", "cv"})


@lru_cache(maxsize=4096)
def split_of(tag: str) -> str:
    """The data split a tag names, one of :data:`SPLITS`, or "" when the tag does not say.

    The split is a whole word of the tag's first component or its last one (after container
    prefixes such as ``metrics/``): ``eval_loss``, ``val/acc``, ``loss/val``, ``test_accuracy``,
    ``train_loss_epoch``, ``valid_nll`` (Lightning, Keras ``val_loss``, HF ``eval_*``/``test_*``,
    TensorBoard ``eval/loss``). Words inside other words do not count (``latest``, ``interval``).
    """
    words = _WORDS.findall(tag.lower())
    if not words:
        return ""
    lead = [w for w in words[:3] if w not in _CONTAINERS]
    for w in (lead[0] if lead else "", words[-1]):
        got = _SPLIT_WORDS.get(w)
        if got is not None:
            return got
    return ""
