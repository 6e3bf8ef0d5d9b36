"""The engine contract every inference backend (``hf``, ``vllm``, Ray pools) implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Literal

import torch

from selfplay.core.errors import UserError
from selfplay.types import Completion, Request

BASE_ADAPTER = "base"  # requests for this adapter run on the bare base model (no LoRA)
STABLE = "STABLE"  # the marker a weights folder gets once every file in it is complete


Placement = Literal["process", "pool"]


class Engine(ABC):
    """Batched generation with per-token log-probs, serving every role's adapter.

    Every member the platform uses is declared here; the ones an engine has nothing to do for
    have a default (docs/architecture.md#the-engine). ``generate`` takes any mix of roles and
    adapters in one call and returns one completion per request, in order. ``load_weights``
    installs new weights for one adapter (LoRA tensors keyed by their peft names) or, with
    ``adapter=None``, the full model's state dict.
    """

    tokenizer: Any  # the model's tokenizer (chat template, counting and cutting text)
    # where the engine runs, which decides how weights reach it (``training.sync``): "process"
    # (this process: tensors handed over in memory) or "pool" (Ray replicas: the object store,
    # or files on a cluster); ``address`` is the pool's Ray cluster (None: this machine)
    placement: ClassVar[Placement] = "process"
    address: str | None = None
    # CPU threads to decode with, asked again at every decode step; async rollouts set it to
    # lend generation the learner's cores while the learner is idle. None: torch's setting.
    # Only an in-process CPU engine asks (``shares_cpu_with_learner``); others ignore it.
    decode_threads: Callable[[], int] | None = None
    shares_cpu_with_learner: bool = False
    # where generation time goes (seconds and tokens of prefills and decode steps), summed
    stats: Mapping[str, float] = MappingProxyType({})

    # ------------------------------------------------------------------ generation
    @abstractmethod
    def generate(self, requests: list[Request]) -> list[Completion]: ...

    def score(self, requests: list[Request], continuations: list[list[int]]) -> list[list[float]]:
        """Log-probs (temperature 1, no nucleus) of each continuation's tokens right after its
        request's prompt (prefill included): how likely the model is to reply that way."""
        raise UserError(f"{type(self).__name__} cannot score given replies; measure by sampling")

    # ------------------------------------------------------------------ adapters
    @abstractmethod
    def add_adapter(self, adapter: str) -> None:
        """Serve a new LoRA adapter (the base model until its weights are loaded)."""

    def remove_adapter(self, adapter: str) -> None:
        """Stop serving ``adapter`` (default: an unused adapter just stays loaded)."""

    # ------------------------------------------------------------------ weights in
    @abstractmethod
    def load_weights(self, adapter: str | None, weights: dict[str, torch.Tensor]) -> None: ...

    def load_weights_from(self, adapter: str | None, path: str) -> None:
        """``load_weights`` from a file of the filesystem weight transport (a pool's replicas
        read it themselves, so only the path travels)."""
        self.load_weights(adapter, read_weights_file(path))

    def nccl_workers(self) -> int:
        """Processes that receive an NCCL weight broadcast (0: this engine cannot)."""
        return 0

    def nccl_join(self, host: str, port: int, world_size: int) -> None:
        """Join the trainer's NCCL group (blocks until the group is whole)."""
        raise UserError(f"{type(self).__name__} has no NCCL weight receiver")

    def nccl_receive(self, plan: list[dict]) -> None:
        """Receive one broadcast of full weights laid out as ``plan``."""
        raise UserError(f"{type(self).__name__} has no NCCL weight receiver")

    # ------------------------------------------------------------------ one GPU for both
    def sleep(self) -> None:
        """Free the GPU for the learner's step, if the engine was built to (vLLM sleep mode)."""

    def wake_up(self) -> None:
        """Take the GPU back after ``sleep`` (nothing to do if it did not sleep)."""

    # ------------------------------------------------------------------ checkpoints
    def rng_state(self) -> Any:
        """The sampler's random state, for checkpoints (None: the engine keeps none)."""
        return None

    def set_rng_state(self, state: Any) -> None:
        """Restore ``rng_state()`` from a checkpoint."""

    def close(self) -> None:
        """Release the model and any processes."""


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
