"""Processes a run depends on, dying under it: a sandbox worker in the middle of a batch of
programs (collect stage), a learner rank while the driver lives (learn stage)."""

from __future__ import annotations

import os
import signal

import pytest
import yaml

from selfplay.core.errors import RunStopped
from tests.faults import harness

pytestmark = pytest.mark.faults

# CURE on the tiny model (as tests/test_golden.py's): each step runs every program on every test
# in the sandbox pool, one batch of 9 runs per problem; the programs are trivial, so the limit
# is far above any load's (docs/testing.md#load-proof-tests)
PROMPTS = {
    "cure_coder.yaml": {"name": "cure_coder", "user": "{{ problem }}",
                        "prefill": "```python\nn = int(input())\nprint(2 * n)  # "},
    "cure_tester.yaml": {"name": "cure_tester",
                         "user": "{{ problem }} {{ example_input }} {{ example_output }}",
                         "prefill": "Input:\n```\n3\n```\nOutput:\n```\n6"},
}


def cure_experiment(folder, name: str) -> dict:
    for file, prompt in PROMPTS.items():
        (folder / file).write_text(yaml.safe_dump(prompt))
    data = harness.experiment(folder, name) | {
        "loop": "cure",
        "sampling": {"max_new_tokens": 6},
        "advantage": {"estimator": "reinforce"},
        "roles": {"coder": {"prompt": str(folder / "cure_coder.yaml")},
                  "tester": {"prompt": str(folder / "cure_tester.yaml")}},
        "cure": {"order": "file", "max_problems": 2, "problems_per_step": 2, "codes": 3,
                 "tests": 3, "max_gt_tests": 2, "time_limit_s": 20.0, "pool_size": 1},
    }
    del data["spiral"]
    return data


def test_a_sandbox_worker_killed_mid_batch_is_replaced_and_the_run_carries_on(
        tmp_path, monkeypatch):
    """collect stage, step 1: the worker running a program is killed (SIGKILL) as the program
    is handed to it; the pool starts a new worker, runs the program again there, and the run
    carries on to the uninterrupted run's episodes and metrics."""
    from sandbox.worker import WorkerHandle
    from selfplay.running.checkpoint import Checkpointer

    expected = harness.essence(harness.start(cure_experiment(tmp_path, "uninterrupted")))
    armed, killed = [], []
    original_call, original_save = WorkerHandle.call, Checkpointer.save

    def call(self, request, timeout):
        if request.get("op") == "run" and armed and len(armed) == 3 and not killed:
            killed.append(self.proc.pid)
            os.kill(self.proc.pid, signal.SIGKILL)
        if request.get("op") == "run" and armed:
            armed.append(request)
        return original_call(self, request, timeout)

    def save(self, next_step, *args, **kwargs):  # step 0's checkpoint arms the kill
        armed.append(next_step)
        return original_save(self, next_step, *args, **kwargs)

    monkeypatch.setattr(WorkerHandle, "call", call)
    monkeypatch.setattr(Checkpointer, "save", harness.instead_at(1, save, original_save))
    run_dir = harness.start(cure_experiment(tmp_path, "killed"))
    assert len(killed) == 1, "the third program of step 1 was handed to a killed worker"
    harness.assert_same_run(expected, run_dir)


def rank_pid(learner, rank: int) -> int:
    import ray

    return ray.get(learner.group.workers[rank].__ray_call__.remote(lambda self: os.getpid()))


def test_a_learner_rank_killed_mid_step_stops_the_run_in_one_line(tmp_path, monkeypatch,
                                                                  uninterrupted):
    """learn stage, step 1, two ranks: rank 1's process is killed (SIGKILL) as the step is
    dealt; the driver lives, stops the run in one line, and the run resumes on two new ranks.
    Two ranks sum gradients in another order than one: floats within 1e-4 relative (as
    tests/test_sharded_run.py), everything discrete exactly."""
    pytest.importorskip("ray")
    from selfplay.training.sharded import ShardedLearner

    def kill_rank(self, samples):
        os.kill(rank_pid(self, 1), signal.SIGKILL)
        return original(self, samples)

    original = ShardedLearner.step
    monkeypatch.setattr(ShardedLearner, "step", harness.instead_at(2, kill_rank, original))
    data = harness.experiment(tmp_path, "run", train={"parallel": {"ranks": 2}})
    with pytest.raises(RunStopped) as stopped:
        harness.start(data)
    message = str(stopped.value)
    assert message.startswith("a learner rank died during step (") and "\n" not in message
    run_dir = harness.run_dir_of(data)
    harness.assert_no_half_written(run_dir)
    harness.resume(run_dir)
    harness.assert_same_run(uninterrupted, run_dir, rel=1e-4)
