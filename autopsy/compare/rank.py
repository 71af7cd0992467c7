"""Turn the compared parts into ranked differences.

Score = a base per kind (how often that kind of change causes a failure) + links to the bad
run's primary finding (the finding cites the key, or the key belongs to the finding's
family) + closeness to the failure for log templates; values that vary by design (seeds,
names, paths) are damped. The weights are data below; `why` records what set each score.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from autopsy.compare.collect import RunFacts
from autopsy.compare.config_diff import ConfigChange, compare_config
from autopsy.compare.metrics import METRICS, Divergence, compare_metric
from autopsy.compare.model import Difference
from autopsy.compare.related import ENVIRONMENT_FAMILIES, METRIC_FAMILIES, related
from autopsy.compare.templates import is_progress
from autopsy.model import Finding

BASE = {"config": 0.45, "environment": 0.35, "template_before": 0.4, "template_at": 0.12, "template_gone": 0.08,
        "metric": 0.35, "throughput": 0.2, "checkpoint": 0.25, "file": 0.12, "finding": 0.2}
CITED = 0.45  # the bad run's primary finding names the key / package
FAMILY = 0.25  # the key belongs to the primary finding's family
METRIC_LINK = 0.15  # the key can move a metric that diverged
BIG_RATIO = 0.1  # a number changed by 5x or more
VARIES_DAMP = 0.25  # seeds, names, paths, ports: multiply by this
NEAR_FAILURE_LINES = 200
PROGRESS_DAMP = 0.3  # progress-bar redraws: multiply by this


def _finding_text(f: Finding) -> str:
    parts = [f.message, f.title, json.dumps(f.facts, default=str, sort_keys=True)]
    parts += [f"{e.path}:{e.line} {e.excerpt or ''} {e.detail or ''}" for e in f.evidence]
    return " ".join(parts).lower()


def _family(f: Finding | None) -> str | None:
    return f.rule.split(".", 1)[0] if f is not None else None


def _cites(f: Finding | None, change: ConfigChange) -> bool:
    """Does the finding point at this key: its location, or its name as a whole word?

    A short, common leaf (``lr``, ``config``, ``optim``) counts only by location; a
    distinctive one (``save_total_limit``, ``per_device_train_batch_size``) also by name.
    """
    if f is None:
        return False
    text = _finding_text(f)
    where = {w.lower() for w in change.bad_where + change.good_where if ":" in w}
    if any(re.search(re.escape(w) + r"(?!\d)", text) for w in where):
        return True
    names = {change.raw_key.lower().lstrip("-"), change.raw_key.rsplit(".", 1)[-1].lower().lstrip("-"),
             change.key.lower()}
    return any(("_" in n or len(n) >= 10) and re.search(r"(?<![\w.])" + re.escape(n) + r"(?![\w])", text)
               for n in names)


def config_differences(goods: Sequence[RunFacts], bad: RunFacts,
                       diverged: Sequence[Divergence]) -> tuple[list[Difference], list[dict[str, Any]]]:
    primary = bad.primary
    family = _family(primary)
    diffs, rows = [], []
    for ch in compare_config([g.config for g in goods], bad.config):
        score, why = BASE["config"], [f"config key {ch.change.replace('_', ' ')}"]
        explains = False
        if _cites(primary, ch):
            score += CITED
            explains = True
            why.append(f"cited by the primary finding ({primary.rule if primary else ''})")
        elif family and related(family, ch.raw_key):
            score += FAMILY
            explains = True
            why.append(f"can cause {family}.* failures")
        for d in diverged:
            if related(METRIC_FAMILIES.get(d.metric, ""), ch.raw_key):
                score += METRIC_LINK
                why.append(f"can move {d.metric}, which diverged at step {d.step}")
                break
        if ch.ratio is not None and (ch.ratio >= 5 or ch.ratio <= 0.2):
            score += BIG_RATIO
            why.append(f"{ch.ratio:.3g}x the good value")
        if ch.varies:
            score *= VARIES_DAMP
            explains = False
            why = ["expected to differ between runs (seed, name, path, port)"]
        key = ch.raw_key if ch.change != "moved" else f"{ch.good_key} -> {ch.raw_key}"
        diffs.append(Difference("config", key, ch.good, ch.bad, min(score, 1.0), "; ".join(why), explains,
                                ch.good_where, ch.bad_where))
        rows.append({"raw_key": key, "key": ch.key, "change": ch.change, "good": ch.good, "bad": ch.bad,
                     "good_where": ", ".join(ch.good_where), "bad_where": ", ".join(ch.bad_where),
                     "score": round(min(score, 1.0), 3)})
    return diffs, rows


def environment_differences(goods: Sequence[RunFacts], bad: RunFacts) -> tuple[list[Difference], list[dict[str, Any]]]:
    primary = bad.primary
    text = _finding_text(primary) if primary is not None else ""
    family = _family(primary)
    good_facts: dict[tuple[str, str], list[Any]] = {}
    for g in goods:
        for k, facts in g.env.items():
            good_facts.setdefault(k, []).extend(facts)
    diffs, rows = [], []
    for k in sorted(set(good_facts) | set(bad.env)):
        gv = sorted({f.value for f in good_facts.get(k, [])})
        bv = sorted({f.value for f in bad.env.get(k, [])})
        if not gv or not bv or set(bv) <= set(gv):
            continue  # one side simply does not say (absence is not a change)
        category, name = k
        score, why, explains = BASE["environment"], [f"{category} version changed"], False
        if name.lower() in text or name.replace("-", "_").lower() in text:
            score += CITED
            explains = True
            why.append(f"named by the primary finding ({primary.rule if primary else ''})")
        elif family in ENVIRONMENT_FAMILIES:
            score += FAMILY
            explains = True
            why.append(f"{family}.* failures come from the environment")
        gw = tuple(dict.fromkeys(f.where for f in good_facts[k]))[:2]
        bw = tuple(dict.fromkeys(f.where for f in bad.env[k]))[:2]
        diffs.append(Difference("environment", name, ", ".join(gv), ", ".join(bv), min(score, 1.0), "; ".join(why),
                                explains, gw, bw))
        rows.append({"name": name, "category": category, "good": ", ".join(gv), "bad": ", ".join(bv),
                     "good_where": ", ".join(gw), "bad_where": ", ".join(bw), "score": round(min(score, 1.0), 3)})
    return diffs, rows


def template_differences(goods: Sequence[RunFacts], bad: RunFacts) -> tuple[list[Difference], list[dict[str, Any]]]:
    good_templates: dict[str, Any] = {}
    for g in goods:
        for t, st in g.templates.items():
            good_templates.setdefault(t, st)
    failure = bad.failure_line()
    diffs, rows = [], []
    for t, st in bad.templates.items():
        if t in good_templates:
            continue
        before = None
        distance = None
        if bad.in_traceback(st.path, st.first_line):
            before = False  # a frame or message of a traceback: the failure itself, not a clue before it
        elif failure is not None and st.path == failure[0]:
            before = st.first_line < failure[1]
            distance = failure[1] - st.first_line if before else None
        if before:
            near = max(0.0, 1.0 - (distance or 0) / NEAR_FAILURE_LINES)
            rare = 1.0 if st.count <= 3 else 3.0 / st.count
            score = BASE["template_before"] + 0.3 * near * (0.5 + 0.5 * rare)
            why = f"new in the bad run, {distance} lines before the failure ({st.count}x)"
        elif before is False:
            score, why = BASE["template_at"], "new in the bad run, at or after the failure (the failure itself)"
        else:
            score, why = BASE["template_at"], f"new in the bad run ({st.count}x)"
        if is_progress(t):
            score *= PROGRESS_DAMP
            why += "; a progress-bar line"
        where = (f"{st.path}:{st.first_line}",)
        diffs.append(Difference("template", st.example, None, t, score, why, False, (), where))
        rows.append({"template": t, "side": "only_bad", "good_count": 0, "bad_count": st.count,
                     "bad_where": where[0], "good_where": "", "before_failure": before,
                     "lines_before_failure": distance, "score": round(score, 3)})
    for t, st in good_templates.items():
        if t in bad.templates:
            continue
        where = (f"{st.path}:{st.first_line}",)
        diffs.append(Difference("template", st.example, t, None, BASE["template_gone"],
                                f"in the good run{'s' if len(goods) > 1 else ''}, never in the bad run", False, where))
        rows.append({"template": t, "side": "only_good", "good_count": st.count, "bad_count": 0, "bad_where": "",
                     "good_where": where[0], "before_failure": None, "lines_before_failure": None,
                     "score": BASE["template_gone"]})
    return diffs, rows


def metric_differences(goods: Sequence[RunFacts], bad: RunFacts) -> tuple[list[Divergence], list[Difference],
                                                                         list[dict[str, Any]]]:
    primary = bad.primary
    family = _family(primary)
    divs, diffs, rows = [], [], []
    for metric in METRICS:
        if metric not in bad.series:
            continue
        good_series = [(g.series[metric][0], g.series[metric][1]) for g in goods if metric in g.series]
        if not good_series:
            continue
        steps, values, source = bad.series[metric]
        d = compare_metric(metric, good_series, (steps, values))
        rows.append({"metric": metric, "diverged": d.diverged, "step": d.step, "bad_value": d.bad_value,
                     "band_low": d.band_low, "band_high": d.band_high, "direction": d.direction,
                     "points_compared": d.points_compared,
                     "good_sources": ", ".join(sorted({g.series[metric][2] for g in goods if metric in g.series})),
                     "bad_source": source, "note": d.note, "score": None})
        if not d.diverged:
            continue
        divs.append(d)
        base = BASE["throughput"] if metric == "throughput" else BASE["metric"]
        score, why, explains = base, [f"left the good runs' band at step {d.step} ({d.direction})"], False
        last = bad.report.run.last_step
        if last and d.step is not None and last > 0:
            score += 0.1 * max(0.0, 1.0 - d.step / last)  # earlier divergence: more likely a cause
        if primary is not None and family in ("loss", "lr") and metric.split("_")[-1] in primary.rule:
            explains = True
            score += FAMILY
            why.append(f"the series of the primary finding ({primary.rule})")
        rows[-1]["score"] = round(min(score, 1.0), 3)
        band = f"{_num(d.band_low)} .. {_num(d.band_high)}"
        diffs.append(Difference("metric", metric, band, _num(d.bad_value), min(score, 1.0), "; ".join(why), explains,
                                (), (f"{metric}@{d.step}",), step=d.step))
    return divs, diffs, rows


def _num(v: float | None) -> str:
    if v is None:
        return "?"
    if not math.isfinite(v):
        return str(v)
    return f"{v:.4g}"


def checkpoint_differences(goods: Sequence[RunFacts], bad: RunFacts) -> tuple[list[Difference], list[dict[str, Any]]]:
    family = _family(bad.primary)
    diffs: list[Difference] = []
    rows: list[dict[str, Any]] = []
    b = bad.checkpoints
    for fact, tolerance in (("count", 0.0), ("cadence_steps", 0.0), ("median_bytes", 0.1), ("save_total_limit", 0.0)):
        gv = [g.checkpoints.get(fact) for g in goods]
        bv = b.get(fact)
        rows.append({"fact": fact, "good": ", ".join(str(v) for v in dict.fromkeys(gv)), "bad": str(bv),
                     "score": None})
        known = [v for v in gv if isinstance(v, int | float)]
        if not isinstance(bv, int | float) or not known:
            continue
        lo, hi = min(known), max(known)
        if lo * (1 - tolerance) <= bv <= hi * (1 + tolerance):
            continue
        if fact == "count" and bad.report.run.last_step is not None:
            # fewer checkpoints because the run died earlier is a symptom, not a cause
            if bv < lo:
                continue
        score, why, explains = BASE["checkpoint"], [f"checkpoint {fact.replace('_', ' ')} differs"], False
        if family in ("disk", "checkpoint"):
            score += FAMILY
            explains = True
            why.append(f"{family}.* failures depend on it")
        limit = b.get("save_total_limit")
        if fact == "count" and isinstance(limit, int) and bv > limit:
            why.append(f"more than save_total_limit={limit}")
        rows[-1]["score"] = round(min(score, 1.0), 3)
        diffs.append(Difference("checkpoint", fact, ", ".join(str(v) for v in dict.fromkeys(gv)), str(bv),
                                min(score, 1.0), "; ".join(why), explains))
    return diffs, rows


def file_differences(goods: Sequence[RunFacts], bad: RunFacts) -> list[Difference]:
    """Inputs whose size changed (data files, scripts): a coarse clue, ranked low."""
    diffs = []
    for path, (kind, size) in sorted(bad.files.items()):
        if kind in ("log", "tfevents", "trainer_state", "exit_code"):
            continue
        sizes = [g.files[path][1] for g in goods if path in g.files]
        if sizes and size not in sizes and "checkpoint" not in path:
            diffs.append(Difference("file", path, ", ".join(f"{s} B" for s in sorted(set(sizes))), f"{size} B",
                                    BASE["file"], "the file's size differs", False, (path,), (path,)))
    return diffs


def finding_differences(goods: Sequence[RunFacts], bad: RunFacts) -> tuple[list[Difference], list[dict[str, Any]]]:
    good_rules = {f.rule for g in goods for f in g.report.findings}
    diffs, rows = [], []
    for f in bad.report.findings:
        if f.rule in good_rules:
            continue
        rows.append({"rule": f.rule, "side": "only_bad", "primary": f.primary, "message": f.message,
                     "score": BASE["finding"]})
        diffs.append(Difference("finding", f.rule, None, f.message, BASE["finding"],
                                "the bad run's finding (a symptom to explain)", False))
    bad_rules = {f.rule for f in bad.report.findings}
    for g in goods:
        for f in g.report.findings:
            if f.rule not in bad_rules:
                rows.append({"rule": f.rule, "side": "only_good", "primary": f.primary, "message": f.message,
                             "score": 0.0})
    return diffs, rows


def rank(diffs: list[Difference]) -> tuple[Difference, ...]:
    kind_order = {"config": 0, "environment": 1, "template": 2, "metric": 3, "checkpoint": 4, "file": 5, "finding": 6}
    return tuple(sorted(diffs, key=lambda d: (-round(d.score, 6), kind_order.get(d.kind, 9), d.key)))


def chart_series(goods: Sequence[RunFacts], bad: RunFacts) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for metric in METRICS:
        if metric not in bad.series:
            continue
        lines = [{"label": f"good {i + 1}" if len(goods) > 1 else "good",
                  "steps": g.series[metric][0], "values": g.series[metric][1]}
                 for i, g in enumerate(goods) if metric in g.series]
        if lines:
            s, v, _ = bad.series[metric]
            out[metric] = {"good": lines, "bad": {"label": "bad", "steps": s, "values": v}}
    return out

