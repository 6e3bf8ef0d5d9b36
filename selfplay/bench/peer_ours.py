"""Our side of ``selfplay bench peer``: the runner's synchronous steps of the rlvr experiment, in
the process ``python -m selfplay.bench.peer --side ours`` starts.
"""

from __future__ import annotations

import tempfile

from selfplay.bench.peer_setup import peak_rss_kib, progress, rss_kib, torch_threads


def run_ours(config, steps: int) -> dict:
    """Our synchronous steps (``runner.train_step``: collect, learn, weight sync), as ``run``
    takes them, without the checkpoint and report ``run`` writes after the last step."""
    from selfplay.running.runner import build, new_run_dir, train_step

    rows, rewards = [], []
    with tempfile.TemporaryDirectory(prefix="bench-peer-ours-") as tmp:
        config.run_dir = tmp
        world = build(config, new_run_dir(config), resume=False)
        ready = rss_kib()
        try:
            for step in range(steps):
                threads = torch_threads()
                m = train_step(world, step)
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
                progress("ours", step + 1, steps, rows[-1])
            peak = peak_rss_kib()
        finally:
            world.logger.close()
            world.loop.close()
            world.learner.close()
    return {"steps": rows, "rewards": rewards, "peak_kib": peak, "ready_kib": ready}
