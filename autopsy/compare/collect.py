"""Everything `autopsy diff` compares, taken from one run: analysed once, read once.

The run is analysed with the same API as `autopsy analyze` (its findings and primary), and
the parsed Run supplies config, scalars and checkpoints; the logs are read once more here
for their templates and environment banners (bounded: head and tail of each log).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autopsy.compare.config_diff import KeyValues, key_table
from autopsy.compare.environment import (
    MAX_ENV_FILE_BYTES,
    EnvFact,
    facts_from_env_file,
    facts_from_line,
    facts_from_wandb_metadata,
    is_env_file,
)
from autopsy.compare.metrics import METRICS
from autopsy.compare.templates import TemplateStats, open_regular, template_file
from autopsy.model import ArtifactKind

if TYPE_CHECKING:
    from autopsy.engine.loader import Catalog
    from autopsy.model import Finding, Report
    from autopsy.run import LoadOptions, Run


@dataclass
class RunFacts:
    """One side of a diff."""

    path: str
    report: Report
    config: dict[tuple[str, str], KeyValues]
    env: dict[tuple[str, str], list[EnvFact]]
    templates: dict[str, TemplateStats]
    series: dict[str, tuple[np.ndarray, np.ndarray, str]]  # metric -> steps, values, source
    checkpoints: dict[str, Any]
    files: dict[str, tuple[str, int]]  # rel path -> (kind, size), checkpoint files left out
    tracebacks: list[tuple[str, int, int]] = field(default_factory=list)  # (log path, first line, last line)
    notes: list[str] = field(default_factory=list)

    def in_traceback(self, path: str, line: int) -> bool:
        return any(p == path and lo <= line <= hi for p, lo, hi in self.tracebacks)

    @property
    def primary(self) -> Finding | None:
        return self.report.primary

    def failure_line(self) -> tuple[str, int] | None:
        """(log path, line) where the primary finding's evidence starts, when it is a log line."""
        f = self.report.primary
        if f is None:
            return None
        lines = [(ev.path, int(ev.line)) for ev in f.evidence
                 if ev.path and ev.line is not None and ev.path in self.files
                 and self.files[ev.path][0] == ArtifactKind.LOG.value]
        if not lines:
            return None
        path, line = min(lines, key=lambda pl: pl[1])
        # The failure starts where the traceback that holds its line starts.
        for p, lo, hi in self.tracebacks:
            if p == path and lo <= line <= hi:
                line = min(line, lo)
        return path, line


def _read_small(path: Path, limit: int = MAX_ENV_FILE_BYTES) -> str | None:
    try:
        fd = open_regular(path)
    except OSError:
        return None
    try:
        return os.read(fd, limit).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _series(run: Run) -> dict[str, tuple[np.ndarray, np.ndarray, str]]:
    """Per compared metric, the source with the most points (rank 0 or unranked rows)."""
    out: dict[str, tuple[np.ndarray, np.ndarray, str]] = {}
    df = run.scalars
    if df.empty:
        return out
    df = df[df["metric"].isin(METRICS) & df["step"].notna()]
    if "rank" in df.columns:
        df = df[df["rank"].isna() | (df["rank"] == 0)]
    for metric, sel in df.groupby("metric", sort=False):
        counts = sel.groupby("source").size().sort_values(ascending=False, kind="stable")
        source = str(counts.index[0])
        part = sel[sel["source"] == source]
        out[str(metric)] = (part["step"].to_numpy(dtype=float), part["value"].to_numpy(dtype=float), source)
    return out


def _config_table(run: Run) -> dict[tuple[str, str], KeyValues]:
    return key_table({str(k): v for k, v in row.items()} for row in run.config.to_dict("records"))


def _traceback_spans(run: Run) -> list[tuple[str, int, int]]:
    spans = []
    for tb in run.all_tracebacks:
        start, end = getattr(tb, "line_start", None), getattr(tb, "line_end", None)
        if tb.path and isinstance(start, int) and isinstance(end, int):
            spans.append((tb.path, start, end))
    return spans


def _checkpoint_facts(run: Run) -> dict[str, Any]:
    df = run.checkpoints
    limit = run.config_value("save_total_limit")
    facts: dict[str, Any] = {"count": len(df), "valid": int(df["valid"].sum()) if len(df) else 0,
                             "save_total_limit": limit.value if limit is not None else None,
                             "save_total_limit_where": f"{limit.path}:{limit.line}" if limit is not None else None}
    steps = sorted(int(s) for s in df["step"].dropna().tolist()) if len(df) else []
    if len(steps) >= 2:
        facts["cadence_steps"] = int(np.median(np.diff(steps)))
    if len(df):
        facts["median_bytes"] = int(df["bytes"].median())
        facts["total_bytes"] = int(df["bytes"].sum())
    return facts


def collect(run_dir: str | os.PathLike[str], *, catalog: Catalog | None = None,
            options: LoadOptions | None = None) -> RunFacts:
    """Analyse one run and gather what the diff compares. Raises RunError if unreadable."""
    from autopsy.api import analyze_run

    report, run = analyze_run(run_dir, catalog=catalog, options=options)
    env: dict[tuple[str, str], list[EnvFact]] = {}

    def add(fact: EnvFact) -> None:
        env.setdefault((fact.category, fact.name), []).append(fact)

    templates: dict[str, TemplateStats] = {}
    notes: list[str] = []
    for art in run.artifacts_of(ArtifactKind.LOG):
        def on_line(lineno: int, text: str, _path: str = art.path) -> None:
            for fact in facts_from_line(text, f"{_path}:{lineno}"):
                add(fact)
        try:
            template_file(run.fs_path(art.path), art.path, templates, on_line)
        except OSError as exc:
            notes.append(f"{art.path}: not read for templates ({exc.strerror or exc})")
    files: dict[str, tuple[str, int]] = {}
    for art in run.artifact_list:
        if art.kind == ArtifactKind.CHECKPOINT_FILE:
            continue
        files[art.path] = (art.kind.value, art.size)
        name = art.path.rsplit("/", 1)[-1]
        if name == "wandb-metadata.json" or is_env_file(art.path):  # a freeze file may be classified as a log
            text = _read_small(run.fs_path(art.path))
            if text is None:
                notes.append(f"{art.path}: could not be read")
                continue
            facts = (facts_from_wandb_metadata(text, art.path) if name == "wandb-metadata.json"
                     else facts_from_env_file(text, art.path))
            for fact in facts:
                add(fact)
    return RunFacts(path=str(run_dir), report=report, config=_config_table(run), env=env,
                    templates=templates, series=_series(run), checkpoints=_checkpoint_facts(run), files=files,
                    tracebacks=_traceback_spans(run), notes=notes)
