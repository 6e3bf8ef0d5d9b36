"""The fault-injection suite's runs: one tiny SPIRAL experiment (Kuhn Poker on the tiny random
model: RAE advantages, so every step trains), run uninterrupted once and then with a fault at a
named stage, and what the two must share.

Runs go through the runner's public entry points (``start`` and ``resume``, what ``selfplay run``
and ``selfplay resume`` call) in this process, so a fault is injected by patching the function
that does the stage's work, and the run pays no start-up cost; ``selfplay`` in a child process
where the fault needs one (a real signal from outside, SIGKILL, a small filesystem).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from tests import nested

STEPS = 3
EXPERIMENT = {
    "name": "faults",
    "seed": 0,
    "loop": "spiral",
    "model": {"path": "tiny-random"},
    "sampling": {"max_new_tokens": 8},
    "train": {"steps": STEPS, "lr": 0.05, "lora": {"r": 4, "alpha": 8}},
    "roles": {"player": {"prompt": "player"}},
    "spiral": {"games": [{"id": "kuhn_poker", "kwargs": {"rounds": 1}}], "games_per_step": 2,
               "eval_games": 0, "lenient": True},
    "logging": {"wandb": "disabled", "progress": False},
    "checkpoint": {"every": 1, "keep": 2},
}
# figures of the machine, not of the algorithm (as tests/test_golden.py)
CLOCK_WORDS = ("seconds", "per_s", "per_minute", "time", "sync/share", "async/", "rss", "memory")
ENV = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "2"}


def experiment(tmp_path: Path, name: str, **sections) -> dict:
    """The experiment with its run folder under ``tmp_path/name`` and ``sections`` merged in."""
    data = json.loads(json.dumps(EXPERIMENT)) | {"run_dir": str(tmp_path / name)}
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return data


def config_of(data: dict):
    from selfplay.loops import validate

    return validate(json.loads(json.dumps(data)), "faults")


def run_dir_of(data: dict) -> Path:
    (found,) = Path(data["run_dir"]).iterdir()
    return found


# ---------------------------------------------------------------------- what must be equal
def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def essence(run_dir: Path) -> dict:
    """Every episode and every metric but the machine's timings, step by step."""
    episodes = [record for path in sorted((run_dir / "episodes").glob("step-*.jsonl"))
                for record in read_jsonl(path)]
    metrics = [{k: v for k, v in row.items() if not any(word in k for word in CLOCK_WORDS)}
               for row in read_jsonl(run_dir / "metrics.jsonl")]
    return {"episodes": episodes, "metrics": metrics, "tasks": read_jsonl(run_dir / "tasks.jsonl")}


def differences(expected, actual, rel: float = 0.0) -> list[str]:
    """Where two essences differ. Exactly, floats included, unless ``rel`` says otherwise: a
    resumed run restores the weights, the optimizer's moments and every random state bit for
    bit, and does the same arithmetic in the same order on the same CPU."""
    return nested.differences(expected, actual, lambda e, a, _: same_leaf(e, a, rel))


def same_leaf(expected, actual, rel: float) -> bool:
    if isinstance(expected, float) and isinstance(actual, float):
        if math.isnan(expected) and math.isnan(actual):
            return True
        if rel and math.isclose(expected, actual, rel_tol=rel, abs_tol=1e-6):
            return True
    return expected == actual


def assert_same_run(expected: dict, run_dir: Path, rel: float = 0.0) -> None:
    """``run_dir`` went step for step as the uninterrupted run: each step once, in order, the
    same episodes and metrics, no checkpoint left half-written."""
    actual = essence(run_dir)
    steps = [row["step"] for row in actual["metrics"] if not row.get("final")]
    assert steps == list(range(STEPS)), steps  # nothing lost or duplicated
    found = differences(expected, actual, rel=rel)
    assert not found, f"{len(found)} differences:\n" + "\n".join(found[:20])
    assert_no_half_written(run_dir)


def assert_no_half_written(run_dir: Path) -> None:
    """Only whole checkpoints (each with its learner folder and meta) and no temporary files."""
    checkpoints = run_dir / "checkpoints"
    leftovers = [p.name for p in checkpoints.glob(".tmp-*")] + [
        p.name for p in (run_dir / "episodes").glob("*.tmp")]
    assert not leftovers, leftovers
    for folder in checkpoints.glob("step-*"):
        assert (folder / "meta.json").is_file() and (folder / "state.pt").is_file(), folder
        assert (folder / "learner" / ".metadata").is_file(), folder
    if (checkpoints / "latest").exists():  # (none yet: stopped before the first)
        latest = (checkpoints / "latest").read_text().strip()
        assert (checkpoints / latest / "meta.json").is_file()


# ---------------------------------------------------------------------- runs in this process
def start(data: dict) -> Path:
    """``selfplay run`` in this process (without the end-of-run page, which tests do not read:
    ~10 s of PNGs per run here)."""
    from selfplay.running import runner

    return runner.start(config_of(data))[0]


def resume(run_dir: Path, *overrides: str) -> Path:
    from selfplay.running import runner

    return runner.resume(run_dir, list(overrides))[0]


def at_call(count: int, action: Callable[[], None], original: Callable) -> Callable:
    """``original`` wrapped so that its ``count``-th call (from 1) does ``action`` first."""
    calls = {"n": 0}

    def wrapped(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == count:
            action()
        return original(*args, **kwargs)

    return wrapped


def instead_at(count: int, replacement: Callable, original: Callable) -> Callable:
    """``original``, but its ``count``-th call (from 1) goes to ``replacement`` (same arguments)."""
    calls = {"n": 0}

    def wrapped(*args, **kwargs):
        calls["n"] += 1
        return (replacement if calls["n"] == count else original)(*args, **kwargs)

    return wrapped


def send_self(signum: int) -> Callable[[], None]:
    return lambda: os.kill(os.getpid(), signum)


# ---------------------------------------------------------------------- runs in a child process
def selfplay(*args: str) -> list[str]:
    return [sys.executable, "-m", "selfplay", *args]


def write_experiment(data: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def launch(folder: Path) -> subprocess.Popen:
    """``selfplay run`` of the test experiment (runs under ``folder/runs``) in a child process
    of its own session (so ``stop`` with SIGKILL takes its children too)."""
    path = write_experiment(experiment(folder, "runs"), folder / "exp.yaml")
    return subprocess.Popen(selfplay("run", str(path)), env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def metric_steps(run_dir: Path | None) -> list[int]:
    if run_dir is None:
        return []
    return [row["step"] for row in read_jsonl(run_dir / "metrics.jsonl") if "step" in row]


def wait_for_rows(process: subprocess.Popen, runs: Path, rows: int) -> Path:
    """The run folder under ``runs`` once its metrics hold ``rows`` steps."""
    deadline = time.time() + 600
    while time.time() < deadline:
        found = list(runs.glob("*")) if runs.exists() else []
        run_dir = found[0] if found else None
        try:
            if len(metric_steps(run_dir)) >= rows:
                return run_dir
        except json.JSONDecodeError:  # a row being written
            pass
        assert process.poll() is None, process.communicate()[1][-3000:]
        time.sleep(0.05)
    raise AssertionError("the run did not get that far")


def stop(process: subprocess.Popen, signum: int = signal.SIGKILL) -> None:
    """Signal the process; SIGKILL takes its children too (it started its own session)."""
    if signum == signal.SIGKILL:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)


def copy_run(run_dir: Path, target: Path) -> Path:
    shutil.copytree(run_dir, target)
    return target
