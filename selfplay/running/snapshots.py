"""Frozen snapshots of the policy that loops serve beside it (opponent pools); the weight sync
after each step is ``training/sync.py``.

Loops never hold the learner or an engine. A loop that needs a frozen copy of the policy asks
``PolicySnapshots`` (the ``selfplay.loops.base.Snapshots`` protocol) for one by name; the
service copies the adapter's weights out of the learner, installs them in the engine under that
name, keeps them for checkpoints, and installs them again after a resume.
"""

from __future__ import annotations

import torch

from selfplay.engines.base import Engine
from selfplay.engines.policy import BatchingPolicy
from selfplay.training.base import Learner


class PolicySnapshots:
    """Named frozen copies of the policy's adapters, served by the engine (LoRA runs)."""

    def __init__(self, learner: Learner, engine: Engine, policy: BatchingPolicy) -> None:
        self._learner, self._engine, self._policy = learner, engine, policy
        self._weights: dict[str, dict[str, torch.Tensor]] = {}

    @property
    def names(self) -> list[str]:
        return list(self._weights)

    def take(self, name: str, adapter: str) -> None:
        """Copy the current weights of ``adapter`` and serve them as adapter ``name``."""
        weights = self._learner.adapter_weights(adapter)
        self._weights[name] = {k: v.cpu() for k, v in weights.items()}  # already copies
        self._install(name)

    def drop(self, name: str) -> None:
        """Stop serving snapshot ``name`` and forget its weights."""
        if self._weights.pop(name, None) is not None:
            with self._policy.updating():
                self._engine.remove_adapter(name)

    def _install(self, name: str) -> None:
        with self._policy.updating():  # no batch may run while adapters change
            self._engine.add_adapter(name)
            # peft state-dict keys carry no adapter name: a snapshot loads under any name
            self._engine.load_weights(name, self._weights[name])

    def state_dict(self) -> dict:
        return {"weights": self._weights}

    def load_state_dict(self, state: dict) -> None:
        """Snapshots of a checkpoint, served again."""
        self._weights = dict(state["weights"])
        for name in self._weights:
            self._install(name)
