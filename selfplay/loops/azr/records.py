"""What AZR records beside the algorithm: one proposal and what the solver made of it, its
``tasks.jsonl`` row and episode ``info``, and the step's ``azr/`` metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

from curricula.azr_rewards import mean_accuracy
from curricula.programs import ANSWER_TYPES
from selfplay.loops.azr.tasks import Judged, Proposed, Task
from selfplay.types import TaskRow, Turn


@dataclass
class Proposal:
    """One proposer reply: the task it gave (or why not) and the fresh solver samples that
    measured its r̄ (seeding proposals are never solved)."""

    mode: str
    task_id: str
    phase: str  # "propose" (trained on) or "seed" (before the first step, not trained on)
    turn: Turn
    proposed: Proposed
    source: Task | None = None  # induction: the triplet whose program it was given
    solves: list[tuple[Turn, Judged]] = field(default_factory=list)
    reward: float | None = None

    @property
    def valid(self) -> bool:
        return self.proposed.outcome == "passed"

    @property
    def solve_rate(self) -> float | None:
        """r̄: the share of the fresh solver samples that passed."""
        if not self.solves:
            return None
        return mean_accuracy([judged.outcome == "passed" for _, judged in self.solves])

    def info(self, step: int) -> dict:
        """The proposer episode's ``info``."""
        task = self.proposed.task
        return {
            "step": step, "mode": self.mode, "phase": self.phase, "task_id": self.task_id,
            "outcome": self.proposed.outcome, "valid": self.valid, "why_invalid": self.proposed.why,
            "question": task.question() if task else None, "pass_rate": self.solve_rate,
            "solver_answers": [judged.answer for _, judged in self.solves],
        }

    def row(self, step: int) -> TaskRow:
        """The proposal's row of ``tasks.jsonl`` (valid or not)."""
        task = self.proposed.task
        return TaskRow(
            step=step,
            loop="azr",
            task_id=self.task_id,
            question=task.question() if task else self.turn.reply,
            phase=f"{self.phase}/{self.mode}",
            kind="code_f" if self.mode == "induction" else "code_io",
            answer=task.gold() if task else None,
            answer_type=ANSWER_TYPES[self.mode],
            valid=self.valid,
            p_hat=self.solve_rate,
            samples=len(self.solves),
            solver_answers=[judged.answer for _, judged in self.solves],
            reward=self.reward,
            kept=self.valid,  # every valid task joins its mode's buffer
        )


def mean(values) -> float:
    values = [float(v) for v in values if v is not None]
    return sum(values) / len(values) if values else 0.0


def proposal_metrics(proposals: list[Proposal], prefix: str) -> dict[str, float]:
    """Per mode: format and validity rates, r̄ and how many tasks it can teach (0 < r̄ < 1),
    the learnability reward of valid tasks, the reward of every proposal."""
    metrics: dict[str, float] = {}
    for mode in sorted({p.mode for p in proposals}):
        mine = [p for p in proposals if p.mode == mode]
        valid = [p for p in mine if p.valid]
        rates = [p.solve_rate for p in valid if p.solve_rate is not None]
        key = f"{prefix}/{mode}"
        metrics |= {
            f"{key}/proposals": float(len(mine)),
            f"{key}/format_rate": mean([p.proposed.outcome != "format" for p in mine]),
            f"{key}/valid_rate": len(valid) / len(mine),
        }
        if rates:
            metrics |= {
                f"{key}/fresh_solve_rate": mean(rates),
                f"{key}/informative_share": mean([0 < r < 1 for r in rates]),
                f"{key}/learnability": mean([p.reward for p in valid]),
            }
        if any(p.reward is not None for p in mine):
            metrics[f"{key}/proposer_reward"] = mean([p.reward for p in mine])
    return metrics


def solve_metrics(solved: list[tuple[Task, Judged, float]]) -> dict[str, float]:
    """Per mode: the training solves' accuracy, format rate and reward."""
    metrics: dict[str, float] = {}
    for mode in sorted({task.mode for task, _, _ in solved}):
        mine = [(j, r) for task, j, r in solved if task.mode == mode]
        metrics |= {
            f"azr/{mode}/solve_accuracy": mean([j.outcome == "passed" for j, _ in mine]),
            f"azr/{mode}/solve_format_rate": mean([j.outcome != "format" for j, _ in mine]),
            f"azr/{mode}/solver_reward": mean([r for _, r in mine]),
        }
    return metrics
