"""The knobs of every curriculum sampler: the ``curriculum:`` section of an experiment.

One pydantic model, used as it is by the experiment config (``selfplay.config``) and by the
samplers here, so a knob is declared once (docs/curricula.md explains each sampler)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SAMPLERS = ("uniform", "band", "dapo", "learnability", "plr", "tscl")


class CurriculumSettings(BaseModel):
    """Difficulty-adaptive task sampling for every loop."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    sampler: Literal["uniform", "band", "dapo", "learnability", "plr", "tscl"] = "uniform"
    retire_at: float | None = Field(None, gt=0, le=1)  # ScaleRL: 0.9; None keeps every task
    retire_min_attempts: int = Field(1, ge=1)
    prior_p: float = Field(0.5, ge=0, le=1)  # p̂ of a task (and level) never seen
    pool_strength: float = Field(8.0, ge=0)  # pseudo-attempts of a task's level in its p̂
    ema: float = Field(0.5, gt=0, le=1)  # weight of the newest group in p̂
    band_lo: float = Field(0.3, ge=0, le=1)
    band_hi: float = Field(0.7, ge=0, le=1)
    dapo_max_rounds: int = Field(3, ge=0)  # refill rounds after the first draw
    learnability_oversample: int = Field(4, ge=1)  # LILO: m×batch candidates, keep the top
    plr_beta: float = Field(0.1, gt=0)  # rank temperature β
    plr_rho: float = Field(0.1, ge=0, le=1)  # staleness mix ρ
    tscl_mode: Literal["epsilon", "thompson"] = "epsilon"
    tscl_epsilon: float = Field(0.1, ge=0, le=1)
    tscl_alpha: float = Field(0.1, gt=0, le=1)
    tscl_window: int = Field(10, ge=1)
    tscl_arms: Literal["level", "family"] = "level"
    top_k: int = Field(5, ge=1)  # top tasks by priority in metrics.jsonl

    @model_validator(mode="after")
    def _band_ordered(self) -> CurriculumSettings:
        if self.band_lo > self.band_hi:
            raise ValueError(f"band_lo {self.band_lo} > band_hi {self.band_hi}")
        return self
