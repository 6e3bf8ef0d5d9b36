"""Async rollouts: overlap with training, bounded staleness, episodes on disk first, errors."""

import json
import threading

import pytest

from selfplay.core.errors import UserError
from selfplay.loops import validate
from selfplay.running.runner import build, run
from tests.conftest import tiny_config, varied_grade

STEPS = 4


def _async_world(tmp_path, max_staleness: int, steps: int = STEPS):
    data = tiny_config(
        tmp_path,
        train={"steps": steps},
        rollout={"mode": "async", "max_staleness": max_staleness},
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    world = build(validate(data, "test"), run_dir, resume=False)
    world.loop.grade = varied_grade
    return world, run_dir


def _instrument(world, run_dir, steps: int, ahead: int):
    """Record the engine's weights version when each collection starts; make learner step s wait
    until the engine is generating for step s + ahead (so the overlap is certain, not a race)."""
    generating = {s: threading.Event() for s in range(steps)}
    version_at_collect: dict[int, int] = {}
    episodes_on_disk_at_train: dict[int, bool] = {}
    collecting: list[int] = []  # the step the producer thread is collecting, if any
    original_collect, original_step = world.loop.collect, world.learner.step
    original_generate = world.engine.generate

    async def collect(policy, step):
        version_at_collect[step] = policy.version
        collecting.append(step)
        try:
            return await original_collect(policy, step)
        finally:
            collecting.remove(step)

    def generate(requests):  # runs under the policy's engine lock: no sync can interleave
        if collecting:
            generating[collecting[0]].set()
        return original_generate(requests)

    def learner_step(samples):
        step = world.learner.version
        episodes_on_disk_at_train[step] = (run_dir / "episodes" / f"step-{step:06d}.jsonl").exists()
        if step + ahead < steps:
            assert generating[step + ahead].wait(timeout=60), "producer did not run ahead"
        return original_step(samples)

    world.loop.collect, world.learner.step = collect, learner_step
    world.engine.generate = generate
    return version_at_collect, episodes_on_disk_at_train


@pytest.mark.parametrize("max_staleness", [1, 2])
def test_async_overlaps_and_bounds_staleness(tmp_path, tiny_model_path, max_staleness):
    world, run_dir = _async_world(tmp_path, max_staleness)
    versions, on_disk = _instrument(world, run_dir, STEPS, ahead=max_staleness)
    rows = run(world, 0)

    # Collection of step s ran while step s - max_staleness trained, never earlier.
    assert versions == {s: max(0, s - max_staleness) for s in range(STEPS)}
    assert all(on_disk[s] for s in range(STEPS))  # episodes written before training
    steps = [r for r in rows if not r.get("final")]
    assert [r["step"] for r in steps] == list(range(STEPS))
    assert [r["staleness/max"] for r in steps] == [
        float(min(s, max_staleness)) for s in range(STEPS)
    ]
    for s in range(STEPS):  # every turn is stamped with the version that sampled it
        lines = (run_dir / "episodes" / f"step-{s:06d}.jsonl").read_text().splitlines()
        stamped = {t["policy_version"] for line in lines for t in json.loads(line)["turns"]}
        assert stamped == {max(0, s - max_staleness)}
    assert rows[0]["eval/accuracy"] == 0.0 and rows[-1].get("final")
    assert "async/learner_wait_seconds" in steps[-1]
    assert world.learner.version == STEPS and world.policy.version == STEPS


def test_async_evaluation_waits_for_current_weights(tmp_path, tiny_model_path):
    world, run_dir = _async_world(tmp_path, max_staleness=2)
    world.config.rlvr.eval_every = 2
    seen: dict[int, int] = {}
    original = world.loop.evaluate

    async def evaluate(policy, step):
        seen[step] = policy.version
        return await original(policy, step)

    world.loop.evaluate = evaluate
    run(world, 0)
    assert seen == {0: 0, 2: 2, STEPS: STEPS}  # "eval at step s" means after s updates


def test_async_producer_error_reaches_the_learner(tmp_path, tiny_model_path):
    world, _ = _async_world(tmp_path, max_staleness=1)
    original = world.loop.collect

    async def failing(policy, step):
        if step == 2:
            raise RuntimeError("game crashed at step 2")
        return await original(policy, step)

    world.loop.collect = failing
    with pytest.raises(RuntimeError, match="game crashed at step 2"):
        run(world, 0)
    rows = [json.loads(line) for line in (world.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]  # the steps before the failure were kept


def test_async_config_needs_importance_correction(tmp_path):
    data = tiny_config(tmp_path, rollout={"mode": "async"}, train={"tis_cap": None})
    with pytest.raises(UserError, match="tis_cap"):
        validate(data, "exp.yaml")
    data = tiny_config(tmp_path, rollout={"mode": "async", "max_staleness": 5})
    with pytest.raises(UserError, match="max_staleness"):
        validate(data, "exp.yaml")


def test_async_spiral_with_opponent_pool(tmp_path, tiny_model_path):
    """SPIRAL against a pool of snapshots: snapshots are installed in the engine (under the
    engine lock) while the producer plays the next step's games against the pool."""
    from tests.test_spiral import spiral_config

    config = spiral_config(
        tmp_path,
        opponent={"kind": "pool", "pool_size": 2, "refresh_every": 1},
        eval_games=2,
    )
    config.train.steps = STEPS
    config.rollout.mode = "async"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    world = build(config, run_dir, resume=False)
    rows = run(world, 0)
    steps = [r for r in rows if not r.get("final")]
    assert [r["step"] for r in steps] == list(range(STEPS))
    assert max(r["staleness/max"] for r in steps) <= 1
    assert world.loop.pool.ids == ["pool-3", "pool-4"]  # FIFO of size 2 after 4 snapshots
    assert set(world.loop.pool.ids) <= set(world.engine.adapters)


def test_bench_step_times_both_modes(tmp_path, tiny_model_path, capsys):
    import yaml

    from selfplay.bench.step import bench_step

    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_config(tmp_path)))
    result = bench_step(str(path), steps=3, staleness=1)
    out = capsys.readouterr().out
    assert "async vs sync wall time per step" in out and "sync %" in out
    assert result["ratio"] > 0 and 0 < result["sync_share_sync"] < 1
    assert result["staleness_async"] > 0  # the async side really trained on older samples
    with pytest.raises(UserError, match="--steps >= 2"):
        bench_step(str(path), steps=1)


def test_cores_are_split_only_for_an_in_process_cpu_engine(tmp_path, tiny_model_path):
    from selfplay.running.rollouts import AsyncRollouts

    world, _ = _async_world(tmp_path, max_staleness=1)
    assert world.engine.shares_cpu_with_learner

    class Elsewhere:  # a Ray pool or vLLM: they set their own threads
        shares_cpu_with_learner = False
        decode_threads = None

    def rollouts_of(engine, **threads):
        return AsyncRollouts(world.loop, world.policy, range(0), 1, lambda step: False,
                             engine=engine, **threads)

    with rollouts_of(world.engine) as rollouts:
        # the hf engine asks for its threads at every decode step: all cores while the learner
        # is idle, the engine's share while it trains
        assert world.engine.decode_threads() == rollouts.engine_threads + rollouts.learner_threads
        with rollouts.learning():
            assert world.engine.decode_threads() == rollouts.engine_threads
    assert world.engine.decode_threads is None
    assert not rollouts_of(Elsewhere()).split_cores
    assert rollouts_of(Elsewhere(), engine_threads=1).split_cores  # asked for explicitly
