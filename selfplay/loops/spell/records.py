"""What SPELL records beside the algorithm: one questioner proposal and how the responder and
verifier fared on it (``Proposal``), its ``tasks.jsonl`` row and episode ``info``, and the
step's ``spell/`` metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

from curricula.spell_rewards import UNPARSABLE
from selfplay.loops.spell.clusters import Plan
from selfplay.types import TaskRow, Turn


def mean(values) -> float:
    values = [float(v) for v in values]
    return sum(values) / len(values) if values else 0.0


@dataclass
class Answer:
    """One responder sample: its final answer, rule score, the verifier's votes and reward."""

    turn: Turn
    answer: str | None
    rule: float
    votes: list[int] = field(default_factory=list)
    vote_turns: list[Turn] = field(default_factory=list)
    verdict: int = UNPARSABLE  # the votes' majority (−1: none or unparsable)
    reward: float = 0.0
    verifier_trains: bool = False


@dataclass
class Proposal:
    """One questioner reply on one cluster's context, and what came of its question."""

    index: int  # position in the step (groups and task ids)
    plan: Plan
    cluster_name: str
    context_tokens: int  # tokens of the questioner's context as given
    turn: Turn
    reply: str
    parsed: tuple[str, str] | None  # (question, reference) or None: bad format
    closed_book: list[float] = field(default_factory=list)  # rule scores without documents
    bad_ground: bool = False
    answers: list[Answer] = field(default_factory=list)
    reward: float = 0.0
    trained: bool = True  # false: a bad case left out by balance_bad
    accepted: bool = False

    @property
    def valid(self) -> bool:
        return self.parsed is not None

    @property
    def mean_reward(self) -> float | None:
        """r̄: the responder's mean reward (None: bad format; 0.0: grounded out, unanswered)."""
        if self.parsed is None:
            return None
        return mean(a.reward for a in self.answers)

    @property
    def bad(self) -> bool:
        return not self.valid or self.bad_ground

    def info(self) -> dict:
        return {
            "cluster": self.cluster_name,
            "documents": self.plan.documents,
            "new_documents": self.plan.new,
            "examples": len(self.plan.examples),
            "context_tokens": self.context_tokens,
            "short": self.plan.short,
            "parsed": self.valid,
            "bad_ground": self.bad_ground,
            "closed_book": self.closed_book,
            "mean_reward": self.mean_reward,
            "accepted": self.accepted,
            "trained": self.trained,
        }

    def row(self, step: int) -> TaskRow:
        """Every proposal is a row of ``tasks.jsonl``: p̂ is the responder's mean reward."""
        question, reference = self.parsed if self.parsed else (self.reply, None)
        return TaskRow(
            step=step, loop="spell", task_id=f"s{step}-q{self.index}", question=question,
            phase="questioner", kind="qa", iteration=len(self.plan.examples),
            answer=reference, answer_type="string" if self.parsed else None, valid=self.valid,
            p_hat=self.mean_reward if self.answers else None, samples=len(self.answers),
            solver_answers=[a.answer for a in self.answers], reward=self.reward,
            kept=self.accepted, document=self.cluster_name,
        )


def step_metrics(proposals: list[Proposal], budget: int) -> dict[str, float]:
    """The step's ``spell/`` figures: the questions' validity and grounding, the responder's
    and verifier's behaviour, and the curriculum's context length and memory."""
    valid = [p for p in proposals if p.valid]
    grounded = [p for p in valid if not p.bad_ground]
    answers = [a for p in grounded for a in p.answers]
    verified = [a for a in answers if a.votes]
    votes = [v for a in verified for v in a.votes]
    plans = {id(p.plan): p.plan for p in proposals}.values()
    metrics = {
        "spell/proposals": float(len(proposals)),
        "spell/valid_rate": mean(p.valid for p in proposals),
        "spell/bad_ground_rate": mean(p.bad_ground for p in valid),
        "spell/closed_book_score": mean(s for p in valid for s in p.closed_book),
        "spell/questioner_reward": mean(p.reward for p in proposals),
        "spell/accepted": float(sum(p.accepted for p in proposals)),
        "spell/short_documents": float(sum(plan.short for plan in plans)),
        "spell/context_budget": float(budget),
        "spell/context_tokens": mean(p.context_tokens for p in proposals),
        "spell/memory_examples": mean(len(p.plan.examples) for p in proposals),
        "spell/responder_answered": mean(a.answer is not None for a in answers),
        "spell/responder_rule_score": mean(a.rule for a in answers),
        "spell/responder_reward": mean(a.reward for a in answers),
        "spell/verifier_parsed": mean(v != UNPARSABLE for v in votes),
        "spell/verifier_yes": mean(v == 1 for v in votes),
        "spell/verifier_agrees_rule": mean(a.verdict == a.rule for a in verified),
        "spell/verifier_trained_groups": float(sum(a.verifier_trains for a in verified)),
    }
    if grounded:
        means = [p.mean_reward for p in grounded]
        metrics["spell/informative_share"] = mean(0 < m < 1 for m in means)
    return metrics
