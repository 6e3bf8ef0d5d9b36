"""What MAE records beside the algorithm: a judged item (``Judged``), one proposal
(``Question``) and one training answer with their judgments, their episode ``info`` and
``tasks.jsonl`` rows, and the step's ``mae/`` metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

from curricula.mae_rewards import (
    extract_answer,
    judge_format,
    judge_score,
    mean_judge,
    proposer_format,
    solver_format,
)
from selfplay.loops.propose import Proposal, mean, proposal_metrics
from selfplay.types import TaskRow, Turn


@dataclass
class Judged:
    """One item (a question, or an answer to one) and the judge's replies on it."""

    turns: list[Turn] = field(default_factory=list)

    @property
    def scores(self) -> list[float | None]:
        """Each judge reply's score in [0, 1]; None where it gave no number (skipped)."""
        return [judge_score(turn.reply) for turn in self.turns]

    @property
    def score(self) -> float:
        """The mean of the scores that parsed; 0.5 when none did."""
        return mean_judge(self.scores)

    @property
    def unscored(self) -> bool:
        return bool(self.turns) and all(s is None for s in self.scores)


@dataclass
class Answer:
    """A solver reply and its judgment."""

    turn: Turn
    question: str
    judged: Judged = field(default_factory=Judged)
    reward: float | None = None  # training answers only

    @property
    def text(self) -> str:
        return extract_answer(self.turn.reply)

    def info(self, step: int) -> dict:
        return {"step": step, "question": self.question, "answer": self.text,
                "judge_scores": self.judged.scores, "judged": self.judged.score,
                "format": solver_format(self.turn.reply)}


@dataclass(kw_only=True)
class Question(Proposal):
    """A proposer reply: its question (None: none parsed), the judge on it (its quality q), and
    the fresh answers that measured its difficulty: p̂ is their mean judge score (MAE has no
    verifier: the judge's score in [0, 1] is a sample's success), d = 1 − p̂."""

    reference: str
    judged: Judged = field(default_factory=Judged)
    responses: list[Answer] = field(default_factory=list)
    admitted: bool = False

    @property
    def quality(self) -> float:
        return self.judged.score

    @property
    def difficulty(self) -> float | None:
        return None if self.p_hat is None else 1.0 - self.p_hat

    def answered(self, responses: list[Answer]) -> None:
        self.responses = responses
        self.answers = [a.text for a in responses]

    def judge_scores(self) -> None:
        """p̂ from the fresh answers' judgments (once they are judged)."""
        self.scores = [a.judged.score for a in self.responses]

    def info(self, step: int) -> dict:
        return {"step": step, "task_id": self.task_id, "valid": self.valid,
                "question": self.question, "reference": self.reference or None,
                "question_scores": self.judged.scores, "quality": self.quality,
                "difficulty": self.difficulty, "format": proposer_format(self.turn.reply),
                "admitted": self.admitted, "solver_answers": self.answers}

    def task_row(self, step: int) -> TaskRow:
        """The proposal's row of ``tasks.jsonl``: p̂ is the fresh answers' mean judge score."""
        return self.row(step, "mae", "propose", kept=self.admitted)


def step_metrics(proposals: list[Question], answers: list[Answer], judges: list[Turn],
                 trained_judges: int, pool_size: int) -> dict[str, float]:
    """The shared figures, and MAE's: proposals (format, q, d, admitted), the training
    answers (format rate, judge score, reward), the judge (parse rate: a reply with a number;
    format: exactly three score pairs; items no reply scored) and the pool."""
    valid = [p for p in proposals if p.valid]
    items = [p.judged for p in valid] + [a.judged for p in valid for a in p.responses] + [
        a.judged for a in answers]
    scores = [s for item in items for s in item.scores]
    return proposal_metrics("mae", proposals) | {
        "mae/proposer_format": mean([proposer_format(p.turn.reply) for p in proposals]),
        "mae/question_quality": mean([p.quality for p in valid]),
        "mae/question_difficulty": mean([p.difficulty for p in valid]),
        "mae/admitted_rate": mean([p.admitted for p in proposals]),
        "mae/solver_format_rate": mean([solver_format(a.turn.reply) == 1.0 for a in answers]),
        "mae/solver_judged": mean([a.judged.score for a in answers]),
        "mae/solver_reward": mean([a.reward for a in answers]),
        "mae/judge_parse_rate": mean([s is not None for s in scores]),
        "mae/judge_format_rate": mean([judge_format(t.reply) == 1.0 for t in judges]),
        "mae/judge_reward": mean([judge_format(t.reply) for t in judges[:trained_judges]]),
        "mae/judge_replies": float(len(judges)),
        "mae/unscored_item_share": mean([item.unscored for item in items]),
        "mae/pool_size": float(pool_size),
    }
