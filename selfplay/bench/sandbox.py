"""Benchmark: warm pool vs one fresh sandboxed interpreter per call (``run_once``).

Both sides use the same isolation and the same concurrency (``pool_size`` callers at a time), in
the same run, so the ratio is the value of keeping workers warm.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sandbox.once import run_once
from sandbox.pool import SandboxPool
from sandbox.types import ExecResult, SandboxLimits

BENCH_CODE = "import math\nprint(sum(math.isqrt(i) for i in range(2000)))\n"
EXPECTED = str(sum(__import__("math").isqrt(i) for i in range(2000))) + "\n"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def measure(calls: list[Callable[[], bool]], concurrency: int) -> dict[str, float]:
    """Run ``calls`` (each one sandbox call, True when its output was the expected one),
    ``concurrency`` at a time: throughput, failures and latency percentiles."""

    def timed(call: Callable[[], bool]) -> tuple[float, bool]:
        start = time.perf_counter()
        ok = call()
        return time.perf_counter() - start, ok

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as executor:
        samples = list(executor.map(timed, calls))
    wall = time.perf_counter() - start
    latencies = [s for s, _ in samples]
    return {
        "calls": len(calls),
        "failures": sum(1 for _, ok in samples if not ok),
        "wall_s": wall,
        "calls_per_s": len(calls) / wall,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * _percentile(latencies, 0.99),
    }


def runs_table(report: dict[str, Any], title: str):
    """The warm pool's and the fresh processes' rows of ``report`` as a rich table."""
    from rich.table import Table

    mode = "bubblewrap" if report["isolated"] else "fallback (reduced isolation)"
    table = Table(title=f"{title} ({mode}, concurrency {report['pool_size']})")
    for column in ("runner", "calls", "failures", "calls/s", "p50 ms", "p99 ms"):
        table.add_column(column, justify="right" if column != "runner" else "left")
    for name, key in (("warm pool", "pool"), ("fresh process (run_once)", "fresh")):
        row = report[key]
        table.add_row(name, str(row["calls"]), str(row["failures"]),
                      f"{row['calls_per_s']:.1f}", f"{row['p50_ms']:.1f}",
                      f"{row['p99_ms']:.1f}")
    return table


def run_benchmark(
    calls: int = 200,
    pool_size: int = 2,
    console: Any = None,
    baseline_calls: int | None = None,
) -> dict[str, Any]:
    """Measure calls/s and p50/p99 latency of the pool and of ``run_once``; print a rich table."""
    limits = SandboxLimits()
    started = time.perf_counter()
    with SandboxPool(size=pool_size, limits=limits) as pool:
        startup = time.perf_counter() - started
        for _ in range(2 * pool_size):  # warm-up
            pool.run(BENCH_CODE)
        pooled = measure([_bench_call(pool.run)] * calls, pool_size)
        isolated = pool.isolated
    pooled["startup_s"] = startup
    fresh = measure([_bench_call(lambda code: run_once(code, limits))] * (baseline_calls or calls),
                    pool_size)
    report = {
        "isolated": isolated,
        "pool_size": pool_size,
        "pool": pooled,
        "fresh": fresh,
        "speedup": pooled["calls_per_s"] / fresh["calls_per_s"],
        "p50_ratio": fresh["p50_ms"] / pooled["p50_ms"],
    }
    _print_table(report, console)
    return report


def _bench_call(run: Callable[[str], ExecResult]) -> Callable[[], bool]:
    return lambda: run(BENCH_CODE).stdout == EXPECTED


def _print_table(report: dict[str, Any], console: Any) -> None:
    from rich.console import Console

    console = console or Console()
    console.print(runs_table(report, "sandbox benchmark"))
    console.print(
        f"pool startup {report['pool']['startup_s']:.2f} s; "
        f"throughput ratio [bold]{report['speedup']:.1f}x[/bold], "
        f"p50 latency ratio {report['p50_ratio']:.1f}x (goal: >= 10x)"
    )
