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


def test_page_renders_every_plot_and_the_task_table_filters(tmp_path):
    from tests.browser import Browser

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
            # every plot div holds a drawn SVG with at least one trace or a heatmap
            drawn = browser.evaluate(
                "Array.from(document.querySelectorAll('div[id^=plot-]')).filter(d => "
                "d.querySelector('.main-svg') && (d.querySelector('.trace, .hm, .bars, "
                ".scatterlayer .trace') || d.querySelector('image'))).length")
            assert drawn == expected
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
        assert browser.evaluate(
            "!!document.querySelector('#plot-other-drill-rates .main-svg .trace')")
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
