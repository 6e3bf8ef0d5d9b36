"""Benchmark: AZR-style program checking (``curricula.programs.run_code``: a proposed program,
its input, ``f(i)`` twice in one process) through the warm sandbox pool against the same
programs each in a fresh isolated interpreter (``sandbox.run_once``). Same isolation, same
concurrency, same run: the ratio is what the pool buys the AZR loop (goal >= 10x)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from curricula.programs import read_results, run_code
from sandbox.once import run_once
from sandbox.pool import SandboxPool
from sandbox.types import ExecResult, SandboxLimits
from selfplay.bench.sandbox import measure, runs_table

# programs of the kind a proposer writes: (program, input, expected output repr)
PROGRAMS = [
    ("def f(a):\n    return a", "'Hello world'", "'Hello world'"),
    ("def f(xs):\n    return sorted(xs)[::-1]", "[3, 1, 2]", "[3, 2, 1]"),
    ("def f(s):\n    return {c: s.count(c) for c in sorted(set(s))}", "'abca'",
     "{'a': 2, 'b': 1, 'c': 1}"),
    ("def f(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
     "30", "832040"),
    ("import math\ndef f(n):\n    return [math.isqrt(i) for i in range(n)]", "5",
     "[0, 1, 1, 1, 2]"),
]


def _checks(run: Callable[[str], ExecResult], count: int) -> list[Callable[[], bool]]:
    """``count`` checks (cycling through PROGRAMS), each one sandbox call through ``run``, True
    when it printed the expected output."""

    def check(code: str, expected: str) -> bool:
        found = read_results(run(code).stdout)
        return bool(found) and found[0].get("output") == expected

    picked = [PROGRAMS[i % len(PROGRAMS)] for i in range(count)]
    return [partial(check, run_code(program, [argument]), expected)
            for program, argument, expected in picked]


def bench_azr(programs: int = 200, pool_size: int = 2, baseline: int = 40,
              console: Any = None) -> dict[str, Any]:
    """Programs checked per second: warm pool vs one fresh interpreter per program."""
    from rich.console import Console

    limits = SandboxLimits(wall_s=10.0, cpu_s=10.0)
    with SandboxPool(size=pool_size, limits=limits) as pool:
        for check in _checks(pool.run, 2 * pool_size):  # warm-up
            check()
        pooled = measure(_checks(pool.run, programs), pool_size)
        isolated = pool.isolated
    fresh = measure(_checks(lambda code: run_once(code, limits), baseline), pool_size)
    report = {"isolated": isolated, "pool_size": pool_size, "pool": pooled, "fresh": fresh,
              "speedup": pooled["calls_per_s"] / fresh["calls_per_s"]}
    console = console or Console()
    console.print(runs_table(report, "AZR program checking"))
    console.print(f"ratio [bold]{report['speedup']:.1f}x[/bold] (goal: >= 10x)")
    return report
