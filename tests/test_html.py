"""The HTML report without a browser: escaping, self-containment, downsampling, sections."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import html_samples as hs

from autopsy.report.chart_svg import layout, nice_ticks, script_json
from autopsy.report.charts import make_line, minmax_indices
from autopsy.report.html import render_html

# Any way a document can make the browser fetch something: attributes, CSS, imports.
_FETCHING = re.compile(
    r"""(?:\b(?:src|srcset|poster|data|action|formaction|background|xlink:href)\s*=\s*["']?\s*(?!data:|\#)[a-z]+:)"""
    r"""|<link\b|@import|url\(\s*["']?\s*(?!data:|\#)[a-z]+:|<iframe|<object|<embed|<img\b""",
    re.IGNORECASE,
)


@pytest.fixture(params=sorted(hs.SAMPLES))
def sample(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str, str]:
    report, run = hs.SAMPLES[request.param](tmp_path / request.param)
    return request.param, render_html(report, run), render_html(report, None)


def test_hostile_text_renders_as_text(tmp_path: Path) -> None:
    report, run = hs.hostile(tmp_path / "run")
    for out in (render_html(report, run), render_html(report, None)):
        # the only <script> elements are ours: the JSON data blocks and the inline JS
        scripts = re.findall(r"<script\b[^>]*>", out)
        assert set(scripts) <= {'<script type="application/json" class="chart-data">', "<script>"}, scripts
        assert out.count("<script>") == 1
        assert "alert(1)" in out  # the text is there ...
        assert "<script>alert(1)" not in out  # ... but never as markup
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out
        assert "{{7*7}}" in out and ">49<" not in out  # not evaluated as a template
        assert "\x1b" not in out  # ANSI colour codes stripped from the excerpt
    with_run = render_html(report, run)
    # in the JSON for the hover layer, a tag holding </script> cannot end the block
    blobs = re.findall(r'<script type="application/json" class="chart-data">(.*?)</script>', with_run, re.S)
    assert blobs and all("<" not in b and ">" not in b for b in blobs)
    assert "\\u003c/script\\u003e" in with_run


def test_evidence_outside_the_run_is_not_read(tmp_path: Path) -> None:
    report, run = hs.hostile(tmp_path / "run")
    (tmp_path / "outside.log").write_text("SECRET-OUTSIDE-LINE\n")
    out = render_html(report, run)
    assert "SECRET-OUTSIDE-LINE" not in out


def test_no_external_resources(sample: tuple[str, str, str]) -> None:
    _name, with_run, without_run = sample
    for out in (with_run, without_run):
        assert not _FETCHING.search(out), _FETCHING.search(out)
        assert out.startswith("<!DOCTYPE html>")
        assert "<style>" in out and "<script>" in out  # CSS and JS inlined


def test_no_external_url_anywhere_without_card_references(tmp_path: Path) -> None:
    report, run = hs.lr_floor(tmp_path / "run")
    out = render_html(report, run)
    refs = set(re.findall(r"https?://[^\s<\"']+", out))
    # the only URLs allowed are rule-card references, shown as text, never fetched
    assert all("<li>" + r in out for r in refs)


def test_fetching_regex_catches_what_it_should() -> None:
    for bad in ('<img src="https://x/y.png">', "<link rel=stylesheet href=x>", "@import 'http://x'",
                "background: url(https://x/y)", '<script src="http://cdn/x.js"></script>'):
        assert _FETCHING.search(bad), bad
    assert not _FETCHING.search('<a href="#finding-1">x</a> <svg viewBox="0 0 1 1"></svg>')


def test_minmax_downsampling_keeps_spikes_and_dips() -> None:
    rng = np.random.default_rng(1)
    steps = np.arange(200_000, dtype="float64")
    values = 1 + 0.01 * rng.standard_normal(len(steps))
    values[123_457] = 1e4  # a one-step spike
    values[7] = -50.0  # a one-step dip
    keep = minmax_indices(steps, values, buckets=300)
    assert len(keep) <= 4 * 300
    assert 123_457 in keep and 7 in keep
    assert keep[0] == 0 and keep[-1] == len(steps) - 1
    assert np.all(np.diff(keep) > 0)  # sorted, unique
    line = make_line("loss", steps, values)
    assert line.values.max() == 1e4 and line.values.min() == -50.0
    assert line.n_points == 200_000 and len(line.steps) <= 4 * 300 + 1


def test_short_series_is_not_downsampled() -> None:
    steps = np.arange(100, dtype="float64")
    assert list(minmax_indices(steps, steps * 2)) == list(range(100))


def test_nonfinite_values_break_the_line_and_are_marked() -> None:
    steps = np.arange(10_000, dtype="float64")
    values = np.linspace(3, 1, len(steps))
    values[5000:5003] = np.nan
    values[9000] = np.inf
    line = make_line("loss", steps[::-1], values[::-1])  # unsorted input is sorted
    assert line.n_nonfinite == 4
    assert line.nonfinite[0] == (5000.0, "NaN")
    assert [(a, b, n) for a, b, _k, n in line.nonfinite_runs] == [(5000.0, 5002.0, 3), (9000.0, 9000.0, 1)]
    assert np.isfinite(line.values).all()
    # three segments: before the NaNs, between NaN and inf, after inf
    assert int(line.starts.sum()) == 3
    drawn = layout(hs_chart(line))
    assert drawn.lines[0].d.count("M") == 3


def hs_chart(line: object) -> object:
    from autopsy.report.charts import Chart

    line.css = "c0"  # type: ignore[attr-defined]
    return Chart(id="t", title="t", lines=[line])  # type: ignore[list-item]


def test_nice_ticks() -> None:
    assert nice_ticks(0, 9000, 7) == [0, 2000, 4000, 6000, 8000]
    assert nice_ticks(0.0, 3e-4, 4) == pytest.approx([0, 1e-4, 2e-4, 3e-4])
    assert nice_ticks(5, 5) == [5]


def test_script_json_is_inert() -> None:
    text = script_json({"label": "</script><script>alert(1)</script>&"})
    assert "<" not in text and ">" not in text and "&" not in text


def test_markers_where_findings_point(tmp_path: Path) -> None:
    report, run = hs.nan_loss(tmp_path / "run")
    out = render_html(report, run)
    loss = _figure(out, "loss")
    assert 'data-rule="loss.nonfinite"' in loss
    assert "NaN from step 312" in loss or "+inf, NaN from step 312" in loss
    grad = _figure(out, "grad_norm")
    assert 'data-rule="loss.spike"' in grad  # the spike is drawn on the grad-norm chart
    assert "running median 1.5" in grad

    report, run = hs.lr_floor(tmp_path / "lr")
    out = render_html(report, run)
    lr = _figure(out, "lr")
    assert "observed floor 3e-05" in lr and "configured min 0" in lr
    assert 'class="marker band' in _figure(out, "loss")  # the plateau window

    report, run = hs.disk_full(tmp_path / "disk")
    out = render_html(report, run)
    ck = _figure(out, "checkpoints")
    assert "forecast: disk full at step ~9,100" in ck and "volume 32.2 GB" in ck  # 30 GiB, decimal units
    for size in ("wide", "narrow"):  # each drawing of the chart carries every checkpoint
        drawing = _drawing(ck, size)
        assert drawing.count("ckpt-corrupt") == 1 and drawing.count("ckpt-valid") == 8, size


def _figure(out: str, chart_id: str) -> str:
    m = re.search(rf'<figure class="chart" id="chart-{chart_id}".*?</figure>', out, re.S)
    assert m, f"no chart {chart_id}"
    return m.group(0)


def _drawing(figure: str, size: str) -> str:
    m = re.search(rf'<svg class="{size}".*?</svg>', figure, re.S)
    assert m, f"no {size} drawing"
    return m.group(0)


def test_verdict_recovery_and_order(tmp_path: Path) -> None:
    report, run = hs.disk_full(tmp_path / "run")
    out = render_html(report, run)
    verdict = out[out.index('id="verdict"'):out.index('id="findings"')]
    assert "Disk full while saving a checkpoint" in verdict and "disk.full" in verdict
    assert "checkpoint-8000 (step 8,000)" in verdict
    assert "1,000 steps" in verdict and "1h 02m" in verdict
    assert "step 9,000 of 20,000" in verdict
    rules = re.findall(r'<li id="finding-\d+" class="finding[^"]*" data-rule="([^"]+)"', out)
    assert rules == [f.rule for f in report.findings]
    # the offending line is highlighted, with its number, among its context lines
    assert re.search(r'<span class="ln hl"><span class="no">120</span><span class="tx">safetensors_rust', out)
    assert '<span class="ln"><span class="no">118</span><span class="tx">Saving model checkpoint' in out
    # explained-by links to the finding that explains it
    assert 'Explained by <a href="#finding-1"><code>disk.full</code></a>' in out


def test_without_run_says_plots_need_the_run_directory(tmp_path: Path) -> None:
    report, _run = hs.disk_full(tmp_path / "run")
    out = render_html(report, None)
    assert "Plots need the run directory" in out
    assert "<svg" not in out
    assert "No space left on device" in out  # evidence excerpt still shown
    assert 'class="ln hl"><span class="no">120</span>' in out


def test_per_rank_section(tmp_path: Path) -> None:
    report, run = hs.stragglers(tmp_path / "run")
    out = render_html(report, run)
    ranks = out[out.index('<section id="ranks">'):]
    assert ranks.count('<tr class="flagged">') == 1
    assert re.search(r'<tr class="flagged"><td>2 <span class="tag bad">flagged</span></td><td class="r">\d+</td>'
                     r'<td class="r">0.95</td><td class="r">1.9</td>', ranks)


def test_a_broken_section_does_not_hide_the_verdict(tmp_path: Path) -> None:
    report, run = hs.disk_full(tmp_path / "run")

    class Broken(hs.FakeRun):
        @property
        def checkpoint_list(self) -> list:  # type: ignore[override]
            raise OSError("disk on fire")

        @checkpoint_list.setter
        def checkpoint_list(self, value: object) -> None:
            pass

    broken = Broken(run.root, run.scalars, [], run.artifact_list)
    out = render_html(report, broken)
    assert "Disk full while saving a checkpoint" in out
    assert "checkpoints: could not be drawn (OSError: disk on fire)" in out


def test_empty_report_renders(tmp_path: Path) -> None:
    from autopsy.model import Report, RunSummary

    out = render_html(Report(RunSummary(path=str(tmp_path)), ()), None)
    assert "No failure found" in out and "No rule fired" in out


def test_sizes_stay_small(sample: tuple[str, str, str]) -> None:
    name, with_run, without_run = sample
    assert len(with_run.encode()) < 400_000, name
    assert len(without_run.encode()) < 100_000, name


# ------------------------------------------------------------------ chart wording and layout


def test_each_axis_uses_one_tick_format() -> None:
    from autopsy.report.chart_format import byte_ticks, linear_ticks, log_ticks, step_ticks

    assert step_ticks([0, 2500, 5000, 7500]) == ["0", "2,500", "5,000", "7,500"]
    assert step_ticks([0, 5000, 10000, 15000]) == ["0", "5k", "10k", "15k"]  # never "5,000" beside "10k"
    assert step_ticks([0, 2500, 5000, 7500, 10000, 12500]) == ["0", "2.5k", "5.0k", "7.5k", "10.0k", "12.5k"]
    assert linear_ticks([0, 5e-5, 1e-4, 1.5e-4, 2e-4]) == (["0.0", "0.5", "1.0", "1.5", "2.0"], "×1e-4")
    assert linear_ticks([2.5, 2.75, 3.0]) == (["2.50", "2.75", "3.00"], "")
    assert log_ticks([1e-7, 1e-5, 1e-3]) == ["1e-7", "1e-5", "1e-3"]  # never "1e+05" beside "1,000"
    assert log_ticks([0.1, 1, 10, 100, 1000]) == ["0.1", "1", "10", "100", "1,000"]
    assert byte_ticks([0, 5e8, 1e9, 1.5e9]) == (["0.0", "0.5", "1.0", "1.5"], "GB")


def _lr_chart(values: np.ndarray, levels: tuple[float, ...] = ()) -> object:
    from autopsy.report.charts import Chart, Marker, spans_decades

    line = make_line("lr", np.arange(len(values), dtype="float64"), values)
    chart = Chart(id="lr", title="Learning rate", lines=[line],
                  markers=[Marker("hline", f"level {v}", value=v) for v in levels])
    return spans_decades(chart)


def test_log_axis_when_a_series_spans_two_decades() -> None:
    warmup = np.concatenate((np.linspace(1e-7, 3e-4, 100), np.full(100, 3e-4)))
    assert _lr_chart(warmup) is True
    assert _lr_chart(np.linspace(3e-5, 3e-4, 100)) is False  # one decade: linear reads better
    assert _lr_chart(warmup, levels=(0.0,)) is False  # a configured minimum of 0 must stay visible
    assert _lr_chart(np.concatenate(([0.0], warmup))) is False  # a zero cannot sit on a log axis


def test_marker_labels_get_rows_and_never_share_one_box() -> None:
    from autopsy.report.chart_labels import TopLabel, place_rows

    labels = [TopLabel(x, f"rule.{i} (root cause)") for i, x in enumerate([100, 101, 103, 180, 880, 885, 20])]
    rows = place_rows(labels, 13.0, 2.0, 898.0)
    assert rows >= 3
    for a in labels:
        assert 2.0 <= a.left and a.right <= 898.0
        for b in labels:
            if a is not b and a.row == b.row:
                assert a.right <= b.left or b.right <= a.left, (a, b)


def test_primary_chart_comes_right_after_the_verdict_and_other_sources_are_toggles(tmp_path: Path) -> None:
    report, run = hs.disk_full(tmp_path / "run")
    out = render_html(report, run)
    after_verdict = out[out.index("</section>", out.index('id="verdict"')):]
    assert after_verdict.removeprefix("</section>").lstrip().startswith('<section id="primary-chart"')
    assert out.index('id="chart-checkpoints"') < out.index('<section id="findings">')
    assert out.count('id="chart-checkpoints"') == 1  # moved, not copied
    assert 'checkpoint timeline</a> is shown under the verdict' in out
    loss = _figure(out, "loss")
    # TensorBoard's loss is drawn; the trainer_state copy (another cadence) is a toggle, off
    assert re.search(r'<input type="checkbox" class="tg t0" id="tg-loss-0" checked>', loss)
    assert re.search(r'<input type="checkbox" class="tg t1" id="tg-loss-1">', loss)
    assert 'for="tg-loss-1"' in loss and "trainer_state.json" in loss
    for size in ("wide", "narrow"):
        drawing = _drawing(loss, size)
        assert '<text class="axis-title y-title"' in drawing and ">training step</text>" in drawing
