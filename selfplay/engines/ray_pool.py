"""A pool of engine replicas as Ray actors behind the one Engine protocol (docs/ray.md).

``generate`` cuts a batch into contiguous shards, one per live replica, runs them in parallel
and puts the completions back in request order. Weight syncs and adapter changes go to every
replica and are remembered, so a replica that dies is replaced by a new actor that is brought up
to date (adapters, then the latest weights) before it serves. A shard whose replica died is run
again on another replica, and the run goes on.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
import torch
from ray.exceptions import RayActorError

from selfplay.core.errors import UserError
from selfplay.core.machine import available_cores
from selfplay.engines.base import Engine, read_weights_file
from selfplay.engines.models import load_tokenizer
from selfplay.types import Completion, Request

DEFAULT_OBJECT_STORE_MB = 256  # LoRA syncs are megabytes; keep the local store small


def connect(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    object_store_mb: int = DEFAULT_OBJECT_STORE_MB,
) -> None:
    """Join the Ray cluster at ``address`` ("auto", "host:port", "ray://host:10001") or start a
    small local one. Does nothing when Ray is already initialized, so callers may share one."""
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, log_to_driver=True)
        return
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,  # the dashboard costs a process and ~100 MB we do not need
        object_store_memory=object_store_mb * 2**20,
        log_to_driver=True,
    )


class EngineActor:
    """One engine replica inside a Ray worker process (wrapped by ``ray.remote`` below)."""

    def __init__(
        self,
        backend: str,
        model_path: str,
        engine_kwargs: dict[str, Any],
        adapters: list[str],
        num_threads: int,
    ) -> None:
        # Ray sets OMP_NUM_THREADS from num_cpus, but torch may already have read it; say it
        # again so replicas sharing a machine do not fight over cores.
        torch.set_num_threads(max(1, num_threads))
        self.engine = _make_engine(backend, Path(model_path), engine_kwargs, adapters)
        self.requests_served = 0

    def ready(self) -> bool:
        return True

    def served(self) -> int:
        """Requests this replica generated for (shows that the load really is shared)."""
        return self.requests_served

    def generate(self, requests: list[Request]) -> list[Completion]:
        completions = self.engine.generate(requests)
        self.requests_served += len(requests)
        return completions

    def load_weights(self, adapter: str | None, weights: dict[str, torch.Tensor] | str) -> None:
        """New weights: the tensors (through the object store) or a weights file's path."""
        if isinstance(weights, str):
            weights = read_weights_file(weights)
        self.engine.load_weights(adapter, weights)

    def add_adapter(self, adapter: str) -> None:
        self.engine.add_adapter(adapter)

    def sleep(self) -> None:
        self.engine.sleep()

    def wake_up(self) -> None:
        self.engine.wake_up()

    def remove_adapter(self, adapter: str) -> None:
        self.engine.remove_adapter(adapter)  # VLLMEngine: an unused adapter just sits there

    def close(self) -> None:
        self.engine.close()


RemoteEngineActor = ray.remote(max_restarts=0, max_task_retries=0)(EngineActor)


def _make_engine(backend: str, model_path: Path, kwargs: dict[str, Any], adapters: list[str]):
    if backend == "vllm":
        from selfplay.engines.vllm_engine import VLLMEngine

        engine = VLLMEngine(model_path, **kwargs)
        for adapter in adapters:  # vLLM registers adapters lazily, one call each
            engine.add_adapter(adapter)
        return engine
    from selfplay.engines.hf import HFEngine

    return HFEngine(model_path, adapters=adapters, **kwargs)


@dataclass
class _Replica:
    """One slot of the pool and the actor currently filling it."""

    slot: int
    actor: Any  # ray ActorHandle
    generation: int  # 0 for the first actor of this slot, +1 per restart
    setup: list[Any] = field(default_factory=list)  # refs to finish before it serves
    failed_starts: int = 0  # restarts in a row that died before serving

    @property
    def live(self) -> bool:
        return not self.setup


def split_evenly(count: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous [start, stop) ranges over ``count`` items, sizes differing by at most one;
    no empty ranges (fewer items than parts gives fewer ranges)."""
    parts = max(1, min(parts, count))
    base, extra = divmod(count, parts)
    ranges, start = [], 0
    for i in range(parts):
        stop = start + base + (i < extra)
        ranges.append((start, stop))
        start = stop
    return ranges


class RayEnginePool(Engine):
    """``replicas`` engines as Ray actors behind one ``selfplay.engines.base.Engine``.

    ``engine_kwargs`` go to every replica's ``HFEngine`` (or ``VLLMEngine`` with
    ``backend="vllm"``) unchanged, except ``seed``: replica i of generation g samples with
    ``seed + i + replicas * g`` so replicas (and restarted ones) do not repeat each other.
    """

    placement = "pool"

    def __init__(
        self,
        model_path: str | Path,
        *,
        replicas: int = 2,
        backend: str = "hf",
        adapters: list[str] | None = None,
        seed: int = 0,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        max_attempts: int = 3,
        max_failed_starts: int = 3,
        start_timeout_s: float = 600.0,
        address: str | None = None,
        **engine_kwargs: Any,
    ) -> None:
        if replicas < 1:
            raise ValueError("a RayEnginePool needs at least one replica")
        # A local cluster gets at least the CPUs the replicas ask for (logical CPUs: Ray only
        # counts them), so the pool never waits for resources that cannot come.
        local_cpus = max(available_cores(), math.ceil(replicas * num_cpus))
        connect(address, num_cpus=local_cpus)
        self.model_path = Path(model_path)
        self.backend = backend
        self.seed = seed
        self.num_cpus, self.num_gpus = num_cpus, num_gpus
        self.engine_kwargs = engine_kwargs
        self.max_attempts = max_attempts  # tries per shard before generate gives up
        self.max_failed_starts = max_failed_starts  # e.g. a bad model path fails every start
        self.replica_count = replicas
        self.restarts = 0
        self.tokenizer = load_tokenizer(self.model_path)
        # What a new replica must replay: adapter set, then the latest weights per adapter
        # (None = full weights), each stored once in the object store.
        self.adapters: list[str] = list(adapters or [])
        self.address = address
        self.sleeping = False
        self._weights: dict[str | None, Any] = {}
        self._replicas = [self._start(slot, 0) for slot in range(replicas)]
        try:  # fail here, with the replica's own error, if the engines cannot be built at all
            setup = [ref for replica in self._replicas for ref in replica.setup]
            # A timeout too: replicas asking for resources the cluster lacks would wait forever.
            ray.get(setup, timeout=start_timeout_s)
        except Exception:
            for replica in self._replicas:
                ray.kill(replica.actor, no_restart=True)
            raise
        for replica in self._replicas:
            replica.setup = []

    # ------------------------------------------------------------------ protocol
    def generate(self, requests: list[Request]) -> list[Completion]:
        if not requests:
            return []
        self._refresh()
        targets = [r for r in self._replicas if r.live] or list(self._replicas)
        ranges = split_evenly(len(requests), len(targets))
        shards = [requests[start:stop] for start, stop in ranges]
        targets = targets[: len(shards)]  # fewer requests than replicas: some stay idle
        results: list[list[Completion] | None] = [None] * len(shards)
        attempts = [1] * len(shards)
        running = {
            self._submit(replica, shard): (index, replica)
            for index, (replica, shard) in enumerate(zip(targets, shards, strict=True))
        }
        while running:
            (ref,), _ = ray.wait(list(running), num_returns=1)
            index, replica = running.pop(ref)
            try:
                results[index] = ray.get(ref)
            except RayActorError as exc:
                if attempts[index] >= self.max_attempts:
                    raise RuntimeError(
                        f"shard {index} failed on {attempts[index]} replicas in a row"
                    ) from exc
                attempts[index] += 1
                self._replace(replica)
                target = self._least_busy([r for _, r in running.values()])
                running[self._submit(target, shards[index])] = (index, target)
        return [completion for shard in results for completion in shard or []]

    def load_weights(self, adapter: str | None, weights: dict[str, torch.Tensor]) -> None:
        """Send new weights to every replica; a replica started later gets them too."""
        # CPU tensors: a CUDA tensor would unpickle onto a GPU the replica may not have.
        ref = ray.put({name: tensor.detach().cpu() for name, tensor in weights.items()})
        # Recorded before sending: a replica restarted during the broadcast replays these.
        previous = self._weights.get(adapter)
        self._weights[adapter] = ref  # drops the previous version from the object store
        try:
            self._broadcast("load_weights", adapter, ref)
        except Exception:  # weights the engines reject must not be replayed into new replicas
            if previous is None:
                self._weights.pop(adapter, None)
            else:
                self._weights[adapter] = previous
            raise

    # one GPU for both: vLLM replicas colocated with learner ranks free it while they step
    def sleep(self) -> None:
        if self.engine_kwargs.get("sleep"):
            self._broadcast("sleep")
            self.sleeping = True

    def wake_up(self) -> None:
        if self.sleeping:
            self._broadcast("wake_up")
            self.sleeping = False

    def load_weights_from(self, adapter: str | None, path: str) -> None:
        """Every replica reads the file itself (only the path travels: the filesystem weight
        transport, for replicas on machines that share the folder); replayed on restarts."""
        self._weights[adapter] = path
        self._broadcast("load_weights", adapter, path)

    def add_adapter(self, adapter: str) -> None:
        """A new LoRA adapter on every replica (serves the base model until weights arrive)."""
        if adapter in self.adapters:
            return
        if self.backend == "hf" and (self.engine_kwargs.get("lora") is None or not self.adapters):
            # Checked here, as HFEngine would, so the replicas never disagree on the set.
            raise ValueError("adapters can only be added to an engine built with LoRA adapters")
        self.adapters.append(adapter)  # recorded first, as in load_weights
        self._broadcast("add_adapter", adapter)

    def remove_adapter(self, adapter: str) -> None:
        # Mirrors HFEngine: the last adapter stays (dropping it would unwrap the peft model).
        if adapter not in self.adapters or len(self.adapters) == 1:
            return
        self.adapters.remove(adapter)
        self._weights.pop(adapter, None)
        self._broadcast("remove_adapter", adapter)

    def close(self) -> None:
        """Stop every replica (best effort: a dead one has nothing left to close)."""
        closing = [r.actor.close.remote() for r in self._replicas]
        with contextlib.suppress(Exception):  # a dead or hung replica must not block closing
            ray.get(closing, timeout=30)
        for replica in self._replicas:
            ray.kill(replica.actor, no_restart=True)
        self._replicas = []
        self._weights.clear()

    # ------------------------------------------------------------------ replicas
    @property
    def actors(self) -> list[Any]:
        """The current actor handle of each slot (tests kill these)."""
        return [replica.actor for replica in self._replicas]

    @property
    def live_replicas(self) -> int:
        return sum(replica.live for replica in self._replicas)

    def wait_ready(self, timeout_s: float = 600.0) -> None:
        """Block until every replica serves (e.g. after a restart, before timing something)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._refresh()
            starting = [ref for replica in self._replicas for ref in replica.setup]
            if not starting:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"{len(starting)} replica calls still starting after {timeout_s} s"
                )
            ray.wait(starting, num_returns=len(starting), timeout=left)

    def _start(self, slot: int, generation: int) -> _Replica:
        """A new actor for ``slot`` with its catch-up calls queued (actors run calls in order)."""
        kwargs = self.engine_kwargs | {"seed": self.seed + slot + self.replica_count * generation}
        actor = RemoteEngineActor.options(num_cpus=self.num_cpus, num_gpus=self.num_gpus).remote(
            self.backend,
            str(self.model_path),
            kwargs,
            list(self.adapters),
            max(1, int(self.num_cpus)),
        )
        setup = [actor.ready.remote()]
        # Full weights first: adapters sit on top of the base they were trained against.
        for adapter in sorted(self._weights, key=lambda name: name is not None):
            setup.append(actor.load_weights.remote(adapter, self._weights[adapter]))
        return _Replica(slot, actor, generation, setup)

    def _replace(self, replica: _Replica) -> None:
        """Restart a dead replica's slot, unless another failed call already did."""
        if self._replicas[replica.slot] is not replica:
            return
        failed_starts = replica.failed_starts + (not replica.live)
        if failed_starts >= self.max_failed_starts:  # it will not come up: say so, not loop
            raise RuntimeError(f"replica {replica.slot} died {failed_starts} times while starting")
        ray.kill(replica.actor, no_restart=True)  # it may be hung rather than gone
        new = self._start(replica.slot, replica.generation + 1)
        new.failed_starts = failed_starts
        self._replicas[replica.slot] = new
        self.restarts += 1

    def _refresh(self) -> None:
        """Promote restarted replicas whose catch-up finished; restart ones that died doing it."""
        for replica in list(self._replicas):
            if replica.live:
                continue
            done, _ = ray.wait(replica.setup, num_returns=len(replica.setup), timeout=0)
            if len(done) < len(replica.setup):
                continue  # still loading: it will serve a later call
            try:
                ray.get(replica.setup)
            except RayActorError:
                self._replace(replica)
                continue
            replica.setup, replica.failed_starts = [], 0

    def _least_busy(self, busy: list[_Replica]) -> _Replica:
        """Where to re-run a shard: the live replica with the fewest shards still running;
        a restarting one only when none is live (its calls queue behind its catch-up)."""
        candidates = [r for r in self._replicas if r.live] or list(self._replicas)
        return min(candidates, key=lambda r: sum(b is r for b in busy))

    def _submit(self, replica: _Replica, shard: list[Request]) -> Any:
        return replica.actor.generate.remote(shard)

    def _broadcast(self, method: str, *args: Any) -> None:
        """Call ``method`` on every replica and wait; replicas that died are restarted (their
        catch-up already includes this call's effect, which is recorded before or after)."""
        calls = [(r, getattr(r.actor, method).remote(*args)) for r in self._replicas]
        for replica, ref in calls:
            if not replica.live:
                replica.setup.append(ref)  # checked with the rest of its catch-up
                continue
            try:
                ray.get(ref)
            except RayActorError:
                self._replace(replica)


def build_ray_engine(
    config: Any,
    model_path: Path,
    *,
    replicas: int | None = None,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
) -> RayEnginePool:
    """The pool an ``ExperimentConfig`` asks for (``cluster.backend: ray``).

    Counts not given here come from ``config.cluster`` (``replicas``, ``num_cpus_per_replica``,
    ``num_gpus_per_replica``) when it has them, else 2 replicas of 1 CPU each; GPUs default to
    one per replica when the cluster has any and ``engine.device`` is not "cpu".
    """
    from selfplay.engines.lora import lora_spec  # torch/transformers: import on use

    cluster, engine = config.cluster, config.engine
    replicas = replicas or getattr(cluster, "replicas", None) or 2
    num_cpus = num_cpus or getattr(cluster, "num_cpus_per_replica", None) or 1.0
    if num_gpus is None:
        num_gpus = getattr(cluster, "num_gpus_per_replica", None)
    local_cpus = max(available_cores(), math.ceil(replicas * num_cpus))
    connect(cluster.address, num_cpus=local_cpus)
    gpus = ray.cluster_resources().get("GPU", 0)
    if num_gpus is None:
        wants_gpu = engine.device is None or engine.device.startswith("cuda")
        num_gpus = 1.0 if wants_gpu and gpus > 0 else 0.0
    if num_gpus * replicas > gpus > 0:  # the last replicas would wait for a GPU forever
        raise UserError(
            f"cluster: {replicas} replicas x {num_gpus} GPU do not fit on the cluster's "
            f"{gpus:g} GPUs; lower cluster.replicas or share GPUs (num_gpus_per_replica: 0.5)"
        )
    adapters = config.adapters()
    return RayEnginePool(
        model_path,
        replicas=replicas,
        backend=engine.backend,
        adapters=adapters,
        seed=config.seed,
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        address=cluster.address,
        **_engine_kwargs(config, lora_spec(config), gpu=num_gpus > 0),
    )


def _engine_kwargs(config: Any, lora: Any, gpu: bool) -> dict[str, Any]:
    """What runner.build_engine passes to one engine, minus adapters and seed (the pool's)."""
    engine = config.engine
    if engine.backend == "vllm":
        return {
            "dtype": config.model.dtype,
            "lora": lora,
            "gpu_memory_utilization": engine.gpu_memory_utilization,
            "max_model_len": engine.max_model_len,
            "sleep": engine.sleep,
            "prefix_caching": engine.prefix_caching,
        }
    device = engine.device
    if gpu and device is not None and device.startswith("cuda"):
        device = "cuda"  # Ray shows each replica only its own GPU, always as cuda:0
    return {
        "dtype": config.model.dtype,
        "lora": lora,
        "max_batch_size": engine.max_batch_size,
        "device": device,
        "prefix_caching": engine.prefix_caching,
        "prefix_cache_mb": engine.prefix_cache_mb,
    }
