"""Log text with <script>, backtick fences and ANSI/OSC escapes is neutralised in every format."""

from __future__ import annotations

import json

import pytest
import report_samples as samples
from text_checks import CONTROL, outside_fences

from autopsy.report.github import annotation_lines
from autopsy.report.markdown import render_markdown
from autopsy.report.notebook import report_repr_html
from autopsy.report.sanitize import md_code, md_code_block, md_text, strip_terminal
from autopsy.report.terminal import render_table, render_terminal


def test_strip_terminal_removes_every_sequence() -> None:
    text = strip_terminal(samples.HOSTILE_EXCERPT)
    assert "\x1b" not in text and not CONTROL.search(text)
    assert "pwned title" not in text  # the OSC payload goes with the sequence
    assert "evil.example" not in text and "link" in text  # OSC 8 hyperlink target dropped, label kept
    assert "red" in text and "<script>" in text  # ordinary text is kept


@pytest.mark.parametrize("seq", ["\x1b[31m", "\x1b[2J", "\x1b]0;t\x07", "\x1b]0;t\x1b\\", "\x1bP1$r\x1b\\",
                                 "\x9b31m", "\x1b(B", "\x07", "\r", "\x08"])
def test_individual_sequences(seq: str) -> None:
    assert strip_terminal(f"a{seq}b") == "ab"


def test_terminal_output_is_clean() -> None:
    report = samples.hostile()
    for text in (render_terminal(report), render_table([report])):
        assert "\x1b" not in text and not CONTROL.search(text.replace("\n", ""))
        # nothing read from the run starts a line (CI runners treat '::cmd::' lines as commands)
        assert not any(line.startswith("::") for line in text.splitlines())


def test_markdown_neutralises_html_and_fences() -> None:
    md = render_markdown(samples.hostile(), samples.CATALOG)
    assert "\x1b" not in md and not CONTROL.search(md.replace("\n", ""))
    prose = outside_fences(md)
    assert not any("<" in line for line in prose), [line for line in prose if "<" in line]
    # the only headings are the entry's own
    assert [line for line in prose if line.startswith("#")] == [md.splitlines()[0]]
    assert "# Heading" in md  # still shown, inside the block
    # the excerpt has a run of 4 backticks: its fence is longer
    assert "\n`````\n" in md


def test_markdown_helpers() -> None:
    assert md_code("a ``b`` c") == "```a ``b`` c```"
    assert md_code("`x`") == "`` `x` ``"
    assert md_code_block("```\nx") == "````\n```\nx\n````"
    assert md_text("<b>x</b> *y* [l](u)") == "&lt;b&gt;x&lt;/b&gt; \\*y\\* \\[l\\](u)"


def test_json_keeps_raw_text_escaped_by_json() -> None:
    report = samples.hostile()
    text = report.to_json()
    assert "\x1b" not in text  # JSON escapes control characters
    assert json.loads(text)["findings"][0]["evidence"][0]["excerpt"] == samples.HOSTILE_EXCERPT


def test_github_annotations_cannot_inject_commands() -> None:
    lines = annotation_lines([samples.hostile()])
    assert len(lines) == 1
    line = lines[0]
    assert line.startswith("::error file=runs/<evil>/train.log,line=7,title=autopsy crash.exception%3A ")
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert "%0A::error::injected" in line  # escaped, not a new command


def test_notebook_html_is_escaped() -> None:
    html = report_repr_html(samples.hostile())
    assert "<script" not in html and "<img" not in html and "\x1b" not in html
    assert "&lt;script&gt;" in html


def test_lone_escape_at_the_end() -> None:
    assert strip_terminal("tail\x1b") == "tail"
