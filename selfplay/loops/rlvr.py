"""RLVR: single-role RL with verifiable rewards on offline procedural reasoning-gym tasks.

Each step draws ``prompts_per_step`` tasks from a fixed set of ``dataset_size`` tasks, samples
``group_size`` answers per task, and rewards an answer 1 when reasoning-gym's verifier (or
Math-Verify equivalence) accepts it. With a small fixed set of easy tasks this is the "sanity
check" setting of REFERENCE §1: the training reward must climb.

With ``rlvr.tool`` set, the solver may run Python while it answers (``selfplay.tools``): each
episode is one tool-integrated rollout, graded on its whole transcript (tool output included, so
an answer the code printed counts in lenient mode), with tool calls and errors in ``info``.
"""

from __future__ import annotations

import contextlib

import reasoning_gym

from curricula.answers import grade_answer
from sandbox import SandboxLimits, SandboxPool
from selfplay.errors import UserError
from selfplay.loops.base import Loop
from selfplay.scheduler import BatchingPolicy
from selfplay.tools import tool_rollout
from selfplay.types import Completion, Episode, Request, Turn

ROLE = "solver"


def build_tasks(specs, size: int, seed: int) -> list[tuple[str, dict, object]]:
    """(family, entry, dataset) triples: a fixed, seeded set mixed by the specs' weights."""
    total = sum(s.weight for s in specs)
    tasks = []
    for index, spec in enumerate(specs):
        count = max(1, round(size * spec.weight / total))
        try:
            dataset = reasoning_gym.create_dataset(
                spec.name, size=count, seed=seed + index, **spec.config
            )
        except Exception as exc:
            raise UserError(f"reasoning-gym task {spec.name!r}: {exc}".splitlines()[0]) from exc
        tasks += [(spec.name, entry, dataset) for entry in dataset]
    return tasks


class RlvrLoop(Loop):
    name = "rlvr"

    def __init__(self, config) -> None:
        super().__init__(config)
        self.require_roles(ROLE)
        self.settings = config.rlvr
        self.tasks = build_tasks(self.settings.tasks, self.settings.dataset_size, config.seed)
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
        self, policy: BatchingPolicy, task_index: int, group: str, greedy: bool = False
    ) -> Episode:
        family, entry, dataset = self.tasks[task_index]
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
                "question": entry["question"],
                "gold": str(entry["answer"]),
                **{k: v for k, v in grade.items() if k != "reward"},
                **tool_info,
            },
        )

    async def collect(self, policy: BatchingPolicy, step: int) -> list[Episode]:
        chosen = self.rng.sample(
            range(len(self.tasks)), min(self.settings.prompts_per_step, len(self.tasks))
        )
        coroutines = [
            self._episode(policy, index, f"s{step}-t{index}")
            for index in chosen
            for _ in range(self.settings.group_size)
        ]
        return await policy.gather(coroutines)

    async def evaluate(self, policy: BatchingPolicy, step: int) -> dict[str, float]:
        """Greedy accuracy on the first ``eval_size`` tasks of the fixed set."""
        count = min(self.settings.eval_size, len(self.tasks))
        if count == 0:
            return {}
        episodes = await policy.gather(
            self._episode(policy, i, f"eval-{i}", greedy=True) for i in range(count)
        )
        return {
            "eval/accuracy": sum(e.info["correct"] for e in episodes) / count,
            "eval/boxed_rate": sum(e.info["boxed"] for e in episodes) / count,
        }

    def summarize(self, episodes: list[Episode]) -> dict[str, float]:
        metrics = super().summarize(episodes)
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
