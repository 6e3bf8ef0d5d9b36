"""The report a run writes when it ends, and ``selfplay analyze``: ``runs/<run>/report/``.

The work is done by ``selfplay.analysis`` (sections, plots, pages); this module is the entry the
runner and the CLI call.
"""

from __future__ import annotations

from pathlib import Path

from selfplay.analysis.page import write_comparison_page, write_run_page
from selfplay.analysis.rundata import RunData
from selfplay.analysis.sections import Options
from selfplay.core.errors import UserError


def write_report(
    run_dir: Path, rows: list[dict] | None = None, embeddings: bool = False
) -> Path | None:
    """The run's page and PNGs in ``run_dir/report/``, written by the runner when a run ends
    (``rows``: unused, kept for callers that pass the metrics they already read). Without
    embeddings by default (``selfplay analyze`` adds them). A failure here is a warning, never
    the end of a finished run. None when there is nothing to show."""
    try:
        run = RunData(Path(run_dir))
        if not run.metrics and not run.episode_files() and not run.tasks:
            return None
        return write_run_page(run, options=Options(embeddings=embeddings)).parent
    except Exception as exc:  # the run's results are safe on disk: say so and go on
        from rich.console import Console

        Console(stderr=True).print(f"[yellow]report not written ({type(exc).__name__}: {exc}); "
                      f"`selfplay analyze {run_dir}` retries[/]")
        return None


def analyze(
    run_dirs: list[Path], out: Path | None = None, embeddings: bool = True, pngs: bool = True
) -> list[Path]:
    """One page per run, and a comparison page when given several; returns the pages."""
    runs = [RunData.open(path) for path in run_dirs]
    for run in runs:
        run.require_episodes()
    options = Options(embeddings=embeddings, pngs=pngs)
    pages = [write_run_page(run, options=options) for run in runs]
    if len(runs) > 1:
        folder = out or runs[0].path.parent / ("compare-" + "-vs-".join(r.name for r in runs))[:150]
        pages.append(write_comparison_page(runs, folder, pngs))
    elif out is not None:
        raise UserError("--out names the comparison folder: give two runs or more")
    return pages
