"""Read one metric file, dispatched on the sub-kind discovery gave it.

The readers live beside this module (:mod:`metric_tables` for CSV/TSV/JSON lines/JSON,
:mod:`tracker_stores` for MLflow and W&B files, :mod:`wandb_records` for W&B's binary
``run-<id>.wandb`` log). Each returns :class:`~autopsy.parsers.types.MetricRows` in a
:class:`~autopsy.parsers.types.Parsed` and never raises on damage.
"""

from __future__ import annotations

from pathlib import Path

from autopsy.model import ParseStatus
from autopsy.parsers.types import MetricRows, Parsed


def read_metric_file(fs_path: Path, rel_path: str, detail: str | None, *, max_bytes: int) -> Parsed:
    """The series of one metric file (``Parsed.value`` is a :class:`MetricRows`)."""
    from autopsy.parsers import metric_tables as tables
    from autopsy.parsers import tracker_stores as stores

    if detail in ("csv", "tsv"):
        return tables.read_table(fs_path, rel_path, max_bytes=max_bytes, delimiter="\t" if detail == "tsv" else None)
    if detail == "jsonl":
        return tables.read_jsonl(fs_path, rel_path, max_bytes=max_bytes)
    if detail == "wandb_history":
        return tables.read_jsonl(fs_path, rel_path, max_bytes=max_bytes, source="wandb")
    if detail == "json":
        return tables.read_json_metrics(fs_path, rel_path, max_bytes=max_bytes)
    if detail == "mlflow":
        return stores.read_mlflow_metric(fs_path, rel_path, max_bytes=max_bytes)
    if detail == "wandb_summary":
        return stores.read_wandb_summary(fs_path, rel_path, max_bytes=max_bytes)
    if detail == "wandb_log":
        from autopsy.parsers.wandb_records import read_wandb_log

        return read_wandb_log(fs_path, rel_path, max_bytes=max_bytes)
    return Parsed(MetricRows(rel_path, "other"), ParseStatus.SKIPPED, f"metric file of unknown kind {detail!r}")
