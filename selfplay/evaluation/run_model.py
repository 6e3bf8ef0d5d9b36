"""A run's saved weights in an inference engine: the latest checkpoint, a chosen step, or
several steps side by side as LoRA adapters (for ``selfplay evaluate`` and ``selfplay
crossplay``). Only the engine is built: no learner, optimizer or loop."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from selfplay.analysis.rundata import RunData
from selfplay.config import ExperimentConfig
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.running import runner
from selfplay.running.checkpoint import trainable_weights
from selfplay.training.sync import adapter_weights_from_trainable

STEP_ZERO = 0  # the initial policy: the base model (LoRA adapters start at zero)


@dataclass
class Snapshot:
    step: int  # the step the weights are ready to start (0: before training)
    path: Path | None  # None: the initial policy (no checkpoint needed)


def load_run_config(run_dir: Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """The run's config for an evaluation: no wandb, no progress bar."""
    return runner.load_run_config(run_dir, overrides, logging=False)


class RunModel:
    """The run's model in an engine, with weights from any of its snapshots."""

    def __init__(self, run_dir: Path, overrides: list[str] | None = None) -> None:
        from selfplay.engines.models import resolve_model_path

        self.run = RunData.open(run_dir)
        self.config = load_run_config(run_dir, overrides)
        self.lora = self.config.train.finetune == "lora"
        self.engine = runner.build_engine(self.config, resolve_model_path(self.config.model.path))
        self.policy = BatchingPolicy(self.engine)

    def snapshots(self) -> list[Snapshot]:
        """Step 0 (LoRA runs: the base model) and every saved or archived checkpoint."""
        saved = [Snapshot(step, path) for step, path in self.run.checkpoints()]
        initial = [Snapshot(STEP_ZERO, None)] if self.lora else []
        return initial + [s for s in saved if s.step != STEP_ZERO]

    def snapshot(self, step: int | None = None) -> Snapshot:
        """The snapshot of ``step`` (default: the latest)."""
        snapshots = self.snapshots()
        if not snapshots:
            raise UserError(f"{self.run.path} has no checkpoint")
        if step is None:
            return snapshots[-1]
        for snap in snapshots:
            if snap.step == step:
                return snap
        known = ", ".join(str(s.step) for s in snapshots)
        raise UserError(f"{self.run.path}: no checkpoint at step {step} (saved: {known}); "
                        "keep more with checkpoint.archive_every")

    def install(self, snapshot: Snapshot, rename: dict[str, str] | None = None) -> None:
        """Load a snapshot's weights. LoRA: every adapter of the run under its own name, or with
        ``rename`` only the adapters it names, each under its new name (several snapshots then
        sit side by side in one engine)."""
        rename = rename or {}
        if not self.lora:
            if len(set(rename.values())) > 1:
                raise UserError("side-by-side snapshots need train.finetune: lora")
            if snapshot.path is None:
                raise UserError("a fully fine-tuned run has no step-0 snapshot")
        trainable = {} if snapshot.path is None else trainable_weights(snapshot.path)
        if not self.lora:
            self.engine.load_weights(None, trainable)
            return
        for adapter in list(rename) if rename else self.config.adapters():
            target = rename.get(adapter, adapter)
            if target not in self.engine.adapters:
                self.engine.add_adapter(target)  # starts at zero: the base model
            weights = adapter_weights_from_trainable(trainable, adapter)
            if snapshot.path is None:
                weights = _zeros_like_adapter(self.engine, target)
            elif not weights:
                raise UserError(f"{snapshot.path}: no LoRA weights for adapter {adapter!r}")
            self.engine.load_weights(target, weights)

    def close(self) -> None:
        self.engine.close()


def _zeros_like_adapter(engine, adapter: str) -> dict[str, torch.Tensor]:
    """The adapter's current tensors with lora_B zeroed: it then serves the base model."""
    from peft import get_peft_model_state_dict

    state = get_peft_model_state_dict(engine.model, adapter_name=adapter)
    return {k: torch.zeros_like(v) if "lora_B" in k else v for k, v in state.items()}
