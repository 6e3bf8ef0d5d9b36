"""RLVR: single-role RL with verifiable rewards on offline procedural reasoning-gym tasks.

Each step draws ``prompts_per_step`` tasks from a fixed set of ``dataset_size`` tasks, samples
``group_size`` answers per task, and rewards an answer 1 when reasoning-gym's verifier (or
Math-Verify equivalence) accepts it. With a small fixed set of easy tasks this is the "sanity
check" setting of REFERENCE §1: the training reward must climb.

Tasks are drawn by the experiment's curriculum (``curriculum.sampler``, docs/curricula.md): every
task of the fixed set is one entry of a ``TaskBuffer``, labelled with its family and difficulty
level (``rlvr.tasks[].levels``: configs merged over the family's ``config``, level k = label k).
The sampler's state (effective-prompt ratio, sampled difficulty, top tasks) goes to
``metrics.jsonl`` and the per-task table to ``curriculum/tasks.csv``. With ``eval_split:
heldout`` evaluation uses tasks from the same families and levels that training never sees.

With ``rlvr.tool`` set, the solver may run Python while it answers (``selfplay.engines.tools``):
each episode is one tool-integrated rollout, graded on its whole transcript (tool output included,
so an answer the code printed counts in lenient mode), with tool calls and errors in ``info``.
"""

from __future__ import annotations

import contextlib
import math
from typing import NamedTuple

import numpy as np
import reasoning_gym

from curricula.answers import grade_answer
from curricula.samplers import Curriculum, Group, groups_of
from sandbox import SandboxLimits, SandboxPool
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.engines.tools import tool_rollout
from selfplay.loops.base import Loop
from selfplay.types import Completion, Episode, Request, Turn

ROLE = "solver"


class RgTask(NamedTuple):
    """One reasoning-gym item of the fixed set, with its family and difficulty level."""

    family: str
    level: float  # index into the spec's ``levels`` (NaN when the spec has none)
    entry: dict
    dataset: object
    task_id: str


def build_levelled_tasks(specs, size: int, seed: int) -> list[RgTask]:
    """A fixed, seeded set mixed by the specs' weights, split evenly over each spec's levels."""
    total = sum(s.weight for s in specs)
    tasks: list[RgTask] = []
    for index, spec in enumerate(specs):
        levels = spec.levels or [{}]
        count = max(1, round(size * spec.weight / total / len(levels)))
        for level, overrides in enumerate(levels):
            label = float(level) if spec.levels else math.nan
            try:
                dataset = reasoning_gym.create_dataset(
                    spec.name,
                    size=count,
                    seed=seed + 1000 * level + index,
                    **{**spec.config, **overrides},
                )
            except Exception as exc:
                where = f"{spec.name!r}" + (f" level {level}" if spec.levels else "")
                raise UserError(f"reasoning-gym task {where}: {exc}".splitlines()[0]) from exc
            prefix = f"{spec.name}@{level}" if spec.levels else spec.name
            tasks += [
                RgTask(spec.name, label, entry, dataset, f"{prefix}#{k}")
                for k, entry in enumerate(dataset)
            ]
    return tasks


def build_tasks(specs, size: int, seed: int) -> list[tuple[str, dict, object]]:
    """(family, entry, dataset) triples: a fixed, seeded set mixed by the specs' weights."""
    return [(t.family, t.entry, t.dataset) for t in build_levelled_tasks(specs, size, seed)]


class RlvrLoop(Loop):
    name = "rlvr"
    curriculum_tasks = "tasks (rlvr.tasks)"

    def __init__(self, config) -> None:
        super().__init__(config)
        self.require_roles(ROLE)
        self.settings = config.rlvr
        self.pool_tasks = build_levelled_tasks(
            self.settings.tasks, self.settings.dataset_size, config.seed
        )
        self.tasks = [(t.family, t.entry, t.dataset) for t in self.pool_tasks]
        self.eval_tasks = (
            build_levelled_tasks(self.settings.tasks, self.settings.eval_size, config.seed + 20_000)
            if self.settings.eval_split == "heldout" and self.settings.eval_size
            else self.pool_tasks[: self.settings.eval_size]
        )
        self.curriculum = Curriculum(config.curriculum, seed=config.seed)
        self.curriculum.buffer.add_many(
            [t.task_id for t in self.pool_tasks],
            [t.family for t in self.pool_tasks],
            [t.level for t in self.pool_tasks],
        )
        self._step_metrics: dict[int, dict] = {}  # step → the curriculum's state after collect
        self._pool: SandboxPool | None = None  # started on the first tool call, not at build

    # ---------------------------------------------------------------- the Python tool
    def sandbox(self) -> SandboxPool:
        if self._pool is None:
            tool = self.settings.tool
            limits = SandboxLimits(wall_s=tool.wall_s, cpu_s=tool.wall_s)
            self._pool = SandboxPool(size=tool.pool_size, limits=limits)
        return self._pool

    def close(self) -> None:
        """Stop the sandbox workers (the runner calls this when the run ends)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit anything may be gone
            self.close()

    async def _solve(self, policy: BatchingPolicy, request: Request) -> tuple[Turn, dict]:
        """One answer: a plain completion, or a tool-integrated rollout when the tool is on."""
        if self.settings.tool is None:
            completion: Completion = await policy(request)
            return self.turn(request, completion, policy), {}
        rollout = await tool_rollout(
            policy, request, self.sandbox(), policy.engine.tokenizer, self.settings.tool
        )
        return rollout.turn, rollout.info()

    def grade(self, text: str, family: str, entry: dict, dataset) -> dict:
        graded = grade_answer(text, entry, dataset, lenient=self.settings.lenient)
        bonus = self.settings.format_reward if graded["boxed"] else 0.0
        return {**graded, "reward": graded["score"] + bonus}

    async def _episode(
        self,
        policy: BatchingPolicy,
        task_index: int,
        group: str,
        greedy: bool = False,
        task: RgTask | None = None,
    ) -> Episode:
        task = task or self.pool_tasks[task_index]
        family, entry, dataset = task.family, task.entry, task.dataset
        request = self.request(ROLE, greedy=greedy, question=entry["question"])
        turn, tool_info = await self._solve(policy, request)
        grade = self.grade(turn.text, family, entry, dataset)
        return Episode(
            loop=self.name,
            env=family,
            turns=[turn],
            rewards={ROLE: grade["reward"]},
            group_id=group,
            info={
                "task": task_index,
                "task_id": task.task_id,
                "level": None if math.isnan(task.level) else task.level,
                "question": entry["question"],
                "gold": str(entry["answer"]),
                **{k: v for k, v in grade.items() if k != "reward"},
                **tool_info,
            },
        )

    async def _groups(self, policy: BatchingPolicy, step: int, indices: np.ndarray) -> list[Group]:
        """One group of ``group_size`` answers per task, graded: what the curriculum records."""
        size = self.settings.group_size
        episodes = await policy.gather(
            self._episode(policy, int(index), f"s{step}-t{index}")
            for index in indices
            for _ in range(size)
        )
        return groups_of(indices, episodes, size, ROLE)

    async def collect(self, policy: BatchingPolicy, step: int) -> list[Episode]:
        count = min(self.settings.prompts_per_step, len(self.pool_tasks))
        kept = await self.curriculum.fill(
            count, step, lambda indices: self._groups(policy, step, indices)
        )
        self._step_metrics[step] = self.curriculum.metrics(step)
        return [episode for group in kept for episode in group.payload]

    async def evaluate(self, policy: BatchingPolicy, step: int) -> dict[str, float]:
        """Greedy accuracy on the evaluation tasks (``eval_split``), overall and per level."""
        tasks = self.eval_tasks
        if not tasks:
            return {}
        episodes = await policy.gather(
            self._episode(policy, i, f"eval-{i}", greedy=True, task=task)
            for i, task in enumerate(tasks)
        )
        count = len(tasks)
        metrics = {
            "eval/accuracy": sum(e.info["correct"] for e in episodes) / count,
            "eval/boxed_rate": sum(e.info["boxed"] for e in episodes) / count,
        }
        if any(not math.isnan(t.level) for t in tasks):
            arms: dict[str, list[bool]] = {}
            for task, episode in zip(tasks, episodes, strict=True):
                arm = task.task_id.split("#")[0]
                arms.setdefault(arm, []).append(episode.info["correct"])
            for arm, results in sorted(arms.items()):
                metrics[f"eval/accuracy/{arm}"] = sum(results) / len(results)
        return metrics

    def summarize(self, episodes: list[Episode]) -> dict[str, float]:
        metrics = super().summarize(episodes)
        if self._step_metrics:  # the oldest step collected (async: the next may be in flight)
            metrics |= self._step_metrics.pop(min(self._step_metrics))
        n = max(len(episodes), 1)
        metrics["rollout/accuracy"] = sum(e.info["correct"] for e in episodes) / n
        metrics["rollout/boxed_rate"] = sum(e.info["boxed"] for e in episodes) / n
        metrics["rollout/answered_rate"] = sum(e.info["answer"] is not None for e in episodes) / n
        if self.settings.tool is not None:
            calls = sum(e.info.get("tool_calls", 0) for e in episodes)
            errors = sum(e.info.get("tool_errors", 0) for e in episodes)
            metrics["rollout/tool_calls"] = calls / n
            metrics["rollout/tool_use_rate"] = (
                sum(e.info.get("tool_calls", 0) > 0 for e in episodes) / n
            )
            metrics["rollout/tool_error_rate"] = errors / calls if calls else 0.0
        return metrics
