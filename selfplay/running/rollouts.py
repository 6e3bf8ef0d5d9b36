"""Where a step's episodes come from (``Rollouts``): collected when the step asks for them
(``SyncRollouts``, ``rollout.mode: sync``), or ahead of it on a producer thread
(``AsyncRollouts``): the episodes of step t+1 are collected while the learner trains step t.

A single producer thread runs the loop's asyncio ``collect`` (and its evaluations); the learner
stays on the main thread. Staleness is bounded by construction: the collection for step s starts
only once the engine serves weights of version ≥ s − max_staleness, and every completion is
stamped with the version that sampled it (``BatchingPolicy`` does it under the engine lock), so
a sample trained at step s (learner version s) is at most ``max_staleness`` versions old.

Importance correction: the learner's proximal policy is its own current weights and the
behaviour policy is the engine's log-probs, so the TIS weight min(π_learner / π_engine, cap)
covers both the engine/trainer mismatch and staleness, as in decoupled PPO (AReaL;
docs/algorithms.md#async-rollouts).
Async configs must keep ``train.tis_cap`` set (the config validator says so).

Evaluations keep their synchronous meaning: the producer waits for the weights of version s
before it evaluates "at step s". A resumed async run goes on without duplicated or missing
episodes, but is not bit-identical to an uninterrupted one (thread timing decides which version
sampled which batch).
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Protocol

import torch

from selfplay.core.errors import UserError
from selfplay.engines.base import Engine
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.base import Loop
from selfplay.types import Collected


@dataclass
class Rollout:
    """One step's collection and what it cost."""

    step: int
    collected: Collected
    seconds: float
    tokens: int
    eval_metrics: dict[str, float]
    eval_rows: dict[str, list[dict]] = field(default_factory=dict)  # Loop.evaluation_rows


class Rollouts(Protocol):
    """What the runner's step asks of its episode source (a context manager around the run)."""

    def take(self, step: int) -> Rollout:
        """This step's collection (evaluated first, when due)."""

    def learning(self) -> AbstractContextManager:
        """Around the learner's update (async: the learner keeps its cores)."""

    def weights_synced(self) -> None:
        """The engine serves the new weights (async: a waiting producer goes on)."""

    def metrics(self) -> dict[str, float]:
        """The source's own figures since the last call."""

    def __enter__(self) -> Rollouts: ...

    def __exit__(self, *exc_info) -> None: ...


class SyncRollouts:
    """Each step's episodes collected when the step asks for them, on this thread."""

    def __init__(self, loop: Loop, policy: BatchingPolicy, evaluate_at: Callable[[int], bool]):
        self.loop, self.policy, self.evaluate_at = loop, policy, evaluate_at

    def take(self, step: int) -> Rollout:
        return collect(self.loop, self.policy, step, self.evaluate_at(step))

    def learning(self) -> AbstractContextManager:
        return nullcontext()

    def weights_synced(self) -> None:
        """Nothing waits for them."""

    def metrics(self) -> dict[str, float]:
        return {}

    def __enter__(self) -> SyncRollouts:
        return self

    def __exit__(self, *exc_info) -> None:
        """Nothing runs in the background."""


def collect(loop: Loop, policy: BatchingPolicy, step: int, evaluate: bool) -> Rollout:
    """Evaluate if asked, then collect one step's episodes (sync steps and the async producer)."""
    eval_metrics = asyncio.run(loop.evaluate(policy, step)) if evaluate else {}
    eval_rows = loop.evaluation_rows() if evaluate else {}
    start, tokens_before = time.perf_counter(), policy.tokens_generated
    collected = asyncio.run(loop.collect(policy, step))
    if not isinstance(collected, Collected):
        raise UserError(
            f"the {loop.name} loop's collect returned {type(collected).__name__}; it must return "
            "selfplay.types.Collected(episodes, metrics, tasks)"
        )
    seconds = time.perf_counter() - start
    return Rollout(step, collected, seconds, policy.tokens_generated - tokens_before, eval_metrics,
                   eval_rows)


class _Stopped(Exception):
    """The consumer went away; the producer ends quietly."""


def split_threads(engine_threads: int | None, learner_threads: int | None) -> tuple[int, int]:
    """CPU threads for generation and learning while they overlap (default: half the cores
    each)."""
    cores = torch.get_num_threads()  # the thread policy's share for this process
    engine = engine_threads or max(1, cores // 2)
    learner = learner_threads or max(1, cores - engine)
    return engine, learner


class AsyncRollouts:
    """Collected ``Rollout``s, produced up to ``max_staleness`` steps ahead on a thread.

    Use as a context manager; ``take(step)`` waits for the step's collection; after each
    learner step and weight sync call ``weights_synced()`` so a producer waiting for newer
    weights can go on.
    """

    def __init__(
        self,
        loop: Loop,
        policy: BatchingPolicy,
        steps: range,
        max_staleness: int,
        evaluate_at: Callable[[int], bool],
        engine: Engine,
        engine_threads: int | None = None,
        learner_threads: int | None = None,
    ) -> None:
        """``engine``: the engine behind ``policy``; an in-process CPU engine shares the cores
        with the learner (``shares_cpu_with_learner``), and its decode threads then follow the
        learner's; a Ray pool, vLLM (which pins its own threads) or a GPU engine is left alone
        unless threads are asked for explicitly."""
        self.loop, self.policy, self.engine = loop, policy, engine
        self.steps = steps
        self.max_staleness = max_staleness
        self.evaluate_at = evaluate_at
        self.engine_threads, self.learner_threads = split_threads(engine_threads, learner_threads)
        self.split_cores = engine.shares_cpu_with_learner or bool(
            engine_threads or learner_threads
        )
        self._ready: queue.Queue = queue.Queue()
        self._new_weights = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="rollouts", daemon=True)
        self._waited = 0.0  # seconds the learner waited for a rollout, since the last metrics()
        self._saved_threads = torch.get_num_threads()
        self._learner_busy = False
        self._producer_waiting = False

    # ------------------------------------------------------------------ consumer side
    def __enter__(self) -> AsyncRollouts:
        if self.split_cores:
            # the hf engine asks before prefill and at every decode step (Ray, vLLM: no such hook)
            self._set_decode_threads(self.threads_for_generation)
            torch.set_num_threads(self.learner_threads)  # OpenMP: the main (learner) thread only
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self.weights_synced()  # wake a producer waiting for weights, so it sees the stop
        # A normal end joins at once (the producer is done); on an error, do not hang on a
        # collection in flight: the daemon thread dies with the process.
        self._thread.join(timeout=None if exc_info[0] is None else 5)
        if self.split_cores:
            self._set_decode_threads(None)
        torch.set_num_threads(self._saved_threads)

    def take(self, step: int) -> Rollout:
        start = time.perf_counter()
        item = self._ready.get()
        self._waited += time.perf_counter() - start
        if isinstance(item, BaseException):
            raise item
        if item.step != step:  # the producer runs the same range of steps, in order
            raise RuntimeError(f"async rollouts: step {step} asked, step {item.step} collected")
        return item

    @contextmanager
    def learning(self):
        """While the learner computes it keeps its cores and generation uses the rest; otherwise
        generation borrows them. A producer already waiting for weights waits until this step's
        sync, so the learner may then use every core."""
        if self.split_cores:
            cores = self.engine_threads + self.learner_threads
            torch.set_num_threads(cores if self._producer_waiting else self.learner_threads)
        self._learner_busy = True
        try:
            yield
        finally:
            self._learner_busy = False

    def threads_for_generation(self) -> int:
        if self._learner_busy:
            return self.engine_threads
        return self.engine_threads + self.learner_threads

    def _set_decode_threads(self, threads: Callable[[], int] | None) -> None:
        self.engine.decode_threads = threads  # only an in-process CPU engine asks for it

    def weights_synced(self) -> None:
        with self._new_weights:
            self._new_weights.notify_all()

    def metrics(self) -> dict[str, float]:
        waited, self._waited = self._waited, 0.0
        return {
            "async/learner_wait_seconds": waited,
            "async/rollouts_ahead": float(self._ready.qsize()),
        }

    # ------------------------------------------------------------------ producer side
    def _produce(self) -> None:
        try:
            for step in self.steps:
                evaluate = self.evaluate_at(step)
                # An evaluation "at step s" must see the weights after s updates, as in sync runs.
                self._wait_for_version(step if evaluate else step - self.max_staleness)
                self._ready.put(collect(self.loop, self.policy, step, evaluate))
        except _Stopped:
            return
        except BaseException as exc:  # hand it to the learner thread, which re-raises it
            self._ready.put(exc)

    def _wait_for_version(self, version: int) -> None:
        policy = self.policy
        with self._new_weights:
            self._producer_waiting = True
            self._new_weights.wait_for(lambda: self._stop.is_set() or policy.version >= version)
            self._producer_waiting = False
        if self._stop.is_set():
            raise _Stopped
