"""CURE (Wang et al. 2025, arXiv:2506.03136; docs/algorithms.md#cure): one policy co-evolves as
a coder and a unit tester on coding problems with ground-truth tests.

One policy, two roles (``coder``, ``tester``; shared weights by default). Each step:

1. ``problems_per_step`` problems are drawn (``order: shuffle``: a new permutation each pass
   over the file; ``file``: in the file's order, easy problems first).
2. For every problem the **coder** writes ``codes`` programs (stdin → stdout) and the
   **tester** ``tests`` unit tests (an input and its expected output), having seen one public
   example; all requests of the step go to the engine as one wave.
3. The sandbox runs every program on every test, the problem's first t ≤ ``max_gt_tests``
   ground-truth tests and the generated ones: the execution matrix B (``execution.py``).
4. Rewards (``curricula/unit_tests.py``): a program earns the share of ground-truth tests it
   passes; a unit test, when some program passes every ground-truth test (C non-empty), earns
   by how well it separates C from the others (``reward_form``, ``post_stage``).
5. Advantages: each problem's code rewards and test rewards are standardised separately,
   (r − mean) / std, and used as they are; a problem whose std is 0 gives no samples.

The problem file is read and its reference programs checked against their own tests once, when
the loop is made; references never enter a reward (they measure ``cure/test_accuracy``).
Every problem of every step is a row of ``tasks.jsonl``; metrics are in ``records.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from curricula.unit_tests import (
    DEFAULT_PROBLEMS,
    Problem,
    load_problems,
    parse_program,
    parse_unit_test,
    standardise,
)
from selfplay.engines.policy import BatchingPolicy
from selfplay.engines.tools import ToolSandbox, ToolSettings
from selfplay.loops.base import Loop, LoopSpec
from selfplay.loops.cure.execution import check_references, reference_agrees, run_matrix
from selfplay.loops.cure.records import Played, coder_info, step_metrics, task_row, tester_info
from selfplay.loops.cure.settings import CureSettings
from selfplay.rl.advantages import group_relative_samples
from selfplay.types import Collected, Completion, Episode, Request, Sample

CODER, TESTER = "coder", "tester"


class CureLoop(Loop):
    name = "cure"
    Settings = CureSettings
    spec = LoopSpec(
        roles={CODER: ("problem",), TESTER: ("problem", "example_input", "example_output")},
        tasks="problems",
    )

    def __init__(self, config) -> None:
        super().__init__(config)
        s: CureSettings = self.settings
        self.source = Path(s.problems) if s.problems else DEFAULT_PROBLEMS
        self.problems = load_problems(self.source)[: s.max_problems]
        check_references(self.problems, str(self.source), s.time_limit_s, s.pool_size)
        self.tool = ToolSandbox(ToolSettings(wall_s=s.time_limit_s, pool_size=s.pool_size))
        self.queue: list[int] = []  # indices of the problems left in this pass over the file

    def close(self) -> None:
        self.tool.close()

    def inputs(self) -> dict[str, Path]:
        return {"cure_problems.jsonl": self.source}

    # ---------------------------------------------------------------- problems
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

    def requests(self, problem: Problem) -> list[Request]:
        """``codes`` coder requests then ``tests`` tester requests for one problem."""
        s = self.settings
        coder = [self.request(CODER, stop=tuple(s.coder_stop), max_new_tokens=s.coder_max_tokens,
                              problem=problem.statement) for _ in range(s.codes)]
        example = problem.example
        tester = [self.request(TESTER, stop=tuple(s.tester_stop),
                               max_new_tokens=s.tester_max_tokens, problem=problem.statement,
                               example_input=example.input.rstrip("\n"),
                               example_output=example.output.rstrip("\n"))
                  for _ in range(s.tests)]
        return coder + tester

    # ---------------------------------------------------------------- one step
    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        s = self.settings
        problems = self.draw()
        requests = [self.requests(problem) for problem in problems]
        flat = await policy.gather(policy(request) for batch in requests for request in batch)
        size = s.codes + s.tests
        completions = [flat[i * size : (i + 1) * size] for i in range(len(problems))]
        # the sandbox runs of every problem at once (the engine is idle meanwhile)
        outcomes = await asyncio.gather(*(
            self.execute(policy, f"s{step}-p{i}-{problem.id}", problem, completions[i])
            for i, problem in enumerate(problems)
        ))
        episodes = []
        for played, batch, replies in zip(outcomes, requests, completions, strict=True):
            turns = [self.turn(r, c, policy) for r, c in zip(batch, replies, strict=True)]
            episodes += self.episodes(played, turns[: s.codes], turns[s.codes :], step)
        rows = [task_row(played, step) for played in outcomes]
        return Collected(episodes, step_metrics(outcomes), rows)

    async def execute(
        self, policy: BatchingPolicy, key: str, problem: Problem, completions: list[Completion]
    ) -> Played:
        """Parse one problem's replies and run its execution matrix (and the reference program
        on the generated tests, for the metrics) in the sandbox."""
        s = self.settings
        programs = [parse_program(c.reply) for c in completions[: s.codes]]
        tests = [parse_unit_test(c.reply) for c in completions[s.codes :]]
        gt = list(problem.tests[: s.max_gt_tests])

        def run(code: str):
            return self.tool.run(policy, code)

        execution, agrees = await asyncio.gather(
            run_matrix(run, programs, [*gt, *tests]), reference_agrees(run, problem, tests)
        )
        return Played(key, problem, len(gt), programs, tests, execution, agrees,
                      s.reward_form, s.post_stage)

    def episodes(self, played: Played, coder_turns, tester_turns, step: int) -> list[Episode]:
        """One episode per program and per unit test, grouped by problem and role; unit tests
        of a problem with no correct program carry no reward (they train on nothing)."""
        code_rewards, test_rewards = played.code_rewards, played.test_rewards
        episodes = [
            Episode(loop=self.name, env="cure", turns=[turn], rewards={CODER: reward},
                    group_id=f"{played.key}-code", info={"step": step} | coder_info(played, j))
            for j, (turn, reward) in enumerate(zip(coder_turns, code_rewards, strict=True))
        ]
        for k, turn in enumerate(tester_turns):
            rewards = {} if test_rewards is None else {TESTER: test_rewards[k]}
            episodes.append(Episode(
                loop=self.name, env="cure", turns=[turn], rewards=rewards,
                group_id=f"{played.key}-test", info={"step": step} | tester_info(played, k),
            ))
        return episodes

    # ---------------------------------------------------------------- advantages
    def samples(self, episodes: list[Episode]) -> list[Sample]:
        """CURE's advantages (``advantage.estimator: auto``): each (problem, role) group's
        rewards standardised, (r − mean) / std, with no ε; a group whose std is 0 gets
        advantage 0, which the runner drops and counts. Another estimator: the base's."""
        if self.config.advantage.estimator != "auto":
            return super().samples(episodes)
        return group_relative_samples(
            episodes, advantages_of=lambda rewards: standardise(rewards) or [0.0] * len(rewards))

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict:
        return super().state_dict() | {"queue": list(self.queue)}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.queue = list(state["queue"])
