"""SIGINT (Ctrl-C) and SIGTERM in the middle of a step: the stage in progress finishes, the run
stops there in one line that says how to resume, and ``selfplay resume`` then goes step for
step as the uninterrupted run did."""

from __future__ import annotations

import re
import signal

import pytest

from selfplay.core.errors import RunInterrupted
from selfplay.running.checkpoint import Checkpointer
from selfplay.running.rollouts import SyncRollouts
from selfplay.running.tracking import RunLogger
from selfplay.training.learner import LocalLearner
from selfplay.training.sync import WeightSync
from tests.faults import harness

pytestmark = pytest.mark.faults

# stage → the method doing its work (the signal arrives as its second call, step 1's, begins),
# the step resume continues from, and the file the stage leaves that the next stage would add to
STAGES = {
    "collect": (SyncRollouts, "take", 1),
    "write": (RunLogger, "write_collected", 1),
    "learn": (LocalLearner, "step", 1),
    "sync": (WeightSync, "__call__", 1),
    "checkpoint": (Checkpointer, "save", 2),
}


def stage_reached(run_dir, stage: str) -> None:
    """The interrupted run did step 1 up to the end of ``stage`` and no further."""
    episodes = (run_dir / "episodes" / "step-000001.jsonl").exists()
    synced = [row["step"] for row in harness.read_jsonl(run_dir / "sync.jsonl")]
    logged = harness.metric_steps(run_dir)
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    order = list(STAGES)
    done = order.index(stage)
    assert episodes == (done >= order.index("write")), "episodes of step 1"
    assert synced == ([0, 1] if done >= order.index("sync") else [0]), synced
    assert logged == ([0, 1] if done >= order.index("checkpoint") else [0]), logged
    assert latest == ("step-000002" if stage == "checkpoint" else "step-000001"), latest


@pytest.mark.parametrize(("stage", "name"), [
    ("collect", "SIGINT"), ("write", "SIGTERM"), ("learn", "SIGINT"), ("sync", "SIGTERM"),
    ("checkpoint", "SIGINT"),
])
def test_a_signal_mid_stage_stops_at_its_end_and_resumes_as_if_uninterrupted(
        tmp_path, monkeypatch, uninterrupted, stage, name):
    signum = signal.Signals[name]
    owner, method, resume_at = STAGES[stage]
    original = getattr(owner, method)
    monkeypatch.setattr(owner, method, harness.at_call(2, harness.send_self(signum), original))
    data = harness.experiment(tmp_path, "run")
    with pytest.raises(RunInterrupted) as stopped:
        harness.start(data)
    run_dir = harness.run_dir_of(data)
    assert str(stopped.value) == (
        f"stopped by {name} at the end of the {stage} stage of step 1; "
        f"`selfplay resume {run_dir}` continues from step {resume_at}")
    assert stopped.value.signum == signum
    stage_reached(run_dir, stage)
    harness.assert_no_half_written(run_dir)

    monkeypatch.setattr(owner, method, original)
    harness.resume(run_dir)
    harness.assert_same_run(uninterrupted, run_dir)


def test_async_rollouts_stop_at_the_end_of_the_learn_stage_and_resume(tmp_path, monkeypatch):
    """Async rollouts collect ahead on a thread: the learner's stage still ends first, and the
    resumed run has every step once (not bit-identical: docs/async.md)."""
    original = LocalLearner.step
    monkeypatch.setattr(LocalLearner, "step",
                        harness.at_call(2, harness.send_self(signal.SIGINT), original))
    data = harness.experiment(tmp_path, "run", rollout={"mode": "async"})
    with pytest.raises(RunInterrupted, match="at the end of the learn stage of step 1"):
        harness.start(data)
    run_dir = harness.run_dir_of(data)
    harness.assert_no_half_written(run_dir)
    monkeypatch.setattr(LocalLearner, "step", original)
    harness.resume(run_dir)
    assert harness.metric_steps(run_dir) == [*range(harness.STEPS), harness.STEPS]  # + final
    episodes = sorted(p.name for p in (run_dir / "episodes").glob("step-*.jsonl"))
    assert episodes == [f"step-{s:06d}.jsonl" for s in range(harness.STEPS)]
    harness.assert_no_half_written(run_dir)


LINE = re.compile(r"selfplay: stopped by (SIGINT|SIGTERM) at the end of the (\w[\w ]*) stage "
                  r"of step (\d+); `selfplay resume (\S+)` continues from step (\d+)")


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_from_outside_stops_the_command_in_one_line(tmp_path, uninterrupted, name):
    """``selfplay run`` in a child process, signalled once its first step is logged: exit code
    128 + the signal, one line, no traceback; the run then resumes as if uninterrupted."""
    signum = signal.Signals[name]
    process = harness.launch(tmp_path)
    run_dir = harness.wait_for_rows(process, tmp_path / "runs", 1)
    harness.stop(process, signum)
    _, err = process.communicate(timeout=600)
    assert process.returncode == 128 + signum, err[-3000:]
    said = [line for line in err.splitlines() if line.startswith("selfplay:")]
    assert len(said) == 1 and "Traceback" not in err, err[-3000:]
    match = LINE.fullmatch(said[0])
    assert match and match[1] == name and match[4] == str(run_dir), said
    harness.assert_no_half_written(run_dir)
    harness.resume(run_dir)
    harness.assert_same_run(uninterrupted, run_dir)
