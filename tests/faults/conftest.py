"""Fixtures of the fault-injection suite (``make test-faults``; docs/testing.md#faults)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults import harness


@pytest.fixture(autouse=True)
def no_report_page(monkeypatch) -> None:
    """Runs in this process skip the end-of-run page (~10 s of PNGs each; no test reads it)."""
    from selfplay.running import runner

    monkeypatch.setattr(runner, "write_report", lambda *args, **kwargs: None)


@pytest.fixture(scope="session")
def uninterrupted_run(tmp_path_factory) -> Path:
    """The experiment's uninterrupted run folder."""
    from selfplay.running import runner

    saved, runner.write_report = runner.write_report, lambda *args, **kwargs: None
    try:
        folder: Path = tmp_path_factory.mktemp("uninterrupted")
        run_dir = harness.start(harness.experiment(folder, "run"))
    finally:
        runner.write_report = saved
    return run_dir


@pytest.fixture(scope="session")
def uninterrupted(uninterrupted_run) -> dict:
    """What the uninterrupted run wrote (its episodes and metrics)."""
    return harness.essence(uninterrupted_run)
