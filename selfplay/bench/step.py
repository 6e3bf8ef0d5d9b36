"""``selfplay bench step``: wall time of training steps, synchronous against asynchronous.

Both sides run the same experiment (default ``rlvr-sanity`` on the embedded model) for the same
number of steps from the same seed, one after the other in this process, with evaluation and
progress bars off and one checkpoint at the end. Step 0 is a warm-up (an async run cannot overlap
anything before its first rollout), so the figures cover steps 1..N-1:

- wall time per step, sync and async, and their ratio (goal ≥ 1.3× with staleness 1);
- weight-sync seconds (loading the new weights into the engine) as a share of step time (goal
  ≤ 5%), and apart from it how long the sync waited for a batch in flight to finish (async);
- where the time went: rollout, training, and (async) how long the learner waited for rollouts.
"""

from __future__ import annotations

import statistics
import tempfile

from rich.console import Console
from rich.table import Table

from selfplay.config import find_experiment, read_yaml
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


def run_mode(experiment: str, steps: int, mode: str, staleness: int, extra: list[str]) -> dict:
    from selfplay.running.runner import build, new_run_dir, run

    config = load_experiment(experiment, _overrides(experiment, steps, mode, staleness, extra))
    with tempfile.TemporaryDirectory(prefix="bench-step-") as tmp:
        config.run_dir = tmp
        world = build(config, new_run_dir(config), resume=False)
        rows = [r for r in run(world, 0) if not r.get("final")][1:]  # step 0: warm-up
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
