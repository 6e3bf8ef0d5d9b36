"""What MAE records beside the algorithm: a judged item (``Judged``), one proposal and one
training answer with their judgments, their episode ``info`` and ``tasks.jsonl`` rows, and the
step's ``mae/`` metrics."""

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
from selfplay.types import TaskRow, Turn


def mean(values) -> float:
    values = [float(v) for v in values if v is not None]
    return sum(values) / len(values) if values else 0.0


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


@dataclass
class Proposal:
    """A proposer reply: its question (None: none parsed), the judge on it (q), the fresh
    answers that measured its difficulty d, and the reward."""

    task_id: str
    turn: Turn
    question: str | None
    reference: str
    judged: Judged = field(default_factory=Judged)
    answers: list[Answer] = field(default_factory=list)
    reward: float = 0.0
    admitted: bool = False

    @property
    def valid(self) -> bool:
        return self.question is not None

    @property
    def quality(self) -> float:
        return self.judged.score

    @property
    def solved(self) -> float | None:
        """The mean judge score of the fresh answers (d = 1 − this)."""
        return mean([a.judged.score for a in self.answers]) if self.answers else None

    @property
    def difficulty(self) -> float | None:
        return None if self.solved is None else 1.0 - self.solved

    def info(self, step: int) -> dict:
        return {"step": step, "task_id": self.task_id, "valid": self.valid,
                "question": self.question, "reference": self.reference or None,
                "question_scores": self.judged.scores, "quality": self.quality,
                "difficulty": self.difficulty, "format": proposer_format(self.turn.reply),
                "admitted": self.admitted, "solver_answers": [a.text for a in self.answers]}

    def row(self, step: int) -> TaskRow:
        """The proposal's row of ``tasks.jsonl``: p̂ is the fresh answers' mean judge score."""
        return TaskRow(
            step=step, loop="mae", task_id=self.task_id, phase="propose", kind="qa",
            question=self.question if self.valid else self.turn.reply, valid=self.valid,
            p_hat=self.solved, samples=len(self.answers),
            solver_answers=[a.text for a in self.answers], reward=self.reward,
            kept=self.admitted,
        )


def step_metrics(proposals: list[Proposal], answers: list[Answer], judges: list[Turn],
                 trained_judges: int, pool_size: int) -> dict[str, float]:
    """The step's figures: proposals (valid, format, q, d, admitted, reward), the training
    answers (format rate, judge score, reward), the judge (parse rate: a reply with a number;
    format: exactly three score pairs; items no reply scored) and the pool."""
    valid = [p for p in proposals if p.valid]
    items = [p.judged for p in valid] + [a.judged for p in valid for a in p.answers] + [
        a.judged for a in answers]
    scores = [s for item in items for s in item.scores]
    return {
        "mae/proposals": float(len(proposals)),
        "mae/valid_question_rate": len(valid) / len(proposals) if proposals else 0.0,
        "mae/proposer_format": mean([proposer_format(p.turn.reply) for p in proposals]),
        "mae/question_quality": mean([p.quality for p in valid]),
        "mae/question_difficulty": mean([p.difficulty for p in valid]),
        "mae/admitted_rate": mean([p.admitted for p in proposals]),
        "mae/proposer_reward": mean([p.reward for p in proposals]),
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
