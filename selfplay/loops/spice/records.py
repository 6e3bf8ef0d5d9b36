"""What SPICE records beside the algorithm: one challenger attempt, its ``tasks.jsonl`` row and
episode ``info``, and the step's challenger and reasoner metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

from curricula.questions import ANSWER_TYPES, GeneratedTask
from selfplay.types import Episode, TaskRow, Turn


@dataclass
class Attempt:
    """One challenger reply on one document, and what the reasoner made of its question."""

    slot: int  # which of the step's documents
    document: int | None  # index into the corpus chunks (None: ungrounded)
    number: int  # attempt number within the slot, over all rounds
    round: int
    format: str  # "mc" | "free": what the prompt asked for
    turn: Turn
    reply: str
    task: GeneratedTask | None
    reason: str  # why it is invalid ("" when valid)
    contaminated: bool = False
    answers: list[str | None] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    reward: float = 0.0

    @property
    def valid(self) -> bool:
        return self.task is not None and not self.contaminated

    @property
    def p_hat(self) -> float | None:
        return sum(self.correct) / len(self.correct) if self.correct else None

    def info(self) -> dict:
        """The challenger episode's ``info``."""
        return {
            "format": self.format,
            "round": self.round,
            "reason": self.reason,
            "contaminated": self.contaminated,
            "parsed": self.task is not None,
            "pass_rate": self.p_hat,
        }

    def row(self, step: int, task_id: str, document: str | None) -> TaskRow:
        """The attempt's row of ``tasks.jsonl`` (every attempt, valid or not)."""
        task = self.task
        return TaskRow(
            step=step,
            phase="challenger",
            loop="spice",
            task_id=task_id,
            question=task.text() if task else self.reply,
            answer=task.answer if task else None,
            answer_type=task.answer_type if task else None,
            valid=self.valid,
            p_hat=self.p_hat,
            samples=len(self.correct),
            solver_answers=self.answers,
            reward=self.reward,
            kept=self.valid,
            document=document,
        )


def step_metrics(attempts: list[Attempt], solved: list[Episode]) -> dict[str, float]:
    """Validity, parse and contamination counts, p̂, rewards and the answer-type mix of the
    step's questions; the reasoner's accuracy on them."""
    valid = [a for a in attempts if a.valid]
    count = max(len(attempts), 1)
    metrics = {
        "challenger/attempts": float(len(attempts)),
        "challenger/valid_rate": len(valid) / count,
        "challenger/parse_rate": sum(a.task is not None for a in attempts) / count,
        "challenger/reward": sum(a.reward for a in attempts) / count,
        "challenger/contamination_drops": float(sum(a.contaminated for a in attempts)),
        "challenger/not_self_contained": float(
            sum(a.reason == "not self-contained" for a in attempts)
        ),
    }
    if valid:
        p_hats = [a.p_hat for a in valid]
        metrics["challenger/informative_share"] = sum(0 < p < 1 for p in p_hats) / len(valid)
        metrics["challenger/p_hat"] = sum(p_hats) / len(valid)
        metrics["challenger/valid_reward"] = sum(a.reward for a in valid) / len(valid)
    for kind in ANSWER_TYPES:
        metrics[f"challenger/type/{kind}"] = (
            sum(a.task.answer_type == kind for a in valid) / len(valid) if valid else 0.0
        )
    if solved:
        metrics["reasoner/accuracy"] = sum(e.info["correct"] for e in solved) / len(solved)
        metrics["reasoner/answered_rate"] = sum(
            e.info["answer"] is not None for e in solved
        ) / len(solved)
    return metrics
