"""What SPELL records beside the algorithm: one questioner proposal and how the responder and
verifier fared on it (``Question``), its episode ``info`` and ``tasks.jsonl`` row, and the
step's ``spell/`` metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

from curricula.spell_rewards import UNPARSABLE
from selfplay.loops.propose import Proposal, mean, proposal_metrics
from selfplay.loops.spell.clusters import Plan
from selfplay.types import TaskRow, Turn


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


@dataclass(kw_only=True)
class Question(Proposal):
    """One questioner reply on one cluster's context (``question``, its reference ``answer``;
    None: bad format), and what came of it: p̂ is r̄, the responder's mean reward."""

    index: int  # position in the step (groups and task ids)
    plan: Plan
    cluster_name: str
    context_tokens: int  # tokens of the questioner's context as given
    closed_book: list[float] = field(default_factory=list)  # rule scores without documents
    bad_ground: bool = False
    responses: list[Answer] = field(default_factory=list)
    trained: bool = True  # false: a bad case left out by balance_bad
    accepted: bool = False

    @property
    def bad(self) -> bool:
        return not self.valid or self.bad_ground

    def info(self) -> dict:
        return {
            "cluster": self.cluster_name, "documents": self.plan.documents,
            "new_documents": self.plan.new, "examples": len(self.plan.examples),
            "context_tokens": self.context_tokens, "short": self.plan.short,
            "parsed": self.valid, "bad_ground": self.bad_ground, "closed_book": self.closed_book,
            "p_hat": self.p_hat, "accepted": self.accepted, "trained": self.trained,
        }

    def task_row(self, step: int) -> TaskRow:
        """Every proposal is a row of ``tasks.jsonl``: p̂ is the responder's mean reward."""
        return self.row(step, "spell", "questioner", kind="qa", document=self.cluster_name,
                        answer_type="string" if self.valid else None, kept=self.accepted)


def step_metrics(questions: list[Question], budget: int) -> dict[str, float]:
    """The shared figures, and SPELL's: the questions' grounding, the responder's and
    verifier's behaviour, and the curriculum's context length and memory."""
    valid = [p for p in questions if p.valid]
    answers = [a for p in valid if not p.bad_ground for a in p.responses]
    verified = [a for a in answers if a.votes]
    votes = [v for a in verified for v in a.votes]
    plans = {id(p.plan): p.plan for p in questions}.values()
    return proposal_metrics("spell", questions) | {
        "spell/bad_ground_rate": mean(p.bad_ground for p in valid),
        "spell/closed_book_score": mean(s for p in valid for s in p.closed_book),
        "spell/accepted": float(sum(p.accepted for p in questions)),
        "spell/short_documents": float(sum(plan.short for plan in plans)),
        "spell/context_budget": float(budget),
        "spell/context_tokens": mean(p.context_tokens for p in questions),
        "spell/memory_examples": mean(len(p.plan.examples) for p in questions),
        "spell/responder_answered": mean(a.answer is not None for a in answers),
        "spell/responder_rule_score": mean(a.rule for a in answers),
        "spell/responder_reward": mean(a.reward for a in answers),
        "spell/verifier_parsed": mean(v != UNPARSABLE for v in votes),
        "spell/verifier_yes": mean(v == 1 for v in votes),
        "spell/verifier_agrees_rule": mean(a.verdict == a.rule for a in verified),
        "spell/verifier_trained_groups": float(sum(a.verifier_trains for a in verified)),
    }
