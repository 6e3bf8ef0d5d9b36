"""The learner contract the runner drives, and its settings (docs/architecture.md#the-learner).

One type over two placements: ``training.learner.LocalLearner`` (this process) and
``training.sharded.ShardedLearner`` (N FSDP2 ranks as Ray actors or torchrun processes). Both
give the same numbers for the same samples; which one a run gets is ``train.parallel.ranks``
(``training.make.make_learner``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from selfplay.engines.lora import LoraSpec
from selfplay.rl.losses import Aggregation, KlEstimator, Objective
from selfplay.types import Sample


@dataclass
class LearnerSettings:
    """How the learner trains. A run derives it from the config (``make.learner_settings``):
    the fields named like ``train:`` keys are those keys; the rest come from the loss preset,
    ``sampling``, ``model`` and ``train.lora``."""

    lr: float = 1e-5
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    lr_final: float = 0.0  # the last step's lr as a share of ``lr``
    schedule_steps: int = 1  # the steps the schedule spans (``train.steps``)
    adam_betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    objective: Objective = "ppo"
    aggregation: Aggregation = "seq-mean-token-sum-norm"
    eps_low: float = 0.2
    eps_high: float = 0.28
    cispo_eps_max: float = 5.0
    tis_cap: float | None = 2.0
    kl_coef: float = 0.0  # β of the KL term to the initial policy (0: off, no reference scored)
    kl_estimator: KlEstimator = "k3"
    epochs: int = 1
    micro_batch_size: int = 8
    logprob_chunk_size: int = 1024
    max_new_tokens: int = 64  # Dr. GRPO's constant normaliser
    dtype: str = "float32"
    gradient_checkpointing: bool = False
    # pack each micro-batch's rows into a prefix tree: every shared beginning computed once
    # (training/batches.py); false: padded rows, micro_batch_size at a time
    share_prefix: bool = True
    tree_tokens: int = 2048  # nodes of one prefix-tree micro-batch (bounds its memory)
    # what a tree may share: "common" prefixes of any rows, or only a "prompt" repeated
    # exactly (a GRPO group: the learner before prefix trees, kept as the benchmark's baseline)
    tree_scope: Literal["common", "prompt"] = "common"
    lora: LoraSpec | None = field(default_factory=LoraSpec)  # None → full fine-tuning


class Learner(ABC):
    """Trains the policy on samples and hands its weights to the engines.

    ``version`` counts optimizer steps (the weights an engine serves carry it); ``adapters``
    are the LoRA adapters it trains ([] when fully fine-tuned); ``settings`` is how it trains.
    """

    settings: LearnerSettings
    adapters: list[str]
    version: int

    # ------------------------------------------------------------------ training
    @abstractmethod
    def step(self, samples: list[Sample]) -> dict[str, float]:
        """One optimizer update on ``samples`` (zero advantages already dropped); its metrics.
        An empty step still counts a version (async rollouts wait on it)."""

    @abstractmethod
    def score(self, samples: list[Sample]) -> list[list[float]]:
        """The learner's log-prob of every model token of each sample (the sync probe)."""

    # ------------------------------------------------------------------ weights out
    @abstractmethod
    def adapter_weights(self, adapter: str) -> dict[str, torch.Tensor]:
        """One adapter's LoRA tensors by their peft names (what ``Engine.load_weights`` takes)."""

    @abstractmethod
    def full_weights(self) -> dict[str, torch.Tensor]:
        """The whole model's state dict (full fine-tuning)."""

    @abstractmethod
    def trainable_weights(self) -> dict[str, torch.Tensor]:
        """What training changes, by parameter name (checkpoint archives)."""

    @abstractmethod
    def write_weights(self, adapter: str | None, path: Path) -> None:
        """One adapter's weights (None: the whole model's) as a safetensors file."""

    # the trainer end of the NCCL weight transport (``training.sync.NcclTransport``): full
    # weights broadcast from the process that holds them whole to vLLM's workers
    @abstractmethod
    def nccl_address(self) -> tuple[str, int]:
        """Where the NCCL group meets: the trainer's host and a free port."""

    @abstractmethod
    def nccl_open(self, host: str, port: int, world_size: int) -> None:
        """Join the group as its rank 0 (blocks until the engines join)."""

    @abstractmethod
    def nccl_plan(self, bucket_bytes: int) -> list[dict]:
        """Gather the weights and return their bucket plan for the receivers."""

    @abstractmethod
    def nccl_send(self) -> int:
        """Broadcast the planned buckets; returns the bytes sent."""

    # ------------------------------------------------------------------ state
    @abstractmethod
    def save(self, folder: Path) -> None:
        """Trainable weights, optimizer and version into ``folder`` (a sharded checkpoint that
        any number of ranks can load)."""

    @abstractmethod
    def load(self, folder: Path) -> None:
        """Restore what ``save`` wrote."""

    def close(self) -> None:
        """Release processes (the sharded learner stops its ranks)."""
