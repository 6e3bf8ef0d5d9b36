"""Weights cut into per-layer buckets, packed by dtype: the units the NCCL transport broadcasts
(one flat buffer per bucket instead of one collective per tensor, as OpenRLHF, PipelineRL and
prime-rl do). Pure tensor code: planned, packed and unpacked the same way on the trainer and on
every inference worker, and tested on the CPU."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

DEFAULT_BUCKET_BYTES = 256 * 2**20
_LAYER = re.compile(r"\.(?:layers|h|blocks)\.(\d+)\.")


@dataclass(frozen=True)
class Entry:
    name: str
    shape: tuple[int, ...]
    offset: int  # in elements, within the bucket's flat buffer
    numel: int


@dataclass
class Bucket:
    dtype: torch.dtype
    layer: int  # -1: before the layers (embeddings); 10**9: after them (norm, head)
    entries: list[Entry] = field(default_factory=list)
    numel: int = 0

    @property
    def nbytes(self) -> int:
        return self.numel * torch.empty((), dtype=self.dtype).element_size()


def layer_of(name: str, position: int, first_layer_position: int | None) -> int:
    """The decoder layer a parameter belongs to: its ``.layers.N.`` index; parameters before
    the first layer in the model's order are layer −1, those after every layer are last."""
    match = _LAYER.search(name)
    if match:
        return int(match.group(1))
    return -1 if first_layer_position is None or position < first_layer_position else 10**9


def plan(
    weights: dict[str, torch.Tensor], bucket_bytes: int = DEFAULT_BUCKET_BYTES
) -> list[Bucket]:
    """Buckets in the model's layer order: one per (layer, dtype), a layer's tensors in their
    own order; a bucket that would pass ``bucket_bytes`` is closed and a new one opened (a single
    larger tensor gets a bucket of its own)."""
    names = list(weights)
    first = next((i for i, n in enumerate(names) if _LAYER.search(n)), None)
    keyed = sorted(
        ((layer_of(n, i, first), i, n) for i, n in enumerate(names)), key=lambda k: (k[0], k[1])
    )
    buckets: list[Bucket] = []
    open_: dict[tuple[int, torch.dtype], Bucket] = {}
    for layer, _, name in keyed:
        tensor = weights[name]
        key = (layer, tensor.dtype)
        bucket = open_.get(key)
        size = tensor.numel() * tensor.element_size()
        if bucket is None or (bucket.entries and bucket.nbytes + size > bucket_bytes):
            bucket = Bucket(tensor.dtype, layer)
            open_[key] = bucket
            buckets.append(bucket)
        bucket.entries.append(Entry(name, tuple(tensor.shape), bucket.numel, tensor.numel()))
        bucket.numel += tensor.numel()
    return buckets


def pack(weights: dict[str, torch.Tensor], bucket: Bucket) -> torch.Tensor:
    """The bucket's tensors flattened into one buffer (the trainer's side)."""
    return torch.cat([weights[e.name].detach().reshape(-1).to(bucket.dtype)
                      for e in bucket.entries])


def unpack(buffer: torch.Tensor, bucket: Bucket) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) views of a received buffer (an inference worker's side)."""
    return [
        (e.name, buffer[e.offset : e.offset + e.numel].view(e.shape)) for e in bucket.entries
    ]
