"""autopsy: a post-mortem analyzer for machine-learning training runs.

Public API::

    import autopsy
    report = autopsy.analyze("runs/exp42")      # -> Report
    run = autopsy.load_run("runs/exp42")        # -> Run (DataFrames: scalars, checkpoints, ...)

``import autopsy`` stays light: no pandas, click, tensorboard or torch until needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autopsy.model import Confidence, Evidence, Finding, Outcome, Report, RunSummary, Severity

__version__ = "0.1.0"

if TYPE_CHECKING:
    from autopsy.api import analyze, analyze_many
    from autopsy.run import Run, load_run

__all__ = [
    "Confidence",
    "Evidence",
    "Finding",
    "Outcome",
    "Report",
    "Run",
    "RunSummary",
    "Severity",
    "__version__",
    "analyze",
    "analyze_many",
    "load_run",
]


def __getattr__(name: str) -> Any:
    # Lazy so that `import autopsy` (and `autopsy --help`) never pays for pandas.
    if name in ("analyze", "analyze_many"):
        from autopsy import api

        return getattr(api, name)
    if name in ("load_run", "Run"):
        from autopsy import run

        return getattr(run, name)
    raise AttributeError(f"module 'autopsy' has no attribute {name!r}")
