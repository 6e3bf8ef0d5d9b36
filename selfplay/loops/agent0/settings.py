"""Agent0's config section (``agent0:``): the two phases, the curriculum reward, the executor's
task pool and band, the tool and the probe set (docs/agent0.md; the loop is ``loop.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from curricula.consistency import in_band_code, in_band_paper
from selfplay.engines.tools import ToolSettings
from selfplay.loops.base import LoopSettings
from selfplay.loops.propose import RewardName
from selfplay.loops.reasoning import TaskSpec


class Agent0Settings(LoopSettings):
    """Agent0: a curriculum role and a tool-using executor role, alternating.

    Steps map to (iteration, phase): each iteration is ``curriculum_steps`` curriculum steps
    then ``executor_steps`` executor steps (train.steps = iterations × their sum)."""

    renamed = {"curriculum_max_tokens": "roles.curriculum.max_tokens",
               "executor_max_tokens": "roles.executor.max_tokens",
               "samples_per_task": "agent0.solver_samples"}

    task_kind: Literal["qa", "code_io"] = "qa"  # code_io: program + input, verified by running it
    curriculum_steps: int = Field(5, ge=1)
    executor_steps: int = Field(5, ge=1)
    solver_samples: int = Field(8, ge=2)  # k executor samples for p̂ and the pseudo-label
    # curriculum phase: GRPO groups of proposals from the curriculum prompt
    proposal_groups: int = Field(1, ge=1)
    proposal_group_size: int = Field(8, ge=2)
    # the composite curriculum reward (curricula/rewards.py)
    # paper / released Agent0 code / released R-Zero code (docs/rzero.md)
    reward_form: Literal["paper", "code", "rzero"] = "paper"
    proposer_reward: RewardName | None = None  # p̂ → reward by name; None: the form's own
    lambda_unc: float = Field(1.0, ge=0)
    lambda_tool: float = Field(1.0, ge=0)
    tool_gamma: float = Field(0.05, ge=0)
    tool_cap: int = Field(4, ge=0)
    repetition_weight: float = Field(1.0, ge=0)
    repetition_threshold: float = Field(0.5, gt=0, le=1)
    agreement_gate: bool = False  # code form: p̂ ← 0 when the executor majority disagrees
    # executor phase
    pool_size: int = Field(64, ge=1)  # proposals generated per iteration for the task pool
    band: Literal["paper", "code"] = "paper"  # |p̂ − ½| ≤ band_delta, or band_lo ≤ p̂ ≤ band_hi
    band_delta: float = Field(0.25, ge=0, le=0.5)
    band_lo: float = Field(0.3, ge=0, le=1)
    band_hi: float = Field(0.8, ge=0, le=1)
    executor_tasks_per_step: int = Field(4, ge=1)
    executor_group_size: int = Field(8, ge=2)
    # 1/0 (paper), +1/−1 (Agent0's code), or (1 − w)·correct + w·format (R-Zero's code)
    executor_reward: Literal["binary", "signed", "format"] = "binary"
    executor_format_weight: float = Field(0.1, ge=0, le=1)  # w of executor_reward: format
    executor_tool: bool = True  # False: plain generations, no Python tool (R-Zero)
    lenient_answers: bool = True  # an executor reply with no \boxed{} answers its last number
    verify_timeout_s: float = Field(5.0, gt=0)  # math-verify, per comparison
    code_io_modes: list[Literal["deduction", "abduction"]] = ["deduction", "abduction"]
    tool: ToolSettings = ToolSettings()
    # pseudo-label accuracy: executor majority vs gold on reasoning-gym tasks, per iteration
    probe: list[TaskSpec] = [TaskSpec(name="basic_arithmetic")]
    probe_size: int = Field(16, ge=0)

    def tool_settings(self) -> ToolSettings | None:
        return self.tool if self.executor_tool else None

    def in_band(self, p_hat: float) -> bool:
        """Whether a task of this p̂ is one the executor can learn from (the pool's filter)."""
        if self.band == "paper":
            return in_band_paper(p_hat, self.band_delta)
        return in_band_code(p_hat, self.band_lo, self.band_hi)

    @model_validator(mode="after")
    def _band_ordered(self) -> Agent0Settings:
        if self.band_lo > self.band_hi:
            raise ValueError(f"band_lo {self.band_lo} > band_hi {self.band_hi}")
        if not self.code_io_modes:
            raise ValueError("code_io_modes needs at least one of deduction, abduction")
        return self
