"""A run directory made of one log, analysed end to end (shared by the failure-time tests)."""

from __future__ import annotations

from pathlib import Path

import autopsy
from autopsy.model import Report


def analyze_log(tmp_path: Path, text: str, primary: str = "oom.cuda") -> Report:
    """Write ``text`` as ``run/train.log`` under ``tmp_path``, analyse it, check the primary rule."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(text)
    report = autopsy.analyze(run)
    assert report.primary is not None and report.primary.rule == primary
    return report
