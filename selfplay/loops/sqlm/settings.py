"""SQLM's config section (``sqlm:``; docs/sqlm.md; the loop is ``loop.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from selfplay.engines.tools import ToolSettings
from selfplay.loops.base import LoopSettings
from selfplay.loops.reasoning import TaskSpec


class SqlmSettings(LoopSettings):
    """One model, two roles: the proposer reads one fixed topic prompt (its role prompt), the
    solver answers every proposal ``solver_samples`` times."""

    # how a proposal is read: arithmetic = the whole reply, algebra = after "Selected
    # Question", coding = a problem, then "Test Cases:" and `input ||| output` lines
    topic: Literal["arithmetic", "algebra", "coding"] = "arithmetic"
    proposal_groups: int = Field(8, ge=1)  # proposer GRPO groups per step
    proposal_group_size: int = Field(4, ge=1)  # proposals per group (the code: rollout.n)
    solver_samples: int = Field(4, ge=2)  # N answers per proposal (the code: rollout.n)
    proposer_reward: Literal["code", "paper"] = "code"  # 1 < m_maj < N, or 0 < m_maj < N
    proposer_update_every: int = Field(5, ge=1)  # the proposer trains on every k-th step only
    proposer_max_tokens: int | None = Field(None, ge=1)  # None: sampling.max_new_tokens
    solver_max_tokens: int | None = Field(None, ge=1)
    sandbox: ToolSettings = ToolSettings(wall_s=5.0)  # coding: where the programs run
    lenient: bool = False  # a solver reply without <answer> tags or \boxed{}: its last number
    # held-out greedy accuracy of the solver (reasoning-gym families), before/after/eval_every
    eval_reasoning: list[TaskSpec] = []
    eval_reasoning_size: int = Field(16, ge=0)
