"""The public API: ``analyze`` one run, ``analyze_many`` for a table over many.

The CLI is a thin wrapper over these. Cards are loaded first so that their log
patterns go into the single scan of every log (``LoadOptions.patterns``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from autopsy.engine.loader import Catalog, load_catalog
from autopsy.engine.precedence import apply_precedence
from autopsy.engine.runner import run_cards, select_cards
from autopsy.model import Outcome, OutcomeKind, Report
from autopsy.run import LoadOptions, load_run
from autopsy.summary import summarize

if TYPE_CHECKING:
    import pandas as pd

    from autopsy.run import Run

Selector = Iterable[str] | str | None


def analyze(
    run_dir: str | os.PathLike[str],
    *,
    select: Selector = None,
    ignore: Selector = None,
    rules_dirs: Sequence[str | os.PathLike[str]] = (),
    options: LoadOptions | None = None,
    catalog: Catalog | None = None,
) -> Report:
    """Analyse one run directory and return its :class:`Report`.

    ``select``/``ignore``: rule ids, aliases or families (``"oom,disk"``); an unknown one
    raises ValueError. ``rules_dirs``: a team's own cards (override built-in ids).
    ``options``: how to read the run (size limits, a pinned ``now`` for tests); its
    ``patterns`` are replaced by the selected cards' patterns. Raises
    :class:`autopsy.run.RunError` when ``run_dir`` is not a readable directory.
    """
    return analyze_run(run_dir, select=select, ignore=ignore, rules_dirs=rules_dirs, options=options,
                       catalog=catalog)[0]


def analyze_run(
    run_dir: str | os.PathLike[str],
    *,
    select: Selector = None,
    ignore: Selector = None,
    rules_dirs: Sequence[str | os.PathLike[str]] = (),
    options: LoadOptions | None = None,
    catalog: Catalog | None = None,
) -> tuple[Report, Run]:
    """:func:`analyze`, also returning the parsed :class:`~autopsy.run.Run`.

    For renderers that need more than the report (the HTML report's log context and
    full-resolution series): they reuse the views parsed for the analysis instead of
    reading the run a second time.
    """
    catalog = catalog if catalog is not None else load_catalog(rules_dirs)
    cards = select_cards(catalog.cards.values(), select, ignore, aliases=catalog.aliases)
    opts = replace(options or LoadOptions(), patterns=catalog.patterns(cards))
    run = load_run(run_dir, opts)
    return report_of(run, catalog, cards, display_path=os.fspath(run_dir), select=select, ignore=ignore), run


def report_of(run: Run, catalog: Catalog, cards: Sequence[Any], *, display_path: str, select: Selector = None,
              ignore: Selector = None) -> Report:
    """The :class:`Report` of a loaded run: every card evaluated, precedence, summary, fix.

    :func:`analyze_run` calls it on a fresh :class:`~autopsy.run.Run`; ``autopsy watch`` on the
    run it followed (its logs already read, incrementally) when the watched command exits.
    """
    from autopsy import __version__

    opts = run.options
    outcomes = run_cards(run, cards)
    outcomes.extend(_card_error_outcomes(catalog, {c.id for c in cards}, select, ignore))
    findings = [f for o in outcomes for f in o.findings]
    ranked = apply_precedence(findings, catalog.cards)
    primary = next((f for f in ranked if f.primary), None)

    problems: list[str] = []
    try:
        problems.extend(run.discovery.problems)
        if run.discovery.truncated:
            problems.append(f"walk stopped at {opts.max_files} files: the rest of the run was not read")
    except Exception as exc:  # discovery is robust; this only keeps a bug from losing the findings
        problems.append(f"discovery: {type(exc).__name__}: {exc}")
    # Refused cards without a usable id, or whose id still loaded from another file (a
    # broken override), are problems; the rest become rule_error outcomes above.
    problems.extend(str(e) for e in catalog.errors if e.rule is None or e.rule in catalog.cards)
    summary = summarize(run, primary, display_path=display_path, problems=problems)
    try:
        artifacts = tuple(run.artifact_list)
    except Exception as exc:
        problems.append(f"artifacts: {type(exc).__name__}: {exc}")
        artifacts = ()

    series = None
    try:
        from autopsy.report.display_series import collect_series

        series = collect_series(run)
    except Exception as exc:  # display data only: a bug here must not lose the diagnosis
        problems.append(f"display series: {type(exc).__name__}: {exc}")

    report = Report(
        run=summary,
        findings=ranked,
        outcomes=tuple(sorted(outcomes, key=lambda o: o.rule)),
        artifacts=artifacts,
        problems=tuple(problems),
        autopsy_version=__version__,
        series=series,
    )
    try:  # the fix is computed once, here, so that every renderer shows the same steps
        from autopsy.report.fix import build_fix

        report = replace(report, fix=build_fix(report, catalog=catalog))
    except Exception as exc:  # advice is wording on top of the diagnosis: a bug here must not lose it
        report = replace(report, problems=(*report.problems, f"fix: {type(exc).__name__}: {exc}"))
    return report


def _card_error_outcomes(catalog: Catalog, selected: set[str], select: Selector, ignore: Selector) -> list[Outcome]:
    """A refused card whose id is known is that rule's outcome: rule_error, with the reason."""
    out = []
    seen: set[str] = set()
    for err in catalog.errors:
        rule = err.rule
        if rule is None or rule in catalog.cards or rule in selected or rule in seen:
            continue
        if not _wanted(rule, select, ignore):
            continue
        seen.add(rule)
        out.append(Outcome(rule, OutcomeKind.RULE_ERROR, reason=f"card refused: {err}"))
    return out


def _wanted(rule: str, select: Selector, ignore: Selector) -> bool:
    def tokens(sel: Selector) -> set[str]:
        if sel is None:
            return set()
        items = [sel] if isinstance(sel, str) else list(sel)
        return {s.strip() for item in items for s in item.split(",") if s.strip()}

    family = rule.split(".", 1)[0]
    sel, ign = tokens(select), tokens(ignore)
    if select is not None and not ({rule, family} & sel):
        return False
    return not ({rule, family} & ign)


FRAME_COLUMNS = ("run", "error", "rule", "severity", "confidence", "primary", "explained_by", "title", "message",
                 "step", "wall_time", "location", "fingerprint", "facts", "last_step", "max_steps",
                 "latest_valid_checkpoint", "steps_lost")


def analyze_many(paths: Iterable[str | os.PathLike[str]], **kw: Any) -> pd.DataFrame:
    """Analyse many runs; one row per (run, finding), and one row for a run with none.

    A run that cannot be read gets one row with ``error`` set instead of raising, so a
    sweep over a hundred directories survives one bad path. Keyword arguments go to
    :func:`analyze`; the rule catalog is loaded once for all runs.
    """
    import pandas as pd

    from autopsy.run import RunError

    if "catalog" not in kw:
        kw["catalog"] = load_catalog(kw.pop("rules_dirs", ()))
    rows: list[dict[str, Any]] = []
    for path in paths:
        name = os.fspath(path)
        try:
            report = analyze(path, **kw)
        except (RunError, OSError) as exc:
            rows.append({"run": name, "error": str(exc)})
            continue
        s = report.run
        base = {"run": name, "error": None, "last_step": s.last_step, "max_steps": s.max_steps,
                "latest_valid_checkpoint": s.latest_valid_checkpoint, "steps_lost": s.steps_lost}
        if not report.findings:
            rows.append(base)
        for f in report.findings:
            rows.append({
                **base,
                "rule": f.rule,
                "severity": str(f.severity),
                "confidence": str(f.confidence),
                "primary": f.primary,
                "explained_by": f.explained_by,
                "title": f.title,
                "message": f.message,
                "step": f.step,
                "wall_time": f.wall_time,
                "location": f.evidence[0].location() if f.evidence else None,
                "fingerprint": f.fingerprint,
                "facts": dict(f.facts),
            })
    df = pd.DataFrame(rows, columns=list(FRAME_COLUMNS))
    for col in ("step", "last_step", "max_steps", "steps_lost"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    df["wall_time"] = pd.to_numeric(df["wall_time"], errors="coerce").astype("float64")
    df["primary"] = df["primary"].astype("boolean")
    return df


__all__ = ["analyze", "analyze_many"]
