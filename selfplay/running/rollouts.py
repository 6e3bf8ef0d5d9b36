"""Asynchronous rollouts: the episodes of step t+1 are collected while the learner trains step t.

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from selfplay.core.errors import UserError
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


def collect(loop: Loop, policy: BatchingPolicy, step: int, evaluate: bool) -> Rollout:
    """Evaluate if asked, then collect one step's episodes (sync steps and the async producer)."""
    eval_metrics = asyncio.run(loop.evaluate(policy, step)) if evaluate else {}
    start, tokens_before = time.perf_counter(), policy.tokens_generated
    collected = asyncio.run(loop.collect(policy, step))
    if not isinstance(collected, Collected):
        raise UserError(
            f"the {loop.name} loop's collect returned {type(collected).__name__}; it must return "
            "selfplay.types.Collected(episodes, metrics, tasks)"
        )
    seconds = time.perf_counter() - start
    return Rollout(step, collected, seconds, policy.tokens_generated - tokens_before, eval_metrics)


class _Stopped(Exception):
    """The consumer went away; the producer ends quietly."""


def split_threads(engine_threads: int | None, learner_threads: int | None) -> tuple[int, int]:
    """CPU threads for generation and learning while they overlap (default: half the cores
    each)."""
    cores = torch.get_num_threads()  # the thread policy's share for this process
    engine = engine_threads or max(1, cores // 2)
    learner = learner_threads or max(1, cores - engine)
    return engine, learner


def shares_cpu_with_learner(engine) -> bool:
    """An in-process engine on the CPU competes with the learner for cores; a Ray pool, vLLM
    (which pins its own threads) or a GPU engine does not, and then threads are left alone."""
    from selfplay.engines.hf import HFEngine

    return isinstance(engine, HFEngine) and engine.device.type == "cpu"


class AsyncRollouts:
    """Iterate over collected ``Rollout``s, produced up to ``max_staleness`` steps ahead.

    Use as a context manager; after each learner step and weight sync call ``weights_synced()``
    so a producer waiting for newer weights can go on.
    """

    def __init__(
        self,
        loop: Loop,
        policy: BatchingPolicy,
        steps: range,
        max_staleness: int,
        evaluate_at: Callable[[int], bool],
        engine_threads: int | None = None,
        learner_threads: int | None = None,
        engine=None,
    ) -> None:
        """``engine``: the engine behind ``policy``; an in-process CPU engine shares the cores
        with the learner, and its decode threads then follow the learner's."""
        self.loop, self.policy, self.engine = loop, policy, engine
        self.steps = steps
        self.max_staleness = max_staleness
        self.evaluate_at = evaluate_at
        self.engine_threads, self.learner_threads = split_threads(engine_threads, learner_threads)
        self.split_cores = shares_cpu_with_learner(engine) or bool(
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

    def __iter__(self) -> Iterator[Rollout]:
        for _ in self.steps:
            start = time.perf_counter()
            item = self._ready.get()
            self._waited += time.perf_counter() - start
            if isinstance(item, BaseException):
                raise item
            yield item

    @contextmanager
    def learner_training(self):
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
        if hasattr(self.engine, "decode_threads"):
            self.engine.decode_threads = threads

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
