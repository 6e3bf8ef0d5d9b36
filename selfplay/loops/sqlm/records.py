"""What SQLM records beside the algorithm: its ``sqlm/`` metrics and ``tasks.jsonl`` rows."""

from __future__ import annotations

from dataclasses import dataclass, field

from curricula.sqlm_rewards import majority
from selfplay.types import TaskRow, Turn


@dataclass
class Proposal:
    """One proposer reply, its question (None: masked) and the solver's N answers to it."""

    index: int
    turn: Turn
    reply: str
    question: str | None
    answers: list[str | None] = field(default_factory=list)
    solver_rewards: list[float] = field(default_factory=list)
    reward: float = 0.0
    tests: list[tuple[str, str]] = field(default_factory=list)  # coding: (stdin, stdout)

    @property
    def valid(self) -> bool:
        return self.question is not None

    @property
    def m_maj(self) -> float:
        return sum(self.solver_rewards)


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def step_metrics(proposals: list[Proposal], trains: bool, n: int) -> dict[str, float]:
    """Validity (1 − masked share), the m_maj histogram's summary, both rewards, how often the
    majority is None (no solver reward at all), distinct questions, the update flag."""
    valid = [p for p in proposals if p.valid]
    answers = [a for p in valid for a in p.answers]
    metrics = {
        "sqlm/validity": len(valid) / len(proposals) if proposals else 0.0,
        "sqlm/masked": float(len(proposals) - len(valid)),
        "sqlm/proposer_trained": float(trains),
        "sqlm/proposer_reward": mean([p.reward for p in valid]),
        "sqlm/solver_reward": mean([r for p in valid for r in p.solver_rewards]),
        "sqlm/m_maj_mean": mean([p.m_maj for p in valid]),
        "sqlm/unanimous_rate": mean([float(p.m_maj == n) for p in valid]),
        "sqlm/majority_none_rate": mean([float(majority(p.answers) is None) for p in valid]),
        "sqlm/answered_rate": mean([float(a is not None) for a in answers]),
        "sqlm/distinct_questions": float(len({p.question for p in valid})),
    }
    return metrics


def task_row(step: int, proposal: Proposal, topic: str, n: int, trains: bool) -> TaskRow:
    """One proposal as a ``tasks.jsonl`` row (docs/run-folder.md): the majority is its
    pseudo-label, m_maj / N its p̂, ``kept`` whether its reward trained the proposer."""
    valid = proposal.valid
    return TaskRow(
        step=step,
        loop="sqlm",
        task_id=f"s{step}-p{proposal.index}",
        question=proposal.question if valid else proposal.reply,
        phase="propose",
        kind=topic,
        valid=valid,
        pseudo_label=majority(proposal.answers) if valid else None,
        p_hat=proposal.m_maj / n if valid else None,
        samples=len(proposal.answers),
        solver_answers=proposal.answers,
        reward=proposal.reward if valid else None,
        kept=trains and valid,
    )
