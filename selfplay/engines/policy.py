"""The policy a loop sees: ``await policy(request)``, batched across live episodes.

Episodes are asyncio coroutines. Game and task code reads sequentially; execution is batched.
Pending requests are sent to the engine as one batch as soon as every live episode is waiting —
on the engine, or on something else it announced with ``policy.elsewhere()`` (a sandbox call,
say), so a slow tool never keeps the engine idle and a fast engine call never waits for a tool.

A loop holds this object and nothing of the machinery behind it: the engine is private to the
policy, and weights change only through the runner (``updating()``). ``tokenizer`` is the
policy's vocabulary, for what counts or cuts text in tokens (tool output, long documents).
"""

from __future__ import annotations

import asyncio
import bisect
import threading
from collections.abc import Awaitable, Iterable
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import TypeVar

from selfplay.engines.base import Engine, encode_request
from selfplay.types import Completion, Request

T = TypeVar("T")


@dataclass
class Likelihoods:
    """What ``likelihoods`` returns: the prompt as the engine saw it (token ids), each
    continuation's per-token log-probs, and the weights version that scored them."""

    prompt_ids: list[int]
    logprobs: list[list[float]]
    policy_version: int


class BatchingPolicy:
    """``await policy(request)`` → Completion; all concurrently pending requests share a batch."""

    def __init__(self, engine: Engine, version: int = 0) -> None:
        self._engine = engine
        self.version = version  # learner step of the weights the engine serves
        # Held while the engine generates and while its weights change (async rollouts run the
        # two on different threads), so every completion is stamped with the version it used.
        self.lock = threading.RLock()
        self.engine_calls = 0
        self.requests_served = 0
        self.tokens_generated = 0
        self._pending: list[tuple[Request, asyncio.Future]] = []
        # likelihood requests (``likelihoods``): scored in the same flush as generation
        self._scoring: list[tuple[Request, list[list[int]], asyncio.Future]] = []
        self.tokens_scored = 0  # continuation tokens scored (no generation: no token budget)
        self._order: dict[int, str] = {}  # id(future) → its key, for ``ordered`` requests
        self._elsewhere = 0
        self._wake: asyncio.Event | None = None

    @property
    def tokenizer(self):
        """The tokenizer of the policy's model."""
        return self._engine.tokenizer

    async def __call__(self, request: Request) -> Completion:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        self._poke()
        return await future

    async def likelihoods(self, request: Request, continuations: list[list[int]]) -> Likelihoods:
        """The log-probs of each continuation's tokens right after ``request``'s prompt
        (temperature 1, no nucleus), batched with every other pending call: a scored move's
        candidate replies (``spiral.action: scored``)."""
        future = asyncio.get_running_loop().create_future()
        self._scoring.append((request, continuations, future))
        self._poke()
        return await future
    async def ordered(self, request: Request, key: str) -> Completion:
        """``await policy(request)``, queued among the pending requests in ``key`` order (one
        sent without a key counts as the key ``""``; equal keys keep their arrival order).

        The engine samples a batch's rows from one random stream in row order, so a batch's
        order is part of what a seeded run repeats. Requests that reach a loop in an order it
        does not control (the verifiers bridge: calls arrive through an HTTP server, in
        whatever order its sockets deliver them) keep the same batch order every run when
        each is sent with a key naming what it is (episode, agent run, call)."""
        future = asyncio.get_running_loop().create_future()
        keys = [self._order.get(id(queued), "") for _, queued in self._pending]
        self._order[id(future)] = key
        self._pending.insert(bisect.bisect_right(keys, key), (request, future))
        self._poke()
        try:
            return await future
        finally:
            self._order.pop(id(future), None)

    @asynccontextmanager
    async def elsewhere(self):
        """Mark the calling episode as waiting on something other than the engine."""
        self._elsewhere += 1
        self._poke()
        try:
            yield
        finally:
            self._elsewhere -= 1

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def gather(self, coroutines: Iterable[Awaitable[T]]) -> list[T]:
        """Run episodes to completion, flushing batches whenever all live ones are waiting."""
        tasks = [asyncio.ensure_future(c) for c in coroutines]
        self._wake = asyncio.Event()
        try:
            while True:
                await _settle()
                live = sum(not t.done() for t in tasks)
                if live == 0:
                    break
                waiting = len(self._pending) + len(self._scoring)
                if waiting and waiting + self._elsewhere >= live:
                    await self._flush()
                    continue
                self._wake.clear()
                waiters = [t for t in tasks if not t.done()]
                wake = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait([*waiters, wake], return_when=asyncio.FIRST_COMPLETED)
                wake.cancel()
            return [t.result() for t in tasks]
        finally:
            for t in tasks:
                t.cancel()
            self._wake = None

    async def _flush(self) -> None:
        if self._scoring:
            await self._flush_scoring()
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        self.engine_calls += 1
        requests = [request for request, _ in batch]
        try:
            completions = await asyncio.to_thread(self._generate, requests)
        except Exception as exc:  # hand the failure to every waiting episode
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        self.requests_served += len(batch)
        for (_, future), completion in zip(batch, completions, strict=True):
            self.tokens_generated += len(completion.token_ids)
            if not future.done():
                future.set_result(completion)

    async def _flush_scoring(self) -> None:
        batch, self._scoring = self._scoring, []
        self.engine_calls += 1
        try:
            results = await asyncio.to_thread(self._score_all, batch)
        except Exception as exc:
            for *_, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (*_, future), result in zip(batch, results, strict=True):
            self.tokens_scored += sum(len(c) for c in result.logprobs)
            if not future.done():
                future.set_result(result)

    def _score_all(
        self, batch: list[tuple[Request, list[list[int]], asyncio.Future]]
    ) -> list[Likelihoods]:
        """One engine call for every candidate of every pending request."""
        requests = [request for request, continuations, _ in batch for _ in continuations]
        flat = [list(c) for _, continuations, _ in batch for c in continuations]
        with self.lock:
            logprobs = self._engine.score(requests, flat) if flat else []
            version = self.version
        results, start = [], 0
        for request, continuations, _ in batch:
            end = start + len(continuations)
            results.append(Likelihoods(encode_request(self.tokenizer, request),
                                       logprobs[start:end], version))
            start = end
        return results

    def _generate(self, requests: list[Request]) -> list[Completion]:
        with self.lock:
            completions = self._engine.generate(requests)
            for request, completion in zip(requests, completions, strict=True):
                completion.policy_version = self.version
                completion.prefill = request.prefill  # so ``completion.reply`` is the whole reply
            return completions

    def score(self, requests: list[Request], continuations: list[list[int]]) -> list[list[float]]:
        """The engine's log-probs of given replies (``Engine.score``), between batches."""
        with self.lock:
            return self._engine.score(requests, continuations)

    @contextmanager
    def updating(self):
        """Hold the engine still (no batch in flight) while its weights or adapters change."""
        with self.lock:
            yield


async def _settle(rounds: int = 3) -> None:
    """Yield a few times so every runnable coroutine reaches its next await."""
    for _ in range(rounds):
        await asyncio.sleep(0)
