"""The NCCL weight transport's two ends (GPU only; docs/scale.md says what has run on a GPU).

- ``WeightReceiver`` is mixed into vLLM's GPU workers (``worker_extension_cls``): it joins a
  NCCL group with the trainer (vLLM's ``StatelessProcessGroup`` and ``PyNcclCommunicator``,
  independent of both sides' torch.distributed groups) and loads each broadcast bucket with
  the model's own ``load_weights`` (which maps Hugging Face names and fuses q/k/v).
- ``TrainerSender`` is the trainer's end, in the learner's rank-0 process: it joins the same
  group as rank 0 and broadcasts the buckets ``engines/buckets.py`` plans and packs.

A bucket plan travels as plain data (``plan_to_wire`` / ``plan_from_wire``) so that vLLM's RPC
can carry it to every worker.
"""

from __future__ import annotations

import torch

from selfplay.engines.buckets import Bucket, Entry, pack, unpack

_DTYPES = {str(d): d for d in (torch.float32, torch.bfloat16, torch.float16)}


def plan_to_wire(plan: list[Bucket]) -> list[dict]:
    return [
        {"dtype": str(b.dtype), "layer": b.layer, "numel": b.numel,
         "entries": [[e.name, list(e.shape), e.offset, e.numel] for e in b.entries]}
        for b in plan
    ]


def plan_from_wire(wire: list[dict]) -> list[Bucket]:
    return [
        Bucket(_DTYPES[b["dtype"]], b["layer"],
               [Entry(n, tuple(shape), offset, numel) for n, shape, offset, numel in b["entries"]],
               b["numel"])
        for b in wire
    ]


def _group(host: str, port: int, rank: int, world_size: int, device):
    from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
    from vllm.distributed.utils import StatelessProcessGroup

    group = StatelessProcessGroup.create(host=host, port=port, rank=rank, world_size=world_size)
    return PyNcclCommunicator(group, device=device)


class WeightReceiver:
    """vLLM worker extension: ``self.device`` and ``self.model_runner`` are the worker's."""

    def init_weight_group(self, host: str, port: int, rank_offset: int, world_size: int) -> None:
        from vllm.distributed.parallel_state import get_world_group

        rank = get_world_group().rank + rank_offset
        self.weight_group = _group(host, port, rank, world_size, self.device)

    def receive_buckets(self, wire: list[dict]) -> int:
        received = 0
        for bucket in plan_from_wire(wire):
            buffer = torch.empty(bucket.numel, dtype=bucket.dtype, device=self.device)
            self.weight_group.broadcast(buffer, src=0, stream=torch.cuda.current_stream())
            self.model_runner.model.load_weights(weights=unpack(buffer, bucket))
            received += bucket.nbytes
        torch.cuda.synchronize()
        return received


class TrainerSender:
    """The trainer's end: rank 0 of the NCCL group, on the learner's GPU."""

    def __init__(self, host: str, port: int, world_size: int) -> None:
        self.group = _group(host, port, 0, world_size, torch.device("cuda", 0))

    def send(self, weights: dict[str, torch.Tensor], plan: list[Bucket]) -> int:
        sent = 0
        for bucket in plan:
            buffer = pack(weights, bucket).to("cuda", non_blocking=True)
            self.group.broadcast(buffer, src=0, stream=torch.cuda.current_stream())
            sent += bucket.nbytes
        torch.cuda.synchronize()
        return sent
