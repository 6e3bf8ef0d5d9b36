"""A run killed with SIGKILL mid-way resumes at the right step with no duplicated rows."""

import json
import subprocess

import pytest
import yaml

from tests.conftest import tiny_config
from tests.processes import ENV, kill_after_rows, metric_rows, selfplay

STEPS = 16


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_resume_after_kill_9_continues_without_duplicates(tmp_path, tiny_model_path, mode):
    config = tiny_config(tmp_path, train={"steps": STEPS}, rollout={"mode": mode})
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config))
    run_dir = kill_after_rows(["run", str(path)], tmp_path / "runs", "tiny-*")
    killed_at = len(metric_rows(run_dir))
    assert 2 <= killed_at < STEPS, "the run must be killed mid-way"

    result = subprocess.run(
        selfplay("resume", str(run_dir)), env=ENV, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "resume" in result.stderr

    rows = metric_rows(run_dir)
    steps = [row["step"] for row in rows if not row.get("final")]
    assert steps == list(range(STEPS))  # each step exactly once, in order
    assert sum(1 for row in rows if row.get("final")) == 1
    episode_files = sorted(p.name for p in (run_dir / "episodes").glob("step-*.jsonl"))
    assert episode_files == [f"step-{s:06d}.jsonl" for s in range(STEPS)]
    for name in episode_files:  # every episode written holds its turns
        record = json.loads((run_dir / "episodes" / name).read_text().splitlines()[0])
        assert record["turns"] and record["step"] == int(name[5:11])
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == f"step-{STEPS:06d}"
