"""The engine protocol every inference backend (``hf``, ``vllm``, Ray pools) implements."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

import torch

from selfplay.types import Completion, Request

BASE_ADAPTER = "base"  # requests for this adapter run on the bare base model (no LoRA)
STABLE = "STABLE"  # the marker a weights folder gets once every file in it is complete


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


def encode_request(tokenizer, request: Request) -> list[int]:
    """Prompt token ids of a request: its ids as given, or its messages through the chat
    template (which already holds the special tokens, so none are added again) followed by its
    prefill, the start of the reply the model continues."""
    if request.prompt_ids is not None:
        return list(request.prompt_ids)
    text = tokenizer.apply_chat_template(
        request.messages, add_generation_prompt=True, tokenize=False
    )
    return tokenizer(text + request.prefill, add_special_tokens=False).input_ids


def read_weights_file(path: str | Path) -> dict[str, torch.Tensor]:
    """A safetensors file the filesystem weight transport wrote; refused until the ``STABLE``
    marker beside it says the folder is complete (a reader on another machine may look early)."""
    from safetensors.torch import load_file

    path = Path(path)
    if not (path.parent / STABLE).exists():
        raise FileNotFoundError(f"{path.parent} is not complete yet (no {STABLE} marker)")
    return load_file(str(path))
