"""What SSP records beside the algorithm: one proposal and the problem the solver answered for
its slot, its ``tasks.jsonl`` row and episode ``info``, and the step's ``ssp/`` metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

from curricula.ssp_rewards import solve_rate, solver_answer
from selfplay.engines.tools import ToolRollout
from selfplay.loops.ssp.retrieval import RagVerdict
from selfplay.loops.ssp.targets import Target
from selfplay.types import TaskRow

RAG_FAILED = "rag check failed"


def mean(values) -> float:
    values = [float(v) for v in values]
    return sum(values) / len(values) if values else 0.0


@dataclass(frozen=True)
class Problem:
    """A question the solver answers, with its target (a valid proposal, this step's or a
    pooled earlier one)."""

    key: str  # the task_id of the proposal that wrote it
    question: str
    target: str


@dataclass
class Proposal:
    """One proposer rollout for one target, and what came of it."""

    slot: int
    target: Target
    rollout: ToolRollout
    question: str | None
    queries: list[str]
    documents: list[str]  # the distinct chunks its searches returned, in order
    reason: str  # why it is invalid ("" when valid)
    verdict: RagVerdict | None = None
    problem: Problem | None = None  # what the solver answered for this slot (None: nothing)
    solver_rewards: list[float] = field(default_factory=list)
    solver_answers: list[str | None] = field(default_factory=list)
    solver_searches: list[int] = field(default_factory=list)
    reward: float = 0.0

    @property
    def valid(self) -> bool:
        return not self.reason

    @property
    def reused(self) -> bool:
        return self.problem is not None and not self.valid

    @property
    def s(self) -> float | None:
        """The solve rate of its own question (None when invalid)."""
        return solve_rate(self.solver_rewards) if self.valid and self.solver_rewards else None

    def info(self) -> dict:
        """The proposer episode's ``info``."""
        return {
            "target": self.target.answer,
            "question": self.question,
            "reason": self.reason,
            "queries": self.queries,
            "rag_answer": self.verdict.answer if self.verdict else None,
            "solve_rate": self.s,
            "reused": self.problem.key if self.reused else None,
        } | self.rollout.info()

    def row(self, step: int, task_id: str) -> TaskRow:
        """The proposal's row of ``tasks.jsonl`` (every proposal, valid or not)."""
        return TaskRow(
            step=step,
            phase="proposer",
            loop="ssp",
            task_id=task_id,
            question=self.question if self.question is not None else self.rollout.turn.reply,
            answer=self.target.answer,
            answer_type="string",
            valid=self.valid,
            p_hat=self.s,
            samples=len(self.solver_rewards) if self.valid else 0,
            solver_answers=self.solver_answers if self.valid else [],
            tool_calls=(sum(self.solver_searches) / len(self.solver_searches)
                        if self.valid and self.solver_searches else None),
            reward=self.reward,
            kept=self.valid,
            document=self.target.chunk_id,
        )


def step_metrics(proposals: list[Proposal], solver_rollouts: list[ToolRollout],
                 solver_rewards: list[float], rag_checked: int) -> dict[str, float]:
    """Validity (each check's failures), the RAG check's pass rate, searches per rollout, the
    solver's accuracy, answered share and the proposers' rewards."""
    reasons = [p.reason for p in proposals]
    valid = [p for p in proposals if p.valid]
    metrics = {
        "ssp/proposals": float(len(proposals)),
        "ssp/valid_rate": mean(p.valid for p in proposals),
        "ssp/question_rate": mean(p.question is not None for p in proposals),
        "ssp/rag_pass_rate": (
            mean(p.valid for p in proposals if p.verdict is not None) if rag_checked else 0.0),
        "ssp/rag_checked": float(rag_checked),
        "ssp/reused": float(sum(p.reused for p in proposals)),
        "ssp/skipped": float(sum(p.problem is None for p in proposals)),
        "ssp/proposer_reward": mean(p.reward for p in proposals),
        "ssp/proposer_searches": mean(p.rollout.tool_calls for p in proposals),
        "ssp/problems": float(sum(p.problem is not None for p in proposals)),
    }
    for reason in ("no question", "length", "too few words", "contains the answer",
                   "too few searches", "repeated query", "no retrieved information", RAG_FAILED):
        metrics[f"ssp/invalid/{reason.replace(' ', '_')}"] = float(reasons.count(reason))
    if valid:
        metrics["ssp/solve_rate"] = mean(p.s for p in valid)
        metrics["ssp/informative_share"] = mean(0 < p.s < 1 for p in valid)
    if solver_rollouts:
        metrics["ssp/solver_accuracy"] = mean(r > 0 for r in solver_rewards)
        metrics["ssp/solver_answered"] = mean(
            solver_answer(r.turn.reply) is not None for r in solver_rollouts)
        metrics["ssp/solver_searches"] = mean(r.tool_calls for r in solver_rollouts)
    return metrics
