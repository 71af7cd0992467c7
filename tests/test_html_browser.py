"""The HTML report in a real browser: Debian's Chromium driven by Playwright.

Each report is loaded from ``file://`` with every request routed through a guard that
aborts (and records) anything that is not ``file:``/``data:``/``about:``; the page must
log no console error, draw its charts with the findings' markers, list the findings in the
report's order and show the hover tooltip. Full-page PNGs land in ``tests/_artifacts/``.

Every sample report and every fixture run's report is also measured at 1400 and 390 px
(:func:`check_layout`, bounding boxes from the browser): each chart has its axis titles, no
two pieces of chart text (marker labels, ticks, titles) overlap, chart text is at least
:data:`MIN_CHART_FONT_PX` CSS px, one source per metric is drawn, a series spanning two
decades (LR, grad norm) is on a log axis, the page never scrolls sideways, and the primary finding's chart
sits right under the verdict, above the findings.

When Playwright or Chromium is missing or cannot start, every test here is skipped with
the reason (``pytest -ra`` prints it); they never pass without a browser.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import html_samples as hs

from autopsy.model import OutcomeKind, Report
from autopsy.report.html import render_html

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parent / "_artifacts"
RUNS = Path(__file__).resolve().parent.parent / "fixtures" / "runs"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ALLOWED_SCHEMES = ("file:", "data:", "about:")
WIDTHS = (1400, 390)
MIN_CHART_FONT_PX = 10.0  # chart text, in CSS px as rendered, at any width from 390 px
PRIMARY_CHART_GAP_PX = 48  # "right under the verdict": at most this much space between them
LOG_CHARTS = ("lr", "grad_norm")  # series that span decades must be drawn on a log axis there

# Everything check_layout needs, measured in the page (boxes in CSS px).
LAYOUT_PROBE = """
() => {
  const shown = el => {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) { return false; }
    for (let e = el; e; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.display === "none" || s.visibility === "hidden") { return false; }
    }
    return true;
  };
  const de = document.documentElement;
  const docTop = el => el ? el.getBoundingClientRect().top + scrollY : null;
  const overflowing = [];
  for (const el of document.querySelectorAll("body *")) {
    const r = el.getBoundingClientRect();
    if (r.right > de.clientWidth + 0.5 && shown(el)) { overflowing.push(el.tagName + "." + el.className); }
  }
  const charts = [];
  for (const fig of document.querySelectorAll("figure.chart")) {
    const drawings = [...fig.querySelectorAll("svg")].filter(shown);
    const c = {id: fig.id, drawings: drawings.length, texts: [], xTitle: null, yTitle: null, labels: 0,
               perMetric: {}, values: []};
    charts.push(c);
    if (drawings.length !== 1) { continue; }
    const svg = drawings[0], scale = svg.getScreenCTM().a, box = svg.getBoundingClientRect();
    c.svg = {left: box.left, right: box.right, width: box.width};
    for (const t of svg.querySelectorAll("text")) {
      if (!shown(t)) { continue; }
      const r = t.getBoundingClientRect();
      c.texts.push({text: t.textContent, cls: t.getAttribute("class") || "",
                    px: parseFloat(getComputedStyle(t).fontSize) * scale,
                    l: r.left, r: r.right, t: r.top, b: r.bottom});
    }
    const xt = svg.querySelector(".x-title"), yt = svg.querySelector(".y-title");
    c.xTitle = xt && shown(xt) ? xt.textContent : null;
    c.yTitle = yt && shown(yt) ? yt.textContent : null;
    c.labels = [...svg.querySelectorAll("text.label")].filter(shown).length;
    const levels = [...svg.querySelectorAll(".marker.hline[data-value]")].map(g => Number(g.dataset.value));
    for (const g of svg.querySelectorAll(".lines > g[data-metric]")) {
      if (!shown(g.querySelector("path.series"))) { continue; }
      c.perMetric[g.dataset.metric] = (c.perMetric[g.dataset.metric] || 0) + 1;
    }
    const blob = fig.querySelector("script.chart-data");
    if (blob) { c.values = JSON.parse(blob.textContent).lines.flatMap(ln => ln.v).concat(levels); }
  }
  const verdict = document.querySelector("#verdict"), primary = document.querySelector("#primary-chart");
  const after = verdict ? verdict.nextElementSibling : null;
  return {scrollWidth: de.scrollWidth, clientWidth: de.clientWidth, overflowing: overflowing.slice(0, 5), charts,
          verdictBottom: verdict ? verdict.getBoundingClientRect().bottom + scrollY : null,
          findingsTop: docTop(document.querySelector("#findings")),
          primaryTop: docTop(primary),
          primaryChart: primary ? primary.querySelector("figure.chart").id : null,
          afterVerdict: after ? after.id : null};
}
"""


def _intersect(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return bool(a["l"] < b["r"] and b["l"] < a["r"] and a["t"] < b["b"] and b["t"] < a["b"])


def check_layout(page: Page, report: Report, where: str) -> dict[str, Any]:
    """The chart and page properties of the report as rendered at the page's width."""
    r: dict[str, Any] = page.page.evaluate(LAYOUT_PROBE)
    assert r["scrollWidth"] <= r["clientWidth"], \
        f"{where}: the page scrolls sideways ({r['scrollWidth']} > {r['clientWidth']} px): {r['overflowing']}"
    for c in r["charts"]:
        at = f"{where} {c['id']}"
        assert c["drawings"] == 1, f"{at}: {c['drawings']} drawings shown (one of wide/narrow expected)"
        assert c["xTitle"] and c["xTitle"].strip(), f"{at}: no x-axis title"
        assert c["yTitle"] and c["yTitle"].strip(), f"{at}: no y-axis title"
        small = [(t["text"], round(t["px"], 1)) for t in c["texts"] if t["px"] < MIN_CHART_FONT_PX]
        assert not small, f"{at}: chart text under {MIN_CHART_FONT_PX} px: {small[:5]}"
        texts = c["texts"]
        hits = [(a["text"], b["text"]) for i, a in enumerate(texts) for b in texts[i + 1:] if _intersect(a, b)]
        assert not hits, f"{at}: overlapping chart text: {hits[:5]}"
        outside = [t["text"] for t in texts if t["l"] < c["svg"]["left"] - 0.5 or t["r"] > c["svg"]["right"] + 0.5]
        assert not outside, f"{at}: text outside its chart: {outside[:5]}"
        if c["id"] not in ("chart-ranks", "chart-checkpoints"):
            many = {m: n for m, n in c["perMetric"].items() if n != 1}
            assert not many, f"{at}: more than one source drawn for {many} (the others are toggles)"
        # the series and the levels drawn with them (a configured minimum of 0 keeps an axis linear)
        values = [v for v in c["values"] if isinstance(v, (int, float))]
        if c["id"].removeprefix("chart-") in LOG_CHARTS and values and min(values) > 0 \
                and max(values) / min(values) >= 100:
            assert "log scale" in c["yTitle"], f"{at}: spans {max(values) / min(values):.3g}x on a linear axis"
    if report.primary is not None and r["charts"]:
        assert r["primaryChart"] is not None, f"{where}: no chart of the primary finding under the verdict"
        assert r["afterVerdict"] == "primary-chart", f"{where}: {r['afterVerdict']} comes right after the verdict"
        gap = r["primaryTop"] - r["verdictBottom"]
        assert 0 <= gap <= PRIMARY_CHART_GAP_PX, f"{where}: the primary chart starts {gap:.0f} px under the verdict"
        assert r["primaryTop"] < r["findingsTop"], f"{where}: the primary chart is below the findings"
    return r


def _chromium_path() -> str | None:
    env = os.environ.get("AUTOPSY_CHROMIUM")
    if env:
        return env
    for name in ("/usr/bin/chromium", "chromium", "chromium-browser"):
        found = shutil.which(name) if not name.startswith("/") else (name if os.access(name, os.X_OK) else None)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        pytest.skip(f"browser tests need the playwright package: {exc}")
    exe = _chromium_path()
    if exe is None:
        pytest.skip("browser tests need Chromium: apt-get install chromium (or set AUTOPSY_CHROMIUM)")
    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, timeout=60_000)
    except Exception as exc:  # the reason is the point: print it in the skip
        pw.stop()
        pytest.skip(f"Chromium at {exe} could not start: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    yield b
    b.close()
    pw.stop()


class Page:
    """A loaded report with what the guards recorded."""

    def __init__(self, browser: Any, html_path: Path, width: int = 1280) -> None:
        self.errors: list[str] = []
        self.blocked: list[str] = []
        self.page = browser.new_page(viewport={"width": width, "height": 900})
        self.page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type == "error"
                     else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.route("**/*", self._guard)
        self.page.goto(html_path.resolve().as_uri(), wait_until="load")

    def _guard(self, route: Any) -> None:
        url = route.request.url
        if url.startswith(ALLOWED_SCHEMES):
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort()

    def check_clean(self) -> None:
        assert self.blocked == [], f"network requests: {self.blocked}"
        assert self.errors == [], self.errors

    def rules_in_order(self) -> list[str]:
        return self.page.eval_on_selector_all("li.finding", "els => els.map(e => e.dataset.rule)")

    def count(self, selector: str) -> int:
        return int(self.page.locator(selector).count())

    def screenshot(self, name: str, *, jpeg: bool = False) -> Path:
        """A full-page capture; JPEG for the fixture sweep (half the time of a PNG of a tall page)."""
        ARTIFACTS.mkdir(exist_ok=True)
        out = ARTIFACTS / f"html_{name}.{'jpg' if jpeg else 'png'}"
        if jpeg:
            self.page.screenshot(path=str(out), full_page=True, type="jpeg", quality=75)
        else:
            self.page.screenshot(path=str(out), full_page=True)
        return out


def _write(name: str, text: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.html"
    path.write_text(text, encoding="utf-8")
    return path


# What each sample must show: charts drawn and the rule markers each must carry.
SAMPLE_EXPECT: dict[str, dict[str, Any]] = {
    "disk_full": {"charts": ["loss", "lr", "checkpoints"], "primary_chart": "checkpoints",
                  "markers": {"checkpoints": ["disk.full", "checkpoint.retention"], "loss": ["disk.full"]}},
    "nan_loss": {"charts": ["loss", "grad_norm", "checkpoints"], "primary_chart": "loss",
                 "markers": {"loss": ["loss.nonfinite"], "grad_norm": ["loss.spike", "loss.nonfinite"]}},
    "lr_floor": {"charts": ["loss", "lr", "throughput"], "primary_chart": "lr",
                 "markers": {"lr": ["lr.floor"], "loss": ["loss.plateau"]}},
    "stragglers": {"charts": ["loss", "ranks"], "primary_chart": "ranks", "markers": {}},
    "hostile": {"charts": ["loss"], "primary_chart": "loss", "markers": {"loss": ["crash.exception"]}},
}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", sorted(SAMPLE_EXPECT))
def test_sample_report_in_browser(browser: Any, name: str, width: int, tmp_path: Path) -> None:
    report, run = hs.SAMPLES[name](tmp_path / name)
    page = Page(browser, _write(name, render_html(report, run)), width)
    try:
        expect = SAMPLE_EXPECT[name]
        for chart_id in expect["charts"]:
            fig = f"#chart-{chart_id}"
            assert page.count(f"{fig} svg:visible") == 1, chart_id
            assert page.count(f"{fig} svg:visible path.series") >= 1, chart_id
            box = page.page.locator(f"{fig} svg:visible").bounding_box()
            assert box and box["width"] > min(400, width - 80) and box["height"] > 100, (chart_id, box)
            for rule in expect["markers"].get(chart_id, []):
                assert page.count(f'{fig} svg:visible .marker[data-rule="{rule}"]') >= 1, (chart_id, rule)
        assert page.rules_in_order() == [f.rule for f in report.findings]
        layout = check_layout(page, report, f"{name}@{width}")
        assert layout["primaryChart"] == f"chart-{expect['primary_chart']}"
        _check_hover(page, f"#chart-{expect['charts'][0]}")
        if name == "hostile":
            # nothing from the log ran: no alert dialog, the text shows as text
            assert page.page.evaluate("document.querySelectorAll('script').length") == \
                1 + page.count("script.chart-data")
            assert "<script>alert(1)</script>" in page.page.inner_text("#finding-1")
        page.screenshot(f"{name}_{width}")
        page.check_clean()
    finally:
        page.page.close()


def test_marker_labels_stack_instead_of_overprinting(browser: Any, tmp_path: Path) -> None:
    """Three findings at one step (disk.full, checkpoint.retention, checkpoint.corrupt) and a
    forecast beside them: four labels within a few pixels, each in its own box at both widths."""
    report, run = hs.disk_full(tmp_path / "run")
    path = _write("disk_full_labels", render_html(report, run))
    for width in WIDTHS:
        page = Page(browser, path, width)
        try:
            layout = check_layout(page, report, f"disk_full@{width}")
            chart = next(c for c in layout["charts"] if c["id"] == "chart-checkpoints")
            assert chart["labels"] >= 4, chart["labels"]  # the overlap check had something to check
        finally:
            page.page.close()


def test_other_sources_are_toggles(browser: Any, tmp_path: Path) -> None:
    """The loss is in TensorBoard and in a trainer_state.json: one is drawn, the other's legend
    key shows it (and hides it again), at both widths."""
    report, run = hs.disk_full(tmp_path / "run")
    path = _write("disk_full_toggles", render_html(report, run))
    for width in WIDTHS:
        page = Page(browser, path, width)
        try:
            fig = page.page.locator("#chart-loss")
            hidden = fig.locator("input.tg:not(:checked)")
            assert hidden.count() == 1
            index = (hidden.get_attribute("class") or "").split()[-1].removeprefix("t")
            series = fig.locator(f"svg:visible .l{index} path.series")
            assert not series.is_visible()
            label = fig.locator(f"label.k{index}")
            assert "trainer_state.json" in label.inner_text()
            label.click()
            assert series.is_visible()
            label.click()
            assert not series.is_visible()
            page.check_clean()
        finally:
            page.page.close()


def _check_hover(page: Page, fig: str) -> None:
    svg = page.page.locator(f"{fig} svg:visible")
    svg.scroll_into_view_if_needed()
    box = svg.bounding_box()
    assert box
    page.page.mouse.move(box["x"] + box["width"] * 0.45, box["y"] + box["height"] * 0.55)
    tip = page.page.locator("#tip")
    assert tip.is_visible(), "hover tooltip did not show"
    assert tip.inner_text().startswith("step ")
    assert svg.locator(".cursor").get_attribute("visibility") == "visible"


def test_saved_report_without_run_in_browser(browser: Any, tmp_path: Path) -> None:
    report, _run = hs.disk_full(tmp_path / "run")
    page = Page(browser, _write("disk_full_norun", render_html(report, None)))
    try:
        assert page.count("svg") == 0
        assert "Plots need the run directory" in page.page.inner_text("#plots")
        assert page.rules_in_order() == [f.rule for f in report.findings]
        assert page.count("#finding-1 .ln.hl") == 1
        page.screenshot("disk_full_norun")
        page.check_clean()
    finally:
        page.page.close()


# Real fixture runs, end to end through analyze(): the "done when".
REAL = {"disk_full": "disk.full", "nan_loss": "loss.nonfinite", "lr_floor": "lr.floor"}
REAL_MARKER_CHART = {"disk_full": "checkpoints", "nan_loss": "loss", "lr_floor": "lr"}


def _pipeline_gap(report: Report) -> str | None:
    """The reason the analysis pipeline cannot produce this report yet (a module missing)."""
    for o in report.outcomes:
        if o.kind is OutcomeKind.RULE_ERROR and o.reason and "ModuleNotFoundError" in o.reason:
            return o.reason
    return None


def _fixture_names() -> list[str]:
    return sorted(p.name for p in RUNS.iterdir() if p.is_dir()) if RUNS.is_dir() else []


@pytest.fixture(scope="module")
def fixture_reports(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Each fixture run analysed once (pinned copy, pinned time) and rendered, for every width."""
    from fixture_runs import pinned_copy, pinned_now

    from autopsy.api import analyze
    from autopsy.run import LoadOptions, load_run

    done: dict[str, tuple[Report, Path]] = {}

    def get(name: str) -> tuple[Report, Path]:
        if name not in done:
            # the run as it was when generated (git keeps no mtimes), analysed at a pinned time
            run_dir = pinned_copy(name, tmp_path_factory.mktemp(name))
            options = LoadOptions(now=pinned_now(name))
            report = analyze(run_dir, options=options)
            done[name] = (report, _write(f"fixture_{name}", render_html(report, load_run(run_dir, options))))
        return done[name]

    return get


@pytest.mark.parametrize("name", _fixture_names() or ["(no fixture runs)"])
def test_fixture_run_report_in_browser(browser: Any, fixture_reports: Any, name: str) -> None:
    if not (RUNS / name).is_dir():
        pytest.skip(f"fixture runs not generated under {RUNS}")
    report, path = fixture_reports(name)
    # A wrong diagnosis is a failure, never a skip: every module of the pipeline exists.
    assert _pipeline_gap(report) is None, _pipeline_gap(report)
    page = Page(browser, path, WIDTHS[0])
    try:
        assert page.rules_in_order() == [f.rule for f in report.findings]
        for width in WIDTHS:  # one page, resized: the stylesheet picks each chart's drawing by its width
            page.page.set_viewport_size({"width": width, "height": 900})
            check_layout(page, report, f"{name}@{width}")
            if name in REAL:
                assert report.primary is not None and report.primary.rule == REAL[name]
                assert page.count("figure.chart svg:visible") >= 1
                chart = REAL_MARKER_CHART[name]
                assert page.count(f'#chart-{chart} svg:visible .marker[data-rule="{REAL[name]}"]') >= 1
            page.screenshot(f"fixture_{name}_{width}", jpeg=True)
        page.check_clean()
    finally:
        page.page.close()
