"""MAE's config section (``mae:``): batch sizes per role, the judge's samples, the question
pool and its seed file, and the TRR++ form (docs/mae.md; the loop is ``loop.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from selfplay.config import InputFile
from selfplay.loops.base import LoopSettings


class MaeSettings(LoopSettings):
    """Multi-Agent Evolve: one policy proposes questions, answers them and judges both."""

    renamed = {"propose_max_tokens": "roles.proposer.max_tokens",
               "solve_max_tokens": "roles.solver.max_tokens",
               "judge_max_tokens": "roles.judge.max_tokens",
               "difficulty_samples": "mae.solver_samples"}

    proposals_per_step: int = Field(128, ge=1)  # proposer batch (propose prompts per step)
    solves_per_step: int = Field(128, ge=1)  # solver batch: pool questions, one answer each
    judge_samples: int = Field(5, ge=1)  # judge replies per judged item (azr.reward.n_samples)
    solver_samples: int = Field(5, ge=1)  # fresh solver answers per new question, for p̂ and d
    # judge turns trained per step (the judge batch); None: every judge turn of the step.
    # Drawn in order: the question judgments, then the training answers', then d's.
    judges_per_step: int | None = Field(128, ge=1)
    admit_threshold: float = Field(0.7, ge=0.0, le=1.0)  # q at which a question joins the pool
    # the chance that a propose prompt is shown a pool question (drawn per prompt)
    include_references: float = Field(0.5, ge=0.0, le=1.0)
    # a JSONL file of {"question": ...} rows that seeds the pool; None: the shipped
    # curricula/data/mae_questions.jsonl (twelve easy questions)
    seed_questions: InputFile | None = None
    pool_cap: int = Field(4096, ge=1)  # questions kept (the oldest admitted leave first)
    # TRR++ per role: code = verl REINFORCE++ whitened over the batch's tokens (the released
    # code); paper = (r − μ)/σ over the batch's sequences (selfplay/rl/trr.py)
    reward_form: Literal["paper", "code"] = "code"
    # a question whose <question> the model opened but never closed still counts (its format
    # score stays 0): small models that run out of tokens (docs/mae.md)
    lenient: bool = False
