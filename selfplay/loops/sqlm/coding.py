"""SQLM's coding topic: a solver's program run on the proposal's own tests in the sandbox (the
released code scores it with verl's ``prime`` manager: the share of the tests passed)."""

from __future__ import annotations

import asyncio

from curricula.unit_tests import parse_program
from selfplay.engines.policy import BatchingPolicy
from selfplay.engines.tools import ToolSandbox
from selfplay.loops.cure.execution import harness, passed


async def program_score(
    tool: ToolSandbox, policy: BatchingPolicy, reply: str, tests: list[tuple[str, str]]
) -> tuple[str | None, float]:
    """(what the reply did, its score): the last ```python block run once per test with the
    test's input as stdin; the score is the share of tests whose printed output matches. A
    reply with no program scores 0."""
    program = parse_program(reply)
    if program is None:
        return None, 0.0
    results = await asyncio.gather(*(tool.run(policy, harness(program, given))
                                      for given, _ in tests))
    ok = sum(passed(result, expected) for result, (_, expected) in zip(results, tests, strict=True))
    return f"passed {ok}/{len(tests)}", ok / len(tests)
