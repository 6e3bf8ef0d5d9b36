"""One rank of the sharded learner (``training/sharded.py``): its shard of the model and of the
optimizer, and the collectives a step runs. The same class runs as a Ray actor (one per GPU, or
per CPU core with gloo in tests) or as a process torchrun started (``training/placement.py``).

A rank loads the model, attaches the LoRA adapters and shards it with FSDP2 ``fully_shard``:
every decoder layer, then the root; on a GPU with bf16 parameters and fp32 gradient reduction;
optionally offloaded to the CPU. Ranks sum their gradients (reduce-scatter with no division:
the driver normalised the loss over the whole batch), clip by the global norm and step their
optimizer shards.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from selfplay.core.errors import UserError
from selfplay.training.allocator import return_large_blocks
from selfplay.training.batches import MicroBatch
from selfplay.training.scoring import Totals
from selfplay.training.sync import NcclSending

STRATEGIES = ("fsdp2",)


@dataclass(frozen=True)
class ParallelSettings:
    ranks: int = 1
    strategy: str = "fsdp2"
    offload: bool = False  # parameters, gradients and optimizer state on the CPU (FSDP2)
    mixed_precision: bool = True  # on a GPU: bf16 parameters, fp32 gradient reduction
    threads_per_rank: int = 1  # CPU ranks: torch threads each
    gpu_share: float = 1.0  # of a GPU per rank (below 1: engine replicas share the GPU)
    address: str | None = None  # a Ray cluster to join (None: the local one)


def rank_device() -> torch.device:
    """This rank's device: ``cuda:LOCAL_RANK`` under torchrun, ``cuda:0`` in a Ray actor (Ray
    shows each actor only its GPU), else the CPU."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))


class RankWorker:
    """One rank's model shard and optimizer; every method is a collective (all ranks call it).
    ``master``: where the ranks meet (None: the process group is already up, under torchrun)."""

    def __init__(
        self,
        rank: int,
        world_size: int,
        master: tuple[str, int] | None,
        model_path: str,
        settings,
        adapters: list[str],
        parallel: ParallelSettings,
        rng_state: torch.Tensor,
    ) -> None:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        from selfplay.engines.lora import attach_adapters
        from selfplay.engines.models import load_causal_lm
        from selfplay.training import state as learner_state
        from selfplay.training.learner import logit_transform
        from selfplay.training.scoring import Scorer

        torch.set_num_threads(max(1, parallel.threads_per_rank))
        cuda = torch.cuda.is_available()
        self.watch = None if cuda else MemoryWatch()  # from before the model is read
        if not cuda:
            return_large_blocks()
        self.device = rank_device()
        if cuda:
            torch.cuda.set_device(self.device)
        if master is not None:
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
        # only rank 0 reads the model file; the others build it on the meta device and receive
        # their shards from rank 0 once it is sharded (N ranks would otherwise each hold the
        # whole model in CPU memory while loading: 16 GB each for a 4B model in fp32)
        reads = rank == 0
        path = Path(model_path)
        model = load_causal_lm(path, settings.dtype) if reads else meta_causal_lm(path,
                                                                                 settings.dtype)
        transform = broadcast_object(logit_transform(model, model_path) if reads else None)
        self.adapters = list(adapters) if settings.lora is not None else []
        if settings.lora is not None:
            model = attach_adapters(model, settings.lora, self.adapters)
        self.built_rng_state = torch.get_rng_state()
        full = model.state_dict() if reads else {}  # rank 0's weights, its LoRA init included
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
        # a copy of the dict: loading replaces its entries with the loaded shards, and the KL
        # reference below is filled from the same initial weights
        fill_from_rank0(self.model, dict(full), self.device)
        self.scorer.model = self.model
        self.scorer.entry = score_as_forward(self.model, self.scorer.compute)
        if settings.lora is None and settings.kl_coef:
            reference = sharded_reference(path, settings.dtype, full, self.model, mesh, parallel,
                                          self.device)
            self.scorer.reference = reference
            self.scorer.reference_entry = score_as_forward(
                reference, lambda batch: self.scorer.compute(batch, reference)
            )
        del full
        self.optimizer = learner_state.adamw(self.model, settings.lr, settings.weight_decay,
                                            settings.adam_betas)
        self.nccl = NcclSending()

    # ------------------------------------------------------------------ training
    def step(
        self, batches: list[MicroBatch], weights: list[float], used: list[str], lr: float
    ) -> dict:
        """One optimizer update at learning rate ``lr``: this rank's micro-batches (padding
        passes have weight 0), ``used``: the adapters any rank trains this step."""
        from selfplay.training import state as learner_state

        learner_state.set_lr(self.optimizer, lr)
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
        from selfplay.training.sync import adapter_weights_from_trainable, save_weights_file

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

    def memory(self) -> float:
        """Peak bytes this rank used: allocated memory above its start (CPU), or the CUDA
        allocator's peak (GPU)."""
        if self.watch is None:
            return float(torch.cuda.max_memory_allocated())
        return self.watch.used()

    def address(self) -> tuple[str, int]:
        from selfplay.training.sync import local_address

        return local_address()

    def ready(self) -> torch.Tensor:
        """The random state after building (the driver's continues from it)."""
        return self.built_rng_state

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def meta_causal_lm(path: Path, dtype: str) -> torch.nn.Module:
    """The model of ``path`` with no storage (the meta device): its shape, no weights read."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from selfplay.engines.models import DTYPES

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path),
                                                 dtype=DTYPES[dtype])
    return model.eval()


def broadcast_object(value: Any) -> Any:
    """Rank 0's ``value`` on every rank."""
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def fill_from_rank0(model: torch.nn.Module, full: dict[str, torch.Tensor],
                    device: torch.device) -> None:
    """Give a sharded model built on the meta device (ranks > 0) its storage, then every rank
    its shards of rank 0's ``full`` state and rank 0's buffers (rotary tables are buffers kept
    out of state dicts)."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    if any(p.is_meta for p in model.parameters()):
        model.to_empty(device=device)
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, full, options=options)
    for buffer in model.buffers():
        dist.broadcast(buffer, src=0)


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
            if hasattr(module, "set_reduce_scatter_unused_params"):  # torch >= 2.13
                module.set_reduce_scatter_unused_params(True, recurse=False)
            elif mesh.size() > 1:  # one rank has nobody to reduce with (bench gpu, torch 2.11)
                raise UserError("the sharded learner needs torch >= 2.13 (FSDP2's "
                                "set_reduce_scatter_unused_params)")
    return model


def score_as_forward(model: torch.nn.Module, compute) -> Any:
    """The scorer's computation ``compute(batch)`` as a forward method of the root FSDP module:
    the scorer calls the decoder and reads the head's weight itself, bypassing
    ``model.forward``."""
    import types

    from torch.distributed.fsdp import register_fsdp_forward_method

    model.fsdp_score = types.MethodType(lambda _, batch: compute(batch), model)
    register_fsdp_forward_method(model, "fsdp_score")
    return model.fsdp_score


def sharded_reference(path: Path, dtype: str, full: dict[str, torch.Tensor],
                      policy: torch.nn.Module, mesh, parallel: ParallelSettings,
                      device: torch.device) -> torch.nn.Module:
    """Full fine-tuning's KL reference on N ranks: the initial weights (rank 0's ``full``),
    frozen and sharded with FSDP2 as the policy is, so each rank holds 1/N of the copy. Built on
    the meta device on every rank; its buffers (rotary tables, kept out of state dicts) are the
    policy's, which rank 0 already sent."""
    reference = meta_causal_lm(path, dtype)
    reference.requires_grad_(False)
    reference = shard(reference, mesh, parallel, torch.cuda.is_available())
    fill_from_rank0(reference, full, device)
    buffers = dict(policy.named_buffers())
    with torch.no_grad():
        for name, buffer in reference.named_buffers():
            buffer.copy_(buffers[name])
    return reference.eval()


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of a (peft-wrapped) causal LM: the units FSDP shards one by one."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(base.get_decoder(), "layers", None)
    if layers is None:  # GPT-2 style
        layers = getattr(base.get_decoder(), "h", None)
    if layers is None:
        raise UserError(f"{type(base).__name__}: no decoder layers found to shard")
    return list(layers)



class MemoryWatch:
    """The peak of this process's resident memory above its level when the watch started,
    sampled every millisecond on a thread (the model file's pages the kernel maps in while
    reading it count: they take memory too). On a GPU the CUDA allocator's peak is used."""

    def __init__(self) -> None:
        import threading

        self.baseline = resident_bytes()
        self.peak = self.baseline
        self._stop = threading.Event()
        threading.Thread(target=self._watch, daemon=True, name="memory-watch").start()

    def _watch(self) -> None:
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, resident_bytes())

    def used(self) -> float:
        """Peak bytes above the baseline so far."""
        self.peak = max(self.peak, resident_bytes())
        return self.peak - self.baseline

    def stop(self) -> None:
        self._stop.set()


def resident_bytes() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss)
