"""``selfplay bench step EXPERIMENT``: where the time of a training step goes.

Two comparisons, each running the same experiment (default ``rlvr-sanity``) for the same number
of steps from the same seed, one after the other in this process, progress bars off, one
checkpoint at the end. Step 0 is a warm-up (first forward passes, the async producer's start),
so the figures cover steps 1..N-1.

``--compare prefix`` (default): synchronous steps with the hf engine's shared-prefix reuse off,
then on (``engine.prefix_caching``). Per step: rollout seconds split into prefill, decode, tool
calls (the sandbox, wall time: it overlaps generation) and the rest (games, parsing, rewards),
then training, weight sync and I/O (episodes, metrics, checkpoints); evaluation as seconds per
evaluation (the final one, after the last step); prompt tokens and the tokens the prefill really
computed. Goal: SPIRAL's rollout ≥ 1.5× faster with reuse.

``--compare async``: synchronous against asynchronous steps, evaluation off:

- wall time per step, sync and async, and their ratio (goal ≥ 1.3× with staleness 1);
- weight-sync seconds (loading the new weights into the engine) as a share of step time (goal
  ≤ 5%), and apart from it how long the sync waited for a batch in flight to finish (async);
- where the time went: rollout, training, and (async) how long the learner waited for rollouts.
"""

from __future__ import annotations

import contextlib
import inspect
import statistics
import tempfile
import threading
import time
from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from selfplay.config_files import find_experiment, read_yaml
from selfplay.core.errors import UserError
from selfplay.loops import load_experiment

QUIET = ["logging.wandb=disabled", "logging.progress=false"]


def _overrides(experiment: str, steps: int, mode: str, staleness: int, extra: list[str]) -> list:
    loop = read_yaml(find_experiment(experiment)).get("loop")
    no_eval = (
        ["rlvr.eval_size=0"]
        if loop == "rlvr"
        else ["spiral.eval_games=0", "spiral.eval_reasoning=[]", "spiral.eval_ood_games=[]"]
    )
    return [
        f"train.steps={steps}",
        f"checkpoint.every={steps}",
        f"rollout.mode={mode}",
        f"rollout.max_staleness={staleness}",
        *QUIET,
        *no_eval,
        *extra,
    ]


def step_rows(config, prepare: Callable | None = None) -> list[dict]:
    """Run ``config`` in a temporary folder and return its steps' metric rows (not the final
    one). ``prepare(world)``, if given, may wrap the run's objects and returns a context manager
    the run goes inside."""
    from selfplay.running.runner import build, new_run_dir, run

    with tempfile.TemporaryDirectory(prefix="bench-step-") as tmp:
        config.run_dir = tmp
        world = build(config, new_run_dir(config), resume=False)
        with prepare(world) if prepare else contextlib.nullcontext():
            return [r for r in run(world, 0) if not r.get("final")]


def run_mode(experiment: str, steps: int, mode: str, staleness: int, extra: list[str]) -> dict:
    config = load_experiment(experiment, _overrides(experiment, steps, mode, staleness, extra))
    rows = step_rows(config)[1:]  # step 0: warm-up
    return {
        "mode": mode,
        "step_s": statistics.mean(r["time/step_seconds"] for r in rows),
        "rollout_s": statistics.mean(r["rollout/seconds"] for r in rows),
        "train_s": statistics.mean(r.get("train/seconds", 0.0) for r in rows),
        "sync_s": statistics.mean(r["sync/seconds"] for r in rows),
        "sync_wait_s": statistics.mean(r["sync/wait_seconds"] for r in rows),
        "wait_s": statistics.mean(r.get("async/learner_wait_seconds", 0.0) for r in rows),
        "staleness": statistics.mean(r["staleness/mean"] for r in rows),
    }


def bench_step(
    experiment: str = "rlvr-sanity",
    steps: int = 6,
    staleness: int = 1,
    overrides: list[str] | None = None,
) -> dict[str, float]:
    if steps < 2:
        raise UserError(f"bench step needs --steps >= 2 (step 0 is a warm-up), got {steps}")
    extra = list(overrides or [])
    results = [run_mode(experiment, steps, mode, staleness, extra) for mode in ("sync", "async")]
    sync, async_ = results
    table = Table(
        caption="seconds per step, mean; sync % = weight sync / step",
        title=f"training steps 1..{steps - 1} of {experiment}, staleness {staleness}",
    )
    for column in (
        "mode",
        "s/step",
        "rollout",
        "train",
        "learner idle",
        "sync",
        "sync wait",
        "sync %",
        "stale",
    ):
        table.add_column(column, justify="right")
    for r in results:
        table.add_row(
            r["mode"],
            f"{r['step_s']:.2f}",
            f"{r['rollout_s']:.2f}",
            f"{r['train_s']:.2f}",
            f"{r['wait_s']:.2f}" if r["mode"] == "async" else "-",
            f"{r['sync_s']:.3f}",
            f"{r['sync_wait_s']:.2f}",
            f"{100 * r['sync_s'] / r['step_s']:.1f}%",
            f"{r['staleness']:.2f}",
        )
    console = Console(width=max(100, Console().width))
    console.print(table)
    ratio = sync["step_s"] / async_["step_s"]
    console.print(f"async vs sync wall time per step: [bold]{ratio:.2f}x[/] (goal >= 1.3x)")
    # Where generation and training share the same CPU cores, overlapping them can at best
    # balance their work over the cores: the async run's rollout and train times are close to
    # one-thread times, so their mean bounds its step time from below.
    balanced = (async_["rollout_s"] + async_["train_s"]) / 2
    console.print(
        f"ceiling on shared cores (sync s/step / mean of async rollout and train): "
        f"{sync['step_s'] / balanced:.2f}x; on separate devices: "
        f"{sync['step_s'] / max(sync['rollout_s'], sync['train_s']):.2f}x"
    )
    return {
        "ratio": ratio,
        "shared_core_ceiling": sync["step_s"] / balanced,
        "sync_share_sync": sync["sync_s"] / sync["step_s"],
        "sync_share_async": async_["sync_s"] / async_["step_s"],
        "staleness_async": async_["staleness"],
    }


def main() -> None:  # python -m selfplay.bench.step
    bench_step()


if __name__ == "__main__":
    main()


# ---------------------------------------------------------------- prefix reuse off and on
BUCKETS = ("io", "eval", "tool")


class StepClock:
    """Seconds spent in I/O, evaluation and tool calls, and the engine's prefill/decode counters,
    snapshotted at every step's ``logger.log`` so each step gets its own differences."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.totals: dict[str, float] = dict.fromkeys(BUCKETS, 0.0)
        self.evaluations: list[float] = []
        self.snapshots: list[dict[str, float]] = []
        self._lock = threading.Lock()

    def add(self, bucket: str, seconds: float) -> None:
        with self._lock:
            self.totals[bucket] += seconds

    def snapshot(self) -> None:
        self.snapshots.append(dict(self.totals))

    def engine_counted(self, collect: Callable) -> Callable:
        """The engine's counters during rollouts only (the probe check after a weight sync and
        evaluations generate too, outside ``rollout/seconds``)."""

        async def counted(*args, **kwargs):
            before = dict(self.engine.stats)
            try:
                return await collect(*args, **kwargs)
            finally:
                for key, value in self.engine.stats.items():
                    with self._lock:
                        self.totals[key] = self.totals.get(key, 0.0) + value - before.get(key, 0)

        return counted

    def timed(self, bucket: str, function: Callable) -> Callable:
        if inspect.iscoroutinefunction(function):

            async def timed_async(*args, **kwargs):
                start = time.perf_counter()
                try:
                    return await function(*args, **kwargs)
                finally:
                    self.add(bucket, time.perf_counter() - start)
                    if bucket == "eval":
                        self.evaluations.append(time.perf_counter() - start)

            return timed_async

        def timed_sync(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.add(bucket, time.perf_counter() - start)

        return timed_sync


def _instrument(world, clock: StepClock) -> None:
    """Wrap the run's own objects (not their classes): logger writes and checkpoints are I/O,
    ``loop.evaluate`` is evaluation; each step's ``logger.log`` takes a snapshot first."""
    logger = world.logger
    for name in ("write_episodes", "write_tasks", "write_files", "log_sync"):
        setattr(logger, name, clock.timed("io", getattr(logger, name)))
    world.checkpointer.save = clock.timed("io", world.checkpointer.save)
    world.loop.evaluate = clock.timed("eval", world.loop.evaluate)
    world.loop.collect = clock.engine_counted(world.loop.collect)
    log = clock.timed("io", logger.log)

    def log_with_snapshot(step, metrics):
        clock.snapshot()
        return log(step, metrics)

    logger.log = log_with_snapshot


def _tool_calls_timed(clock: StepClock):
    """Time every sandbox call (the pool runs them in worker threads, beside generation)."""
    from unittest import mock

    from sandbox.pool import SandboxPool

    return mock.patch.object(SandboxPool, "run", clock.timed("tool", SandboxPool.run))


def run_prefix_mode(experiment: str, steps: int, reuse: bool, extra: list[str]) -> dict:
    overrides = [
        f"train.steps={steps}",
        f"checkpoint.every={steps}",
        "rollout.mode=sync",
        f"engine.prefix_caching={str(reuse).lower()}",
        *QUIET,
        *extra,
    ]
    config = load_experiment(experiment, overrides)
    if config.engine.backend != "hf":
        raise UserError(f"bench step --compare prefix times the hf engine; {experiment} uses vllm")
    clocks: list[StepClock] = []

    def prepare(world):
        clocks.append(StepClock(world.engine))
        _instrument(world, clocks[0])
        return _tool_calls_timed(clocks[0])

    rows = step_rows(config, prepare)
    return _prefix_figures(reuse, rows, clocks[0])


def _prefix_figures(reuse: bool, rows: list[dict], clock: StepClock) -> dict:
    """Means over steps 1..N-1 of the step metrics and of the clock's per-step differences."""
    snaps = clock.snapshots
    deltas = [
        {key: snaps[i].get(key, 0.0) - snaps[i - 1].get(key, 0.0) for key in snaps[i]}
        for i in range(1, len(snaps))
    ]

    def mean(values) -> float:
        values = list(values)
        return statistics.mean(values) if values else 0.0

    measured = rows[1:]
    figures = {
        "reuse": reuse,
        "step_s": mean(r["time/step_seconds"] for r in measured),
        "rollout_s": mean(r["rollout/seconds"] for r in measured),
        "train_s": mean(r.get("train/seconds", 0.0) for r in measured),
        "sync_s": mean(r["sync/seconds"] for r in measured),
        "eval_s": clock.evaluations[-1] if clock.evaluations else 0.0,
    }
    for key in ("prefill_seconds", "decode_seconds", "prompt_tokens", "prefill_tokens"):
        figures[key] = mean(d.get(key, 0.0) for d in deltas)
    figures["tool_s"] = mean(d["tool"] for d in deltas)
    figures["io_s"] = mean(d["io"] for d in deltas)
    generation = figures["prefill_seconds"] + figures["decode_seconds"]
    figures["other_s"] = figures["rollout_s"] - generation
    return figures


def bench_prefix(
    experiment: str = "spiral-kuhn-cpu", steps: int = 3, overrides: list[str] | None = None
) -> dict[str, float]:
    if steps < 2:
        raise UserError(f"bench step needs --steps >= 2 (step 0 is a warm-up), got {steps}")
    extra = list(overrides or [])
    off, on = (run_prefix_mode(experiment, steps, reuse, extra) for reuse in (False, True))
    table = Table(
        title=f"{experiment}: seconds per step (mean of steps 1..{steps - 1}), prefix reuse",
        caption="rollout = prefill + decode + other (games, parsing, rewards); tools overlap "
        "generation; eval: seconds per evaluation (the final one)",
    )
    columns = (
        "prefix reuse",
        "s/step",
        "rollout",
        "prefill",
        "decode",
        "other",
        "tools",
        "train",
        "sync",
        "I/O",
        "eval",
        "prompt tok",
        "prefilled tok",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for r in (off, on):
        table.add_row(
            "on" if r["reuse"] else "off",
            *(
                f"{r[k]:.2f}"
                for k in (
                    "step_s",
                    "rollout_s",
                    "prefill_seconds",
                    "decode_seconds",
                    "other_s",
                    "tool_s",
                    "train_s",
                    "sync_s",
                    "io_s",
                    "eval_s",
                )
            ),
            f"{r['prompt_tokens']:.0f}",
            f"{r['prefill_tokens']:.0f}",
        )
    console = Console(width=max(140, Console().width))
    console.print(table)
    ratios = {
        "rollout": off["rollout_s"] / on["rollout_s"],
        "prefill": off["prefill_seconds"] / max(on["prefill_seconds"], 1e-9),
        "step": off["step_s"] / on["step_s"],
    }
    console.print(
        f"prefix reuse on vs off: rollout [bold]{ratios['rollout']:.2f}x[/] faster, prefill "
        f"{ratios['prefill']:.2f}x, step {ratios['step']:.2f}x (goal for spiral-kuhn-cpu: "
        "rollout >= 1.5x)"
    )
    return ratios
