"""loss.nonfinite: the first NaN/Inf of every loss-like series, fp16 scaler collapse.

"Loss-like" is any series whose canonical metric is the loss or the evaluation loss, or whose
tag names a loss (``val/cls_loss``, ``loss_box_reg``, ``lm loss``, ``eval_nll``): a NaN in a
detection head's component loss or in the validation loss is as fatal as one in the total.
The training loss and the gradient norm are reported on their own (their transient rules
differ: fp16 scalers skip steps whose grad norm overflowed); every other loss-like series is
reported per split (train components vs eval/val/test), the earliest first, the rest listed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

import numpy as np

from autopsy.checks.loss_scale import ScalerPatterns, nan_stop, scale_collapse
from autopsy.checks.series import Series, fmt_value, load_series, rounded, series_at
from autopsy.engine.types import CheckContext, NotEvaluated
from autopsy.metrics import EVAL_LOSS, LOSS, LOSS_SCALE
from autopsy.model import Confidence, Evidence, Finding, Severity
from autopsy.parsers.types import Hit
from autopsy.run import Run
from autopsy.run_frames import distinct_rows

# The card's fp16 loss-scaler lines, by what each means (see autopsy.checks.loss_scale).
SCALER_PATTERNS = ScalerPatterns(
    per_skip=("apex_overflow", "deepspeed_overflow", "deepspeed_fp16_overflow", "deepspeed_overflow_detected",
              "fairseq_overflow"),
    interval=("megatron_iteration",),
    running=("deepspeed_step_report",),
    gave_up=("deepspeed_min_scale", "fairseq_min_scale"),
    labels={"apex_overflow": "apex amp", "deepspeed_overflow": "DeepSpeed", "deepspeed_fp16_overflow": "DeepSpeed",
            "deepspeed_overflow_detected": "DeepSpeed", "fairseq_overflow": "fairseq",
            "megatron_iteration": "Megatron", "deepspeed_step_report": "DeepSpeed",
            "deepspeed_min_scale": "DeepSpeed", "fairseq_min_scale": "fairseq"},
)

# A tag naming a loss: "loss" or "nll" as a word of it (not "loss_scale", "lossless", "closs_rate"); or a
# regression error, the loss a regression objective is judged by (XGBoost "train-rmse", Keras "val_mae", CNTK
# "mse"): NaN there means the predictions are NaN. Not MAPE, which is infinite by definition on a zero target.
_LOSS_WORD = re.compile(r"(?:^|[^a-z])(?:loss|losses|nll|xent|r?mse|mae)(?:$|[^a-z])")  # xent: OpenNMT, Marian
_ERROR_WORD = re.compile(r"(?:^|[^a-z])(?:r?mse|mae)(?:$|[^a-z])")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NOT_LOSS = re.compile(r"scale|scaler|weight|coef|ratio|factor|count|num_|_num|skipped")


def is_loss_like(tag: str, metric: object, errors: bool = True) -> bool:
    """True for a series that is a loss: canonical ``loss``/``eval_loss`` or a tag naming one (with ``errors``,
    a regression error too: ``rmse``, ``mse``, ``mae``)."""
    if metric in (LOSS, EVAL_LOSS):
        return True
    if isinstance(metric, str) and metric:
        return False  # canonical and not a loss (loss_scale, lr, grad_norm...)
    t = _CAMEL.sub("_", tag).lower()  # CamelCase words are words (CNTK "TrainLossPerSample", MXNet "TrainLoss")
    if not _LOSS_WORD.search(t) or _NOT_LOSS.search(t):
        return False
    return errors or not _ERROR_WORD.search(t) or bool(_LOSS_WORD.search(_ERROR_WORD.sub(" ", t)))


def loss_like_series(run: Run, skip: Iterable[tuple[str, str]] = ()) -> list[Series]:
    """Every loss-like series other than those in ``skip`` ((source, tag) pairs): one per source, tag, rank."""
    df = run.scalars
    if df.empty:
        return []
    pairs = [(str(t), m if isinstance(m, str) else None) for t, m in distinct_rows(df, ("tag", "metric"))]
    # A regression error is the loss only where nothing is called a loss: XGBoost's "train-rmse", CNTK's
    # "mse". Beside Keras' "loss" (an MSE objective) its "mae" metric is a metric, and an inf loss already
    # says what a non-finite mae would repeat.
    like = {t for t, m in pairs if is_loss_like(t, m, errors=False)} or {t for t, m in pairs if is_loss_like(t, m)}
    if not like:
        return []
    # Positions, not a filtered copy of the frame (no astype(str): a categorical compares by codes)
    at_like = np.flatnonzero(df["tag"].isin(like).to_numpy(dtype=bool))
    done = set(skip)
    out: list[Series] = []
    groups = df[["source", "tag"]].iloc[at_like].groupby(["source", "tag"], sort=True, observed=True).indices
    for (source, tag), at in groups.items():
        if (source, tag) in done:
            continue
        rows = at_like[at]
        rank = df["rank"].iloc[rows]
        no_rank = rank.isna().to_numpy(dtype=bool)
        rows = rows[no_rank] if no_rank.any() else rows[(rank == rank.min()).to_numpy(dtype=bool)]
        metric = df["metric"].iloc[int(rows[0])]
        s = series_at(str(metric) if isinstance(metric, str) else tag, df, rows)
        if s is not None:
            out.append(s)
    return out


def _split(run: Run, s: Series) -> str:
    df = run.scalars
    got = df.loc[(df["tag"] == s.tag) & (df["source"] == s.source), "split"]
    return str(got.iloc[0]) if len(got) else ""


def nonfinite(ctx: CheckContext) -> Iterable[Finding]:
    """The first NaN/Inf in the loss, in the grad norm and in every other loss-like series, a framework
    stopping on a NaN loss (TF NanTensorHook, Keras TerminateOnNaN), and an fp16 loss scaler skipping
    (almost) every step."""
    run = ctx.run
    collapse = scale_collapse(ctx, SCALER_PATTERNS)
    loss = load_series(run, LOSS)
    gnorm = load_series(run, "grad_norm")
    others = loss_like_series(run, skip=[(loss.source, loss.tag)] if loss is not None else [])
    twin = _finite_training_twin(loss, others)
    if twin is not None:  # a bare "loss" never finite beside the training loss under its own name: judge that one
        loss, others = twin, [s for s in others if s is not twin]
    # Another series of the training loss (a copy in another source, Lightning's train_loss_epoch
    # beside train_loss_step) is named on the training loss's finding when that one fires too, not
    # reported again; a copy non-finite while the judged loss is finite is reported on its own.
    loss_copies: list[str] = []
    if loss is not None and not np.isfinite(loss.values).all():
        loss_copies = _unique(s.tag for s in others
                              if s.metric == LOSS and s.tag != loss.tag and not np.isfinite(s.values).all())
        others = [s for s in others if s.metric != LOSS]
    elif loss is not None:  # a copy of the training loss in another source repeats the same values
        others = [s for s in others if s.metric != LOSS or s.source == loss.source]
    # the framework (or the job itself) stopped on a NaN loss
    stop_names = ("tf_nan_loss", "keras_terminate_nan", "jax_debug_nans", "nan_loss_abort", "nan_guard_stopped",
                  "cntk_nan_criterion")
    if loss is None and gnorm is None and not others:
        stopped = nan_stop(ctx, stop_names)
        lines = nan_lines(ctx) if not stopped else []
        if collapse or stopped or lines or any(ctx.hits.get(n) for n in SCALER_PATTERNS.labels):
            return [*collapse, *stopped, *lines]  # the scaler's / the framework's / the loss lines were read
        raise NotEvaluated(_missing(run))
    loss_ok = loss is None or bool(np.isfinite(loss.values).all())
    out: list[Finding] = list(collapse)
    for s in (loss, gnorm):
        if s is None:
            continue
        f = _judge(ctx, s, key=f"loss.nonfinite:{s.metric}", loss_ok=loss_ok,
                   also=loss_copies if s is loss else None)
        if f is not None:
            out.append(f)
    # Other loss-like series: one finding per group (train-side components, evaluation splits).
    groups: dict[str, list[tuple[Series, int]]] = {}
    for s in others:
        bad = ~np.isfinite(s.values)
        if bad.any():
            group = "eval" if _split(run, s) in ("eval", "val", "test") or s.metric == EVAL_LOSS else "components"
            groups.setdefault(group, []).append((s, int(np.argmax(bad))))
    for group, found in sorted(groups.items()):
        found.sort(key=lambda sf: (int(sf[0].steps[sf[1]]), sf[0].tag))
        first = found[0][0]  # the same tag in another source (CSV and TensorBoard) is a copy, not another series
        f = _judge(ctx, first, key=f"loss.nonfinite:{group}", loss_ok=False,
                   also=_unique(s.tag for s, _ in found[1:] if s.tag != first.tag))
        if f is not None:
            out.append(f)
    first_bad = [f.step for f in out[len(collapse):] if f.step is not None]  # the series' findings
    stopped = nan_stop(ctx, stop_names, series_step=min(first_bad) if first_bad else None)
    if len(out) == len(collapse) and not stopped:  # no series holds a non-finite point
        out.extend(nan_lines(ctx))
    out.extend(stopped)
    return out


# The whole key around a nan_loss_line match: "val/mask_loss", "'eval_test_loss'", "-----loss-----".
_KEY_BEFORE = re.compile(r"[\w/.-]*$")
_KEY_AFTER = re.compile(r"[\w/.-]*")
_INIT_INF = re.compile(r"best|min|lowest|prev|old|init")


def nan_lines(ctx: CheckContext) -> list[Finding]:
    """Lines printing a loss-named value as NaN/Inf (the card's ``nan_loss_line``) that no series holds.

    The metric reader takes no series from a one-off line (a single progress-bar frame, one eval
    dict quoted in a thread, a ``tensor(nan, device=...)`` print): a person reading it sees a NaN loss,
    so the rule reports it, with medium confidence (whether later steps were finite again is not
    known from a line). Loss-scale / weight keys are not losses, and a best/min loss printed as
    ``inf`` is the initial value of a running minimum, not a measurement. A key of which a series was
    read from the same file is left to that series' judgement (a NaN line the series kept or replaced)."""
    found: list[tuple[Hit, str, str]] = []  # (line, key, value), the first key of each line
    keys: list[str] = []
    df = ctx.run.scalars
    read = set() if df.empty else {(str(p), str(t).lower()) for p, t in distinct_rows(df, ("path", "tag"))}
    for hit in ctx.hits.get("nan_loss_line", ()):
        first = True
        for m in _NAN_LOSS.finditer(hit.text):
            key = (_KEY_BEFORE.search(hit.text[:m.start()]).group(0)  # type: ignore[union-attr]
                   + m.group("word") + _KEY_AFTER.match(hit.text, m.end("word")).group(0))  # type: ignore[union-attr]
            key = key.strip("-_./'\"")
            value = m.group("value").lower()
            if _NOT_LOSS.search(key.lower()) or ("inf" in value and _INIT_INF.search(key.lower())):
                continue
            if (hit.path, key.lower()) in read:
                continue  # a series of this key was read from this file: the series' judgement stands
            if key.lower() == "loss" and _FINITE_TRAIN_LOSS.search(hit.text):
                continue  # a bare "loss" shown as nan beside the training loss itself, finite: a display key
            keys.append(key)
            if first:
                found.append((hit, key, value))
                first = False
    if not found:
        return []
    hit, key, value = found[0]
    keys = _unique(keys)
    files = _unique(h.path for h, _, _ in found)
    value = "nan" if "nan" in value else ("-inf" if value.startswith("-") else "inf")
    facts: dict[str, object] = {"tag": key, "first_value": value, "path": hit.path, "line": hit.lineno,
                                "n_lines": len(found), "keys": keys[:20], "from_lines": True}
    if hit.step is not None:
        facts["first_step"] = hit.step
    more = (f" ({len(found)} line(s) in {', '.join(files[:3])}; keys {', '.join(keys[:5])})"
            if len(found) > 1 or len(keys) > 1 else "")
    msg = (f"{key} is printed as {value} at {hit.path}:{hit.lineno}{more}; no metric series holds these lines, "
           "so whether later steps were finite again is not known from them.")
    ev = [Evidence(path=h.path, line=h.lineno, excerpt=h.text.strip()[:300], rank=h.rank) for h, _, _ in found[:3]]
    return [ctx.finding(msg, key="loss.nonfinite:line", facts=facts, evidence=ev, confidence=Confidence.MEDIUM,
                        step=hit.step, wall_time=hit.wall_time)]


# The training loss itself under its own name, printed finite on the same line as a bare "loss=nan": NeMo's
# Megatron progress bar ("Epoch 0:   3%|| 565/20101 [2:12:19<76:15:08, 14.05s/it, loss=nan, v_num=,
# val_loss_step=11.30, reduced_train_loss=3.910, ...", neuronx-nemo-megatron#28) shows the bar's running "loss"
# as nan at every redraw while the reduced training loss is finite; components (rpn_class_loss) are no copy.
_TRAIN_LOSS_TAG = r"(?:reduced_)?train(?:ing)?_loss(?:_step)?"
_FINITE_TRAIN_LOSS = re.compile(rf"(?i)(?<![\w/.-]){_TRAIN_LOSS_TAG}\s{{0,8}}[:=]\s{{0,8}}[-+]?\d")
_TRAIN_LOSS_NAME = re.compile(rf"(?i){_TRAIN_LOSS_TAG}")


def _finite_training_twin(loss: Series | None, others: list[Series]) -> Series | None:
    """The training loss under its own name (``reduced_train_loss``, ``train_loss``), finite at every step of
    a judged ``loss`` series that is never finite and read from the same file: that ``loss`` is a display key
    (NeMo's bar), and the twin is what the run's loss was."""
    if loss is None or np.isfinite(loss.values).any():
        return None
    steps = set(loss.steps.tolist())
    return next((s for s in others if s.path == loss.path and s.tag != loss.tag and _TRAIN_LOSS_NAME.fullmatch(s.tag)
                 and bool(np.isfinite(s.values).all()) and steps <= set(s.steps.tolist())), None)


# The card's nan_loss_line regex, re-run on a hit's line to find where the key is (same shape).
_NAN_LOSS = re.compile(r"(?i)(?<![a-z])(?P<word>loss|nll)(?![a-z])[\w/.-]{0,40}['\"]?"
                       r"(?:\s{0,8}[:=]\s{0,8}|\s{0,8}(?=\[))(?:tensor\(|\[\s{0,8})?"
                       r"(?P<value>[-+]?(?:nan|inf(?:inity)?))(?![a-z])")


def _judge(ctx: CheckContext, s: Series, *, key: str, loss_ok: bool, also: list[str] | None = None) -> Finding | None:
    bad = ~np.isfinite(s.values)
    if not bad.any():
        return None
    n_before = int(ctx.param("values_before"))
    max_transient = int(ctx.param("max_transient_points"))
    first = int(np.argmax(bad))
    n_bad = int(bad.sum())
    if first == 0 and not bad[n_bad:].any() and len(s) - n_bad >= int(ctx.param("leading_placeholder_min_finite")):
        # Non-finite only in its first points, then finite for good: a placeholder printed before the first
        # update (an RL loop's "loss=nan" while its replay buffer fills, a logger's nan before any loss was
        # computed). A diverged model does not come back: its NaN weights keep the loss NaN.
        return None
    tail_ok = bool(np.isfinite(s.values[-1]))
    recovered = tail_ok and (n_bad <= max_transient or n_bad <= float(ctx.param("max_transient_fraction")) * len(s))
    # fp16/AMP: the scaler skips a step whose gradients overflowed and logs its grad norm as
    # inf/nan; when the loss stays finite and training goes on, that is the scaler working.
    # Real runs (TRL DPO logging every step) show scattered skips, 4 of 75 points, none longer
    # than a couple of steps: short isolated runs are the scaler too, not only a few points.
    if s.metric == "grad_norm" and loss_ok and tail_ok and not recovered:
        recovered = (_longest_run(bad) <= max_transient
                     and n_bad <= float(ctx.param("max_skip_fraction")) * len(s))
    if s.metric == "grad_norm" and loss_ok and recovered:
        return None
    lo = max(0, first - n_before)
    before = [[int(st), fmt_value(float(v))] for st, v in zip(s.steps[lo:first], s.values[lo:first], strict=False)]
    step = int(s.steps[first])
    value = fmt_value(float(s.values[first]))
    facts: dict[str, object] = {
        "metric": s.metric, "tag": s.tag, "source": s.source, "path": s.path,
        "first_step": step, "first_value": value, "n_nonfinite": n_bad,
        "n_points": len(s), "values_before": before, "recovered": recovered,
    }
    named = s.metric if s.metric in (LOSS, "grad_norm") else s.tag
    if s.metric not in (LOSS, "grad_norm"):  # beyond the training loss and grad norm: say which split
        split = _split(ctx.run, s) or ("eval" if s.metric == EVAL_LOSS else "")
        if split:
            facts["split"] = split
        if s.synthetic_steps:
            facts["step_is_ordinal"] = True  # the source numbers no steps: the n-th logged point
    if also:
        facts["also_nonfinite"] = also[:20]
    finite_idx = np.flatnonzero(~bad[:first])
    if finite_idx.size:
        facts["last_finite_step"] = int(s.steps[finite_idx[-1]])
        facts["last_finite_value"] = rounded(float(s.values[finite_idx[-1]]))
    scale = load_series(ctx.run, LOSS_SCALE)
    if scale is not None and len(scale.finite()):
        facts["min_loss_scale"] = rounded(float(np.min(scale.finite().values)))
    trend = ""
    if len(before) >= 2 and all(isinstance(v, float) for _, v in before):
        vals = [float(v) for _, v in before]
        if vals[-1] > 3 * max(abs(vals[0]), 1e-12):
            trend = f", after rising from {vals[0]:.4g} to {vals[-1]:.4g}"
    if recovered:
        severity = Severity.WARNING
        tail = f"; {n_bad} non-finite point(s), then finite again (transient)"
    else:
        severity = Severity.ERROR
        tail = (f"; {n_bad} of {len(s)} points are non-finite and the last one is too" if not tail_ok
                else f"; {n_bad} of {len(s)} points are non-finite")
    where = f"logged point {step}" if s.synthetic_steps and named == s.tag else f"step {step}"
    more = f"; also non-finite: {', '.join(also[:5])}" if also else ""
    msg = f"{named} became {value} at {where} ({s.where}){trend}{tail}{more}."
    ev = [s.evidence(step=int(s.steps[lo]), step_end=step,
                     excerpt=", ".join(f"step {st}: {_num(v)}" for st, v in [*before, [step, value]]))]
    return ctx.finding(msg, key=key, facts=facts, evidence=ev, severity=severity, step=step,
                       wall_time=_wall(s, first))


def _missing(run: Run) -> str:
    """What was missing, exactly: no loss-like series, and which metric series were read instead."""
    df = run.scalars
    read = sorted({str(t) for t in df["tag"].unique()})[:8] if not df.empty else []
    seen = f"; series read: {', '.join(read)}" if read else "; no metric series was read from any file"
    return ("no loss or grad_norm series found (nor an eval/validation or component loss), and no fp16 "
            f"loss-scaler lines{seen}")


def _unique(tags: Iterable[str]) -> list[str]:
    """``tags`` without repeats, in order."""
    return list(dict.fromkeys(tags))


def _longest_run(mask: np.ndarray) -> int:
    """Length of the longest run of True values in ``mask``."""
    best = cur = 0
    for v in mask.tolist():
        cur = cur + 1 if v else 0
        best = max(best, cur)
    return best


def _wall(s: Series, idx: int) -> float | None:
    w = float(s.wall_times[idx])
    return w if math.isfinite(w) else None


def _num(v: object) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    return f"{v:.4g}"
