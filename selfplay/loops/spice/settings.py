"""SPICE's config section (``spice:``; docs/spice.md; the loop is ``loop.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from selfplay.config import InputFile, Strict
from selfplay.loops.base import LoopSettings
from selfplay.loops.propose import RewardName


class ContaminationSettings(Strict):
    """Generated questions that nearly copy an evaluation item are dropped (and counted).

    The items are the held-out reasoning-gym questions of ``spice.eval_reasoning`` plus the
    ``question`` field of every row of the JSONL files in ``eval_files``."""

    enabled: bool = True
    threshold: float = Field(0.9, gt=0, le=1)  # cosine similarity (MiniLM) that counts as a copy
    eval_files: list[InputFile] = []  # local JSONL files of {"question": ..., "answer": ...} rows


class SpiceSettings(LoopSettings):
    renamed = {"challenger_max_tokens": "roles.challenger.max_tokens",
               "reasoner_max_tokens": "roles.reasoner.max_tokens",
               "reasoner_samples": "spice.solver_samples"}

    corpus: str | None = None  # None: corpora.DEFAULT_CORPUS (built on first use)
    corpus_cache: str | None = None  # None: the corpora package's cache folder
    grounded: bool = True  # false: no document in the challenger's prompt ("no corpus" ablation)
    chunk_max_tokens: int = Field(5992, ge=16)  # the chunk is cut to this many tokens in the prompt
    documents_per_step: int = Field(4, ge=1)
    attempts_per_document: int = Field(4, ge=1)  # challenger samples per document per round
    max_rounds: int = Field(1, ge=1)  # more rounds only for documents still without a valid one
    formats: Literal["mc", "free", "both"] = "both"  # "both": attempts alternate mc / free-form
    solver_samples: int = Field(8, ge=2)  # K = G: the reasoner's answers to each question
    invalid_reward: float = -0.1  # ρ; negative ρ has caused collapse elsewhere (docs/spice.md)
    # p̂ → reward (curricula/rewards.py): variance | uncertainty | learnability | threshold | m:f
    challenger_reward: RewardName = "variance"
    # documents are drawn by `curriculum.sampler`; near_half = an alias of its `learnability`
    sampler: Literal["uniform", "near_half"] = "uniform"
    lenient: bool = True  # reasoner answers without \boxed{}: the last number / option letter
    verify_timeout_s: float = Field(2.0, gt=0)  # math-verify per comparison
    contamination: ContaminationSettings = ContaminationSettings()
    eval_reasoning_size: int = Field(32, ge=0)
