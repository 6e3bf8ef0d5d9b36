"""Runs in a child process, for the tests that kill one mid-way and resume it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ENV = {**os.environ, "WANDB_MODE": "disabled"}


def selfplay(*args: str) -> list[str]:
    return [sys.executable, "-m", "selfplay", *args]


def metric_rows(run_dir: Path | None) -> list[dict]:
    path = run_dir / "metrics.jsonl" if run_dir else None
    if path is None or not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def kill_after_rows(args: list[str], runs: Path, pattern: str, rows: int = 2,
                    group: bool = False) -> Path:
    """Start ``selfplay ARGS``; once its run folder (``runs/pattern``) has ``rows`` metric rows,
    SIGKILL it and the processes it started (Ray's agents). ``group``: the whole process group
    at once (a sweep and the run it is running in a child). Returns the run folder."""
    process = subprocess.Popen(selfplay(*args), env=ENV, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, start_new_session=True)
    deadline, run_dir = time.time() + 300, None
    while time.time() < deadline:
        found = list(runs.glob(pattern))
        run_dir = found[0] if found else None
        if len(metric_rows(run_dir)) >= rows:
            break
        assert process.poll() is None, process.stderr.read().decode()[-2000:]
        time.sleep(0.02)
    if group:
        os.killpg(process.pid, signal.SIGKILL)
    process.send_signal(signal.SIGKILL)
    process.wait()
    time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError):  # nothing else was started
        os.killpg(process.pid, signal.SIGKILL)
    assert run_dir is not None, "no run folder appeared"
    return run_dir
