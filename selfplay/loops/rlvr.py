"""RLVR: single-role RL with verifiable rewards on offline procedural reasoning-gym tasks.

Each step draws ``prompts_per_step`` tasks from a fixed set of ``dataset_size`` tasks, samples
``group_size`` answers per task, and rewards an answer 1 when reasoning-gym's verifier (or
Math-Verify equivalence) accepts it. With a small fixed set of easy tasks this is the "sanity
check" setting (docs/algorithms.md#losses): the training reward must climb.

Tasks are drawn by the experiment's curriculum (``curriculum.sampler``, docs/curricula.md): every
task of the fixed set is one entry of a ``TaskBuffer``, labelled with its family and difficulty
level (``rlvr.tasks[].levels``: configs merged over the family's ``config``, level k = label k).
The sampler's state (effective-prompt ratio, sampled difficulty, top tasks) goes to
``metrics.jsonl`` and the per-task table to ``curriculum/tasks.csv``. With ``eval_split:
heldout`` evaluation uses tasks from the same families and levels that training never sees.

With ``rlvr.tool`` set, the solver may run Python while it answers (``selfplay.engines.tools``):
each episode is one tool-integrated rollout, graded on its whole transcript (tool output
included, so an answer the code printed counts in lenient mode), with tool calls and errors in
``info``.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field

from curricula.answers import grade_answer
from curricula.curriculum import Curriculum, Group, groups_of
from selfplay.engines.policy import BatchingPolicy
from selfplay.engines.tools import ToolSandbox, ToolSettings
from selfplay.loops.base import Loop, LoopSettings, LoopSpec
from selfplay.loops.reasoning import RgTask, TaskSpec, build_levelled_tasks
from selfplay.types import Collected, Episode, Request, Turn

ROLE = "solver"


class RlvrSettings(LoopSettings):
    tasks: list[TaskSpec] = Field(min_length=1)  # none: an empty pool, a run on nothing
    dataset_size: int = Field(64, ge=1)  # a small fixed set → the "sanity check" setting
    prompts_per_step: int = Field(4, ge=1)
    group_size: int = Field(8, ge=2)
    lenient: bool = True  # accept the last number when no \boxed{} is given
    format_reward: float = Field(0.0, ge=0)  # bonus for a \boxed{} answer
    eval_size: int = Field(32, ge=0)
    # train: the first eval_size training tasks (the sanity check); heldout: eval_size other
    # tasks from the same families and levels, never trained on
    eval_split: Literal["train", "heldout"] = "train"
    tool: ToolSettings | None = None  # set to give the solver a Python interpreter

    def trained_families(self) -> set[str]:
        return {task.name for task in self.tasks}

    def tool_settings(self) -> ToolSettings | None:
        return self.tool


class RlvrLoop(Loop):
    name = "rlvr"
    Settings = RlvrSettings
    spec = LoopSpec(roles={ROLE: ("question",)}, tasks="tasks (rlvr.tasks)", reasoner=ROLE)

    def __init__(self, config) -> None:
        super().__init__(config)
        s: RlvrSettings = self.settings
        self.pool_tasks = build_levelled_tasks(s.tasks, s.dataset_size, config.seed)
        self.eval_tasks = (
            build_levelled_tasks(s.tasks, s.eval_size, config.seed + 20_000)
            if s.eval_split == "heldout" and s.eval_size
            else self.pool_tasks[: s.eval_size]
        )
        self.curriculum = Curriculum(config.curriculum, seed=config.seed)
        self.curriculum.buffer.add_many(
            [t.task_id for t in self.pool_tasks],
            [t.family for t in self.pool_tasks],
            [t.level for t in self.pool_tasks],
        )
        self.tool = ToolSandbox(s.tool) if s.tool is not None else None

    def close(self) -> None:
        if self.tool is not None:
            self.tool.close()

    # ---------------------------------------------------------------- one answer
    async def solve(self, policy: BatchingPolicy, request: Request) -> tuple[Turn, dict]:
        """One answer: a plain completion, or a tool-integrated rollout when the tool is on."""
        if self.tool is None:
            completion = await policy(request)
            return self.turn(request, completion, policy), {}
        rollout = await self.tool.rollout(policy, request)
        return rollout.turn, rollout.info()

    def grade(self, text: str, task: RgTask) -> dict:
        graded = grade_answer(text, task.entry, task.dataset, lenient=self.settings.lenient)
        bonus = self.settings.format_reward if graded["boxed"] else 0.0
        return {**graded, "reward": graded["score"] + bonus}

    async def episode(
        self, policy: BatchingPolicy, index: int, group: str, task: RgTask, greedy: bool = False
    ) -> Episode:
        request = self.request(ROLE, greedy=greedy, question=task.entry["question"])
        turn, tool_info = await self.solve(policy, request)
        grade = self.grade(turn.reply, task)  # the prompt's prefill starts the reply
        return Episode(
            loop=self.name,
            env=task.family,
            turns=[turn],
            rewards={ROLE: grade["reward"]},
            group_id=group,
            info={
                "task": index,
                "task_id": task.task_id,
                "level": None if math.isnan(task.level) else task.level,
                "question": task.entry["question"],
                "gold": str(task.entry["answer"]),
                **{k: v for k, v in grade.items() if k not in ("reward", "correct")},
                **tool_info,
            },
            correct=grade["correct"],
        )

    # ---------------------------------------------------------------- one step
    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        """Draw tasks, answer each ``group_size`` times, report the outcomes; a sampler that
        keeps only some groups (DAPO) draws again for the rest."""
        wanted = min(self.settings.prompts_per_step, len(self.pool_tasks))
        kept = await self.curriculum.play(wanted, step, lambda t: self.answer(policy, step, t))
        episodes = [episode for group in kept for episode in group.payload]
        metrics = self.curriculum.metrics(step) | answer_metrics(episodes, self.tool is not None)
        return Collected(episodes, metrics)

    async def answer(self, policy: BatchingPolicy, step: int, tasks: np.ndarray) -> list[Group]:
        """``group_size`` graded answers to each task: one ``Group`` per task."""
        size = self.settings.group_size
        episodes = await policy.gather(
            self.episode(policy, int(index), f"s{step}-t{index}", self.pool_tasks[int(index)])
            for index in tasks
            for _ in range(size)
        )
        return groups_of(tasks, episodes, [e.correct for e in episodes], ROLE)

    async def evaluate(self, policy: BatchingPolicy, step: int) -> dict[str, float]:
        """Greedy accuracy on the evaluation tasks (``eval_split``), overall and per level, and
        on ``eval_reasoning``'s held-out families when set."""
        tasks, held_out = self.eval_tasks, await super().evaluate(policy, step)
        if not tasks:
            return held_out
        episodes = await policy.gather(
            self.episode(policy, i, f"eval-{i}", task, greedy=True) for i, task in enumerate(tasks)
        )
        count = len(tasks)
        metrics = held_out | {
            "eval/accuracy": sum(e.correct for e in episodes) / count,
            "eval/boxed_rate": sum(e.info["boxed"] for e in episodes) / count,
        }
        if any(not math.isnan(t.level) for t in tasks):
            arms: dict[str, list[bool]] = {}
            for task, episode in zip(tasks, episodes, strict=True):
                arms.setdefault(task.task_id.split("#")[0], []).append(episode.correct)
            for arm, results in sorted(arms.items()):
                metrics[f"eval/accuracy/{arm}"] = sum(results) / len(results)
        return metrics


def answer_metrics(episodes: list[Episode], tool: bool) -> dict[str, float]:
    """Accuracy, boxed and answered rates of a step's answers; tool use when the tool is on."""
    n = max(len(episodes), 1)
    metrics = {
        "rollout/accuracy": sum(e.correct for e in episodes) / n,
        "rollout/boxed_rate": sum(e.info["boxed"] for e in episodes) / n,
        "rollout/answered_rate": sum(e.info["answer"] is not None for e in episodes) / n,
    }
    if tool:
        calls = sum(e.info.get("tool_calls", 0) for e in episodes)
        errors = sum(e.info.get("tool_errors", 0) for e in episodes)
        metrics["rollout/tool_calls"] = calls / n
        used = sum(e.info.get("tool_calls", 0) > 0 for e in episodes)
        metrics["rollout/tool_use_rate"] = used / n
        metrics["rollout/tool_error_rate"] = errors / calls if calls else 0.0
    return metrics
