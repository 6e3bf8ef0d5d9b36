"""What CURE records beside the algorithm: one problem's outcome (``Played``), the ``info`` of
its episodes, its row of ``tasks.jsonl`` and the step's ``cure/`` metrics."""

from __future__ import annotations

from dataclasses import dataclass

from curricula.unit_tests import (
    Problem,
    UnitTest,
    code_rewards,
    correct_programs,
    standardise,
    unit_test_correct,
    unit_test_rewards,
)
from selfplay.loops.cure.execution import Execution
from selfplay.types import TaskRow


def mean(values) -> float:
    values = [float(v) for v in values]
    return sum(values) / len(values) if values else 0.0


@dataclass
class Played:
    """One problem of one step: what was written, what ran, and the rewards."""

    key: str  # unique within the run: step and position (a problem may come twice a step)
    problem: Problem
    gt_tests: int  # t: the ground-truth tests used (the first columns of the matrix)
    programs: list[str | None]  # parsed programs (None: no code block)
    tests: list[UnitTest | None]  # parsed generated tests (None: malformed)
    execution: Execution
    agrees: list[bool | None]  # the reference program reproduces each generated test
    form: str = "paper"
    post_stage: bool = False

    @property
    def matrix(self) -> list[list[int]]:
        return self.execution.matrix

    @property
    def code_rewards(self) -> list[float]:
        return code_rewards(self.matrix, self.gt_tests)

    @property
    def test_rewards(self) -> list[float] | None:
        return unit_test_rewards(self.matrix, self.gt_tests, self.form, self.post_stage)

    @property
    def correct(self) -> list[int]:
        return correct_programs(self.matrix, self.gt_tests)

    @property
    def test_correct(self) -> list[bool] | None:
        return unit_test_correct(self.matrix, self.gt_tests)

    @property
    def code_dropped(self) -> bool:
        return standardise(self.code_rewards) is None

    @property
    def test_dropped(self) -> bool:
        rewards = self.test_rewards
        return rewards is None or standardise(rewards) is None

    def ran_cleanly(self, j: int) -> bool:
        """Program j parsed and ended normally, in time, on every ground-truth test."""
        return self.programs[j] is not None and all(
            self.execution.clean.get((j, k), False) for k in range(self.gt_tests))


def coder_info(played: Played, j: int) -> dict:
    """The ``info`` of a coder episode (``correct``: it passes every ground-truth test, which
    the run page's difficulty section reads as solved)."""
    row = played.matrix[j]
    return {
        "problem": played.problem.id, "key": played.key, "parsed": played.programs[j] is not None,
        "ran": played.ran_cleanly(j), "gt_passed": sum(row[: played.gt_tests]),
        "gt_tests": played.gt_tests, "correct": j in played.correct,
        "generated_passed": sum(row[played.gt_tests :]),
    }


def tester_info(played: Played, k: int) -> dict:
    """The ``info`` of a tester episode: whether its test parsed, is correct by C (None when C
    is empty), agrees with the reference program, and how many programs pass it."""
    test, verdicts = played.tests[k], played.test_correct
    column = [row[played.gt_tests + k] for row in played.matrix]
    return {
        "problem": played.problem.id, "key": played.key, "well_formed": test is not None,
        "input": test.input if test else None, "output": test.output if test else None,
        "correct_by_c": None if verdicts is None else verdicts[k],
        "reference_agrees": played.agrees[k], "programs_passing": sum(column),
    }


def task_row(played: Played, step: int) -> TaskRow:
    """One row of ``tasks.jsonl`` per problem per step: p̂ is the share of programs passing
    every ground-truth test, the reward the mean unit-test reward (null when C is empty),
    ``kept`` whether the coder's group trains (its rewards are not all equal)."""
    test_rewards = played.test_rewards
    t = played.gt_tests
    return TaskRow(
        step=step, loop="cure", task_id=played.key, question=played.problem.statement,
        phase="coder", kind="stdio", valid=True,
        p_hat=len(played.correct) / len(played.programs), samples=len(played.programs),
        solver_answers=[None if program is None else f"{sum(row[:t])}/{t}"
                        for program, row in zip(played.programs, played.matrix, strict=True)],
        reward=None if test_rewards is None else mean(test_rewards),
        kept=not played.code_dropped,
    )


def step_metrics(outcomes: list[Played]) -> dict[str, float]:
    """The step's ``cure/`` figures: how the programs and tests fared, the matrix, the
    problems with no correct or no wrong program, and the problems dropped (std 0)."""
    programs = [(p, j) for p in outcomes for j in range(len(p.programs))]
    tests = [(p, k) for p in outcomes for k in range(len(p.tests))]
    formed = [(p, k) for p, k in tests if p.tests[k] is not None]
    judged = [v for p in outcomes if p.test_correct is not None for v in p.test_correct]
    rewarded = [r for p in outcomes if p.test_rewards is not None for r in p.test_rewards]
    cells = [c for p in outcomes for row in p.matrix for c in row[: p.gt_tests]]
    generated = [row[p.gt_tests + k] for p, k in formed for row in p.matrix]
    runs = sum(p.execution.runs for p in outcomes)
    return {
        "cure/code_parsed": mean(p.programs[j] is not None for p, j in programs),
        "cure/code_ran": mean(p.ran_cleanly(j) for p, j in programs),
        "cure/code_accuracy": mean(j in p.correct for p, j in programs),
        "cure/code_reward": mean(r for p in outcomes for r in p.code_rewards),
        "cure/test_well_formed": mean(p.tests[k] is not None for p, k in tests),
        "cure/test_accuracy": mean(p.agrees[k] is True for p, k in tests),
        "cure/test_correct_by_c": mean(judged),
        "cure/test_reward": mean(rewarded),
        "cure/gt_pass_rate": mean(cells),
        "cure/generated_pass_rate": mean(generated),
        "cure/c_empty": mean(not p.correct for p in outcomes),
        "cure/w_empty": mean(len(p.correct) == len(p.programs) for p in outcomes),
        "cure/dropped_code_problems": mean(p.code_dropped for p in outcomes),
        "cure/dropped_test_problems": mean(p.test_dropped for p in outcomes),
        "cure/problems": float(len(outcomes)),
        "cure/runs": float(runs),
        "cure/timeout_rate": sum(p.execution.timeouts for p in outcomes) / max(runs, 1),
        "cure/run_error_rate": sum(p.execution.errors for p in outcomes) / max(runs, 1),
    }
