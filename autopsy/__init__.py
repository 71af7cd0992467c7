"""autopsy: a post-mortem analyzer for machine-learning training runs.

Public API::

    import autopsy
    report = autopsy.analyze("runs/exp42")      # -> Report
    run = autopsy.load_run("runs/exp42")        # -> Run (DataFrames: scalars, checkpoints, ...)
    d = autopsy.diff("runs/ok", "runs/broken")  # -> RunDiff (ranked differences, DataFrames)
    autopsy.watch("runs/exp42", on_finding=print)  # follow a live run; warn before it dies

``import autopsy`` stays light: no pandas, click, tensorboard or torch until needed; the model
classes below are imported on first use too.
"""

from __future__ import annotations

__version__ = "0.1.0"

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: `autopsy --help` may not load it
if TYPE_CHECKING:
    from typing import Any

    from autopsy.api import analyze, analyze_many
    from autopsy.compare import RunDiff, diff
    from autopsy.model import Confidence, Evidence, Finding, Outcome, Report, RunSummary, Severity
    from autopsy.run import Run, load_run

__all__ = [
    "Confidence",
    "Evidence",
    "Finding",
    "Outcome",
    "Report",
    "Run",
    "RunDiff",
    "RunSummary",
    "Severity",
    "__version__",
    "analyze",
    "analyze_many",
    "diff",
    "load_run",
    "watch",
]


_MODEL_NAMES = frozenset({"Confidence", "Evidence", "Finding", "Outcome", "Report", "RunSummary", "Severity"})


def __getattr__(name: str) -> Any:
    # Lazy so that `import autopsy` (and `autopsy --help`) never pays for pandas, nor even for
    # the model's dataclasses and hashlib (a few ms of a start-up budget of ~25 ms).
    if name in _MODEL_NAMES:
        from autopsy import model

        value = getattr(model, name)
        globals()[name] = value  # later look-ups skip this hook
        return value
    if name in ("analyze", "analyze_many"):
        from autopsy import api

        return getattr(api, name)
    if name in ("diff", "RunDiff"):
        from autopsy import compare

        return getattr(compare, name)
    if name == "watch":  # the package autopsy.watch, callable as autopsy.watch(run_dir, on_finding=...)
        import importlib

        return importlib.import_module("autopsy.watch")
    if name in ("load_run", "Run"):
        from autopsy import run

        return getattr(run, name)
    raise AttributeError(f"module 'autopsy' has no attribute {name!r}")
