"""A run killed with SIGKILL mid-way resumes at the right step with no duplicated rows."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import tiny_config

STEPS = 16


def _rows(run_dir):
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _selfplay(*args):
    return [sys.executable, "-m", "selfplay", *args]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_resume_after_kill_9_continues_without_duplicates(tmp_path, tiny_model_path, mode):
    config = tiny_config(tmp_path, train={"steps": STEPS}, rollout={"mode": mode})
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "WANDB_MODE": "disabled"}
    process = subprocess.Popen(
        _selfplay("run", str(path)), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.time() + 300
    run_dir = None
    while time.time() < deadline:
        dirs = list((tmp_path / "runs").glob("tiny-*"))
        run_dir = dirs[0] if dirs else None
        if run_dir is not None and len(_rows(run_dir)) >= 2:
            break
        assert process.poll() is None, process.stderr.read().decode()[-2000:]
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed_at = len(_rows(run_dir))
    assert 2 <= killed_at < STEPS, "the run must be killed mid-way"

    result = subprocess.run(
        _selfplay("resume", str(run_dir)), env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "resume" in result.stderr

    rows = _rows(run_dir)
    steps = [row["step"] for row in rows if not row.get("final")]
    assert steps == list(range(STEPS))  # each step exactly once, in order
    assert sum(1 for row in rows if row.get("final")) == 1
    episode_files = sorted(p.name for p in (run_dir / "episodes").glob("step-*.jsonl"))
    assert episode_files == [f"step-{s:06d}.jsonl" for s in range(STEPS)]
    for name in episode_files:  # every episode written holds its turns
        record = json.loads((run_dir / "episodes" / name).read_text().splitlines()[0])
        assert record["turns"] and record["step"] == int(name[5:11])
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == f"step-{STEPS:06d}"
