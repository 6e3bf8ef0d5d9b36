"""SSP's config section (``ssp:``): the targets, the search tool, the validity checks, the RAG
check and the rewards (docs/ssp.md; the loop is ``loop.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from curricula.ssp_rewards import QuestionRules
from selfplay.config import InputFile
from selfplay.engines.search_tool import SearchSettings
from selfplay.loops.base import LoopSettings
from selfplay.loops.propose import RewardName


class SspSettings(LoopSettings):
    """Search Self-Play: each step the proposer writes ``proposals_per_step`` questions, one per
    target answer, searching the corpus; the solver answers each ``solver_samples`` times with
    the same search tool."""

    renamed = {f"{role}_max_tokens": f"roles.{role}.max_tokens"
               for role in ("proposer", "solver", "judge")}
    renamed_values = {"proposer_reward": {"1-acc": "inverse_accuracy"}}

    # a JSONL file of {"answer": ...} rows; None: short spans mined from the corpus's chunks
    targets: InputFile | None = None
    max_targets: int = Field(2000, ge=1)  # mined targets kept (the first, in corpus order)
    proposals_per_step: int = Field(8, ge=1)  # one proposal per target (the release script's n=1)
    solver_samples: int = Field(5, ge=1)  # n solver attempts per problem
    search: SearchSettings = SearchSettings()
    # validity (quarl/utils/problem_extraction.py): the paper's thresholds by default
    min_question_chars: int = Field(10, ge=1)
    max_question_chars: int = Field(1000, ge=1)
    min_question_words: int = Field(10, ge=1)
    min_searches: int = Field(2, ge=0)
    lenient: bool = False  # a <question> left open when the token budget ends still counts
    rag_check: bool = True  # the judge must answer the question from the retrieved documents
    # other proposers' documents mixed into the judge's (the released noisy_RAG_materials)
    noisy_documents: int = Field(4, ge=0)
    # a failed proposal: its slot is filled by a pooled earlier valid problem (`reuse`) or
    # left empty (`skip`); its proposer gets `format_penalty` (script: 0; code default: -1)
    failure_strategy: Literal["reuse", "skip"] = "reuse"
    format_penalty: float = 0.0
    pool_size: int = Field(256, ge=1)  # valid problems kept for `reuse` (the newest)
    # p̂ → reward (curricula/rewards.py): inverse_accuracy 1 − p̂ (the script's 1-acc), or
    # intermediate_difficulty 4·p̂·(1 − p̂)
    proposer_reward: RewardName = "inverse_accuracy"

    def rules(self) -> QuestionRules:
        return QuestionRules(self.min_question_chars, self.max_question_chars,
                             self.min_question_words, self.min_searches)
