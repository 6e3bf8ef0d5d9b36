"""``selfplay bench threads``: OpenMP's wait policy on a quiet and on a busy machine.

The same matmul work (the shapes of SmolLM2-135M's decoder layers, 256 rows, as in a training
micro-batch) runs in a fresh process per measurement, with ``OMP_WAIT_POLICY`` ACTIVE or
PASSIVE and torch threads = the cores this process may use, first alone, then beside another
process that keeps one core busy (a pure-Python loop, as a second job on a shared machine
would). Measurements are interleaved and repeated; the table shows medians. The thread policy
(docs/speed.md#threads) chose PASSIVE from this benchmark.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

from rich.console import Console
from rich.table import Table

from selfplay.core.machine import available_cores

WORKLOAD = """
import json, sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
x = torch.randn(256, 576)
up, down = torch.randn(1536, 576), torch.randn(576, 1536)
def work(n):
    for _ in range(n):
        torch.nn.functional.linear(torch.nn.functional.linear(x, up), down)
work(20)
start = time.perf_counter()
work(int(sys.argv[2]))
print(json.dumps(time.perf_counter() - start))
"""
SPIN = "while True: pass"


def _measure(policy: str, threads: int, iterations: int) -> float:
    env = os.environ | {"OMP_WAIT_POLICY": policy}
    out = subprocess.run(
        [sys.executable, "-c", WORKLOAD, str(threads), str(iterations)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_threads(repeats: int = 3, iterations: int = 300) -> dict[str, float]:
    threads = available_cores()
    seconds: dict[tuple[str, str], list[float]] = {}
    for _ in range(repeats):
        for load in ("quiet", "busy"):
            spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if load == "busy" else None
            time.sleep(0.2 if spinner else 0)
            try:
                for policy in ("ACTIVE", "PASSIVE"):
                    seconds.setdefault((load, policy), []).append(
                        _measure(policy, threads, iterations)
                    )
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
    medians = {key: statistics.median(values) for key, values in seconds.items()}
    table = Table(
        title=f"{iterations} MLP matmul pairs (256 x 576 -> 1536 -> 576), {threads} torch "
        f"threads, median of {repeats}"
    )
    for column in ("machine", "OMP_WAIT_POLICY", "seconds", "runs"):
        table.add_column(column, justify="right")
    for (load, policy), median in medians.items():
        runs = " ".join(f"{s:.2f}" for s in seconds[(load, policy)])
        table.add_row(
            load + (" (1 core spinning)" if load == "busy" else ""), policy, f"{median:.2f}", runs
        )
    console = Console()
    console.print(table)
    ratios = {
        load: medians[(load, "ACTIVE")] / medians[(load, "PASSIVE")] for load in ("quiet", "busy")
    }
    console.print(
        f"PASSIVE vs ACTIVE: [bold]{ratios['busy']:.2f}x[/] faster on the busy machine, "
        f"{ratios['quiet']:.2f}x on the quiet one (above 1: PASSIVE is faster)"
    )
    return ratios
