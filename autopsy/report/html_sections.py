"""View models of the HTML report's run-dependent sections: plots, checkpoint timeline,
per-rank step times, log context around evidence lines.

Each builder takes the :class:`~autopsy.run.Run` (or any object with the same attributes)
and returns plain dicts/dataclasses the templates place; none of them writes anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autopsy.model import Finding
from autopsy.parsers.safe_open import open_binary
from autopsy.report.chart_svg import ChartView, draw
from autopsy.report.charts import (
    Chart,
    Line,
    Marker,
    finding_anchor,
    fmt_bytes,
    fmt_num,
    make_line,
    metric_charts,
)
from autopsy.report.sanitize import strip_terminal

CONTEXT_LINES = 3  # lines shown before and after an evidence line
MAX_CONTEXT_READ_BYTES = 64 * 1024**2  # stop reading a log for context past this (speed on huge logs)
MAX_LINE_CHARS = 2000  # a 100 MB single line is cut for display
MAX_RANK_LINES = 16

VOLUME_FACTS = ("volume_bytes", "fs_total_bytes", "disk_total_bytes", "volume_size_bytes", "volume_total_bytes",
                "total_bytes", "disk_bytes")


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


# ----------------------------------------------------------------------- plots


def plot_section(run: Any, findings: Sequence[Finding], crash_step: int | None) -> list[ChartView]:
    return [draw(c) for c in metric_charts(run.scalars, findings, crash_step=crash_step)]


# ----------------------------------------------------------------------- checkpoints


def checkpoint_section(run: Any, findings: Sequence[Finding], crash_step: int | None) -> dict[str, Any]:
    """Rows of the checkpoint table and the timeline chart (bytes on disk over steps)."""
    cps = list(run.checkpoint_list)
    latest = run.latest_valid_checkpoint
    rows = []
    for c in cps:
        status = "in progress" if getattr(c, "in_progress", False) else ("valid" if c.valid else "corrupt")
        reasons = list(c.problems) + [f"missing {m}" for m in c.missing]
        rows.append({"path": c.path, "layout": c.layout, "step": c.step, "size": fmt_bytes(c.bytes),
                     "status": status, "reasons": reasons, "latest": latest is not None and c.path == latest.path})
    disk = run.disk
    disk_rows = [("run directory", fmt_bytes(disk.run_bytes)), ("checkpoints", fmt_bytes(disk.checkpoint_bytes))]
    if disk.fs_total_bytes is not None:
        disk_rows.append(("volume size (at analysis time)", fmt_bytes(disk.fs_total_bytes)))
    if disk.fs_free_bytes is not None:
        disk_rows.append(("volume free (at analysis time)", fmt_bytes(disk.fs_free_bytes)))
    chart = _checkpoint_chart(cps, findings, crash_step, volume_now=disk.fs_total_bytes)
    return {"rows": rows, "disk": disk_rows, "chart": draw(chart) if chart else None}


def _checkpoint_chart(cps: Sequence[Any], findings: Sequence[Finding], crash_step: int | None,
                      volume_now: int | None = None) -> Chart | None:
    stepped = [c for c in cps if c.step is not None]
    if not stepped and not any(f.rule == "checkpoint.retention" for f in findings):
        return None
    steps = np.array([float(c.step) for c in stepped])
    cum = np.cumsum([float(c.bytes) for c in stepped]) if stepped else np.array([])
    lines = []
    if len(steps):
        line = make_line("checkpoint bytes on disk (cumulative)", steps, cum)
        line.css = "c0"
        lines.append(line)
    markers: list[Marker] = []
    for c, total in zip(stepped, cum.tolist(), strict=True):
        status = "in-progress" if getattr(c, "in_progress", False) else ("valid" if c.valid else "corrupt")
        markers.append(Marker("point", f"{c.path}: {fmt_bytes(c.bytes)}, {status.replace('-', ' ')}",
                              "", f"ckpt ckpt-{status}", step=float(c.step), value=total))
    for i, f in enumerate(findings):
        if f.rule in ("disk.full", "checkpoint.retention", "checkpoint.corrupt", "checkpoint.gap") or f.primary:
            if f.step is not None:
                markers.append(Marker("vline", f.rule, f.rule, f"sev-{f.severity}", step=float(f.step),
                                      anchor=finding_anchor(i)))
        if f.rule != "checkpoint.retention":
            continue
        volume = next((v for k in VOLUME_FACTS if (v := _num(f.facts.get(k))) is not None), None)
        label = f"volume {fmt_bytes(volume)}" if volume is not None else ""
        # The rule's forecast used the volume as measured at analysis: drawn only with that forecast
        # (a 100 GB line beside 1 MB of checkpoints would flatten the plot and say nothing).
        if volume is None and volume_now and _num(f.facts.get("forecast_fill_step")) is not None:
            volume = float(volume_now)
            label = f"volume {fmt_bytes(volume)} (at analysis time)"
        fill = next((v for k, val in f.facts.items() if "fill" in k and k.endswith("step")
                     and (v := _num(val)) is not None), None)
        if volume is not None:
            markers.append(Marker("hline", label, f.rule, "level-volume", value=volume,
                                  anchor=finding_anchor(i)))
        if fill is not None:
            markers.append(Marker("vline", f"forecast: disk full at step ~{fmt_num(fill)}", f.rule, "forecast",
                                  step=fill, anchor=finding_anchor(i)))
            if volume is not None and len(steps):
                fc = Line("forecast (current cadence)", np.array([steps[-1], fill]), np.array([cum[-1], volume]),
                          starts=np.array([True, False]), n_points=2, dashed=True, css="forecast")
                lines.append(fc)
    if crash_step is not None and not any(m.kind == "vline" and m.step == crash_step for m in markers):
        markers.append(Marker("vline", "last step", "", "crash", step=float(crash_step)))
    if not lines and not markers:
        return None
    return Chart(id="checkpoints", title="Checkpoints: bytes on disk over steps", lines=lines, markers=markers,
                 y_format="bytes", y_title="checkpoint bytes on disk")


# ----------------------------------------------------------------------- per-rank


def rank_section(run: Any, findings: Sequence[Finding]) -> dict[str, Any] | None:
    """Per-rank step times: logged step_time, else derived from per-rank wall-clock times."""
    df = run.scalars
    if df is None or df.empty:
        return None
    ranked = df[df["rank"].notna() & df["step"].notna()]
    if ranked["rank"].nunique() < 2:
        return None
    how = "logged step time"
    st = ranked[ranked["metric"] == "step_time"]
    series: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    if st["rank"].nunique() >= 2:
        for rank, g in st.groupby("rank"):
            series[int(rank)] = (g["step"].to_numpy("float64"), g["value"].to_numpy("float64"))
    else:
        how = "seconds between logged steps (wall-clock)"
        timed = ranked[ranked["wall_time"].notna()]
        for rank, g in timed.groupby("rank"):
            g = g.drop_duplicates("step").sort_values("step")
            if len(g) < 3:
                continue
            s = g["step"].to_numpy("float64")
            w = g["wall_time"].to_numpy("float64")
            ds = np.diff(s)
            ok = ds > 0
            series[int(rank)] = (s[1:][ok], np.diff(w)[ok] / ds[ok])
    if len(series) < 2:
        return None
    medians = {r: float(np.nanmedian(v)) for r, (_s, v) in series.items() if len(v)}
    overall = float(np.median(list(medians.values()))) if medians else math.nan
    flagged = _flagged_ranks(findings)
    rows = [{"rank": r, "points": len(series[r][0]), "median": fmt_num(m),
             "ratio": fmt_num(round(m / overall, 2)) if overall > 0 else "—", "flagged": r in flagged}
            for r, m in sorted(medians.items())]
    lines = []
    for i, r in enumerate(sorted(series)[:MAX_RANK_LINES]):
        line = make_line(f"rank {r}", *series[r])
        line.css = f"c{i % 8}"
        lines.append(line)
    markers = []
    for i, f in enumerate(findings):
        if f.rule.startswith("dist.") and f.step is not None:
            markers.append(Marker("vline", f.rule, f.rule, f"sev-{f.severity}", step=float(f.step),
                                  anchor=finding_anchor(i)))
    chart = Chart(id="ranks", title=f"Per-rank step time (s) — {how}", lines=lines, markers=markers,
                  y_title="time per step (s)")
    if len(series) > MAX_RANK_LINES:
        chart.notes.append(f"{len(series) - MAX_RANK_LINES} more ranks in the table only")
    return {"rows": rows, "chart": draw(chart), "how": how}


def _flagged_ranks(findings: Sequence[Finding]) -> set[int]:
    out: set[int] = set()
    for f in findings:
        if not f.rule.startswith("dist."):
            continue
        for k in ("rank", "slow_rank", "straggler_rank", "failed_rank"):
            v = f.facts.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                out.add(v)
        for k in ("ranks", "slow_ranks", "straggler_ranks"):
            v = f.facts.get(k)
            if isinstance(v, (list, tuple)):
                out.update(x for x in v if isinstance(x, int) and not isinstance(x, bool))
    return out


# ----------------------------------------------------------------------- log context


def read_context(root: Path, wanted: dict[str, list[tuple[int, int]]]) -> dict[str, dict[int, str]]:
    """Lines around evidence spans, one streaming pass per file, bounded in bytes.

    ``wanted`` maps a run-relative path to (first, last) line spans (1-based). Returns
    path -> {lineno: text} for the spans widened by :data:`CONTEXT_LINES`. Paths that
    escape the run root or cannot be read are skipped: the excerpt alone is shown then.
    """
    out: dict[str, dict[int, str]] = {}
    root_resolved = root.resolve()
    for rel, spans in wanted.items():
        try:
            path = (root / rel).resolve()
            path.relative_to(root_resolved)  # evidence paths come from parsed data: never leave the run
        except (OSError, ValueError):
            continue
        need: set[int] = set()
        for a, b in spans:
            need.update(range(max(1, a - CONTEXT_LINES), b + CONTEXT_LINES + 1))
        if not need:
            continue
        last = max(need)
        lines: dict[int, str] = {}
        try:
            with open_binary(path) as fh:
                read = 0
                for no, raw in enumerate(_bounded_lines(fh), start=1):
                    read += len(raw)
                    if no in need:
                        text = raw[: MAX_LINE_CHARS * 4].decode("utf-8", "replace").rstrip("\r\n")
                        lines[no] = strip_terminal(text, one_line=True)[:MAX_LINE_CHARS]
                    if no >= last or read > MAX_CONTEXT_READ_BYTES:
                        break
        except OSError:
            continue
        out[rel] = lines
    return out


def _bounded_lines(fh: Any, chunk: int = 1 << 16) -> Iterable[bytes]:
    """Lines of a binary file without holding a huge single line in memory (cut at 64 KiB)."""
    buf = b""
    while True:
        data = fh.read(chunk)
        if not data:
            if buf:
                yield buf
            return
        buf += data
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                if len(buf) > chunk:
                    # part of an over-long line: keep its head, drop the rest up to the newline
                    head = buf[:chunk]
                    buf = b""
                    for more in iter(lambda: fh.read(chunk), b""):
                        nl2 = more.find(b"\n")
                        if nl2 >= 0:
                            buf = more[nl2 + 1:]
                            break
                    yield head
                break
            yield buf[: nl + 1]
            buf = buf[nl + 1:]
