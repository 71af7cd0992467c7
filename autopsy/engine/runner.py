"""Run every selected card against a Run; each card ends in exactly one Outcome.

* fired: it produced findings;
* not_fired: it looked and found nothing;
* not_evaluated: its inputs are absent ("no text logs found") or its check raised
  :class:`NotEvaluated` with the reason;
* rule_error: the card's code raised; the exception is caught here so one broken rule
  never hides the others, and its message is reported.
"""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from autopsy.engine.patterns import collect_hits, evaluate_match
from autopsy.engine.types import Card, CheckContext, NotEvaluated
from autopsy.model import Finding, Outcome, OutcomeKind

CheckFn = Callable[[CheckContext], Iterable[Finding]]

# What each ``needs:`` entry means, and how to say it is missing.
_MISSING = {
    "log": "no text logs found",
    "scalars": "no scalar series found (no event files, trainer_state.json log_history or logged metrics)",
    "trainer_state": "no trainer_state.json found",
    "checkpoints": "no checkpoints found",
    "config": "no config files or launch flags found",
    "tfevents": "no TensorBoard event files found",
    "artifacts": "the run directory holds no files",
}


def has_input(run: Any, need: str) -> bool:
    """Whether the run holds the input a ``needs:`` entry names (parses it on first use)."""
    if need == "log":
        return bool(run.logs)
    if need == "scalars":
        return not run.scalars.empty
    if need == "trainer_state":
        return run.trainer_state is not None
    if need == "checkpoints":
        return bool(run.checkpoint_list)
    if need == "config":
        return bool(run.config_entries)
    if need == "tfevents":
        return bool(run.tfevents)
    if need == "artifacts":
        return bool(run.discovery.artifacts)
    raise ValueError(f"unknown need {need!r}")


def missing_reason(run: Any, card: Card) -> str | None:
    """Why a card cannot be evaluated on this run, or None when it can.

    A pattern card needs logs. Otherwise ``needs:`` lists what a card reads, some of it
    optional (an OOM card cites the config when there is one), so the runner only skips
    a card when *none* of its inputs exist; a check that needs more than that raises
    :class:`NotEvaluated` with its own reason.
    """
    if card.match is not None and not has_input(run, "log"):
        # A check card reads its log hits *and* other inputs (loss.nonfinite: fp16 overflow lines
        # and the loss series): without logs it still runs on those; a pattern card cannot.
        other = [n for n in card.needs if n not in ("log", "artifacts")]
        if card.check is None or not any(has_input(run, n) for n in other):
            return _MISSING["log"]
    if not card.needs:
        return None
    if any(has_input(run, n) for n in card.needs):  # stops at the first input present
        return None
    return "; ".join(_MISSING[n] for n in card.needs)


def select_cards(cards: Iterable[Card], select: Iterable[str] | str | None = None,
                 ignore: Iterable[str] | str | None = None, *,
                 aliases: dict[str, str] | None = None) -> list[Card]:
    """Cards chosen by ``--select``/``--ignore`` (ids, aliases or families; comma lists ok).

    Raises ValueError naming a selector that matches no card, so a typo is not a silent
    "nothing fired".
    """
    pool = sorted(cards, key=lambda c: c.id)
    aliases = aliases or {}

    def resolve(selectors: Iterable[str] | str | None, what: str) -> set[str] | None:
        if selectors is None:
            return None
        items = _split(selectors)
        chosen: set[str] = set()
        for sel in items:
            sel_id = aliases.get(sel, sel)
            hit = {c.id for c in pool if c.id == sel_id or c.family == sel or sel in c.aliases}
            if not hit:
                raise ValueError(f"--{what} {sel!r} matches no rule id or family")
            chosen |= hit
        return chosen

    selected = resolve(select, "select")
    ignored = resolve(ignore, "ignore") or set()
    return [c for c in pool if (selected is None or c.id in selected) and c.id not in ignored]


def _split(selectors: Iterable[str] | str) -> list[str]:
    if isinstance(selectors, str):
        selectors = [selectors]
    return [s.strip() for item in selectors for s in item.split(",") if s.strip()]


_CHECK_CACHE: dict[str, CheckFn] = {}


def resolve_check(ref: str) -> CheckFn:
    """Import ``package.module:function``; raises ImportError/AttributeError with the ref."""
    fn = _CHECK_CACHE.get(ref)
    if fn is None:
        module_name, _, attr = ref.partition(":")
        module = importlib.import_module(module_name)
        try:
            fn = getattr(module, attr)
        except AttributeError:
            raise AttributeError(f"check {ref!r}: module {module_name} has no function {attr!r}") from None
        if not callable(fn):
            raise TypeError(f"check {ref!r} is not callable")
        _CHECK_CACHE[ref] = fn
    return fn


def evaluate_card(run: Any, card: Card) -> Outcome:
    """One card on one run, never raising (except KeyboardInterrupt and the like)."""
    try:
        reason = missing_reason(run, card)
        if reason is not None:
            return Outcome(card.id, OutcomeKind.NOT_EVALUATED, reason=reason)
        logs = run.logs if card.match is not None else []
        ctx = CheckContext(run=run, card=card, params=card.params, hits=collect_hits(card, logs))
        if card.check is not None:
            findings = list(resolve_check(card.check)(ctx))
        else:
            findings = evaluate_match(ctx, logs)
        findings = _validated(card, findings)
    except NotEvaluated as exc:
        return Outcome(card.id, OutcomeKind.NOT_EVALUATED, reason=str(exc) or "inputs missing")
    except Exception as exc:
        return Outcome(card.id, OutcomeKind.RULE_ERROR, reason=describe_error(exc))
    if not findings:
        return Outcome(card.id, OutcomeKind.NOT_FIRED)
    return Outcome(card.id, OutcomeKind.FIRED, findings=tuple(findings))


def _validated(card: Card, findings: list[Any]) -> list[Finding]:
    out = []
    for f in findings:
        if not isinstance(f, Finding):
            raise TypeError(f"check returned {type(f).__name__}, expected Finding")
        if f.rule != card.id:
            # A check that reports under another id would bypass select/ignore and precedence.
            raise ValueError(f"check returned a finding for {f.rule!r}; a card only reports its own id")
        if f.primary or f.explained_by:
            f = replace(f, primary=False, explained_by=None)  # precedence decides these
        out.append(f)
    return out


def describe_error(exc: BaseException) -> str:
    """``ValueError: bad thing (autopsy/checks/loss.py:42 in plateau)``: message and where."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames:
        last = frames[-1]
        where = f" ({_short(last.filename)}:{last.lineno} in {last.name})"
    message = str(exc).strip() or "(no message)"
    return f"{type(exc).__name__}: {message}{where}"


def _short(filename: str) -> str:
    norm = filename.replace("\\", "/")
    idx = norm.rfind("/autopsy/")
    return norm[idx + 1:] if idx >= 0 else norm.rsplit("/", 1)[-1]


def run_cards(run: Any, cards: Sequence[Card]) -> list[Outcome]:
    """Every card's outcome, in card (id) order."""
    return [evaluate_card(run, card) for card in cards]
