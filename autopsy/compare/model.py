"""What `autopsy diff` found: ranked differences between good runs and a bad run.

Data only (frozen dataclasses and row lists); the parts become pandas DataFrames on access,
so a notebook gets ``d.config``, ``d.environment``, ``d.templates``, ``d.metrics`` as frames
while ``import autopsy.compare`` stays light. Rendering lives in ``autopsy.report.diff_*``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from autopsy.model import Finding

# The kinds of difference, in the order the sections are shown.
KINDS = ("config", "environment", "template", "metric", "checkpoint", "file", "finding")

CONFIG_COLUMNS = ("raw_key", "key", "change", "good", "bad", "good_where", "bad_where", "score")
ENVIRONMENT_COLUMNS = ("name", "category", "good", "bad", "good_where", "bad_where", "score")
TEMPLATE_COLUMNS = ("template", "side", "good_count", "bad_count", "bad_where", "good_where",
                    "before_failure", "lines_before_failure", "score")
METRIC_COLUMNS = ("metric", "diverged", "step", "bad_value", "band_low", "band_high", "direction",
                  "points_compared", "good_sources", "bad_source", "note", "score")
CHECKPOINT_COLUMNS = ("fact", "good", "bad", "score")
FINDING_COLUMNS = ("rule", "side", "primary", "message", "score")


@dataclass(frozen=True)
class Difference:
    """One thing that differs, with how likely it explains the bad run's failure.

    ``score`` is in [0, 1]; ``why`` says in one sentence what set it (a link to the bad
    run's primary finding, closeness to the failure, a value expected to vary such as a seed).
    ``good_where`` / ``bad_where`` are ``file:line`` (or ``tag@step``) locations, run-relative.
    """

    kind: str
    key: str
    good: str | None
    bad: str | None
    score: float
    why: str
    explains_primary: bool = False
    good_where: tuple[str, ...] = ()
    bad_where: tuple[str, ...] = ()
    step: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "good": self.good, "bad": self.bad,
                "score": round(self.score, 3), "why": self.why, "explains_primary": self.explains_primary,
                "good_where": list(self.good_where), "bad_where": list(self.bad_where), "step": self.step}


@dataclass
class RunDiff:
    """The comparison of one bad run against one or more good runs.

    ``differences`` is ranked, most likely explanation first. ``agree`` is True when
    nothing beyond expected variation (seeds, run names, noise within the good runs' band)
    differs. The per-part rows are kept as dicts; the properties turn them into DataFrames.
    """

    goods: tuple[str, ...]
    bad: str
    differences: tuple[Difference, ...]
    bad_primary: Finding | None
    good_primaries: tuple[Finding | None, ...]
    agree: bool
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what could not be compared, and why
    series: dict[str, Any] = field(default_factory=dict)  # metric -> {"good": [...], "bad": ...} for charts

    @property
    def top(self) -> Difference | None:
        return self.differences[0] if self.differences else None

    def _frame(self, part: str, columns: tuple[str, ...]) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.rows.get(part, []), columns=list(columns))

    @property
    def config(self) -> pd.DataFrame:
        """One row per config key that differs: raw_key, key, change, good, bad, where, score."""
        return self._frame("config", CONFIG_COLUMNS)

    @property
    def environment(self) -> pd.DataFrame:
        """Library, driver and hardware facts that differ (or exist on one side only)."""
        return self._frame("environment", ENVIRONMENT_COLUMNS)

    @property
    def templates(self) -> pd.DataFrame:
        """Log line templates found on one side only (numbers, paths, ids, times masked)."""
        return self._frame("templates", TEMPLATE_COLUMNS)

    @property
    def metrics(self) -> pd.DataFrame:
        """Per compared metric: whether and at which step the bad run left the good runs' band."""
        return self._frame("metrics", METRIC_COLUMNS)

    @property
    def checkpoints(self) -> pd.DataFrame:
        """Checkpoint cadence, size and count on both sides."""
        return self._frame("checkpoints", CHECKPOINT_COLUMNS)

    @property
    def findings(self) -> pd.DataFrame:
        """Findings of the bad run that no good run has (and the reverse)."""
        return self._frame("findings", FINDING_COLUMNS)

    def to_frame(self) -> pd.DataFrame:
        """Every difference, ranked: kind, key, good, bad, score, why, explains_primary, where."""
        import pandas as pd

        return pd.DataFrame([d.to_dict() for d in self.differences],
                            columns=["kind", "key", "good", "bad", "score", "why", "explains_primary",
                                     "good_where", "bad_where", "step"])

    def _repr_markdown_(self) -> str:
        from autopsy.report.diff_text import render_markdown

        return render_markdown(self)
