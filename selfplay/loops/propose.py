"""The propose-and-solve core: what the loops in which one role poses tasks and another solves
them share, so that each loop's own file holds its algorithm and little else
(docs/architecture.md#the-propose-and-solve-core).

- ``Proposal``: one proposer reply, typed: the task it poses (``question``; None when it
  poses none), why it is invalid (``reason``), the solver's N outcomes on it (``scores``, each
  a success in [0, 1]) and so its p̂, the proposer's reward, and its ``tasks.jsonl`` row.
- ``solve_groups``: every proposal solved N times in one engine wave, the results grouped
  back by proposal (the "gather flat, then slice" step every such loop needs).
- ``proposer_reward``: the p̂ → reward function a loop's settings name, from the one registry
  (``curricula.rewards``: each paper's form and its code's, by name, or a plug-in).
- ``proposal_metrics``: the figures every such loop reports, under its own prefix.

The vocabulary (docs/architecture.md#vocabulary): p̂ is ``p_hat`` (the share of a task's
solver samples that succeeded), the solver's sample count ``solver_samples``, a role's token
budget and stop strings ``roles.<role>.max_tokens`` and ``roles.<role>.stop``, and a loop's
own metrics are ``<loop>/<figure>`` (``<loop>/<part>/<figure>`` for a part of it: a role,
a mode, a phase).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, TypeVar

from pydantic import AfterValidator

from curricula.rewards import PROPOSER_REWARDS, resolve_reward
from selfplay.core import plugins
from selfplay.engines.policy import BatchingPolicy
from selfplay.types import TaskRow, Turn

Item = TypeVar("Item")
Result = TypeVar("Result")


def mean(values: Iterable[float | bool | None]) -> float:
    """The mean of the values that are not None; 0.0 for none (a step with nothing to
    average reports 0, not an error)."""
    kept = [float(v) for v in values if v is not None]
    return sum(kept) / len(kept) if kept else 0.0


def grouped(flat: Sequence[Result], size: int) -> list[list[Result]]:
    """``flat`` cut into consecutive groups of ``size``."""
    return [list(flat[k : k + size]) for k in range(0, len(flat), size)] if size else []


async def solve_groups(
    policy: BatchingPolicy,
    items: Sequence[Item],
    samples: int,
    solve: Callable[[Item], Awaitable[Result]],
) -> list[list[Result]]:
    """``solve(item)`` ``samples`` times for every item, all in one engine wave (the calls of
    every coroutine share the engine's batches), grouped back by item, in the items' order."""
    flat = await policy.gather(solve(item) for item in items for _ in range(samples))
    return grouped(flat, samples)


def _reward_name(name: str) -> str:
    if name in PROPOSER_REWARDS or plugins.resolvable(name, plugins.REWARDS):
        return name
    raise ValueError(f"unknown proposer reward {name!r} (known: "
                     f"{', '.join(sorted(PROPOSER_REWARDS))}, or module:function)")


# a settings field naming a p̂ → reward: checked with the config, loaded with the loop
RewardName = Annotated[str, AfterValidator(_reward_name)]


def proposer_reward(name: str, samples: int | None = None) -> Callable[[float], float]:
    """The p̂ → reward function ``name`` (``curricula.rewards.resolve_reward``; ``samples`` is
    the solver's N, for the forms that read it). Refused in one line when unknown, so a
    loop resolves it when it is made, before a run folder exists."""
    return resolve_reward(name, samples)


@dataclass(kw_only=True)
class Proposal:
    """One proposer reply and what the solver made of its task.

    A loop subclasses it with what its own proposals carry (a document, a target, a mode);
    every field is a keyword. ``scores`` are the solver's samples' successes in [0, 1] (1 for
    a right answer; a share of tests passed), so ``p_hat`` is their mean."""

    task_id: str
    turn: Turn
    question: str | None = None  # the task as the solver reads it; None: it poses none
    reason: str = ""  # why it is invalid ("" when valid)
    answer: str | None = None  # its gold (or its proposer's) answer, when it has one
    scores: list[float] = field(default_factory=list)
    answers: list[str | None] = field(default_factory=list)  # the solver's answers
    reward: float | None = None  # the proposer's reward (None: not rewarded)

    @property
    def valid(self) -> bool:
        return self.question is not None and not self.reason

    @property
    def p_hat(self) -> float | None:
        """The share of the solver's samples that succeeded (None: invalid, or not solved)."""
        return sum(self.scores) / len(self.scores) if self.scores and self.valid else None

    def row(self, step: int, loop: str, phase: str, **fields) -> TaskRow:
        """The proposal's row of ``tasks.jsonl`` (docs/run-folder.md); ``fields`` adds or
        replaces any column (``kept``, ``document``, ...)."""
        columns = dict(
            step=step, loop=loop, task_id=self.task_id, phase=phase,
            question=self.question if self.question is not None else self.turn.reply,
            answer=self.answer, valid=self.valid, p_hat=self.p_hat, samples=len(self.scores),
            solver_answers=list(self.answers), reward=self.reward, kept=self.valid,
        )
        return TaskRow(**(columns | fields))


def proposal_metrics(prefix: str, proposals: Sequence[Proposal]) -> dict[str, float]:
    """What every propose-and-solve loop reports of its proposals, as ``<prefix>/<figure>``:
    how many, the valid share, mean p̂ of the solved ones and the share of them that teach
    something (0 < p̂ < 1), the proposers' mean reward. A figure with nothing to average (no
    proposal solved, none rewarded) is left out: a mean of nothing is not a 0."""
    solved = [p.p_hat for p in proposals if p.valid and p.p_hat is not None]
    rewards = [p.reward for p in proposals if p.reward is not None]
    metrics = {f"{prefix}/proposals": float(len(proposals)),
               f"{prefix}/valid_rate": mean(p.valid for p in proposals)}
    if solved:
        metrics[f"{prefix}/p_hat"] = mean(solved)
        metrics[f"{prefix}/informative_share"] = mean(0 < p < 1 for p in solved)
    if rewards:
        metrics[f"{prefix}/proposer_reward"] = mean(rewards)
    return metrics
