"""``train.token_budget``: a run stops after the first step at which the tokens it generated
for training reach the budget (``train.steps`` stays an upper bound), and a resumed run counts
on from its checkpoint instead of from zero. Real tiny-random runs, in this process."""

from __future__ import annotations

import json
from pathlib import Path

from selfplay.config_files import dump
from selfplay.loops import validate
from selfplay.running.runner import build, resume, run
from tests.conftest import tiny_config

# 2 prompts x 3 samples x at most 6 new tokens: at most 36 tokens a step, so step 0 cannot reach
# 40; the random model rarely stops early, so step 1 does, long before train.steps = 6.
BUDGET = 40


def _start(tmp_path: Path, name: str, steps: int) -> Path:
    data = tiny_config(tmp_path, train={"steps": steps, "token_budget": BUDGET},
                       checkpoint={"every": 1, "keep": 1})
    config = validate(data, "test")
    run_dir = tmp_path / name
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(dump(config))
    run(build(config, run_dir, resume=False), 0)
    return run_dir


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _episode_tokens(run_dir: Path, step: int) -> int:
    """What the run folder itself shows was generated at ``step``: every turn's completion."""
    lines = (run_dir / "episodes" / f"step-{step:06d}.jsonl").read_text().splitlines()
    return sum(len(t["completion_ids"]) for line in lines for t in json.loads(line)["turns"])


def test_a_budget_stops_the_run_at_the_step_that_reaches_it_and_resume_counts_on(
        tmp_path, monkeypatch):
    monkeypatch.setattr("selfplay.running.runner.write_report", lambda *a, **k: None)  # not tested
    # stopped by train.steps = 1 first (the budget not reached), then resumed with room: the
    # counter in the checkpoint carries on (from zero, the resumed run would take a step more)
    run_dir = _start(tmp_path, "part", steps=1)
    assert [r["step"] for r in _rows(run_dir)] == [0, 1]  # step 0 and the final row
    resume(run_dir, ["train.steps=6"])
    rows = _rows(run_dir)
    steps = [r for r in rows if not r.get("final")]
    per_step = [_episode_tokens(run_dir, r["step"]) for r in steps]
    assert [r["rollout/tokens"] for r in steps] == per_step
    totals = [sum(per_step[: i + 1]) for i in range(len(per_step))]
    assert [r["rollout/tokens_total"] for r in steps] == totals
    # the last step reached the budget, the one before did not, and train.steps (6) was not
    assert totals[-1] >= BUDGET > totals[-2]
    assert len(steps) < 6, "the budget must stop the run before train.steps"
    assert rows[-1].get("final") and rows[-1]["step"] == len(steps)
