"""Running CURE's programs on unit tests in the sandbox: the execution matrix B, and the check
of a problem file's reference programs against their own tests.

The sandbox pool runs a piece of Python with no stdin of its own, so each run is a small
harness (``harness``): the test's input goes into a temporary file that becomes file
descriptor 0, so ``input()``, ``sys.stdin`` and ``open(0)`` all read it; the program then runs
as ``__main__``. A ``sys.exit`` ends it normally (the released code counts what was printed);
an exception, a time-out (``cure.time_limit_s`` per run) or output past the sandbox's limit
fails the run. A program that never halts is killed at the limit and counted, never more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from curricula.unit_tests import Problem, UnitTest, outputs_match
from sandbox import ExecResult, SandboxLimits, SandboxPool
from selfplay.core.errors import UserError

Runner = Callable[[str], Awaitable[ExecResult]]  # code → result (ToolSandbox.run with a policy)

_HARNESS = """import os as _os, sys as _sys, tempfile as _tempfile
_file = _tempfile.TemporaryFile()
_file.write({stdin!r})
_file.seek(0)
_os.dup2(_file.fileno(), 0)
_file.close()
_sys.stdin = open(0, "r", encoding="utf-8", errors="replace", closefd=False)
try:
    exec(compile({program!r}, "<program>", "exec"), {{"__name__": "__main__"}})
except SystemExit:
    pass
"""


def harness(program: str, stdin: str) -> str:
    """Code that runs ``program`` with ``stdin`` as its standard input."""
    return _HARNESS.format(stdin=stdin.encode("utf-8"), program=program)


def passed(result: ExecResult, expected: str) -> bool:
    """A run passes when it ended normally in time and printed the expected output."""
    return result.ok and outputs_match(result.stdout, expected)


@dataclass
class Execution:
    """The execution matrix of one problem and what the runs did."""

    matrix: list[list[int]]  # n programs × (t ground-truth + m generated tests)
    runs: int = 0
    timeouts: int = 0
    errors: int = 0  # runs that raised, were killed or printed too much (time-outs apart)
    clean: dict[tuple[int, int], bool] = field(default_factory=dict)  # (j, l) → ended normally


async def run_matrix(
    run: Runner, programs: Sequence[str | None], tests: Sequence[UnitTest | None]
) -> Execution:
    """Every program on every test, all runs at once (the pool bounds how many run together).
    A program or test that did not parse (None) runs nothing: its cells are 0."""
    cells = [(j, k) for j, program in enumerate(programs) if program is not None
             for k, test in enumerate(tests) if test is not None]
    results = await asyncio.gather(
        *(run(harness(programs[j], tests[k].input)) for j, k in cells)
    )
    execution = Execution([[0] * len(tests) for _ in programs], runs=len(cells))
    for (j, k), result in zip(cells, results, strict=True):
        execution.matrix[j][k] = int(passed(result, tests[k].output))
        execution.timeouts += result.timed_out
        execution.errors += not result.ok and not result.timed_out
        execution.clean[(j, k)] = result.ok
    return execution


async def reference_agrees(
    run: Runner, problem: Problem, tests: Sequence[UnitTest | None]
) -> list[bool | None]:
    """Whether the problem's reference program prints each generated test's expected output
    (None for a malformed test): how right the tests are, measured, never rewarded."""
    results = await asyncio.gather(
        *(run(harness(problem.reference, test.input)) for test in tests if test is not None)
    )
    answers = iter(results)
    return [None if test is None else passed(next(answers), test.output) for test in tests]


def check_references(
    problems: Sequence[Problem], source: str, time_limit_s: float, pool_size: int = 2
) -> None:
    """Run every reference program on every one of its tests, once, at start: one that fails a
    test is one line naming the file, the problem and the test (the file is wrong, not the
    model)."""
    limits = SandboxLimits(wall_s=time_limit_s, cpu_s=time_limit_s)
    jobs = [(problem, index, test) for problem in problems
            for index, test in enumerate(problem.tests)]
    with (SandboxPool(size=pool_size, limits=limits) as pool,
          ThreadPoolExecutor(max_workers=pool_size) as threads):
        results = list(threads.map(
            lambda job: pool.run(harness(job[0].reference, job[2].input)), jobs))
    for (problem, index, test), result in zip(jobs, results, strict=True):
        if not passed(result, test.output):
            if result.timed_out:
                why = f"ran past {time_limit_s:g} s"
            elif not result.ok:
                last = (result.stderr.strip().splitlines() or ["no output"])[-1]
                why = f"failed: {last}"
            else:
                why = (f"printed {result.stdout.strip()[:60]!r}, "
                       f"expected {test.output.strip()[:60]!r}")
            raise UserError(
                f"{source}: problem {problem.id!r}: its reference program fails its own test "
                f"{index} ({why})"
            )
