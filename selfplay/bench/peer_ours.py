"""Our side of ``selfplay bench peer``: the runner's synchronous steps of the rlvr experiment, in
the process ``python -m selfplay.bench.peer --side ours`` starts.
"""

from __future__ import annotations

import tempfile

from selfplay.bench.peer_setup import peak_rss_kib, progress, rss_kib, torch_threads


def run_ours(config, steps: int) -> dict:
    """Our synchronous steps (``runner.step``: collect, learn, weight sync), as ``run`` takes
    them (an evaluation before the first), without the checkpoints and report ``run`` writes."""
    from selfplay.running.rollouts import SyncRollouts
    from selfplay.running.runner import build, eval_due, new_run_dir, step

    rows, rewards = [], []
    with tempfile.TemporaryDirectory(prefix="bench-peer-ours-") as tmp:
        config.run_dir = tmp
        config.checkpoint.every = config.train.steps = steps + 1  # no checkpoint is due
        world = build(config, new_run_dir(config), resume=False)
        rollouts = SyncRollouts(world.loop, world.policy, lambda n: eval_due(world.loop, n))
        ready = rss_kib()
        try:
            for number in range(steps):
                threads = torch_threads()
                m = step(world, number, rollouts)
                rows.append(
                    {
                        "seconds": m["time/step_seconds"],
                        "rollout_seconds": m["rollout/seconds"],
                        "train_seconds": m.get("train/seconds", 0.0),
                        "sync_seconds": m["sync/seconds"],
                        "tokens": round(m["rollout/completion_tokens"] * m["rollout/turns"]),
                        "trained": int(m.get("train/samples", 0)),
                        "threads": threads,
                    }
                )
                rewards.append(m.get("reward/solver", float("nan")))
                progress("ours", number + 1, steps, rows[-1])
            peak = peak_rss_kib()
        finally:
            world.logger.close()
            world.loop.close()
            world.learner.close()
    return {"steps": rows, "rewards": rewards, "peak_kib": peak, "ready_kib": ready}
