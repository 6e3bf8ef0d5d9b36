"""CURE (Wang et al. 2025, arXiv:2506.03136; docs/algorithms.md#cure): one policy co-evolves as
a coder and a unit tester on coding problems with ground-truth tests.

One policy, two roles (``coder``, ``tester``). Each step draws ``problems_per_step`` problems
(``order: shuffle``, a new permutation each pass over the file, or ``file``, in order). For each
the **coder** writes ``codes`` programs (stdin → stdout) and the **tester** ``tests`` unit tests
(an input and its expected output), having seen one public example: all in one engine wave. The
sandbox runs every program on the problem's first t ≤ ``max_gt_tests`` ground-truth tests and
the generated ones: the execution matrix B (``sandbox.stdio.run_matrix``). A program earns the
share of ground-truth tests it passes; a unit test, when some program passes them all (C not
empty), earns by how well it separates C from the others (``reward_form``, ``post_stage``;
``curricula/unit_tests.py``). Each problem's code rewards and test rewards are standardised
separately, (r − mean) / std; a group whose std is 0 gives no samples.

The reference programs are checked against their own tests when the loop is made; they never
enter a reward (they measure ``cure/test_accuracy``). Every problem is a row of ``tasks.jsonl``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from curricula import unit_tests as rules
from curricula.unit_tests import DEFAULT_PROBLEMS, Problem, UnitTest
from sandbox.stdio import Execution, failures, run_matrix
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.engines.tools import ToolSandbox, ToolSettings
from selfplay.loops.base import Loop, LoopSpec
from selfplay.loops.cure.settings import CureSettings
from selfplay.loops.propose import grouped, mean
from selfplay.rl.advantages import group_relative_samples
from selfplay.types import Collected, Completion, Episode, Sample, TaskRow, Turn

CODER, TESTER = "coder", "tester"


@dataclass
class Played:
    """One problem of one step: what was written, what ran, and the rewards (``of``)."""

    key: str  # unique within the run: step and position (a problem may come twice a step)
    problem: Problem
    gt_tests: int  # t: the ground-truth tests used (the first columns of the matrix)
    programs: list[str | None]  # parsed programs (None: no code block)
    tests: list[UnitTest | None]  # parsed generated tests (None: malformed)
    execution: Execution
    agrees: list[bool | None]  # the reference program reproduces each generated test
    code_rewards: list[float]
    test_rewards: list[float] | None  # None: no program is correct (C empty)
    correct: list[int]  # C: the programs passing every ground-truth test
    test_correct: list[bool] | None  # each test's verdict by C

    @classmethod
    def of(cls, key, problem, gt_tests, programs, tests, execution, agrees,
           form: str = "paper", post_stage: bool = False) -> Played:
        matrix = execution.matrix
        return cls(key, problem, gt_tests, programs, tests, execution, agrees,
                   rules.code_rewards(matrix, gt_tests),
                   rules.unit_test_rewards(matrix, gt_tests, form, post_stage),
                   rules.correct_programs(matrix, gt_tests),
                   rules.unit_test_correct(matrix, gt_tests))

    code_dropped = property(lambda self: rules.standardise(self.code_rewards) is None)  # std 0

    def ran_cleanly(self, j: int) -> bool:
        """Program j parsed and ended normally, in time, on every ground-truth test."""
        return self.programs[j] is not None and all(
            self.execution.clean.get((j, k), False) for k in range(self.gt_tests))

    def coder_info(self, j: int) -> dict:
        """A coder episode's ``info``."""
        row = self.execution.matrix[j]
        return {"problem": self.problem.id, "key": self.key,
                "parsed": self.programs[j] is not None, "ran": self.ran_cleanly(j),
                "gt_passed": sum(row[: self.gt_tests]), "gt_tests": self.gt_tests,
                "generated_passed": sum(row[self.gt_tests :])}

    def tester_info(self, k: int) -> dict:
        """A tester episode's ``info`` (``correct_by_c``: None when C is empty)."""
        test, verdicts = self.tests[k], self.test_correct
        return {"problem": self.problem.id, "key": self.key, "well_formed": test is not None,
                "input": test.input if test else None, "output": test.output if test else None,
                "correct_by_c": None if verdicts is None else verdicts[k],
                "reference_agrees": self.agrees[k],
                "programs_passing": sum(row[self.gt_tests + k] for row in self.execution.matrix)}

    def row(self, step: int) -> TaskRow:
        """Its ``tasks.jsonl`` row: p̂ = |C| / n, the mean unit-test reward, kept: trained."""
        t, tests = self.gt_tests, self.test_rewards
        return TaskRow(
            step=step, loop="cure", task_id=self.key, question=self.problem.statement,
            phase=CODER, kind="stdio", valid=True, p_hat=len(self.correct) / len(self.programs),
            samples=len(self.programs), reward=None if tests is None else mean(tests),
            solver_answers=[None if program is None else f"{sum(row[:t])}/{t}" for program, row
                            in zip(self.programs, self.execution.matrix, strict=True)],
            kept=not self.code_dropped)


def step_metrics(outcomes: list[Played]) -> dict[str, float]:
    """The step's ``cure/`` figures: how the programs and tests fared, the matrix, the
    problems with no correct or no wrong program, and the problems dropped (std 0)."""
    programs = [(p, j) for p in outcomes for j in range(len(p.programs))]
    tests = [(p, k) for p in outcomes for k in range(len(p.tests))]
    generated = [row[p.gt_tests + k] for p, k in tests if p.tests[k] is not None
                 for row in p.execution.matrix]
    runs = max(sum(p.execution.runs for p in outcomes), 1)
    return {
        "cure/code_parsed": mean(p.programs[j] is not None for p, j in programs),
        "cure/code_ran": mean(p.ran_cleanly(j) for p, j in programs),
        "cure/code_accuracy": mean(j in p.correct for p, j in programs),
        "cure/code_reward": mean(r for p in outcomes for r in p.code_rewards),
        "cure/test_well_formed": mean(p.tests[k] is not None for p, k in tests),
        "cure/test_accuracy": mean(p.agrees[k] is True for p, k in tests),
        "cure/test_correct_by_c": mean(v for p in outcomes for v in p.test_correct or []),
        "cure/test_reward": mean(r for p in outcomes for r in p.test_rewards or []),
        "cure/gt_pass_rate": mean(c for p in outcomes for row in p.execution.matrix
                                  for c in row[: p.gt_tests]),
        "cure/generated_pass_rate": mean(generated),
        "cure/c_empty": mean(not p.correct for p in outcomes),
        "cure/w_empty": mean(len(p.correct) == len(p.programs) for p in outcomes),
        "cure/dropped_code_problems": mean(p.code_dropped for p in outcomes),
        "cure/dropped_test_problems": mean(rules.standardise(p.test_rewards or []) is None
                                           for p in outcomes),
        "cure/problems": float(len(outcomes)),
        "cure/runs": float(sum(p.execution.runs for p in outcomes)),
        "cure/timeout_rate": sum(p.execution.timeouts for p in outcomes) / runs,
        "cure/run_error_rate": sum(p.execution.errors for p in outcomes) / runs,
    }


def check_references(problems: list[Problem], source: str, time_limit_s: float,
                     pool_size: int = 2) -> None:
    """Every reference program on every one of its tests, once: one that fails a test is one
    line naming the file, the problem and the test (the file is wrong, not the model)."""
    cases = [(problem, index, test) for problem in problems
             for index, test in enumerate(problem.tests)]
    reasons = failures([(p.reference, test) for p, _, test in cases], time_limit_s, pool_size)
    for (problem, index, _), why in zip(cases, reasons, strict=True):
        if why:
            raise UserError(f"{source}: problem {problem.id!r}: its reference program fails "
                            f"its own test {index} ({why})")


class CureLoop(Loop):
    name = "cure"
    Settings = CureSettings
    spec = LoopSpec(
        roles={CODER: ("problem",), TESTER: ("problem", "example_input", "example_output")},
        estimator="own", tasks="problems",
    )

    def __init__(self, config) -> None:
        super().__init__(config)
        s: CureSettings = self.settings
        self.source = Path(s.problems) if s.problems else DEFAULT_PROBLEMS
        self.problems = rules.load_problems(self.source)[: s.max_problems]
        check_references(self.problems, str(self.source), s.time_limit_s, s.pool_size)
        self.tool = ToolSandbox(ToolSettings(wall_s=s.time_limit_s, pool_size=s.pool_size))
        self.queue: list[int] = []  # indices of the problems left in this pass over the file

    def close(self) -> None:
        self.tool.close()

    def inputs(self) -> dict[str, Path]:
        return {"cure_problems.jsonl": self.source}

    def draw(self) -> list[Problem]:
        """The step's problems: the next ones of the current pass, a new pass when it ends."""
        chosen = []
        while len(chosen) < self.settings.problems_per_step:
            if not self.queue:
                self.queue = list(range(len(self.problems)))
                if self.settings.order == "shuffle":
                    self.rng.shuffle(self.queue)
            chosen.append(self.problems[self.queue.pop(0)])
        return chosen

    # ---------------------------------------------------------------- one step
    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        s, problems = self.settings, self.draw()
        requests = [[self.request(CODER, problem=p.statement) for _ in range(s.codes)]
                    + [self.request(TESTER, problem=p.statement,
                                    example_input=p.example.input.rstrip("\n"),
                                    example_output=p.example.output.rstrip("\n"))
                       for _ in range(s.tests)] for p in problems]
        flat = await policy.gather(policy(request) for batch in requests for request in batch)
        completions = grouped(flat, s.codes + s.tests)
        # the sandbox runs of every problem at once (the engine is idle meanwhile)
        outcomes = await asyncio.gather(*(
            self.execute(policy, f"s{step}-p{i}-{problem.id}", problem, completions[i])
            for i, problem in enumerate(problems)
        ))
        episodes = []
        for played, batch, replies in zip(outcomes, requests, completions, strict=True):
            turns = [self.turn(r, c, policy) for r, c in zip(batch, replies, strict=True)]
            episodes += self.episodes(played, turns[: s.codes], turns[s.codes :], step)
        return Collected(episodes, step_metrics(outcomes), [p.row(step) for p in outcomes])

    async def execute(self, policy: BatchingPolicy, key: str, problem: Problem,
                      completions: list[Completion]) -> Played:
        """Parse one problem's replies and run its execution matrix (and the reference program
        on the generated tests, for the metrics) in the sandbox."""
        s = self.settings
        programs = [rules.parse_program(c.reply) for c in completions[: s.codes]]
        tests = [rules.parse_unit_test(c.reply) for c in completions[s.codes :]]
        gt = list(problem.tests[: s.max_gt_tests])

        def run(code: str):
            return self.tool.run(policy, code)

        # the reference program on the generated tests: how right they are (never rewarded)
        execution, reference = await asyncio.gather(
            run_matrix(run, programs, [*gt, *tests]), run_matrix(run, [problem.reference], tests))
        agrees = [None if test is None else bool(ok)
                  for test, ok in zip(tests, reference.matrix[0], strict=True)]
        return Played.of(key, problem, len(gt), programs, tests, execution, agrees,
                         s.reward_form, s.post_stage)

    def episodes(self, played: Played, coder_turns: list[Turn], tester_turns: list[Turn],
                 step: int) -> list[Episode]:
        """One episode per program and per unit test, grouped by problem and role (a program
        is ``correct`` when it passes every ground-truth test); unit tests of a problem with
        no correct program carry no reward (they train on nothing)."""
        tests = played.test_rewards
        return [Episode(self.name, "cure", [turn], {CODER: played.code_rewards[j]},
                        f"{played.key}-code", {"step": step} | played.coder_info(j),
                        correct=j in played.correct) for j, turn in enumerate(coder_turns)] + [
            Episode(self.name, "cure", [turn], {} if tests is None else {TESTER: tests[k]},
                    f"{played.key}-test", {"step": step} | played.tester_info(k))
            for k, turn in enumerate(tester_turns)]

    def own_samples(self, episodes: list[Episode]) -> list[Sample]:
        """Each (problem, role) group's rewards standardised, (r − mean) / std with no ε; std 0:
        advantage 0 (the runner drops and counts those)."""
        return group_relative_samples(episodes, advantages_of=lambda rewards: (
            rules.standardise(rewards) or [0.0] * len(rewards)))

    def state_dict(self) -> dict:
        return super().state_dict() | {"queue": list(self.queue)}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.queue = list(state["queue"])
