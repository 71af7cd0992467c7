"""Notebook views: to_frame, _repr_html_/_repr_markdown_, and the example notebook's code cells run."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import report_samples as samples
from conftest import REPO

from autopsy.report.frame import FRAME_COLUMNS, report_to_frame, reports_to_frame

NOTEBOOK = REPO / "examples" / "notebook.ipynb"


def test_to_frame_one_row_per_finding() -> None:
    report = samples.disk_full()
    df = report.to_frame()
    assert list(df.columns) == list(FRAME_COLUMNS)
    assert list(df["rule"]) == ["disk.full", "checkpoint.retention", "checkpoint.corrupt"]
    assert df["primary"].tolist() == [True, False, False]
    assert df.loc[0, "location"] == "train.log:48213"
    assert df.loc[1, "facts"]["limit"] == 3
    assert str(df["step"].dtype) == "Int64"


def test_frames_of_many_keep_runs_without_findings() -> None:
    df = reports_to_frame([samples.clean(), samples.empty_log()])
    assert df["run"].tolist() == ["runs/ok", "runs/silent"]
    assert df["rule"].isna().tolist() == [True, False]
    assert report_to_frame(samples.clean()).empty


def test_repr_methods() -> None:
    report = samples.disk_full()
    html = report._repr_html_()
    assert html.startswith("<div class='autopsy-report'>") and "disk.full" in html and "checkpoint-8000" in html
    assert report._repr_markdown_() == report.to_markdown()


def _code_cells() -> list[str]:
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def test_example_notebook_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Execute every code cell in one namespace, as a kernel would, from the repo root."""
    if not (REPO / "fixtures" / "runs" / "disk_full").is_dir():
        pytest.skip("fixtures/runs/disk_full not generated")
    monkeypatch.chdir(REPO)
    ns: dict[str, object] = {"__name__": "__main__"}
    cells = _code_cells()
    assert len(cells) >= 5
    for i, src in enumerate(cells):
        tree = ast.parse(src, filename=f"cell {i}")
        # like IPython: the value of a trailing expression is "displayed" (here: evaluated)
        last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        body = ast.Module(body=tree.body[:-1] if last else tree.body, type_ignores=[])
        exec(compile(body, f"cell {i}", "exec"), ns)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), f"cell {i}", "eval"), ns)
            for method in ("_repr_html_", "_repr_markdown_"):
                if hasattr(value, method):
                    assert isinstance(getattr(value, method)(), str)
    report = ns["report"]
    assert isinstance(report, samples.Report)
    assert Path(report.run.path).name == "disk_full"
