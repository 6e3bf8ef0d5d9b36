"""SQLM's config section (``sqlm:``; docs/sqlm.md; the loop is ``loop.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from selfplay.engines.tools import ToolSettings
from selfplay.loops.base import LoopSettings
from selfplay.loops.propose import RewardName


class SqlmSettings(LoopSettings):
    """The proposer reads one fixed topic prompt; the solver answers ``solver_samples`` times."""

    renamed = {f"{role}_max_tokens": f"roles.{role}.max_tokens" for role in ("proposer", "solver")}
    renamed_values = {"proposer_reward": {"code": "agreement_band", "paper": "informative"}}

    # a proposal: the whole reply; algebra: after "Selected Question"; coding: + test lines
    topic: Literal["arithmetic", "algebra", "coding"] = "arithmetic"
    proposal_groups: int = Field(8, ge=1)  # proposer GRPO groups per step
    proposal_group_size: int = Field(4, ge=1)  # proposals per group (the code: rollout.n)
    solver_samples: int = Field(4, ge=2)  # N answers per proposal (the code: rollout.n)
    # p̂ → reward (curricula/rewards.py): agreement_band, the code's 1 < m_maj < N, or
    # informative, the paper's 0 < m_maj < N (coding: always 0 < mean test score < 1)
    proposer_reward: RewardName = "agreement_band"
    proposer_update_every: int = Field(5, ge=1)  # the proposer trains on every k-th step only
    sandbox: ToolSettings = ToolSettings(wall_s=5.0)  # coding: where the programs run
    lenient: bool = False  # a solver reply without <answer> tags or \boxed{}: its last number
