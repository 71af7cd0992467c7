"""Experiment trackers' local files: the MLflow file store and W&B run directories.

MLflow (``mlruns/<experiment>/<run id>/``): ``metrics/<name>`` holds one
``<timestamp ms> <value> <step>`` line per logged value (older versions omit the step;
a name with slashes is a nested path), ``params/<name>`` holds a parameter's value as
text, ``meta.yaml`` the run's status (1 running, 3 finished, 4 failed, 5 killed).

W&B (``wandb/run-<time>-<id>/``): ``files/wandb-summary.json`` the last value of every
metric with ``_step`` / ``_timestamp``; ``files/config.yaml`` (read by the config parser),
``files/output.log`` (read as a log), ``files/wandb-metadata.json`` (the program and its
arguments); ``run-<id>.wandb``, the binary record log, is read by :mod:`wandb_records`.
"""

from __future__ import annotations

import re
from pathlib import Path

from autopsy.model import ParseStatus
from autopsy.parsers.config_aliases import canonical_key
from autopsy.parsers.launch_script import parse_value
from autopsy.parsers.metric_tables import read_json_metrics, split_of, to_float, wall_seconds
from autopsy.parsers.safe_open import open_binary
from autopsy.parsers.types import ConfigEntry, MetricRows, Parsed

# mlflow/store/tracking/file_store.py writes "%s %s %s\n" % (timestamp, value, step)
MLFLOW_LINE = re.compile(rb"^(?P<ts>-?\d{1,16}) (?P<value>\S+)(?: (?P<step>-?\d{1,19}))?\r?$")
MLFLOW_STATUS = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}
_MAX_PARAM_BYTES = 64 * 1024


def mlflow_metric_name(rel_path: str) -> str:
    """``mlruns/0/<run>/metrics/train/loss`` -> ``train/loss``."""
    return rel_path.split("/metrics/", 1)[1] if "/metrics/" in rel_path else rel_path.split("metrics/", 1)[-1]


def sniff_mlflow_metric(rel_path: str, head: bytes) -> bool:
    """A file under a ``metrics/`` folder whose first line is ``<ms> <value> [<step>]``."""
    if not ("/metrics/" in rel_path or rel_path.startswith("metrics/")):
        return False
    first = head.split(b"\n", 1)[0]
    m = MLFLOW_LINE.match(first)
    return m is not None and to_float(m.group("value").decode("ascii", "replace")) is not None


def read_mlflow_metric(fs_path: Path, rel_path: str, *, max_bytes: int) -> Parsed:
    """One MLflow metric file as a series; never raises on damage."""
    tag = mlflow_metric_name(rel_path)
    rows = MetricRows(rel_path, "mlflow")
    split = split_of(tag)
    try:
        fh = open_binary(fs_path)
    except OSError as exc:
        return Parsed(rows, ParseStatus.UNREADABLE, f"cannot read: {exc.strerror or exc}")
    read = 0
    partial = cut = False
    with fh:
        for no, line in enumerate(fh, 1):
            read += len(line)
            if read > max_bytes:
                partial = True
                break
            if not line.strip():
                continue
            m = MLFLOW_LINE.match(line.rstrip(b"\n"))
            value = to_float(m.group("value").decode("ascii", "replace")) if m else None
            if m is None or value is None:
                if not line.endswith(b"\n"):
                    cut = True  # the last line, cut mid-write
                else:
                    rows.bad(f"line {no}: not '<timestamp> <value> <step>'")
                continue
            rows.rows_read += 1
            step = int(m.group("step")) if m.group("step") is not None else rows.rows_read - 1
            rows.add(tag, step, wall_seconds(float(m.group("ts"))), value, split)
    notes = []
    status = ParseStatus.OK
    if rows.bad_rows:
        notes.append(f"{rows.bad_rows} line(s) could not be read and were skipped (first: {rows.first_bad})")
    if cut:
        status = ParseStatus.TRUNCATED
        notes.append("last line cut short")
    if partial:
        status = ParseStatus.TRUNCATED
        notes.append(f"only the first {max_bytes} bytes were read")
    return Parsed(rows, status, "; ".join(notes) or None)


def read_mlflow_param(fs_path: Path, rel_path: str) -> Parsed:
    """``params/<name>``: the whole file is the value (no trailing newline in MLflow's files)."""
    name = rel_path.split("/params/", 1)[1] if "/params/" in rel_path else rel_path.rsplit("/", 1)[-1]
    try:
        with open_binary(fs_path) as fh:
            data = fh.read(_MAX_PARAM_BYTES + 1)
    except OSError as exc:
        return Parsed([], ParseStatus.UNREADABLE, f"cannot read: {exc.strerror or exc}")
    text = data[:_MAX_PARAM_BYTES].decode("utf-8", "replace").strip()
    leaf = name.rsplit("/", 1)[-1].rsplit(".", 1)[-1]
    value = parse_value(text)
    key = canonical_key(leaf, value, parent=name.rsplit(".", 1)[0] if "." in name else None)
    note = "value longer than 64 KiB; kept the start" if len(data) > _MAX_PARAM_BYTES else None
    return Parsed([ConfigEntry(key, name, value, text[:200], rel_path, 1, "mlflow")],
                  ParseStatus.TRUNCATED if note else ParseStatus.OK, note)


def mlflow_status_entry(entries: list[ConfigEntry]) -> list[ConfigEntry]:
    """A ``run_status`` entry naming the status code of an MLflow ``meta.yaml`` (4 -> FAILED)."""
    out = []
    for e in entries:
        if e.raw_key == "status" and isinstance(e.value, int) and e.value in MLFLOW_STATUS:
            out.append(ConfigEntry("run_status", "status", MLFLOW_STATUS[e.value], e.text, e.path, e.line, e.source))
    return out


def read_wandb_summary(fs_path: Path, rel_path: str, *, max_bytes: int) -> Parsed:
    """``wandb-summary.json``: the last value of each metric, at ``_step`` / ``_timestamp``."""
    parsed = read_json_metrics(fs_path, rel_path, max_bytes=max_bytes, source="wandb")
    rows: MetricRows = parsed.value
    rows.source = "wandb"
    return parsed


def wandb_metadata_flags(text: str, rel_path: str) -> list[ConfigEntry]:
    """The command-line flags W&B recorded in ``wandb-metadata.json`` (``"args": ["--lr", "3e-4"]``),
    as launch flags: they are what the run was started with."""
    import json

    from autopsy.parsers.launch_script import flag_entries

    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return []
    args = obj.get("args") if isinstance(obj, dict) else None
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return []
    m = re.search(r'"args"\s*:', text)
    line = text.count("\n", 0, m.start()) + 1 if m else 1
    return flag_entries([str(obj.get("program") or "python"), *args], rel_path, line)
