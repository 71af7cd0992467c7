"""The HTML report in a real browser: Debian's Chromium driven by Playwright.

Each report is loaded from ``file://`` with every request routed through a guard that
aborts (and records) anything that is not ``file:``/``data:``/``about:``; the page must
log no console error, draw its charts with the findings' markers, list the findings in the
report's order and show the hover tooltip. Full-page PNGs land in ``tests/_artifacts/``.

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

    def __init__(self, browser: Any, html_path: Path) -> None:
        self.errors: list[str] = []
        self.blocked: list[str] = []
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
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

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        out = ARTIFACTS / f"html_{name}.png"
        self.page.screenshot(path=str(out), full_page=True)
        return out


def _write(name: str, text: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.html"
    path.write_text(text, encoding="utf-8")
    return path


# What each sample must show: charts drawn and the rule markers each must carry.
SAMPLE_EXPECT = {
    "disk_full": {"charts": ["loss", "lr", "checkpoints"],
                  "markers": {"checkpoints": ["disk.full", "checkpoint.retention"], "loss": ["disk.full"]}},
    "nan_loss": {"charts": ["loss", "grad_norm", "checkpoints"],
                 "markers": {"loss": ["loss.nonfinite"], "grad_norm": ["loss.spike", "loss.nonfinite"]}},
    "lr_floor": {"charts": ["loss", "lr", "throughput"],
                 "markers": {"lr": ["lr.floor"], "loss": ["loss.plateau"]}},
    "stragglers": {"charts": ["loss", "ranks"], "markers": {}},
    "hostile": {"charts": ["loss"], "markers": {"loss": ["crash.exception"]}},
}


@pytest.mark.parametrize("name", sorted(SAMPLE_EXPECT))
def test_sample_report_in_browser(browser: Any, name: str, tmp_path: Path) -> None:
    report, run = hs.SAMPLES[name](tmp_path / name)
    page = Page(browser, _write(name, render_html(report, run)))
    try:
        expect = SAMPLE_EXPECT[name]
        for chart_id in expect["charts"]:
            fig = f"#chart-{chart_id}"
            assert page.count(f"{fig} svg") == 1, chart_id
            assert page.count(f"{fig} svg path.series") >= 1, chart_id
            box = page.page.locator(f"{fig} svg").bounding_box()
            assert box and box["width"] > 400 and box["height"] > 100, (chart_id, box)
            for rule in expect["markers"].get(chart_id, []):
                assert page.count(f'{fig} svg .marker[data-rule="{rule}"]') >= 1, (chart_id, rule)
        assert page.rules_in_order() == [f.rule for f in report.findings]
        _check_hover(page, f"#chart-{expect['charts'][0]}")
        if name == "hostile":
            # nothing from the log ran: no alert dialog, the text shows as text
            assert page.page.evaluate("document.querySelectorAll('script').length") == \
                1 + page.count("script.chart-data")
            assert "<script>alert(1)</script>" in page.page.inner_text("#finding-1")
        page.screenshot(name)
        page.check_clean()
    finally:
        page.page.close()


def _check_hover(page: Page, fig: str) -> None:
    svg = page.page.locator(f"{fig} svg")
    svg.scroll_into_view_if_needed()
    box = svg.bounding_box()
    assert box
    page.page.mouse.move(box["x"] + box["width"] * 0.45, box["y"] + box["height"] * 0.55)
    tip = page.page.locator("#tip")
    assert tip.is_visible(), "hover tooltip did not show"
    assert tip.inner_text().startswith("step ")
    assert page.page.locator(f"{fig} .cursor").get_attribute("visibility") == "visible"


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


@pytest.mark.parametrize("name", sorted(REAL))
def test_fixture_run_report_in_browser(browser: Any, name: str, tmp_path: Path) -> None:
    if not (RUNS / name).is_dir():
        pytest.skip(f"fixture run {RUNS / name} not generated")
    from fixture_runs import pinned_copy, pinned_now

    from autopsy.api import analyze
    from autopsy.run import LoadOptions, load_run

    # the run as it was when generated (git keeps no mtimes), analysed at a pinned time
    run_dir = pinned_copy(name, tmp_path)
    options = LoadOptions(now=pinned_now(name))
    report = analyze(run_dir, options=options)
    # A wrong diagnosis is a failure, never a skip: every module of the pipeline exists.
    assert _pipeline_gap(report) is None, _pipeline_gap(report)
    html = render_html(report, load_run(run_dir, options))
    path = _write(f"fixture_{name}", html)
    page = Page(browser, path)
    try:
        assert report.primary is not None and report.primary.rule == REAL[name]
        assert page.rules_in_order() == [f.rule for f in report.findings]
        assert page.count("figure.chart svg") >= 1
        chart = REAL_MARKER_CHART[name]
        assert page.count(f'#chart-{chart} svg .marker[data-rule="{REAL[name]}"]') >= 1
        page.screenshot(f"fixture_{name}")
        page.check_clean()
    finally:
        page.page.close()
