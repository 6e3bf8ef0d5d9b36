"""The curricula wired into agent0's executor phase: its pool tasks are drawn by
``curriculum.sampler``, each graded group is recorded, and the state survives a checkpoint.
(SPICE's document choice is tested in tests/test_spice.py.)"""

from __future__ import annotations

import asyncio
import copy
import re

import pytest

from selfplay.engines.policy import BatchingPolicy
from selfplay.loops import make_loop, validate
from selfplay.types import Completion
from tests.test_agent0 import agent0_config

# the pool's p̂ (k = 4 samples each): tasks 2, 3, 4 are inside the band [0.3, 0.7]
POOL_P_HAT = [0.0, 0.25, 0.5, 0.5, 0.5, 1.0]
IN_BAND = {"it0-p2", "it0-p3", "it0-p4"}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    from selfplay.engines.models import load_tokenizer

    return load_tokenizer(tiny_model_path)


def pool_tasks() -> list[dict]:
    """Kept pool tasks as ``_build_pool`` writes them (pseudo-label 7)."""
    return [
        {
            "task_id": f"it0-p{i}",
            "p_hat": p_hat,
            "pseudo_label": "7",
            "proposal": {
                "text": f"Q{i}",
                "valid": True,
                "kind": "qa",
                "question": f"Item q{i}: what is three plus four?",
                "answer": "7",
                "answer_type": "integer",
            },
        }
        for i, p_hat in enumerate(POOL_P_HAT)
    ]


def half_right_executor():
    """Every other answer to a question is right: each group has p̂ = ½ (a mixed group)."""
    calls: dict[str, int] = {}

    def executor(prompt: str) -> str:
        question = re.search(r"Item (q\d+)", prompt).group(1)
        calls[question] = calls.get(question, 0) + 1
        return "\\boxed{7}" if calls[question] % 2 else "\\boxed{5}"

    return executor


class ExecutorEngine:
    """Answers executor requests with ``reply(prompt)``; the completion's tokens are the
    reply's (the tool rollout reads the tokens)."""

    def __init__(self, tokenizer, reply):
        self.tokenizer, self.reply = tokenizer, reply

    def generate(self, requests):
        out = []
        for request in requests:
            if request.prompt_ids is not None:
                prompt = self.tokenizer.decode(request.prompt_ids)
            else:
                prompt = request.messages[-1]["content"] + request.prefill
            text = self.reply(prompt)
            ids = self.tokenizer(text, add_special_tokens=False).input_ids
            out.append(
                Completion(
                    text=text,
                    prompt_ids=[1, 2],
                    token_ids=ids,
                    logprobs=[-0.5] * len(ids),
                    finish_reason="stop",
                )
            )
        return out


def loop_with_pool(tmp_path, **curriculum):
    config = agent0_config(tmp_path, band="code", band_lo=0.0, band_hi=1.0)
    config["curriculum"] = {"pool_strength": 0, **curriculum}
    loop = make_loop(validate(config, "test"))
    kept = pool_tasks()
    loop.pool = {"iteration": 0, "tasks": kept, "indices": loop.add_to_curriculum(kept, 1)}
    return loop


def executor_step(loop, engine, step):
    """One executor step of iteration 0 (``collect``: curriculum_steps = 1, so steps 1, 2, ...
    until the next iteration are executor steps)."""
    assert loop.phase(step) == (0, "executor")
    return asyncio.run(loop.collect(BatchingPolicy(engine), step))


def executor_steps(loop, tokenizer, steps):
    """Run executor steps 1..steps; the task ids drawn each step, and the last step's
    collection."""
    loop.config.agent0.executor_steps = steps  # keep every step in iteration 0
    engine = ExecutorEngine(tokenizer, half_right_executor())
    drawn, collected = [], None
    for step in range(1, steps + 1):
        collected = executor_step(loop, engine, step)
        drawn.append(sorted({e.info["task_id"] for e in collected.episodes}))
    return drawn, collected


def test_band_draws_only_in_band_pool_tasks(tmp_path, tokenizer):
    loop = loop_with_pool(tmp_path, sampler="band", band_lo=0.3, band_hi=0.7)
    buffer = loop.curriculum.buffer
    assert buffer.ids == [t["task_id"] for t in pool_tasks()]
    assert list(buffer.p_hat) == POOL_P_HAT  # the pool estimate is each task's first group
    assert list(buffer.difficulty) == [1 - p for p in POOL_P_HAT]
    drawn, _ = executor_steps(loop, tokenizer, steps=6)
    assert all(len(step) == 2 and set(step) <= IN_BAND for step in drawn), drawn
    # every group was recorded: 4 pool samples + 4 executor samples per draw
    drawn_ids = [task for step in drawn for task in step]
    for task_id in IN_BAND:
        index = buffer.index(task_id)
        assert buffer.attempts[index] == 4 + 4 * drawn_ids.count(task_id)
        assert buffer.p_hat[index] == pytest.approx(0.5)


def test_uniform_draws_every_pool_task(tmp_path, tokenizer):
    loop = loop_with_pool(tmp_path, sampler="uniform")
    drawn, _ = executor_steps(loop, tokenizer, steps=8)
    assert all(len(set(step)) == 2 for step in drawn)  # no task twice within a step
    assert {task for step in drawn for task in step} == {t["task_id"] for t in pool_tasks()}


def test_executor_curriculum_survives_a_checkpoint_and_logs_metrics(tmp_path, tokenizer):
    loop = loop_with_pool(tmp_path, sampler="plr")
    _, collected = executor_steps(loop, tokenizer, steps=1)
    metrics = collected.metrics
    assert metrics["curriculum/drawn_groups"] == 2.0
    assert metrics["curriculum/effective_ratio"] == 1.0  # half-right groups
    assert "it0-p" in metrics["curriculum/top_tasks"]
    state = copy.deepcopy(loop.state_dict())  # what a checkpoint pickles
    restored = make_loop(loop.config)
    restored.load_state_dict(state)
    assert restored.pool["indices"] == loop.pool["indices"]
    assert list(restored.curriculum.buffer.attempts) == list(loop.curriculum.buffer.attempts)
    assert [restored.curriculum.draw(2, 3).tolist() for _ in range(4)] == [
        loop.curriculum.draw(2, 3).tolist() for _ in range(4)
    ]
    loop.save_artifacts(tmp_path)
    table = (tmp_path / "curriculum" / "tasks.csv").read_text()
    assert "it0-p3" in table and "qa/integer" in table
    loop.close()
    restored.close()


def test_dapo_refills_the_executor_step_with_mixed_groups(tmp_path, tokenizer):
    """q0–q2 are always answered right (a group with no advantage), q3–q5 half right: DAPO
    trains only on q3–q5 and draws again until the step has two of them."""

    def executor(prompt: str) -> str:
        question = int(re.search(r"Item q(\d+)", prompt).group(1))
        return "\\boxed{7}" if question < 3 else half_right(prompt)

    half_right = half_right_executor()
    loop = loop_with_pool(tmp_path, sampler="dapo", dapo_max_rounds=4)
    engine = ExecutorEngine(tokenizer, executor)
    drawn = 0
    for step in (1, 2):  # the executor steps of iteration 0
        collected = executor_step(loop, engine, step)
        episodes, metrics = collected.episodes, collected.metrics
        assert {e.info["task_id"] for e in episodes} <= {"it0-p3", "it0-p4", "it0-p5"}
        assert len({e.info["task_id"] for e in episodes}) == 2
        assert metrics["curriculum/kept_groups"] == 2.0
        drawn += metrics["curriculum/drawn_groups"]
    assert drawn > 4  # some all-right groups were drawn, graded and thrown away
    loop.close()
