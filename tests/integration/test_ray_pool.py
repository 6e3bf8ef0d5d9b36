"""The Ray engine pool on a small local Ray cluster: two replicas of the tiny model with LoRA.

One cluster and one pool for the whole module (starting Ray and two engine actors costs ~20 s on
two cores); every test loads the weights it compares against, so order does not matter, and
counts restarts relative to the pool's count when it began.
"""

from __future__ import annotations

import threading

import pytest

ray = pytest.importorskip("ray")

import torch  # noqa: E402
from peft import get_peft_model_state_dict  # noqa: E402

from selfplay.config import ExperimentConfig  # noqa: E402
from selfplay.engines.base import Engine  # noqa: E402
from selfplay.engines.hf import HFEngine  # noqa: E402
from selfplay.engines.policy import BatchingPolicy  # noqa: E402
from selfplay.engines.ray_pool import (  # noqa: E402
    RayEnginePool,
    build_ray_engine,
    connect,
    split_evenly,
)
from selfplay.loops import make_loop, validate  # noqa: E402
from selfplay.running.checkpoint import Checkpointer  # noqa: E402
from selfplay.running.rollouts import SyncRollouts  # noqa: E402
from selfplay.running.runner import (  # noqa: E402
    World,
    eval_due,
    lora_spec,
    run,
    step,
    weight_sync,
)
from selfplay.running.snapshots import PolicySnapshots  # noqa: E402
from selfplay.running.tracking import RunLogger  # noqa: E402
from selfplay.training.learner import LocalLearner  # noqa: E402
from selfplay.training.make import learner_settings  # noqa: E402
from selfplay.types import Request, SamplingParams  # noqa: E402
from tests.conftest import tiny_config  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.heavy]  # heavy: CI's `make test-heavy`

QUESTIONS = [f"What is {i} + {2 * i}?" + " Think." * (i % 3) for i in range(8)]


def ask(text: str, adapter: str = "shared", max_new_tokens: int = 12) -> Request:
    sampling = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    return Request(
        role="solver",
        messages=[{"role": "user", "content": text}],
        adapter=adapter,
        sampling=sampling,
    )


def token_ids(completions) -> list[list[int]]:
    return [c.token_ids for c in completions]


def random_lora(engine: HFEngine, adapter: str, seed: int) -> dict[str, torch.Tensor]:
    """The adapter's LoRA tensors (peft names) with lora_B random, so it changes outputs."""
    generator = torch.Generator().manual_seed(seed)
    state = get_peft_model_state_dict(engine.model, adapter_name=adapter)
    return {
        name: torch.randn(t.shape, generator=generator) * 0.5 if "lora_B" in name else t.clone()
        for name, t in state.items()
    }


def served(pool: RayEnginePool) -> list[int]:
    return ray.get([actor.served.remote() for actor in pool.actors])


def kill_and_wait(actor) -> None:
    """Kill an actor and return once calls to it fail (ray.kill itself does not wait)."""
    ray.kill(actor)
    while True:
        try:
            ray.get(actor.ready.remote(), timeout=30)
        except ray.exceptions.RayActorError:
            return


class KillOnFirstBatch:
    """The pool as the policy sees it, killing one replica as the step's first batch goes out:
    the kill lands inside the step however fast the tiny step is (a timer could miss it)."""

    def __init__(self, pool: RayEnginePool, victim, at_call: int = 1) -> None:
        self.pool, self.victim, self.calls_left = pool, victim, at_call

    def generate(self, requests: list[Request]):
        self.calls_left -= 1
        if self.victim is not None and self.calls_left == 0:
            kill_and_wait(self.victim)
            self.victim = None
        return self.pool.generate(requests)

    def __getattr__(self, name: str):
        return getattr(self.pool, name)


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> ExperimentConfig:
    return validate(tiny_config(tmp_path_factory.mktemp("ray")), "tiny_config")


@pytest.fixture(scope="module")
def pool(config, tiny_model_path):
    connect(None, num_cpus=2)  # the brief's budget: two logical CPUs, one per replica
    pool = build_ray_engine(config, tiny_model_path, replicas=2)
    yield pool
    pool.close()
    ray.shutdown()


@pytest.fixture(scope="module")
def reference(config, tiny_model_path) -> HFEngine:
    """A local engine built like each replica, to compare greedy outputs with."""
    return HFEngine(tiny_model_path, lora=lora_spec(config), adapters=config.adapters())


def load_both(pool: RayEnginePool, reference: HFEngine, adapter: str, weights) -> None:
    pool.load_weights(adapter, weights)
    reference.load_weights(adapter, weights)


def test_split_evenly_gives_contiguous_balanced_shards():
    assert split_evenly(8, 2) == [(0, 4), (4, 8)]
    assert split_evenly(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert split_evenly(1, 4) == [(0, 1)]  # never an empty shard


def test_two_replicas_serve_one_batch_like_a_local_engine(pool, reference):
    assert isinstance(pool, Engine) and pool.live_replicas == 2
    before = served(pool)
    requests = [ask(q) for q in QUESTIONS]
    completions = pool.generate(requests)
    expected = reference.generate(requests)
    assert token_ids(completions) == token_ids(expected)
    assert [c.prompt_ids for c in completions] == [c.prompt_ids for c in expected]
    for got, want in zip(completions, expected, strict=True):
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)
    after = served(pool)
    assert [a - b for a, b in zip(after, before, strict=True)] == [4, 4]  # contiguous halves


def test_weight_sync_changes_outputs_on_every_replica(pool, reference):
    # The same prompt twice: one copy per replica, so both replicas' outputs are checked.
    requests = [ask(QUESTIONS[1])] * 2
    old = token_ids(pool.generate(requests))
    load_both(pool, reference, "shared", random_lora(reference, "shared", seed=1))
    new = token_ids(pool.generate(requests))
    assert new == token_ids(reference.generate(requests))
    assert new[0] != old[0] and new[1] != old[1]
    # A new adapter reaches every replica too, and mixes with the old one in one batch.
    pool.add_adapter("extra")
    reference.add_adapter("extra")
    load_both(pool, reference, "extra", random_lora(reference, "extra", seed=2))
    mixed = [
        ask(QUESTIONS[1], "extra"),
        ask(QUESTIONS[1]),
        ask(QUESTIONS[2]),
        ask(QUESTIONS[2], "extra"),
    ]
    assert token_ids(pool.generate(mixed)) == token_ids(reference.generate(mixed))
    assert pool.adapters == ["shared", "extra"]


def test_replica_killed_during_generate_is_restarted_and_shard_rerun(pool, reference):
    load_both(pool, reference, "shared", random_lora(reference, "shared", seed=3))
    restarts = pool.restarts
    big = [ask(q, max_new_tokens=16) for q in QUESTIONS] * 6  # ~1 s of work per replica
    expected = token_ids(reference.generate(big))
    killer = threading.Timer(0.3, kill_and_wait, args=(pool.actors[0],))
    killer.start()
    first = pool.generate(big)
    killer.join()
    # If the kill landed only after the call, this next call is the one that meets it.
    second = pool.generate(big)
    assert token_ids(first) == expected and token_ids(second) == expected
    assert pool.restarts == restarts + 1
    # The new replica caught up (adapters, latest weights) before serving: both agree again.
    pool.wait_ready(timeout_s=120)
    requests = [ask(QUESTIONS[4]), ask(QUESTIONS[4], "extra")] * 2
    assert token_ids(pool.generate(requests)) == token_ids(reference.generate(requests))
    assert isinstance(pool, Engine) and pool.live_replicas == 2


def pool_world(config, run_dir, pool, model_path, engine) -> World:
    """runner.build's world with the pool as its engine (``engine``: the pool as the policy
    sees it)."""
    learner = LocalLearner(model_path, learner_settings(config), config.adapters(),
                           config.engine.device)
    policy = BatchingPolicy(engine)
    return World(
        config, run_dir, pool, learner, make_loop(config), policy,
        PolicySnapshots(learner, pool, policy), RunLogger(run_dir, config, resume=False),
        Checkpointer(run_dir, config.checkpoint.keep), weight_sync(config, run_dir, pool, learner),
    )


def test_two_replicas_serve_one_experiment_step(pool, reference, config, tiny_model_path, tmp_path):
    """runner.build's world with the pool as its engine; a replica dies during the rollout."""
    adapters = config.adapters()
    run_dir = tmp_path / "run"
    world = pool_world(config, run_dir, pool, tiny_model_path,
                       KillOnFirstBatch(pool, victim=pool.actors[1]))
    for adapter in adapters:  # start from the learner's weights, as a fresh run does
        pool.load_weights(adapter, world.learner.adapter_weights(adapter))
    restarts = pool.restarts
    try:
        metrics = step(world, 0, SyncRollouts(world.loop, world.policy,
                                              lambda n: eval_due(world.loop, n)))
    finally:
        world.logger.close()
        world.loop.close()
    assert metrics["time/step_seconds"] > 0 and any(k.startswith("reward/") for k in metrics)
    episodes = run_dir / "episodes" / "step-000000.jsonl"
    assert episodes.exists() and episodes.read_text().strip()
    assert pool.restarts == restarts + 1
    # Every replica, the restarted one included, now serves the learner's updated weights.
    pool.wait_ready(timeout_s=120)
    for adapter in adapters:
        reference.load_weights(adapter, world.learner.adapter_weights(adapter))
    requests = [ask(QUESTIONS[5])] * 2
    assert token_ids(pool.generate(requests)) == token_ids(reference.generate(requests))


def test_async_run_survives_a_replica_death(pool, tiny_model_path, tmp_path):
    """Async rollouts on the pool: a replica dies while later steps are being collected (the
    third engine call: eval, step 0, then step 1 overlapping step 0's training); the run
    completes every step and writes every step's episodes."""
    steps = 3
    config = validate(
        tiny_config(tmp_path, train={"steps": steps}, rollout={"mode": "async"}), "async"
    )
    run_dir = tmp_path / "run"
    world = pool_world(config, run_dir, pool, tiny_model_path,
                       KillOnFirstBatch(pool, victim=pool.actors[0], at_call=3))
    for adapter in config.adapters():
        pool.load_weights(adapter, world.learner.adapter_weights(adapter))
    restarts = pool.restarts
    rows = run(world, 0)
    assert [r["step"] for r in rows if not r.get("final")] == list(range(steps))
    assert pool.restarts == restarts + 1
    for number in range(steps):
        assert (run_dir / "episodes" / f"step-{number:06d}.jsonl").read_text().strip()
    assert max(r["staleness/max"] for r in rows if not r.get("final")) <= 1
