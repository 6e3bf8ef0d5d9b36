"""Agent0's task kinds as strategies: how a proposal becomes a task, how the executor's k
answers to it are scored, and how one answer is judged in the executor phase.

- ``QaTasks``: a question with the proposer's answer; the executor's answers are
  pseudo-labelled by self-consistency (ỹ, p̂), and the proposer's answer only says whether it
  agrees with ỹ.
- ``CodeIoTasks`` (Absolute Zero style): a program and an input; the sandbox runs ``f(input)``
  twice in one process for the gold output, and every executor answer is checked by running
  it (no pseudo-labels). The program machinery is AZR's (``curricula/programs.py``).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

from curricula import programs
from curricula.answers import answers_equal
from curricula.consistency import consensus
from curricula.proposals import Proposal, code_question, parse_code_io, parse_qa
from selfplay.engines.policy import BatchingPolicy
from selfplay.engines.tools import ToolSandbox
from selfplay.types import Turn

MAX_OUTPUT_CHARS = 200  # a longer gold output makes a code_io task invalid


@dataclass
class Solve:
    """One executor rollout on one task."""

    turn: Turn
    text: str
    answer: str | None
    tool_calls: int
    correct: bool | None = None  # code_io: verified by execution


@dataclass
class ScoredTask:
    """A proposal with the executor's k answers: its label, p̂ and agreement."""

    proposal: Proposal
    solves: list[Solve] = field(default_factory=list)
    label: str | None = None  # majority answer (qa) / gold output (code_io)
    p_hat: float = 0.0
    agrees: bool | None = None  # majority ≡ the proposer's own answer (qa)

    @property
    def tool_calls(self) -> float:
        return sum(s.tool_calls for s in self.solves) / max(len(self.solves), 1)


class QaTasks:
    """Question-answer tasks, labelled by the executor's majority."""

    name = "qa"

    def __init__(self, verify_timeout_s: float) -> None:
        self.verify_timeout_s = verify_timeout_s

    async def task(self, policy: BatchingPolicy, reply: str) -> Proposal:
        return parse_qa(reply)

    def pose(self, proposal: Proposal) -> Proposal:
        """The task as asked: a question-answer proposal asks its own question."""
        return proposal

    async def check(
        self, policy: BatchingPolicy, proposal: Proposal, answer: str | None
    ) -> bool | None:
        return None  # judged against the pseudo-label, once all k answers are in

    def score(self, proposal: Proposal, solves: list[Solve]) -> ScoredTask:
        vote = consensus(
            [s.answer for s in solves], reference=proposal.answer, timeout_s=self.verify_timeout_s
        )
        return ScoredTask(proposal, solves, vote.label, vote.p_hat, vote.agrees)

    def correct(self, task: dict, solve: Solve) -> bool:
        """An executor-phase answer against the pool task's pseudo-label."""
        return answers_equal(solve.answer, task["pseudo_label"], self.verify_timeout_s)


class CodeIoTasks:
    """Program/input tasks, checked by running the program in the sandbox."""

    name = "code_io"

    def __init__(self, tool: ToolSandbox, modes: list[str], rng: random.Random) -> None:
        self.tool, self.modes, self.rng = tool, modes, rng

    async def task(self, policy: BatchingPolicy, reply: str) -> Proposal:
        proposal = parse_code_io(reply)
        return await self.ground(policy, proposal) if proposal.valid else proposal

    async def ground(self, policy: BatchingPolicy, proposal: Proposal) -> Proposal:
        """Run ``f(input)`` twice in one sandbox process (``programs.run_code``): valid when
        both calls give the same output that ``eval(repr(·))`` gives back, at most
        ``MAX_OUTPUT_CHARS`` long (``pose`` then turns it into a question)."""
        code = programs.run_code(proposal.program, [proposal.input], MAX_OUTPUT_CHARS)
        result = await self.tool.run(policy, code)
        found = programs.read_results(result.stdout) if result.ok else None
        if not found or not found[0].get("ok"):
            error = found[0].get("error") if found else None
            why = error if error in ("not deterministic", "output too long") else "program failed"
            return dataclasses.replace(proposal, valid=False, why_invalid=why)
        return dataclasses.replace(proposal, output=found[0]["output"])

    def pose(self, proposal: Proposal) -> Proposal:
        """Ask a grounded program for its output (deduction) or an input giving it
        (abduction), the mode drawn from the loop's random stream. Called in proposal order
        once every program has run: the sandbox finishes runs in any order, the draws may not
        follow it."""
        if not proposal.valid:
            return proposal
        mode = self.rng.choice(self.modes)
        deduction = mode == programs.DEDUCTION
        posed = dataclasses.replace(
            proposal,
            mode=mode,
            answer=proposal.output if deduction else proposal.input,
            answer_type=programs.ANSWER_TYPES[mode],
        )
        posed.question = code_question(posed)
        return posed

    async def check(self, policy: BatchingPolicy, proposal: Proposal, answer: str | None) -> bool:
        """Deduction: ``eval(gold) == eval(answer)`` (in process when both are literals);
        abduction: ``f(answer) == gold`` in the sandbox, the answer read as written."""
        if answer is None:
            return False
        if proposal.mode == programs.DEDUCTION:
            same = programs.literal_equal(proposal.output, answer)
            if same is not None:
                return same
        code = programs.answer_code(proposal.mode, proposal.program, proposal.output, answer)
        result = await self.tool.run(policy, code)
        found = programs.read_results(result.stdout) if result.ok else None
        return bool(found) and all(found)

    def score(self, proposal: Proposal, solves: list[Solve]) -> ScoredTask:
        p_hat = sum(bool(s.correct) for s in solves) / len(solves)
        return ScoredTask(proposal, solves, proposal.answer, p_hat)

    def correct(self, task: dict, solve: Solve) -> bool:
        return bool(solve.correct)
