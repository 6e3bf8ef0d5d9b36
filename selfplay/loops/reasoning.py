"""Reasoning-gym task sets shared by the loops: RLVR's training tasks, the held-out reasoning
families SPIRAL and SPICE evaluate transfer on, Agent0's labelled probe set.

Tasks are offline procedural items with verifiers (PyPI ``reasoning-gym``): a fixed, seeded set
mixed by weight, optionally split over difficulty levels.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from pydantic import Field

from curricula.answers import grade_answer
from selfplay.config import Strict
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.types import Request


def reasoning_gym():
    """reasoning-gym, imported when a task set is built (it takes about a second, and a config
    that names tasks validates without it: ``selfplay bench gpu`` on a machine without it)."""
    import reasoning_gym as module

    return module


class TaskSpec(Strict):
    name: str  # a reasoning-gym dataset name
    weight: float = Field(1.0, gt=0)
    config: dict[str, Any] = {}
    # difficulty levels: each a config merged over `config` (level k = difficulty label k)
    levels: list[dict[str, Any]] = []


class RgTask(NamedTuple):
    """One reasoning-gym item of a fixed set, with its family and difficulty level."""

    family: str
    level: float  # index into the spec's ``levels`` (NaN when the spec has none)
    entry: dict
    dataset: object
    task_id: str


def build_levelled_tasks(specs: list[TaskSpec], size: int, seed: int) -> list[RgTask]:
    """A fixed, seeded set mixed by the specs' weights, split evenly over each spec's levels."""
    total = sum(s.weight for s in specs)
    tasks: list[RgTask] = []
    for index, spec in enumerate(specs):
        levels = spec.levels or [{}]
        count = max(1, round(size * spec.weight / total / len(levels)))
        for level, overrides in enumerate(levels):
            label = float(level) if spec.levels else math.nan
            try:
                dataset = reasoning_gym().create_dataset(
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


def build_tasks(specs: list[TaskSpec], size: int, seed: int) -> list[RgTask]:
    """A held-out set (``size`` items, no levels needed); [] when there are no specs."""
    return build_levelled_tasks(specs, size, seed) if specs and size else []


async def reasoning_accuracy(
    policy: BatchingPolicy, tasks: list[RgTask], ask: Callable[[dict], Request]
) -> dict[str, float]:
    """Accuracy on ``tasks`` per family (``eval/reasoning/<family>``) and overall
    (``eval/reasoning/mean``): one answer each to ``ask(entry)``, graded leniently by the
    family's verifier (the reply includes the request's prefill)."""

    async def solve(task: RgTask) -> tuple[str, bool]:
        request = ask(task.entry)
        reply = (await policy(request)).reply
        return task.family, grade_answer(reply, task.entry, task.dataset, lenient=True)["correct"]

    results = await policy.gather(solve(task) for task in tasks)
    metrics: dict[str, float] = {}
    for family in sorted({f for f, _ in results}):
        scores = [ok for f, ok in results if f == family]
        metrics[f"eval/reasoning/{family}"] = sum(scores) / len(scores)
    metrics["eval/reasoning/mean"] = sum(ok for _, ok in results) / len(results)
    return metrics
