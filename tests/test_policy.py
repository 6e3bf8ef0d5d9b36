"""BatchingPolicy (engines/policy.py): requests of live episodes share engine batches, finished
episodes shrink them, a wait elsewhere (a sandbox call) never keeps the engine idle, and an
engine failure reaches every waiting episode."""

import asyncio

from selfplay.engines.policy import BatchingPolicy
from selfplay.types import Completion, Request


class CountingEngine:
    """Echo engine that records every batch it receives."""

    def __init__(self):
        self.batches: list[int] = []

    def generate(self, requests):
        self.batches.append(len(requests))
        return [
            Completion(
                text=f"{r.role}",
                prompt_ids=[1],
                token_ids=[2],
                logprobs=[-0.1],
                finish_reason="stop",
            )
            for r in requests
        ]


def _request(i):
    return Request(role=f"r{i}", prompt_ids=[1, 2])


async def _episode(policy, i, turns):
    for _ in range(turns):
        completion = await policy(_request(i))
        assert completion.text == f"r{i}"
    return i


def test_one_engine_call_per_wave():
    engine = CountingEngine()
    policy = BatchingPolicy(engine)
    results = asyncio.run(policy.gather(_episode(policy, i, turns=3) for i in range(10)))
    assert results == list(range(10))
    assert engine.batches == [10, 10, 10]


def test_finished_episodes_shrink_the_wave():
    engine = CountingEngine()
    policy = BatchingPolicy(engine)
    asyncio.run(policy.gather(_episode(policy, i, turns=i + 1) for i in range(4)))
    assert engine.batches == [4, 3, 2, 1]


def test_waiting_elsewhere_does_not_block_the_engine():
    engine = CountingEngine()
    policy = BatchingPolicy(engine)

    async def tool_user():
        async with policy.elsewhere():
            await asyncio.sleep(0.05)  # a slow tool call
        return await policy(_request(0))

    async def talker():
        for _ in range(2):
            await policy(_request(1))
        return "done"

    asyncio.run(policy.gather([tool_user(), talker()]))
    # the talker's first request was flushed while the tool user was busy elsewhere
    assert engine.batches[0] == 1 and sum(engine.batches) == 3


def test_engine_failure_reaches_the_episodes():
    class Broken:
        def generate(self, requests):
            raise RuntimeError("engine died")

    policy = BatchingPolicy(Broken())
    try:
        asyncio.run(policy.gather([_episode(policy, 0, 1)]))
    except RuntimeError as exc:
        assert "engine died" in str(exc)
    else:
        raise AssertionError("the failure was swallowed")


class OrderEngine(CountingEngine):
    """Records the roles of each batch, in row order."""

    def __init__(self):
        super().__init__()
        self.rows: list[list[str]] = []

    def generate(self, requests):
        self.rows.append([r.role for r in requests])
        return super().generate(requests)


def test_ordered_requests_take_their_place_by_key_whatever_order_they_arrive_in():
    """``policy.ordered(request, key)`` queues a request among the pending ones in key order:
    requests arriving in an order the caller does not control (the verifiers bridge's HTTP
    calls) make the same batch every run."""

    async def send(policy, name, key, delay):
        for _ in range(delay):
            await asyncio.sleep(0)
        return await policy.ordered(_request(name), key)

    for arrival in ([("c", "k3"), ("a", "k1"), ("b", "k2")],
                    [("b", "k2"), ("c", "k3"), ("a", "k1")]):
        engine = OrderEngine()
        policy = BatchingPolicy(engine)
        asyncio.run(policy.gather(send(policy, name, key, delay)
                                  for delay, (name, key) in enumerate(arrival)))
        assert engine.rows == [["ra", "rb", "rc"]], arrival
