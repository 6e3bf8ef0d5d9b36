"""The curriculum a loop draws its tasks from: a task buffer and a sampler (docs/curricula.md).

A loop uses it in its own code, in three visible moves per step::

    tasks = curriculum.draw(n, step)                 # which tasks to play now
    while len(tasks):
        groups = await play(tasks)                   # G graded answers per task: one Group each
        kept += curriculum.report(groups, step)      # outcomes in; the groups to train on out
        tasks = curriculum.redraw(n - len(kept), step)   # DAPO refills; other samplers: none
    metrics |= curriculum.metrics(step)

``report`` records every group's outcome in the buffer (p̂, the sampler's scores, ScaleRL's
retirement) and returns the groups the sampler keeps; ``redraw`` draws again only for a sampler
that refills (DAPO: until the batch is full or ``dapo_max_rounds`` rounds are spent), never a
task already drawn this step. ``metrics(step)`` reads the step's tally without changing it.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from curricula.buffer import TaskBuffer, level_label
from curricula.samplers import (
    BandSampler,
    DapoSampler,
    LearnabilitySampler,
    PlrSampler,
    Sampler,
    UniformSampler,
)
from curricula.settings import SAMPLERS
from curricula.tscl import TsclSampler

SAMPLER_CLASSES: dict[str, type[Sampler]] = {
    cls.name: cls
    for cls in (
        UniformSampler,
        BandSampler,
        DapoSampler,
        LearnabilitySampler,
        PlrSampler,
        TsclSampler,
    )
}


def make_sampler(settings: Any, seed: int = 0) -> Sampler:
    """The sampler ``settings.sampler`` names (settings: ``CurriculumSettings`` or the config)."""
    try:
        cls = SAMPLER_CLASSES[settings.sampler]
    except KeyError:
        known = ", ".join(SAMPLERS)
        raise ValueError(f"unknown sampler {settings.sampler!r} (known: {known})") from None
    return cls(settings, seed)


@dataclass
class Group:
    """One graded group: a task's G answers. ``payload`` is whatever the loop trains on."""

    task: int
    successes: float
    attempts: int
    rewards: Sequence[float]
    payload: Any = None

    @property
    def effective(self) -> bool:
        """Non-zero advantage: the group's rewards are not all equal."""
        return len(self.rewards) > 1 and max(self.rewards) > min(self.rewards)

    @property
    def mean_abs_advantage(self) -> float:
        """PLR's score: mean |r − r̄| over the group (the group-relative advantage, unscaled)."""
        if not self.rewards:
            return 0.0
        mean = sum(self.rewards) / len(self.rewards)
        return sum(abs(r - mean) for r in self.rewards) / len(self.rewards)


def groups_of(
    tasks: Sequence[int],
    episodes: Sequence[Any],
    correct: Sequence[bool],
    role: str,
) -> list[Group]:
    """Episodes played an equal number of times per task, in the order of ``tasks``, as one
    ``Group`` per task: successes = how many were ``correct`` (the loop's own grading),
    rewards = the ``role``'s rewards, payload = the episodes."""
    size = len(episodes) // max(len(tasks), 1)
    groups = []
    for k, task in enumerate(tasks):
        members = slice(k * size, (k + 1) * size)
        groups.append(
            Group(
                task=int(task),
                successes=float(sum(bool(c) for c in correct[members])),
                attempts=size,
                rewards=[e.rewards[role] for e in episodes[members]],
                payload=list(episodes[members]),
            )
        )
    return groups


@dataclass
class _Tally:
    """What one step drew, recorded and kept (the step's metrics)."""

    step: int
    drawn: list[int] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    kept: int = 0
    rounds: int = 0
    retired: int = 0


class Curriculum:
    """A ``TaskBuffer`` and the sampler ``settings.sampler`` names (``CurriculumSettings``)."""

    def __init__(self, settings: Any, seed: int = 0) -> None:
        self.settings = settings
        self.buffer = TaskBuffer(ema=settings.ema)
        self.sampler = make_sampler(settings, seed)
        self._tally = _Tally(step=-1)

    def add(self, task_id: str, family: str = "", difficulty: float = math.nan) -> int:
        return self.buffer.add(task_id, family=family, difficulty=difficulty)

    # ------------------------------------------------------------------ a step's moves
    def draw(
        self, n: int, step: int, exclude: Sequence[int] = (), replace: bool = False
    ) -> np.ndarray:
        """n tasks to play at ``step`` (fewer if fewer are active), never one in ``exclude``,
        nor one drawn already this step; ``replace``: drawn with replacement (a task may come
        twice, and the step's earlier draws are not excluded)."""
        tally = self._at(step)
        tally.drawn += [int(i) for i in exclude]
        never = [int(i) for i in exclude] if replace else tally.drawn
        tasks = self.sampler.sample(self.buffer, n, step, np.asarray(never, np.int64), replace)
        tally.drawn += tasks.tolist()
        return tasks

    def report(self, groups: list[Group], step: int) -> list[Group]:
        """Record graded groups (retire what crossed ``retire_at``, let the sampler learn) and
        return the ones the sampler keeps for training (DAPO: 0 < correct < G; others: all)."""
        tally = self._at(step)
        for group in groups:
            self.buffer.record(
                group.task, group.successes, group.attempts, step, group.mean_abs_advantage
            )
        tally.retired += self.buffer.retire(
            self.settings.retire_at, self.settings.retire_min_attempts
        )
        self.sampler.observe(self.buffer, np.asarray([g.task for g in groups], np.int64), step)
        tally.groups += groups
        kept = [g for g in groups if self.sampler.keep(g.successes, g.attempts)]
        tally.kept += len(kept)
        return kept

    async def play(
        self,
        wanted: int,
        step: int,
        play: Callable[[np.ndarray], Awaitable[list[Group]]],
        exclude: Sequence[int] = (),
    ) -> list[Group]:
        """A step's groups, visibly: ``draw`` → ``play`` (the loop grades the drawn tasks, one
        ``Group`` each) → ``report`` → ``redraw`` for the groups the sampler did not keep
        (DAPO), until ``wanted`` are kept or there is nothing to draw again."""
        kept: list[Group] = []
        tasks = self.draw(wanted, step, exclude=exclude)
        while len(tasks):
            kept += self.report(await play(tasks), step)
            tasks = self.redraw(wanted - len(kept), step)
        return kept

    def redraw(self, missing: int, step: int) -> np.ndarray:
        """More tasks for ``missing`` groups the sampler did not keep: only a sampler that
        refills (DAPO), at most ``dapo_max_rounds`` times a step, never a task drawn already
        this step. Empty when there is nothing to draw again."""
        tally = self._at(step)
        if missing <= 0 or not self.sampler.refills:
            return np.zeros(0, np.int64)
        if tally.rounds >= self.settings.dapo_max_rounds:
            return np.zeros(0, np.int64)
        tally.rounds += 1
        tasks = self.sampler.sample(self.buffer, missing, step, np.asarray(tally.drawn, np.int64))
        tally.drawn += tasks.tolist()
        return tasks

    def _at(self, step: int) -> _Tally:
        if self._tally.step != step:
            self._tally = _Tally(step)
        return self._tally

    # ------------------------------------------------------------------ reading it
    def metrics(self, step: int) -> dict[str, float | str]:
        """The sampler's state at ``step`` for metrics.jsonl (the step's tally is kept)."""
        tally = self._tally if self._tally.step == step else _Tally(step)
        groups, buffer = tally.groups, self.buffer
        metrics: dict[str, float | str] = {
            "curriculum/drawn_groups": float(len(groups)),
            "curriculum/kept_groups": float(tally.kept),
            "curriculum/refill_rounds": float(tally.rounds),
            "curriculum/effective_ratio": (
                sum(g.effective for g in groups) / len(groups) if groups else 0.0
            ),
            "curriculum/seen": float(buffer.seen.sum()),
            "curriculum/retired": float(buffer.retired.sum()),
            "curriculum/retired_now": float(tally.retired),
        }
        if groups:
            tasks = np.asarray([g.task for g in groups])
            difficulty = buffer.difficulty[tasks]
            known = difficulty[~np.isnan(difficulty)]
            if len(known):
                metrics["curriculum/difficulty_mean"] = float(known.mean())
            labels = [level_label(d) for d in difficulty]  # "?" for tasks without a level
            for label in sorted(set(labels)):
                metrics[f"curriculum/difficulty/{label}"] = labels.count(label) / len(groups)
        metrics["curriculum/top_tasks"] = self.top_tasks(step)
        return metrics

    def top_tasks(self, step: int) -> str:
        """The sampler's top-k tasks by priority: ``id=priority`` joined by spaces."""
        if len(self.buffer) == 0:
            return ""
        priority = self.sampler.priority(self.buffer, step)
        top = np.argsort(-priority, kind="stable")[: self.settings.top_k]
        return " ".join(f"{self.buffer.ids[i]}={priority[i]:.3g}" for i in top)

    def state_dict(self) -> dict:
        return {"buffer": self.buffer.state_dict(), "sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.buffer.load_state_dict(state["buffer"])
        self.sampler.load_state_dict(state["sampler"])
