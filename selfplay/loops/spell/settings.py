"""SPELL's config section (``spell:``): the corpus and its clusters, the questioner's growing
context, the responder's and verifier's sample counts and the rewards' options (docs/spell.md;
the loop is ``loop.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from curricula.rewards import SPELL_SIGMA
from curricula.spell_rewards import MAX_ANSWER_WORDS
from selfplay.loops.base import LoopSettings
from selfplay.loops.propose import RewardName


class SpellSettings(LoopSettings):
    """SPELL: a questioner reads documents of one cluster (the chunks of one corpus source) and
    writes a question with its answer; a responder answers it ``responder_samples`` times; a
    verifier votes ``verifier_votes`` times on each answer against the reference."""

    renamed = {f"{role}_{key}": f"roles.{role}.{key}"
               for role in ("questioner", "responder", "verifier") for key in ("max_tokens", "stop")
               } | {"responder_samples": "spell.solver_samples"}
    renamed_values = {"questioner_reward": {"reverse": "learnability", "rzero": "uncertainty"}}

    corpus: str | None = None  # None: corpora.DEFAULT_CORPUS (built on first use)
    corpus_cache: str | None = None  # None: the corpora package's cache folder
    max_clusters: int | None = Field(None, ge=1)  # only the corpus's first N sources (None: all)
    clusters_per_step: int = Field(4, ge=1)  # clusters drawn by `curriculum.sampler` each step
    questions_per_cluster: int = Field(1, ge=1)  # questioner samples per cluster
    new_documents: int = Field(5, ge=1)  # unseen documents added to the questioner's context
    memory_size: int = Field(3, ge=0)  # accepted (evidence, Q, A) entries kept per cluster
    document_max_tokens: int = Field(5992, ge=8)  # each document is cut to this many tokens
    # the questioner's context budget: context_tokens + context_growth × step, at most
    # context_tokens_max (the released code has no schedule: context_growth 0)
    context_tokens: int = Field(18000, ge=8)
    context_growth: int = Field(0, ge=0)
    context_tokens_max: int | None = Field(None, ge=8)
    # what the responder reads: `documents`, every document of the cluster (the released code);
    # `none`, the question alone (the wording; no grounding filter then)
    responder_context: Literal["documents", "none"] = "documents"
    responder_context_tokens: int = Field(18000, ge=8)
    grounding_filter: bool = True  # closed-book pass: score ≥ 0.1 marks the question bad_ground
    closed_book_samples: int = Field(1, ge=1)
    solver_samples: int = Field(8, ge=1)  # the responder's answers to each question
    verifier_votes: int = Field(8, ge=1)
    # trained verifier votes at most this share of the step's responder samples (the code's
    # 1/8), eligible groups drawn at random; None: every eligible group
    verifier_fraction: float | None = Field(0.125, gt=0)
    balance_bad: bool = True  # bad questions (format, grounding) trained at most 1:1 with good
    # a longer reference answer is a bad-format question (our bound: the code's was not checked)
    max_answer_words: int = Field(MAX_ANSWER_WORDS, ge=1)
    # p̂ → reward (curricula/rewards.py): gaussian (the code's), learnability (its `reverse`),
    # uncertainty (its `rzero`), or a plug-in; r̄ = 0 or 1 gives 0 in every built-in form
    questioner_reward: RewardName = "gaussian"
    sigma: float = Field(SPELL_SIGMA, gt=0)  # width of the gaussian questioner reward
    eval_reasoning_size: int = Field(32, ge=0)

    @model_validator(mode="after")
    def _filter_needs_documents(self) -> SpellSettings:
        if self.responder_context == "none" and self.grounding_filter:
            raise ValueError(
                "grounding_filter needs responder_context: documents (with no documents the "
                "responder is itself closed-book, so every answerable question would be "
                "bad_ground); set grounding_filter: false"
            )
        return self

    def context_budget(self, step: int) -> int:
        """The questioner's context length in tokens at ``step``."""
        budget = self.context_tokens + self.context_growth * step
        return budget if self.context_tokens_max is None else min(budget, self.context_tokens_max)
