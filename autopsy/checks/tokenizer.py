"""Tokenizer rules: sequences past the model's maximum (``tokenizer.overflow``) and a
tokenizer/model vocabulary or label-id disagreement (``tokenizer.mismatch``).

Both explain the same symptom ("index out of range in self" on CPU, the
``srcIndex < srcSelectDimSize`` device-side assert on GPU), so they split it: with
length warnings (or a position-embedding frame) and no vocabulary mismatch, the index
error is overflow's; otherwise it is mismatch's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from autopsy.checks.common import (
    config_evidence,
    config_lookup,
    config_where,
    evidence_for,
    group_int,
    hit_count,
    other_rule_fired_lines,
    rank_phrase,
    ranks_of,
    recovered,
    traceback_at,
    where,
)
from autopsy.checks.tb_causes import gate_closed
from autopsy.engine.types import CheckContext
from autopsy.model import Confidence, Evidence, Finding, Severity
from autopsy.parsers.types import ConfigEntry, Hit

_POSITION_WORDS = ("position", "wpe", "pos_emb", "pos_embed")


def _after(crash: list[Hit], first_warning: Hit) -> list[Hit]:
    """Crash lines that come after the first warning (same file: by line; else by time, else kept)."""
    out = []
    for h in crash:
        if h.path == first_warning.path:
            if h.lineno > first_warning.lineno:
                out.append(h)
        elif h.wall_time is None or first_warning.wall_time is None or h.wall_time >= first_warning.wall_time:
            out.append(h)
    return out


def _position_frame(ctx: CheckContext, hit: Hit) -> bool:
    tb = traceback_at(ctx.run, hit)
    if tb is None:
        return False
    code = " ".join((f.code or "") + " " + (f.function or "") for f in tb.frames[-6:]).lower()
    return any(w in code for w in _POSITION_WORDS)


def overflow(ctx: CheckContext) -> Iterable[Finding]:
    warns = ctx.hits.get("length_warning", [])
    if not warns:
        return []
    min_after = int(ctx.params.get("progress_after_steps", 2))
    first = warns[0]
    lengths = [(group_int(h, "length") or 0, group_int(h, "max_length") or 0) for h in warns]
    worst, _ = max(lengths)
    max_len = Counter(m for _, m in lengths).most_common(1)[0][0]
    facts: dict[str, Any] = {"count": hit_count(ctx.run, ctx.card.id, ["length_warning"]) or len(warns),
                             "worst_length": worst, "max_length": max_len,
                             "over_by": worst - max_len}
    ranks = ranks_of(warns, ctx.run)
    if ranks:
        facts["ranks"] = ranks
    evidence: list[Evidence] = evidence_for(sorted(warns, key=lambda h: -(group_int(h, "length") or 0))[:3])
    crash = [h for h in [*ctx.hits.get("ctx_index_error", ()), *ctx.hits.get("ctx_src_index_assert", ())]
             if not recovered(ctx.run, h, min_after)]
    sizes = [h for h in ctx.hits.get("ctx_size_mismatch", ())
             if group_int(h, "size_b") == max_len and (group_int(h, "size_a") or 0) > max_len]
    followed = _after([*crash, *sizes], first)
    if _vocab_mismatch(ctx) is not None and not sizes:
        followed = [h for h in followed if _position_frame(ctx, h)]  # the vocabulary explains the rest
    for fact, keys in (("seq_len", ctx.params.get("seq_len_keys", ())),
                       ("max_position_embeddings", ctx.params.get("max_position_keys", ()))):
        entry = config_lookup(ctx.run, list(keys))
        if entry is not None:
            facts[fact] = entry.value
            facts[f"{fact}_source"] = config_where(entry)
            evidence.append(config_evidence(entry))
    n = facts["count"]
    base = (f"The tokenizer produced sequences longer than the model's maximum ({worst} > {max_len}, "
            f"{n} warning{'s' if n != 1 else ''}){rank_phrase(facts)} ({where(first)})")
    if followed:
        err = followed[0]
        facts["index_error"] = err.text.strip()[:200]
        if err.step is not None:
            facts["step"] = err.step
        evidence.append(Evidence(path=err.path, line=err.lineno, excerpt=err.text.strip()[:300], step=err.step,
                                 rank=err.rank, detail="the indexing error the long sequences caused"))
        msg = base + f", and it ended in an indexing error ({where(err)}): truncate to max_length={max_len}."
        return [ctx.finding(msg, key=f"overflow:{max_len}:crash", facts=facts, evidence=evidence,
                            severity=Severity.CRITICAL, confidence=Confidence.HIGH, step=err.step,
                            wall_time=err.wall_time)]
    msg = base + "; without truncation these sequences index past the position embeddings."
    return [ctx.finding(msg, key=f"overflow:{max_len}", facts=facts, evidence=evidence, step=first.step,
                        wall_time=first.wall_time)]


def _vocab_entries(ctx: CheckContext) -> tuple[ConfigEntry | None, ConfigEntry | None]:
    keys = set(ctx.params.get("vocab_keys", ("vocab_size",)))
    try:
        entries = [e for e in ctx.run.config_entries if e.key in keys and isinstance(e.value, int)
                   and not isinstance(e.value, bool) and e.value > 0]
    except Exception:  # a config-parser bug must not hide the log evidence
        return None, None
    tok = [e for e in entries if e.source == "tokenizer"]
    model = [e for e in entries if e.source == "hf_config"] or [e for e in entries if e.source != "tokenizer"]
    t = max(tok, key=lambda e: e.value) if tok else None
    m = min(model, key=lambda e: (e.path.count("/"), e.value)) if model else None
    return t, m


def _vocab_mismatch(ctx: CheckContext) -> tuple[ConfigEntry, ConfigEntry] | None:
    t, m = _vocab_entries(ctx)
    if t is not None and m is not None and t.value > m.value:
        return t, m
    return None


def mismatch(ctx: CheckContext) -> Iterable[Finding]:
    min_after = int(ctx.params.get("progress_after_steps", 2))

    def live(name: str) -> list[Hit]:
        return [h for h in ctx.hits.get(name, ()) if not recovered(ctx.run, h, min_after)]

    vocab = _vocab_mismatch(ctx)
    # A label id outside the classes is this rule's only with tokenizer / embedding evidence: the vocabulary
    # disagrees, or the frames show a tokenizer or language model (tb_causes); a class-label assert in a
    # vision model is cuda.runtime's (or crash.exception's) to report.
    labels = [h for h in live("frames_label_assert") + live("frames_target_out_of_bounds")
              if vocab is not None or not gate_closed(ctx, h)]
    index = live("index_error") + live("index_table") + live("src_index_assert")
    overflow_seen = bool(other_rule_fired_lines(ctx.run, "tokenizer.overflow"))
    if index and vocab is None and (overflow_seen or any(_position_frame(ctx, h) for h in index)):
        index = []  # long sequences (position ids), not the vocabulary: tokenizer.overflow's finding
    if not labels and not index and vocab is None:
        return []
    facts: dict[str, Any] = {}
    evidence: list[Evidence] = []
    if vocab is not None:
        t, m = vocab
        facts.update({"tokenizer_vocab_size": t.value, "model_vocab_size": m.value,
                      "tokenizer_source": config_where(t), "model_source": config_where(m)})
        evidence.extend([config_evidence(t), config_evidence(m)])
    crash = labels or index
    kind = "labels" if labels else "vocab" if vocab is not None else "index"
    facts["kind"] = kind
    if labels:
        target = group_int(labels[0], "target")
        if target is not None:
            facts["target"] = target
    lead = crash[0] if crash else None
    if lead is not None:
        for g in ("index", "table_rows"):
            value = group_int(lead, g)
            if value is not None:
                facts[g] = value
        evidence = evidence_for(crash, limit=3) + evidence
        ranks = ranks_of(crash, ctx.run)
        if ranks:
            facts["ranks"] = ranks
        if lead.step is not None:
            facts["step"] = lead.step
    if kind == "labels":
        which = f"target {facts['target']}" if "target" in facts else "n_classes assert"
        msg = (f"A label id is outside the model's classes ({which}){rank_phrase(facts)} "
               f"({where(lead)}): labels and num_labels/vocabulary disagree.") if lead else ""
    elif vocab is not None:
        t, m = vocab
        crashed = f", and token ids past the embedding crashed the run ({where(lead)})" if lead else ""
        msg = (f"The tokenizer has {t.value} tokens ({config_where(t)}) but the model embeds only {m.value} "
               f"({config_where(m)}){crashed}: resize_token_embeddings or use the matching tokenizer.")
    else:
        assert lead is not None
        msg = (f"An embedding lookup went out of range ({lead.text.strip()[:80]}){rank_phrase(facts)} "
               f"({where(lead)}): token ids exceed the model's vocabulary (tokenizer/model mismatch likely).")
    severity = Severity.CRITICAL if lead is not None else Severity.ERROR
    confidence = Confidence.HIGH if (vocab is not None or labels) else Confidence.MEDIUM
    return [ctx.finding(msg, key=f"mismatch:{kind}", facts=facts, evidence=evidence, severity=severity,
                        confidence=confidence, step=lead.step if lead else None,
                        wall_time=lead.wall_time if lead else None)]
