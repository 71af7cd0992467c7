"""Every fixture run through every renderer: JSON schema, SARIF schema, snapshots of three runs.

Fixture runs are copied with their recorded mtimes (fixtures/mtimes.json) and analysed with a
pinned ``now`` and a pinned volume size, so that the output is byte-for-byte reproducible on any
checkout (git sets mtimes to checkout time).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from conftest import RUNS
from fixture_runs import pinned_copy, pinned_now
from snapshot_util import assert_snapshot

from autopsy.model import Report

SNAPSHOT_RUNS = ("disk_full", "nan_loss", "retention", "killed_mid_save")
PINNED_DISK = collections.namedtuple("usage", "total used free")(100 * 10**9, 60 * 10**9, 40 * 10**9)
SARIF_SCHEMA = Path(__file__).parent / "data" / "sarif-2.1.0.schema.json"


def _runs() -> list[str]:
    return sorted(p.name for p in RUNS.glob("*") if p.is_dir()) if RUNS.exists() else []


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every fixture run copied with the mtimes it had when generated (tests/fixture_runs.py)."""
    root = tmp_path_factory.mktemp("pinned")
    for name in _runs():
        pinned_copy(name, root)
    return root


_cache: dict[str, Report] = {}


def _report(pinned: Path, name: str) -> Report:
    if name not in _cache:
        import autopsy
        from autopsy.run import LoadOptions

        cwd = os.getcwd()
        real_disk_usage = shutil.disk_usage
        os.chdir(pinned)
        # Some rules report the volume's size/free space at analysis time (forecasts): pin it.
        shutil.disk_usage = lambda _p: PINNED_DISK  # type: ignore[assignment]
        try:  # a relative path, so the report says "disk_full", not a tmp dir
            _cache[name] = autopsy.analyze(name, options=LoadOptions(now=pinned_now(name)))
        finally:
            os.chdir(cwd)
            shutil.disk_usage = real_disk_usage
    return _cache[name]


@pytest.fixture(scope="module")
def report_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(resources.files("autopsy").joinpath("schema", "report.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def sarif_validator() -> jsonschema.protocols.Validator:
    return jsonschema.Draft4Validator(json.loads(SARIF_SCHEMA.read_text(encoding="utf-8")))


@pytest.mark.parametrize("name", _runs())
def test_fixture_json_and_sarif_validate(name: str, pinned: Path, report_validator: jsonschema.protocols.Validator,
                                         sarif_validator: jsonschema.protocols.Validator) -> None:
    from autopsy.report.json_report import report_from_dict
    from autopsy.report.sarif import render_sarif

    report = _report(pinned, name)
    data = json.loads(report.to_json())
    report_validator.validate(data)
    sarif_validator.validate(json.loads(render_sarif([report])))
    assert report_from_dict(data).to_json() == report.to_json()


@pytest.mark.parametrize("name", [n for n in SNAPSHOT_RUNS if n in _runs()])
def test_fixture_markdown_snapshots(name: str, pinned: Path) -> None:
    from autopsy.report.markdown import render_markdown

    assert_snapshot(f"fixture_{name}.md", render_markdown(_report(pinned, name)))


SCREEN_LINES = 50  # a first screen: a laptop terminal at 100 columns


@pytest.mark.parametrize("name", _runs())
def test_fixture_terminal_fits_100_columns_and_acts_on_the_first_screen(name: str, pinned: Path) -> None:
    """100 columns, no word broken, the whole verdict and the fix on the first screen, Not evaluated last."""
    from autopsy.report.common import verdict_finding
    from autopsy.report.terminal import _fix_lines, render_terminal

    report = _report(pinned, name)
    text = render_terminal(report, width=100)
    assert_snapshot(f"fixture_{name}.txt", text)
    lines = text.splitlines()
    for line in lines:  # a line over 100 columns is one word that cannot be broken (a long path)
        assert len(line) <= 100 or len(line.split()) <= 2, line
    top = verdict_finding(report)
    first = " ".join(x.strip() for x in lines[:SCREEN_LINES])
    if top is not None:
        assert " ".join(top.message.split()) in first  # the verdict's message, whole
        assert "Fix" in lines[:SCREEN_LINES] or "Recovery" in lines[:SCREEN_LINES], name
        fix = _fix_lines(report, 100)
        if fix:  # the whole fix (every step) on the first screen, not only its heading
            start = lines.index("Fix")
            assert lines[start:start + len(fix)] == fix, name
            assert start + len(fix) <= SCREEN_LINES, f"{name}: the fix ends on line {start + len(fix)}"
        assert "," not in next((w for w in first.split() if w.startswith("pid=")), "")
    headings = [x for x in lines if x and not x.startswith(" ")]
    if report.not_evaluated:
        assert headings[-1].startswith("Not evaluated"), headings


@pytest.mark.parametrize("name", _runs())
def test_fixture_resume_command_parses_with_the_runs_own_script(name: str, pinned: Path) -> None:
    """The resume command the report proposes (not a re-derivation of it) parses with the run's
    own script; a run with a checkpoint but no command says why instead of inventing a flag."""
    from tests.argparse_rebuild import rebuild_parser, script_args

    report = _report(pinned, name)
    plan = report.run.resume
    if plan is None:
        assert report.run.latest_valid_checkpoint is None or report.run.poisoned_checkpoints, name
        return
    if plan.command is None:
        assert plan.note, f"{name}: a checkpoint to resume from and no word on how"
        return
    assert plan.verified and plan.script and plan.checkpoint and plan.option, (name, plan)
    parser = rebuild_parser(RUNS / name / plan.script)
    ns, extra = parser.parse_known_args(script_args(plan.command, plan.script))
    assert not extra, (name, plan.command, extra)
    assert plan.cwd == name and (RUNS / name / plan.checkpoint).exists()  # relative to the one stated dir
    assert getattr(ns, plan.option.lstrip("-").replace("-", "_")) == plan.checkpoint, (name, plan.command)


def test_verbose_shows_every_fact_and_reason(pinned: Path) -> None:
    from autopsy.report.terminal import render_terminal

    report = _report(pinned, "disk_full")
    short, full = render_terminal(report), render_terminal(report, verbose=True)
    assert "(-v: all" in short and "(-v: all" not in full
    for o in report.not_evaluated:
        assert f"{o.rule}: " in full and f"{o.rule}: " not in short
