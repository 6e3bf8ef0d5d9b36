"""The analysis page in a real browser (headless Chromium over the DevTools protocol): every
plot renders, no image is broken, the console shows no error, the task table filters and sorts.
A screenshot is kept under the test's tmp dir (its path is printed) as an artefact."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from selfplay.analysis.report import analyze
from tests.analysis_data import make_curriculum_run, make_game_run, make_plugin_run

# where to keep the page's screenshot for a person to look at (nothing is left in runs/ unless
# asked: SELFPLAY_TEST_ARTEFACTS=DIR)
ARTEFACTS = os.environ.get("SELFPLAY_TEST_ARTEFACTS")

pytestmark = pytest.mark.skipif(
    shutil.which("chromium") is None and not Path("/usr/bin/chromium").exists(),
    reason="chromium is not installed (make setup installs it with apt-get)",
)


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_page_renders_every_plot_and_the_task_table_filters(tmp_path):
    from tests.browser import Browser, chart_pixels

    runs = [make_curriculum_run(tmp_path / "a"), make_game_run(tmp_path / "b")]
    pages = analyze(runs, out=tmp_path / "compare", embeddings=False)
    pages += analyze([make_plugin_run(tmp_path / "c")], embeddings=False)  # a plug-in loop
    with Browser() as browser:
        for page in pages:
            browser.open(page)
            expected = browser.evaluate(
                "Object.keys(JSON.parse(document.getElementById('figures-data').textContent))"
                ".length")
            assert expected > 0
            assert browser.wait_for("document.body.dataset.plotsRendered") == str(expected)
            # every plot div holds a uPlot canvas with one legend row per series (and x), and
            # each series' colour on it (lines, markers, bars); heatmaps their painted cells
            figures = browser.evaluate(
                "JSON.parse(document.getElementById('figures-data').textContent)")
            charts = chart_pixels(browser)
            assert charts.keys() == figures.keys()
            for name, chart in charts.items():
                assert chart is not None, name
                if chart["kind"] == "heatmap":
                    assert chart["cells"] > 1000, (name, chart)
                else:
                    series = figures[name]["series"]
                    assert chart["legend"] == 1 + len(series), (name, chart)
                    # a bar is a filled block (> 1,000 pixels), a marker about 20
                    least = {s["label"]: 1000 if s["mode"] == "bar" else 5 for s in series}
                    assert chart["series"] and all(n > least[label] for label, n in
                                                   chart["series"].items()), (page, name, chart)
            images = browser.wait_for(
                "Array.from(document.images).every(i => i.complete) && document.images.length")
            assert images == browser.evaluate("document.querySelectorAll('.plot a').length")
            assert browser.evaluate(
                "Array.from(document.images).filter(i => i.naturalWidth === 0).length") == 0
        # the game run's page: transcripts, the model's HTML reply shown as text
        browser.open(pages[1])
        browser.wait_for("document.body.dataset.plotsRendered")
        assert browser.evaluate("document.querySelectorAll('table.transcript').length") >= 4
        text = browser.evaluate("document.getElementById('transcripts').parentElement.innerText")
        assert "<script>alert(1)</script>" in text and "[raise] is not legal" in text
        assert not browser.evaluate(
            "[...document.scripts].some(s => s.textContent.includes('alert(1)'))")
        # the plug-in loop's page: its own metric drawn, its transcripts shown
        browser.open(pages[3])
        browser.wait_for("document.body.dataset.plotsRendered")
        assert browser.evaluate("!!document.querySelector('#plot-other-drill-rates canvas')")
        assert "Drill: rates" in browser.evaluate(
            "document.getElementById('plot-other-drill-rates').innerText")
        assert browser.evaluate("document.querySelectorAll('table.transcript').length") >= 2
        # the run page of the curriculum run: its task table
        browser.open(pages[0])
        browser.wait_for("document.body.dataset.plotsRendered")
        rows = "document.querySelectorAll('#tasks tbody tr').length"
        assert browser.evaluate(rows) == 8
        browser.evaluate("(() => { const s = document.getElementById('task-search'); "
                         "s.value = 'determinant'; s.dispatchEvent(new Event('input')); })()")
        assert browser.evaluate(rows) == 1
        assert "determinant" in browser.evaluate("document.querySelector('#tasks tbody').innerText")
        # HTML inside a question is shown as text, never parsed
        browser.evaluate("(() => { const s = document.getElementById('task-search'); "
                         "s.value = 'capital'; s.dispatchEvent(new Event('input')); })()")
        assert "<b>capital</b>" in browser.evaluate(
            "document.querySelector('#tasks tbody').innerText")
        # clear the filter, sort by p_hat descending (two clicks): the first row has p̂ = 1
        browser.evaluate("(() => { const s = document.getElementById('task-search'); "
                         "s.value = ''; s.dispatchEvent(new Event('input')); "
                         "const th = [...document.querySelectorAll('#tasks th')]"
                         ".find(h => h.dataset.name === 'p_hat'); th.click(); th.click(); })()")
        first = browser.evaluate(
            "(() => { const cols = [...document.querySelectorAll('#tasks th')]"
            ".map(h => h.dataset.name); const cells = document.querySelector('#tasks tbody tr')"
            ".children; return cells[cols.indexOf('p_hat')].textContent; })()")
        assert first == "1"
        shot = browser.screenshot(tmp_path / "analysis-page.png")
        assert browser.errors == [], browser.errors
    assert shot.stat().st_size > 10_000
    if ARTEFACTS:  # pytest prunes its tmp dirs
        kept = Path(ARTEFACTS) / shot.name
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, kept)
        print(f"screenshot: {kept}")


def test_hovering_a_chart_shows_its_values_and_a_missing_script_leaves_the_png_links(tmp_path):
    """uPlot's legend shows the values under the cursor; a page moved without
    uPlot.iife.min.js says so where each figure would be, and its PNG links still work."""
    from tests.browser import Browser

    [page] = analyze([make_game_run(tmp_path)], embeddings=False)
    with Browser() as browser:
        browser.open(page)
        browser.wait_for("document.body.dataset.plotsRendered")
        box = browser.evaluate(
            "(() => { const o = document.querySelector('#plot-games-training-rates .u-over'); "
            "o.scrollIntoView(); const r = o.getBoundingClientRect(); "
            "return [r.left, r.top, r.width, r.height]; })()")
        # the right edge of the plot: step 1 (training games ended by an invalid move: 1/4)
        browser.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": box[0] + box[2] - 2,
                                                  "y": box[1] + box[3] / 2}, session=True)
        legend = browser.wait_for(
            "(t => t.includes('step') && !t.includes('–') && t)("
            "document.querySelector('#plot-games-training-rates .u-legend').innerText)")
        assert "invalid" in legend and "0.25" in legend, legend
        assert browser.errors == [], browser.errors
    (page.parent / "uPlot.iife.min.js").unlink()
    with Browser() as browser:
        browser.open(page)
        assert browser.wait_for("document.body.dataset.plotsRendered") == "0"
        texts = browser.evaluate(
            "Array.from(document.querySelectorAll('div[id^=plot-]')).map(d => d.innerText)")
        assert texts and all("uPlot.iife.min.js is missing next to this page" in t
                             for t in texts)
        assert any("the PNG link below shows this figure" in t for t in texts)
        assert not browser.evaluate("document.querySelector('.uplot')")
        assert browser.evaluate(
            "Array.from(document.images).filter(i => i.naturalWidth === 0).length") == 0
        assert browser.errors and all("ERR_FILE_NOT_FOUND" in e for e in browser.errors), (
            browser.errors)  # the missing script, nothing else


def test_edge_case_charts_are_drawn(tmp_path):
    """Data a real run gives: values that differ in the 7th digit (a sweep's train/tis_weight_mean
    1 ± 3e-7 once sent uPlot's tick loop over an empty range), flat and all-zero series, a
    single step with its interval, a log axis, text categories as bars, a heatmap with a
    missing cell, large numbers. Each is drawn, none raises."""
    from selfplay.analysis.page import page_html, write_page
    from selfplay.analysis.plots import Plot, Series
    from selfplay.analysis.sections import Section
    from tests.browser import Browser, chart_pixels

    section = Section("Edge cases", "edge")
    plots = [
        Plot("tiny-range", "1 ± 3e-7", "step", "weight", [
            Series("a", [0, 1], [1.0000000199, 1.0000000447],
                   band=([1.0000000199, 0.9999999816], [1.0000000199, 1.0000001078])),
            Series("b", [0, 1], [1.0000000199, 1.0000000397])]),
        Plot("flat", "flat", "step", "y", [Series("a", [0, 1, 2], [5, 5, 5])]),
        Plot("zero", "all zero", "step", "y", [Series("a", [0, 1], [0.0, 0.0])]),
        Plot("one-step", "one step with its interval", "step", "y",
             [Series("a", [3], [0.5], band=([0.4], [0.6]))]),
        Plot("log", "log x", "tokens", "y",
             [Series("a", [0, 10, 1000, 100000], [0.1, 0.2, 0.3, 0.4])], log_x=True),
        Plot("named", "text categories", "arm", "y", [Series("a", ["lr=1", "lr=2"], [1, 2], "bar"),
                                                      Series("b", ["lr=2"], [3], "bar")]),
        Plot("heat", "heatmap with a gap", "step", "bin",
             heatmap=([0, 1], ["lo", "hi"], [[1, None], [2, 3]]), zlabel="count"),
        Plot("big", "large numbers", "tokens generated", "tokens",
             [Series("a", [0, 1_000_000, 2_000_000], [1e9, 2e9, 3e9])]),
    ]
    for plot in plots:
        plot.png = False
        section.add(plot)
    assert len(section.plots) == len(plots)
    page = write_page(tmp_path, page_html("edge cases", "", [section], None, []))
    with Browser() as browser:
        browser.open(page)
        assert browser.wait_for("document.body.dataset.plotsRendered") == str(len(plots))
        charts = chart_pixels(browser)
        for name, chart in charts.items():
            assert chart is not None, name
            if chart["kind"] == "heatmap":
                assert chart["cells"] > 1000, (name, chart)
            else:
                assert all(n > 5 for n in chart["series"].values()), (name, chart)
        assert charts["plot-one-step"]["bands"]["a"] > 20
        assert browser.errors == [], browser.errors
