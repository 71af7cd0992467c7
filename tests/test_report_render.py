"""Terminal and Markdown renderers on hand-built reports: snapshots, format, determinism."""

from __future__ import annotations

import random
import re
from dataclasses import replace

import pytest
import report_samples as samples
from snapshot_util import assert_snapshot

from autopsy.model import Report
from autopsy.report.markdown import ENTRY_SEPARATOR, render_markdown, root_causes
from autopsy.report.terminal import render_table, render_terminal, render_verdict

# The ISSUES-log template (shared/issue-template.md): these lines, in this order, per entry.
TEMPLATE_HEADINGS = ["**Issue:**", "**Symptoms:**", "**Root Cause:**", "**Solution Applied:**",
                     "**Files Changed:**", "**Lesson Learned:**", "**Related Guidelines:**", "**Status:**"]


@pytest.mark.parametrize("name", sorted(samples.SAMPLES))
def test_terminal_snapshot(name: str) -> None:
    assert_snapshot(f"sample_{name}.txt", render_terminal(samples.SAMPLES[name]()))


@pytest.mark.parametrize("name", sorted(samples.SAMPLES))
def test_markdown_snapshot(name: str) -> None:
    assert_snapshot(f"sample_{name}.md", render_markdown(samples.SAMPLES[name](), samples.CATALOG))


def test_table_snapshot() -> None:
    reports = [f() for f in samples.SAMPLES.values()] + [samples.clean()]
    assert_snapshot("sample_table.txt", render_table(reports))


def _entries(md: str) -> list[str]:
    return md.split(ENTRY_SEPARATOR)


@pytest.mark.parametrize("name", sorted(samples.SAMPLES))
def test_markdown_follows_the_template(name: str) -> None:
    report = samples.SAMPLES[name]()
    md = render_markdown(report, samples.CATALOG)
    entries = _entries(md)
    assert len(entries) == len(root_causes(report)) >= 1
    for entry in entries:
        lines = entry.splitlines()
        assert re.fullmatch(r"## \d{4}-\d{2}-\d{2} - \S.*", lines[0]), lines[0]
        found = [h for line in lines for h in TEMPLATE_HEADINGS if line.startswith(h)]
        assert found == TEMPLATE_HEADINGS
        assert lines[-1] == "**Status:** ⏳ IN PROGRESS"
        # each heading but the inline ones stands alone on its line, followed by content
        for h in ("**Symptoms:**", "**Root Cause:**", "**Solution Applied:**", "**Files Changed:**",
                  "**Lesson Learned:**", "**Related Guidelines:**"):
            i = lines.index(h)
            assert lines[i + 1].strip(), f"{h} has no content"


def test_disk_full_entry_is_specialised_with_facts() -> None:
    md = render_markdown(samples.disk_full(), samples.CATALOG)
    assert md.startswith("## 2025-10-24 - Training crash: disk full at step 9000\n")  # failure date, not today
    assert "`save_total_limit: 3` at `configs/train.yaml:12`" in md  # config snippet with file:line
    assert "Set `save_total_limit: 2` (now 3 at `configs/train.yaml:12`)" in md
    # 8 checkpoints of 2.55 GB + the 0.12 GB half-written one, all but checkpoint-8000
    assert "delete the other 7 complete checkpoint directories" in md and "frees 17.6 GB" in md
    assert "delete `checkpoint-9000` too: it cannot be resumed from" in md
    assert ("Resume, from `runs/exp42`: `python train.py --config configs/train.yaml --resume_from_checkpoint "
            "checkpoint-8000`") in md
    assert "- `configs/train.yaml` (line 12): `save_total_limit: 3`" in md  # Files Changed
    assert "<https://huggingface.co/docs/transformers/" in md  # card references
    assert "autopsy fingerprint: `disk.full:" in md


def test_one_entry_per_root_cause_explained_findings_are_symptoms() -> None:
    report = samples.disk_full()
    md = render_markdown(report, samples.CATALOG)
    assert len(_entries(md)) == 1  # retention and corrupt are explained by disk.full
    assert "`checkpoint.corrupt` (error)" in md
    nan = render_markdown(samples.nan_loss(), samples.CATALOG)
    assert len(_entries(nan)) == 1  # the unexplained spike is a warning: no entry of its own
    assert _entries(nan)[0].startswith("## 2025-10-24 - Loss became NaN/Inf at step 1234")


def test_nan_resume_goes_before_the_first_nonfinite_step() -> None:
    md = render_markdown(samples.nan_loss(), samples.CATALOG)
    assert "Resume from `checkpoint-1000` (step 1,000, before the first non-finite step 1,234)" in md


def test_markdown_without_catalog_still_renders() -> None:
    md = render_markdown(samples.empty_log(), catalog=samples.FakeCatalog([]))
    assert "**Solution Applied:**\n1. Run Python unbuffered" in md
    assert md.startswith("## 2025-10-24 - Training log is empty")  # no failure time: newest artifact mtime


def test_no_findings_gives_a_note_not_an_entry() -> None:
    md = render_markdown(samples.clean(), samples.CATALOG)
    assert "##" not in md and "no failure found" in md


def test_terminal_verdict_and_sections() -> None:
    report = samples.disk_full()
    text = render_terminal(report)
    head = text.split("\n\n", 1)[0]
    assert " ".join(head.split()) == " ".join(render_verdict(report).split())  # the whole verdict, wrapped
    assert max(len(x) for x in text.splitlines()) <= 100
    assert head.startswith("runs/exp42: CRITICAL disk.full at step 9,000, 2025-10-24 14:03:11 UTC: ")
    sections = ["Evidence", "Fix", "Recovery", "Other findings (2)", "Unreadable, skipped or empty (1)",
                "Not evaluated (1)"]
    lines = text.splitlines()
    assert [x for x in lines if x and not x.startswith(" ")][1:] == sections  # in this order, Not evaluated last
    assert "resume, run from runs/exp42:\n    python train.py --config configs/train.yaml --resume_from_checkpoint " \
        "checkpoint-8000\n" in text
    assert "lost since the checkpoint: 1,000 steps, 1h 03m" in text
    assert "  1. Keep `checkpoint-8000` (the latest valid checkpoint)" in text  # the fix, as in markdown
    assert "\x1b" not in text


def test_colour_only_when_asked() -> None:
    report = samples.disk_full()
    assert "\x1b[" in render_terminal(report, color=True)
    assert "\x1b[" not in render_terminal(report, color=False)


def test_rule_errors_are_shown() -> None:
    text = render_terminal(samples.nan_loss())
    assert "Rule errors (1)\n  loss.plateau: ZeroDivisionError" in text


def _shuffled(report: Report) -> Report:
    items = list(report.findings)
    random.Random(7).shuffle(items)
    arts = list(report.artifacts)
    random.Random(8).shuffle(arts)
    return replace(report, findings=tuple(reversed(items)), artifacts=tuple(arts),
                   outcomes=tuple(reversed(report.outcomes)))


@pytest.mark.parametrize("name", sorted(samples.SAMPLES))
def test_output_does_not_depend_on_input_order(name: str) -> None:
    report = samples.SAMPLES[name]()
    other = _shuffled(report)
    assert render_terminal(report) == render_terminal(other)
    assert render_markdown(report, samples.CATALOG) == render_markdown(other, samples.CATALOG)
    assert report.to_json() == other.to_json()
