"""AZR's tasks: a triplet (or, for induction, a program with input/output pairs and a
message), the per-mode task buffers, and the sandbox checks that turn a proposer's reply into a
task and judge a solver's answer (the program machinery itself is ``curricula/programs.py``).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any

from curricula import programs
from curricula.azr_rewards import Outcome
from curricula.programs import ABDUCTION, DEDUCTION, INDUCTION
from selfplay.engines.tools import ToolSandbox


@dataclass
class Task:
    """A valid task of one mode. Deduction and abduction: one input and its output; induction:
    ``inputs``/``outputs`` pairs, the first ``shown`` of them in the solver's prompt, the rest
    held out, and the proposer's ``message``."""

    mode: str
    program: str
    inputs: list[str]
    outputs: list[str]
    message: str = ""
    shown: int = 1
    task_id: str = ""

    def pairs(self, held_out: bool) -> list[tuple[str, str]]:
        pairs = list(zip(self.inputs, self.outputs, strict=True))
        return pairs[self.shown:] if held_out else pairs[: self.shown]

    def fields(self) -> dict[str, str]:
        """The solve prompt's fields for this task's mode."""
        if self.mode == DEDUCTION:
            return {"program": self.program, "input": self.inputs[0]}
        if self.mode == ABDUCTION:
            return {"program": self.program, "output": self.outputs[0]}
        shown = "\n".join(f"f({i}) == {o}" for i, o in self.pairs(held_out=False))
        return {"message": self.message, "pairs": shown}

    def question(self) -> str:
        """The task as a person reads it (``tasks.jsonl``'s ``question``)."""
        if self.mode == DEDUCTION:
            return f"{self.program}\n# f({self.inputs[0]}) = ?"
        if self.mode == ABDUCTION:
            return f"{self.program}\n# f(?) = {self.outputs[0]}"
        return f"# {self.message}\n" + self.fields()["pairs"] + "\n# f = ?"

    def gold(self) -> str:
        """What the solver must find: the output, the input, the program."""
        return {DEDUCTION: self.outputs[0], ABDUCTION: self.inputs[0]}.get(self.mode, self.program)

    def reference(self) -> str:
        """The triplet as shown to a proposer."""
        return f"```python\n{self.program}\n```\nInput: {self.inputs[0]}\nOutput: {self.outputs[0]}"


def seed_task(mode: str = DEDUCTION) -> Task:
    """The paper's seed: the identity ``f(a) = a`` on "Hello world", as a task of ``mode``."""
    return Task(mode, programs.IDENTITY, [programs.SEED_INPUT], [programs.SEED_INPUT],
                task_id="seed")


class Buffers:
    """One buffer of valid tasks per mode, newest last, at most ``cap`` each."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.tasks: dict[str, list[Task]] = {DEDUCTION: [], ABDUCTION: [], INDUCTION: []}

    def add(self, task: Task) -> None:
        kept = self.tasks[task.mode]
        kept.append(task)
        del kept[: max(0, len(kept) - self.cap)]

    def newest(self, mode: str, count: int) -> list[Task]:
        """``count`` tasks newest first (the released code's ``max_new``), cycling through
        the buffer when it holds fewer."""
        kept = self.tasks[mode][::-1]
        return [kept[i % len(kept)] for i in range(count)] if kept else []

    def sample(self, mode: str, count: int, rng: random.Random) -> list[Task]:
        kept = self.tasks[mode]
        return [kept[rng.randrange(len(kept))] for _ in range(count)] if kept else []

    def programs(self) -> list[Task]:
        """The triplets whose programs an induction proposer may be given."""
        return self.tasks[DEDUCTION] + self.tasks[ABDUCTION]

    def sizes(self) -> dict[str, int]:
        return {mode: len(kept) for mode, kept in self.tasks.items()}

    def state_dict(self) -> dict[str, Any]:
        return {m: [dataclasses.asdict(t) for t in kept] for m, kept in self.tasks.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tasks = {m: [Task(**t) for t in kept] for m, kept in state.items()}


@dataclass
class Checked:
    """A proposer reply read and checked: the task, or why not (``outcome`` ``format`` when it
    could not be read, ``wrong`` when it is not a valid task)."""

    outcome: Outcome
    task: Task | None = None
    why: str = ""
    parsed: programs.Parsed = field(default_factory=programs.Parsed)


@dataclass
class Judged:
    outcome: Outcome
    answer: str | None


class Checker:
    """Runs proposed programs and solver answers in the sandbox pool (started on first use)."""

    def __init__(self, settings) -> None:
        self.s = settings
        self.banned = tuple(settings.banned)
        self.tool = ToolSandbox(settings.sandbox)

    def close(self) -> None:
        self.tool.close()

    async def results(self, policy, code: str) -> tuple[list | None, str]:
        """What a ``programs.*_code`` program printed, or (None, why it printed nothing)."""
        result = await self.tool.run(policy, code)
        found = programs.read_results(result.stdout) if result.ok else None
        if found is not None:
            return found, ""
        return None, "timed out" if result.out_of_time else "program failed"

    async def outputs(self, policy, program: str, inputs: list[str]) -> tuple[list | None, str]:
        """Per input: ``{"ok", "output" | "error"}`` from one sandbox call."""
        found, why = await self.results(
            policy, programs.run_code(program, inputs, self.s.max_output_chars))
        return (found, why) if found is None or len(found) == len(inputs) else (None, "bad run")

    async def propose(self, policy, mode: str, reply: str, source: Task | None) -> Checked:
        """A task from a proposer's reply: a program and an input (deduction, abduction), or
        inputs and a message for ``source``'s program (induction)."""
        if mode == INDUCTION:
            return await self._induction(policy, reply, source)
        parsed = programs.parse_program_input(reply)
        if not parsed.ok:
            return Checked("format", why=parsed.why, parsed=parsed)
        checked = programs.check_program(parsed.program, self.banned)
        why = checked.why or programs.check_arguments(parsed.inputs[0], self.banned)
        if why:
            return Checked("wrong", why=why, parsed=parsed)
        found, why = await self.outputs(policy, checked.program, parsed.inputs)
        if found is None or not found[0]["ok"]:
            return Checked("wrong", why=why or found[0]["error"], parsed=parsed)
        task = Task(mode, checked.program, parsed.inputs, [found[0]["output"]])
        return Checked("passed", task, parsed=parsed)

    async def _induction(self, policy, reply: str, source: Task) -> Checked:
        parsed = programs.parse_inputs_message(reply, self.s.require_message)
        if not parsed.ok:
            return Checked("format", why=parsed.why, parsed=parsed)
        wanted = self.s.induction_inputs
        inputs = [i for i in parsed.inputs if not programs.check_arguments(i, self.banned)]
        found, why = await self.outputs(policy, source.program, inputs) if inputs else ([], "")
        if found is None:
            return Checked("wrong", why=why, parsed=parsed)
        pairs = [(i, r["output"]) for i, r in zip(inputs, found, strict=True) if r["ok"]]
        if len(pairs) < wanted:
            return Checked("wrong", why=f"{len(pairs)} of {wanted} inputs run", parsed=parsed)
        pairs = pairs[:wanted]
        task = Task(INDUCTION, source.program, [i for i, _ in pairs], [o for _, o in pairs],
                    parsed.message, self.s.induction_shown)
        return Checked("passed", task, parsed=parsed)

    async def judge(self, policy, task: Task, reply: str) -> Judged:
        """A solver's reply to ``task``: format error, wrong, or passed."""
        lenient = self.s.lenient
        if task.mode == INDUCTION:
            answer = programs.parse_program_answer(reply, lenient)
        else:
            answer = programs.parse_answer(reply, lenient)
        if answer is None:
            return Judged("format", None)
        return Judged("passed" if await self._passes(policy, task, answer) else "wrong", answer)

    async def _passes(self, policy, task: Task, answer: str) -> bool:
        lenient = self.s.lenient  # the small-model readings: docs/azr.md#lenient-answers
        if task.mode == DEDUCTION:  # eval(gold) == eval(answer)
            if lenient and programs.spelled_equal(task.outputs[0], answer):
                return True
            same = programs.literal_equal(task.outputs[0], answer)
            if same is not None:
                return same
            found, _ = await self.results(policy, programs.equal_code(task.outputs[0], answer))
            return bool(found) and all(found)
        if task.mode == ABDUCTION:  # f(answer) == gold output, for any one reading of it
            return await self._abduction(policy, task, answer)
        # induction: the answer's program on every held-out pair
        checked = programs.check_program(
            programs.function_only(answer) if lenient else answer, self.banned)
        if not checked.ok:
            return False
        pairs = task.pairs(held_out=True)
        found, _ = await self.results(policy, programs.match_code(checked.program, pairs))
        return bool(found) and len(found) == len(pairs) and all(found)

    async def _abduction(self, policy, task: Task, answer: str) -> bool:
        if self.s.lenient:
            inputs = programs.lenient_inputs(answer, self.banned)
        else:
            given = programs.answer_input(answer)
            inputs = [] if programs.check_arguments(given, self.banned) else [given]
        if not inputs:
            return False
        pairs = [(given, task.outputs[0]) for given in inputs]
        found, _ = await self.results(policy, programs.match_code(task.program, pairs))
        return bool(found) and len(found) == len(pairs) and any(found)
