"""Programs run on stdio tests (an input, and the output a program must print): what coding
loops run in the sandbox (CURE's execution matrix, SQLM's coding topic).

The sandbox runs a piece of Python with no stdin of its own, so each run is a small harness
(``harness``): the input goes into a temporary file that becomes file descriptor 0, so
``input()``, ``sys.stdin`` and ``open(0)`` all read it; the program then runs as ``__main__``.
A ``sys.exit`` ends it normally (what was printed counts); an exception, a time-out or output
past the sandbox's limit fails the run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import NamedTuple

from .pool import SandboxPool
from .types import ExecResult, SandboxLimits

Runner = Callable[[str], Awaitable[ExecResult]]  # code → its result (e.g. ``SandboxPool.arun``)


class StdioTest(NamedTuple):
    """One stdio test: what the program reads and what it must print."""

    input: str
    output: str

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


def outputs_match(actual: str, expected: str) -> bool:
    """Printed output equals the expected one up to whitespace (CURE's released check: the
    same tokens separated by any whitespace)."""
    return actual.split() == expected.split()


def passed(result: ExecResult, expected: str) -> bool:
    """A run passes when it ended normally in time and printed the expected output."""
    return result.ok and outputs_match(result.stdout, expected)


def failure(result: ExecResult, expected: str, wall_s: float) -> str | None:
    """Why a run (limited to ``wall_s`` seconds) did not pass, in a few words; None when it
    passed."""
    if passed(result, expected):
        return None
    if result.timed_out:
        return f"ran past {wall_s:g} s"
    if not result.ok:
        return f"failed: {(result.stderr.strip().splitlines() or ['no output'])[-1]}"
    return f"printed {result.stdout.strip()[:60]!r}, expected {expected.strip()[:60]!r}"


@dataclass
class Execution:
    """The execution matrix of programs × tests, and what the runs did."""

    matrix: list[list[int]]  # 1 where program j passed test k
    runs: int = 0
    timeouts: int = 0
    errors: int = 0  # runs that raised, were killed or printed too much (time-outs apart)
    clean: dict[tuple[int, int], bool] = field(default_factory=dict)  # (j, k) → ended normally


async def run_matrix(
    run: Runner, programs: Sequence[str | None], tests: Sequence[StdioTest | None]
) -> Execution:
    """Every program on every test (anything with ``input`` and ``output``), all runs at once
    (the pool bounds how many run together). A program or test that did not parse (None) runs
    nothing: its cells are 0."""
    cells = [(j, k) for j, program in enumerate(programs) if program is not None
             for k, test in enumerate(tests) if test is not None]
    results = await asyncio.gather(*(run(harness(programs[j], tests[k].input)) for j, k in cells))
    execution = Execution([[0] * len(tests) for _ in programs], runs=len(cells))
    for (j, k), result in zip(cells, results, strict=True):
        execution.matrix[j][k] = int(passed(result, tests[k].output))
        execution.timeouts += result.timed_out
        execution.errors += not result.ok and not result.timed_out
        execution.clean[(j, k)] = result.ok
    return execution


def failures(cases: Sequence[tuple[str, StdioTest]], wall_s: float, pool_size: int = 2
             ) -> list[str | None]:
    """Each (program, test) run once, outside any event loop (a file's reference programs
    checked at start): why each one failed (``failure``), None where it passed."""
    limits = SandboxLimits(wall_s=wall_s, cpu_s=wall_s)
    with (SandboxPool(size=pool_size, limits=limits) as pool,
          ThreadPoolExecutor(max_workers=pool_size) as threads):
        results = list(threads.map(pool.run, [harness(p, test.input) for p, test in cases]))
    return [failure(result, test.output, wall_s)
            for result, (_, test) in zip(results, cases, strict=True)]
