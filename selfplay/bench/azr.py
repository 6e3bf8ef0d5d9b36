"""Benchmark: AZR-style program checking (``curricula.programs.run_code``: a proposed program,
its input, ``f(i)`` twice in one process) through the warm sandbox pool against the same
programs each in a fresh isolated interpreter (``sandbox.run_once``). Same isolation, same
concurrency, same run: the ratio is what the pool buys the AZR loop (goal >= 10x)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from curricula.programs import read_results, run_code
from sandbox.once import run_once
from sandbox.pool import SandboxPool
from sandbox.types import SandboxLimits

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


def _checks(count: int) -> list[tuple[str, str]]:
    """``count`` checking programs (cycling through PROGRAMS) with their expected output."""
    picked = [PROGRAMS[i % len(PROGRAMS)] for i in range(count)]
    return [(run_code(program, [argument]), expected) for program, argument, expected in picked]


def _measure(run, checks: list[tuple[str, str]], concurrency: int) -> dict[str, float]:
    def one(check: tuple[str, str]) -> bool:
        found = read_results(run(check[0]).stdout)
        return bool(found) and found[0].get("output") == check[1]

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as executor:
        ok = list(executor.map(one, checks))
    wall = time.perf_counter() - start
    return {"programs": len(checks), "failures": ok.count(False), "wall_s": wall,
            "programs_per_s": len(checks) / wall}


def bench_azr(programs: int = 200, pool_size: int = 2, baseline: int = 40,
              console: Any = None) -> dict[str, Any]:
    """Programs checked per second: warm pool vs one fresh interpreter per program."""
    limits = SandboxLimits(wall_s=10.0, cpu_s=10.0)
    with SandboxPool(size=pool_size, limits=limits) as pool:
        for code, _ in _checks(2 * pool_size):  # warm-up
            pool.run(code)
        pooled = _measure(pool.run, _checks(programs), pool_size)
        isolated = pool.isolated
    fresh = _measure(lambda code: run_once(code, limits), _checks(baseline), pool_size)
    report = {"isolated": isolated, "pool_size": pool_size, "pool": pooled, "fresh": fresh,
              "speedup": pooled["programs_per_s"] / fresh["programs_per_s"]}
    _print(report, console)
    return report


def _print(report: dict[str, Any], console: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    mode = "bubblewrap" if report["isolated"] else "fallback (reduced isolation)"
    table = Table(title=f"AZR program checking ({mode}, concurrency {report['pool_size']})")
    for column in ("runner", "programs", "failures", "programs/s"):
        table.add_column(column, justify="right" if column != "runner" else "left")
    for name, key in (("warm pool", "pool"), ("fresh process (run_once)", "fresh")):
        row = report[key]
        table.add_row(name, str(row["programs"]), str(row["failures"]),
                      f"{row['programs_per_s']:.1f}")
    console.print(table)
    console.print(f"ratio [bold]{report['speedup']:.1f}x[/bold] (goal: >= 10x)")
