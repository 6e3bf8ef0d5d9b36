"""AZR's config section (``azr:``): batch sizes per mode, the seeding, the buffers, the
sandbox checks and the reward form (docs/azr.md; the loop is ``loop.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from curricula.programs import BANNED
from selfplay.engines.tools import ToolSettings
from selfplay.loops.base import LoopSettings

MODES = ("deduction", "abduction", "induction")


class AzrSettings(LoopSettings):
    """Absolute Zero: one policy proposes and solves programs in three modes."""

    renamed = {"propose_max_tokens": "roles.propose_<mode>.max_tokens (each mode's role)",
               "solve_max_tokens": "roles.solve_<mode>.max_tokens (each mode's role)",
               "learnability_samples": "azr.solver_samples"}

    # paper: proposer r = 0 when r̄ ∈ {0, 1}, −0.5 for an invalid task, TRR++ (r − μ)/σ per
    # (mode, role); code: −0.5 when r̄ ∈ {0, 1}, −1 for an invalid task, TRR++ as REINFORCE++
    # whitened over the batch's tokens (docs/algorithms.md#azr)
    reward_form: Literal["paper", "code"] = "paper"
    proposals_per_mode: int = Field(64, ge=1)  # propose prompts per mode per step
    solves_per_mode: int = Field(64, ge=1)  # solve prompts per mode per step (n = 1 each)
    solver_samples: int = Field(8, ge=1)  # n fresh solver samples for p̂ = r̄ of a new task
    references: int = Field(6, ge=0)  # K triplets from the buffer shown to a proposer
    induction_inputs: int = Field(10, ge=2)  # inputs an induction proposal must give
    induction_shown: int = Field(5, ge=1)  # pairs the solver sees; the rest are held out
    # seeding: the identity f(a) = a on "Hello world", expanded by the model into valid
    # triplets before the first step, until each mode's buffer holds `seed_size` tasks
    seed_size: int = Field(256, ge=1)
    seed_batch: int | None = Field(None, ge=1)  # proposals per mode per round; None: 4 × per step
    seed_rounds: int = Field(8, ge=0)  # seeding rounds at most (then training starts anyway)
    buffer_cap: int = Field(16384, ge=1)  # tasks kept per mode (the oldest leave first)
    lenient: bool = False  # answers: also an unclosed <answer> / a bare program (small models)
    require_message: bool = True  # an induction proposal must give a message
    max_output_chars: int = Field(1000, ge=1)  # a longer output's repr makes a task invalid
    banned: list[str] = list(BANNED)  # modules / attributes a program may not touch
    # the sandbox the programs run in: its time limit is the validity check's
    sandbox: ToolSettings = ToolSettings(wall_s=10.0, pool_size=4)

    @model_validator(mode="after")
    def _shown_below_inputs(self) -> AzrSettings:
        if self.induction_shown >= self.induction_inputs:
            raise ValueError(
                f"induction_shown {self.induction_shown} must be below induction_inputs "
                f"{self.induction_inputs} (some pairs must be held out)"
            )
        return self

    @property
    def seed_proposals(self) -> int:
        return self.seed_batch or 4 * self.proposals_per_mode
