"""What AZR records beside the algorithm: one proposal and what the solver made of it
(``Proposed``: the core's proposal with AZR's mode, phase and sandbox check), its
``tasks.jsonl`` row and episode ``info``, and the step's ``azr/`` metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

from curricula.programs import ANSWER_TYPES
from selfplay.loops.azr.tasks import Checked, Judged, Task
from selfplay.loops.propose import Proposal, mean, proposal_metrics
from selfplay.types import TaskRow, Turn


@dataclass(kw_only=True)
class Proposed(Proposal):
    """One proposer reply: the task it gave (or why not) and the fresh solver samples that
    measured its p̂ (seeding proposals are never solved)."""

    mode: str
    phase: str  # "propose" (trained on) or "seed" (before the first step, not trained on)
    checked: Checked
    source: Task | None = None  # induction: the triplet whose program it was given
    solves: list[tuple[Turn, Judged]] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.checked.outcome == "passed"

    def judged(self, solves: list[tuple[Turn, Judged]]) -> None:
        """Record the fresh solver samples: p̂ is the share that passed."""
        self.solves = solves
        self.scores = [float(judged.outcome == "passed") for _, judged in solves]
        self.answers = [judged.answer for _, judged in solves]

    def info(self, step: int) -> dict:
        """The proposer episode's ``info``."""
        return {
            "step": step, "mode": self.mode, "phase": self.phase, "task_id": self.task_id,
            "outcome": self.checked.outcome, "valid": self.valid, "why_invalid": self.reason,
            "question": self.question, "p_hat": self.p_hat, "solver_answers": self.answers,
        }

    def task_row(self, step: int) -> TaskRow:
        """The proposal's row of ``tasks.jsonl`` (valid or not; every valid task joins its
        mode's buffer)."""
        return self.row(step, "azr", f"{self.phase}/{self.mode}", answer_type=ANSWER_TYPES[
            self.mode], kind="code_f" if self.mode == "induction" else "code_io")


def proposal_figures(proposals: list[Proposed], prefix: str) -> dict[str, float]:
    """Per mode, the shared figures and AZR's: the format rate and the learnability reward of
    valid tasks."""
    metrics: dict[str, float] = {}
    for mode in sorted({p.mode for p in proposals}):
        mine = [p for p in proposals if p.mode == mode]
        learnability = [p.reward for p in mine if p.valid and p.reward is not None]
        metrics |= proposal_metrics(f"{prefix}/{mode}", mine)
        metrics[f"{prefix}/{mode}/format_rate"] = mean(p.checked.outcome != "format" for p in mine)
        if learnability:
            metrics[f"{prefix}/{mode}/learnability"] = mean(learnability)
    return metrics


def solve_metrics(solved: list[tuple[Task, Judged, float]]) -> dict[str, float]:
    """Per mode: the training solves' accuracy, format rate and reward."""
    metrics: dict[str, float] = {}
    for mode in sorted({task.mode for task, _, _ in solved}):
        mine = [(j, r) for task, j, r in solved if task.mode == mode]
        metrics |= {
            f"azr/{mode}/solve_accuracy": mean(j.outcome == "passed" for j, _ in mine),
            f"azr/{mode}/solve_format_rate": mean(j.outcome != "format" for j, _ in mine),
            f"azr/{mode}/solver_reward": mean(r for _, r in mine),
        }
    return metrics
