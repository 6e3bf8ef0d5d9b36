"""propose_solve: a two-agent verifiers v1 environment (the multi-agent ``Env`` API).

A ``proposer`` agent writes an addition problem within a bound the seed task gives; the env
parses it and hands it to a ``solver`` agent as a new task. The solver's reward is its task's
``@vf.reward`` (the sum right or not); the proposer's, recorded in ``finalize`` (cross-agent
judgement), is 1 for a well-formed problem the solver got wrong, 0.5 for one it got right and
0 for a malformed one (then the solver does not play). Written as a verifiers package is: the
module exports its ``Env`` and its seed ``Taskset`` through ``__all__``.
"""

from __future__ import annotations

import re

import verifiers.v1 as vf

from selfplay.loops.verifiers.envs.arithmetic import ArithmeticData, ArithmeticTask

__all__ = ["ProposeSolveEnv", "ProposeSolveTaskset"]

PROBLEM = re.compile(r"(\d+)\s*\+\s*(\d+)")


class BoundData(vf.TaskData):
    bound: int


class BoundTask(vf.Task[BoundData]):
    """A seed row: the largest operand the proposer may use (no reward of its own)."""


class ProposeSolveConfig(vf.TasksetConfig):
    num_tasks: int = 8
    bounds: list[int] = [5, 9]


class ProposeSolveTaskset(vf.Taskset[BoundTask, ProposeSolveConfig]):
    def load(self) -> list[BoundTask]:
        bounds = self.config.bounds
        return [
            BoundTask(
                BoundData(
                    prompt=(
                        f"Write one addition problem of two whole numbers, each at most "
                        f"{bounds[i % len(bounds)]}, as: What is A + B?"
                    ),
                    bound=bounds[i % len(bounds)],
                ),
                self.config.task,
            )
            for i in range(self.config.num_tasks)
        ]


class ProposeSolveEnvConfig(vf.EnvConfig):
    proposer: vf.AgentConfig = vf.AgentConfig()
    solver: vf.AgentConfig = vf.AgentConfig()


class ProposeSolveEnv(vf.Env[ProposeSolveEnvConfig]):
    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        proposal = await agents.proposer.run(task)
        problem = parse_problem(proposal.last_reply or "", task.data.bound)
        if problem is None:
            return  # a malformed proposal: finalize gives it 0, nobody solves it
        a, b = problem
        question = f"What is {a} + {b}? Answer with the number only."
        await agents.solver.run(ArithmeticTask(ArithmeticData(prompt=question, answer=a + b)))

    async def finalize(self, task: vf.Task, episode: vf.Episode) -> None:
        solved = [t for t in episode.traces if t.agent.name == "solver"]
        for trace in episode.traces:
            if trace.agent.name != "proposer":
                continue
            if not solved:
                trace.record_reward("proposal", 0.0)
            else:
                trace.record_reward("proposal", 0.5 if solved[0].reward >= 1.0 else 1.0)


def parse_problem(reply: str, bound: int) -> tuple[int, int] | None:
    """The first ``A + B`` of the reply with both operands within ``bound``, else None."""
    match = PROBLEM.search(reply)
    if match is None:
        return None
    a, b = int(match.group(1)), int(match.group(2))
    return (a, b) if a <= bound and b <= bound else None
