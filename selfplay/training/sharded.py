"""The learner over N FSDP2 ranks: long-lived Ray actors, one per device, behind the one-process
``Learner``'s interface (``train.parallel: {ranks: N, strategy: fsdp2}``).

Each rank is a Ray actor (in a placement group: one GPU each, or one CPU each with gloo in tests)
that starts ``torch.distributed`` itself, as verl and OpenRLHF do, loads the model, attaches the
LoRA adapters and shards it with FSDP2 ``fully_shard``: every decoder layer, then the root; on a
GPU with bf16 parameters and fp32 gradient reduction; optionally offloaded to the CPU.

The driver keeps what makes the numbers the one-process learner's: it cuts the step's samples
into micro-batches with every normaliser computed over the whole batch (Dr. GRPO's constant,
token-mean's token count, group coefficients, ADPO scales and ε_high, TIS reference), then deals
the micro-batches to the ranks. Ranks sum their gradients (reduce-scatter with no division),
clip by the global norm, and step their optimizer shards. Samples of one group may land on
different ranks. FSDP collectives must match across ranks, so every rank runs the same number of
forward and backward passes (padding passes have weight 0), every micro-batch runs its prompt
in full (no shared-prefix pass, which would run the layers twice), and a parameter a rank did
not use still takes part in the reduction with a zero gradient; parameters no rank used this
step (another role's adapter) get no gradient at all, so AdamW leaves them alone, as on one
process.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from selfplay.core.errors import UserError
from selfplay.training.batches import MicroBatch, micro_batches
from selfplay.training.scoring import Totals
from selfplay.training.weights import NcclSending
from selfplay.types import Sample

STRATEGIES = ("fsdp2",)


@dataclass(frozen=True)
class ParallelSettings:
    ranks: int = 1
    strategy: str = "fsdp2"
    offload: bool = False  # parameters, gradients and optimizer state on the CPU (FSDP2)
    mixed_precision: bool = True  # on a GPU: bf16 parameters, fp32 gradient reduction
    threads_per_rank: int = 1  # CPU ranks: torch threads each
    address: str | None = None  # a Ray cluster to join (None: the local one)


# ---------------------------------------------------------------------- one rank
class RankWorker:
    """One rank's model shard and optimizer; every method is a collective (all ranks call it)."""

    def __init__(
        self,
        rank: int,
        world_size: int,
        master: tuple[str, int],
        model_path: str,
        settings,
        adapters: list[str],
        parallel: ParallelSettings,
        rng_state: torch.Tensor,
    ) -> None:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        from selfplay.engines.hf import attach_adapters
        from selfplay.engines.models import load_causal_lm
        from selfplay.training import state as learner_state
        from selfplay.training.learner import logit_transform
        from selfplay.training.scoring import Scorer

        torch.set_num_threads(max(1, parallel.threads_per_rank))
        cuda = torch.cuda.is_available()
        self.device = torch.device("cuda", 0) if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(self.device)
        dist.init_process_group(
            "nccl" if cuda else "gloo",
            init_method=f"tcp://{master[0]}:{master[1]}",
            rank=rank,
            world_size=world_size,
        )
        self.rank, self.world_size, self.settings = rank, world_size, settings
        # the driver's random state: every rank builds the same adapters (LoRA A is random),
        # and the same as a one-process learner built at this point
        torch.set_rng_state(rng_state)
        model = load_causal_lm(Path(model_path), settings.dtype)
        transform = logit_transform(model, model_path)
        self.adapters = list(adapters) if settings.lora is not None else []
        if settings.lora is not None:
            model = attach_adapters(model, settings.lora, self.adapters)
        self.built_rng_state = torch.get_rng_state()
        if settings.gradient_checkpointing:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
            if settings.lora is not None:
                model.enable_input_require_grads()
        self.scorer = Scorer(model, self.adapters, settings, transform, self.device)
        self.scorer.mark_trainable()
        mesh = init_device_mesh(self.device.type, (world_size,))
        self.model = shard(model, mesh, parallel, cuda)
        self.scorer.model = self.model
        self.scorer.entry = score_as_forward(self.model, self.scorer)
        self.optimizer = learner_state.adamw(self.model, settings.lr, settings.weight_decay)
        self.nccl = NcclSending()

    # ------------------------------------------------------------------ training
    def step(self, batches: list[MicroBatch], weights: list[float], used: list[str]) -> dict:
        """One optimizer update: this rank's micro-batches (padding passes have weight 0),
        ``used``: the adapters any rank trains this step."""
        batches = [b.to(self.device) for b in batches]
        self.model.train()
        if self.settings.epochs > 1:
            self.scorer.first_pass(batches)
        totals, norm = Totals(), 0.0
        for _ in range(self.settings.epochs):
            self.optimizer.zero_grad(set_to_none=True)
            totals = self.scorer.accumulate(batches, weights)
            self._forget_unused(used)
            norm = self._clip(self.settings.max_grad_norm)
            self.optimizer.step()
        self.model.eval()
        return {"sums": totals.sums, "mismatch_max": totals.mismatch_max, "grad_norm": norm}

    def _forget_unused(self, used: list[str]) -> None:
        """No gradient for adapters nobody trained this step (they took part in the reduction
        with zeros; AdamW must skip them, as it does on one process)."""
        if not self.adapters:
            return
        idle = [a for a in self.adapters if a not in used]
        for name, param in self.model.named_parameters():
            if any(f".{a}." in name for a in idle):
                param.grad = None

    def _clip(self, max_norm: float) -> float:
        """Clip by the global gradient norm (as ``torch.nn.utils.clip_grad_norm_`` on one
        process: coefficient max_norm / (norm + 1e-6), at most 1). Computed from the local
        shards and summed across ranks, which also works with CPU offload."""
        import torch.distributed as dist

        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        local = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
        squares = torch.zeros((), dtype=torch.float32, device=self.device)
        for g in local:
            squares += g.detach().float().pow(2).sum().to(self.device)
        dist.all_reduce(squares)
        total = squares.sqrt()
        coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for g in local:
            g.detach().mul_(coefficient.to(g.device, g.dtype))
        return float(total)

    # ------------------------------------------------------------------ weights and state
    def full_state(self, trainable_only: bool) -> dict[str, torch.Tensor]:
        """The whole (or the trainable) state dict gathered on rank 0, on the CPU ({} on the
        other ranks)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(
            full_state_dict=True, cpu_offload=True, ignore_frozen_params=trainable_only
        )
        state = get_model_state_dict(self.model, options=options)
        if trainable_only:
            trainable = {n for n, p in self.model.named_parameters() if p.requires_grad}
            state = {k: v for k, v in state.items() if k in trainable}
        return state if self.rank == 0 else {}

    def write_weights(self, adapter: str | None, path: str) -> None:
        """Rank 0 writes the gathered weights (one adapter's, or the model's) to ``path``."""
        from selfplay.training.weights import adapter_weights_from_trainable, save_weights_file

        state = self.full_state(trainable_only=adapter is not None)
        if self.rank == 0:
            weights = adapter_weights_from_trainable(state, adapter) if adapter else state
            save_weights_file(weights, path)

    def nccl_open(self, host: str, port: int, world_size: int) -> None:
        if self.rank == 0:
            self.nccl.open(host, port, world_size)

    def nccl_plan(self, bucket_bytes: int) -> list[dict]:
        state = self.full_state(trainable_only=False)
        return self.nccl.prepare(state, bucket_bytes) if self.rank == 0 else []

    def nccl_send(self) -> int:
        return self.nccl.send() if self.rank == 0 else 0

    def save(self, folder: str, version: int) -> None:
        from selfplay.training import state as learner_state

        learner_state.save(self.model, self.optimizer, version, Path(folder))

    def load(self, folder: str) -> int:
        from selfplay.training import state as learner_state

        return learner_state.load(self.model, self.optimizer, Path(folder))

    def score(self, batches: list[MicroBatch]) -> list[list[float]]:
        with torch.no_grad():
            return [self.scorer.token_logprobs(b.to(self.device))[0].tolist() for b in batches]

    def address(self) -> tuple[str, int]:
        from selfplay.training.weights import local_address

        return local_address()

    def ready(self) -> torch.Tensor:
        """The random state after building (the driver's continues from it)."""
        return self.built_rng_state

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def shard(model: torch.nn.Module, mesh, parallel: ParallelSettings, cuda: bool) -> torch.nn.Module:
    """FSDP2 over ``mesh``: each decoder layer, then the root; gradients summed, not averaged
    (the loss is already normalised over the whole batch)."""
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        FSDPModule,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
    )

    kwargs: dict[str, Any] = {"mesh": mesh}
    if cuda and parallel.mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32
        )
    kwargs["offload_policy"] = CPUOffloadPolicy() if parallel.offload else OffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            # plain SUM collectives (gloo has no pre-multiplied sum); the factor 1 is a no-op
            module.set_force_sum_reduction_for_comms(True)
            module.set_reduce_scatter_unused_params(True, recurse=False)
    return model


def score_as_forward(model: torch.nn.Module, scorer) -> Any:
    """The scorer's computation as a forward method of the root FSDP module: the scorer calls
    the decoder and reads the head's weight itself, bypassing ``model.forward``."""
    import types

    from torch.distributed.fsdp import register_fsdp_forward_method

    model.fsdp_score = types.MethodType(lambda _, batch: scorer.compute(batch), model)
    register_fsdp_forward_method(model, "fsdp_score")
    return model.fsdp_score


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of a (peft-wrapped) causal LM: the units FSDP shards one by one."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(base.get_decoder(), "layers", None)
    if layers is None:  # GPT-2 style
        layers = getattr(base.get_decoder(), "h", None)
    if layers is None:
        raise UserError(f"{type(base).__name__}: no decoder layers found to shard")
    return list(layers)


# ---------------------------------------------------------------------- the driver
def deal(batches: list[MicroBatch], ranks: int) -> tuple[list[list[MicroBatch]], list[list[float]]]:
    """Micro-batches dealt to ranks, largest first to the least loaded, each rank padded to the
    same number of passes (a copy of one of its own batches, or of the smallest batch, with
    weight 0)."""
    shares: list[list[MicroBatch]] = [[] for _ in range(ranks)]
    load = [0] * ranks
    for batch in sorted(batches, key=lambda b: -b.input_ids.numel()):
        rank = min(range(ranks), key=lambda r: (load[r], r))
        shares[rank].append(batch)
        load[rank] += batch.input_ids.numel()
    passes = max(len(share) for share in shares)
    smallest = min(batches, key=lambda b: b.input_ids.numel())
    weights = []
    for share in shares:
        weights.append([1.0] * len(share) + [0.0] * (passes - len(share)))
        share += [share[0] if share else smallest] * (passes - len(share))
    return shares, weights


class ShardedLearner:
    """``Learner``'s interface over ``parallel.ranks`` FSDP2 ranks (Ray actors)."""

    def __init__(
        self, model_path: Path, settings, adapters: list[str] | None, parallel: ParallelSettings
    ) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from selfplay.engines.ray_pool import connect

        if parallel.strategy not in STRATEGIES:
            raise UserError(f"train.parallel.strategy {parallel.strategy!r} is not one of "
                            f"{', '.join(STRATEGIES)}")
        connect(parallel.address)
        gpu = torch.cuda.is_available() or bool(ray.cluster_resources().get("GPU"))
        bundle = {"GPU": 1, "CPU": 1} if gpu else {"CPU": 1}
        self.group = placement_group([bundle] * parallel.ranks, strategy="PACK")
        ray.get(self.group.ready(), timeout=120)
        # the one-process learner's settings, but every micro-batch runs its prompt in full
        self.settings = replace(settings, share_prefix=False)
        self.adapters = list(adapters or []) if settings.lora else []
        self.ranks = parallel.ranks
        def on(rank: int) -> PlacementGroupSchedulingStrategy:
            return PlacementGroupSchedulingStrategy(
                placement_group=self.group, placement_group_bundle_index=rank
            )

        # rank 0's node and a free port there: where the ranks meet
        master = ray.get(ray.remote(num_cpus=0)(master_address).options(
            scheduling_strategy=on(0)).remote())
        actor = ray.remote(num_gpus=1 if gpu else 0, num_cpus=1)(RankWorker)
        self.workers = [
            actor.options(scheduling_strategy=on(rank)).remote(
                rank, self.ranks, master, str(model_path), self.settings, self.adapters, parallel,
                torch.get_rng_state(),
            )
            for rank in range(self.ranks)
        ]
        self.broken = False
        torch.set_rng_state(self._all("ready")[0])
        self.version = 0

    def _all(self, method: str, *args, per_rank: list[tuple] | None = None) -> list:
        """``method`` on every rank (a collective), their results in rank order. A rank that
        dies ends the step in one line: the run resumes from its last checkpoint."""
        import ray
        from ray.exceptions import RayActorError

        calls = [
            getattr(worker, method).remote(*(per_rank[rank] if per_rank else args))
            for rank, worker in enumerate(self.workers)
        ]
        try:
            pending = list(calls)
            while pending:  # the first rank to fail ends the wait (the others may be blocked)
                ready, pending = ray.wait(pending, num_returns=1)
                ray.get(ready)
            return ray.get(calls)
        except RayActorError as exc:
            self.broken = True  # the others may be stuck in a collective: close kills them
            raise UserError(
                f"a learner rank died during {method} ({type(exc).__name__}); the run stops "
                "here and `selfplay resume RUN` continues from its last checkpoint"
            ) from exc

    # ------------------------------------------------------------------ training
    def step(self, samples: list[Sample]) -> dict[str, float]:
        import time

        start = time.perf_counter()
        if not samples:
            self.version += 1
            return {"train/samples": 0.0}
        batches = micro_batches(
            samples,
            self.adapters,
            aggregation=self.settings.aggregation,
            max_new_tokens=self.settings.max_new_tokens,
            micro_batch_size=self.settings.micro_batch_size,
            eps_high=self.settings.eps_high,
            share_prefixes=False,
        )
        shares, weights = deal(batches, self.ranks)
        used = sorted({b.adapter for b in batches})
        results = self._all("step", per_rank=[(s, w, used) for s, w in zip(shares, weights,
                                                                              strict=True)])
        totals = Totals()
        for result in results:
            totals = totals.add(Totals(result["sums"], result["mismatch_max"]))
        self.version += 1
        tokens = sum(b.tokens for b in batches)
        elapsed = time.perf_counter() - start
        return totals.metrics() | {
            "train/grad_norm": results[0]["grad_norm"],
            "train/samples": float(len(samples)),
            "train/tokens": float(tokens),
            "train/tokens_per_s": tokens / max(elapsed, 1e-9),
            "train/seconds": elapsed,
        }

    def score(self, samples: list[Sample]) -> list[list[float]]:
        """Trainer log-probs of every model token of each sample (rank 0's answer; every rank
        runs the same passes)."""
        batches = [
            micro_batches([s], self.adapters, aggregation=self.settings.aggregation,
                          max_new_tokens=self.settings.max_new_tokens, micro_batch_size=1,
                          eps_high=self.settings.eps_high, share_prefixes=False)[0]
            for s in samples
        ]
        return self._all("score", batches)[0]

    # ------------------------------------------------------------------ weights and state
    def adapter_weights(self, adapter: str) -> dict[str, torch.Tensor]:
        from selfplay.training.weights import adapter_weights_from_trainable

        return adapter_weights_from_trainable(self.trainable_weights(), adapter)

    def full_weights(self) -> dict[str, torch.Tensor]:
        return self._all("full_state", False)[0]

    def trainable_weights(self) -> dict[str, torch.Tensor]:
        return self._all("full_state", True)[0]

    def write_weights(self, adapter: str | None, path: Path) -> None:
        self._all("write_weights", adapter, str(path))

    def nccl_open(self, host: str, port: int, world_size: int) -> None:
        self._all("nccl_open", host, port, world_size)

    def nccl_plan(self, bucket_bytes: int) -> list[dict]:
        return self._all("nccl_plan", bucket_bytes)[0]

    def nccl_send(self) -> int:
        return self._all("nccl_send")[0]

    def nccl_address(self) -> tuple[str, int]:
        """Rank 0's address: the trainer end of the NCCL group lives there."""
        import ray

        return ray.get(self.workers[0].address.remote())

    def save(self, folder: Path) -> None:
        self._all("save", str(folder), self.version)

    def load(self, folder: Path) -> None:
        self.version = self._all("load", str(folder))[0]

    def close(self) -> None:
        """Stop the ranks: a clean shutdown of the process group when they are healthy, then
        the actors and their placement group go."""
        import ray
        from ray.util.placement_group import remove_placement_group

        if not self.broken:
            ray.wait([w.close.remote() for w in self.workers], num_returns=self.ranks, timeout=30)
        for worker in self.workers:
            ray.kill(worker)
        remove_placement_group(self.group)


def master_address() -> tuple[str, int]:
    """This node's address and a free port on it (run on rank 0's node)."""
    import ray

    with socket.socket() as probe:
        probe.bind(("", 0))
        return ray.util.get_node_ip_address(), probe.getsockname()[1]

