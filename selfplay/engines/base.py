"""The engine protocol every inference backend (``hf``, ``vllm``, Ray pools) implements."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from selfplay.types import Completion, Request


@runtime_checkable
class Engine(Protocol):
    """Batched generation with per-token log-probs, serving every role's adapter.

    ``generate`` takes any mix of roles/adapters in one call and returns one completion per
    request, in order. ``load_weights`` installs new weights for one adapter (LoRA tensors keyed
    by their peft names) or, with ``adapter=None``, the full model's state dict.
    """

    def generate(self, requests: list[Request]) -> list[Completion]: ...

    def load_weights(self, adapter: str | None, weights: dict[str, torch.Tensor]) -> None: ...

    def add_adapter(self, adapter: str) -> None: ...

    def close(self) -> None: ...
