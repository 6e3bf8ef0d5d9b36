"""The learner an experiment asks for: one process, or N FSDP2 ranks (``train.parallel``)."""

from __future__ import annotations

from pathlib import Path

from selfplay.config import ExperimentConfig
from selfplay.core.errors import UserError
from selfplay.training.learner import Learner, LearnerSettings
from selfplay.training.placement import launched_by_torchrun, world_size
from selfplay.training.sharded import ParallelSettings, ShardedLearner


def learner_dtype(config: ExperimentConfig, gpu: bool) -> str:
    """The dtype the learner keeps its weights in: ``model.dtype``, except for an fp32 master
    copy on a GPU with ``train.parallel.mixed_precision`` where the weights themselves train
    (full fine-tuning, or any sharded run): a bf16 weight cannot take an update below 2^-8 of
    itself, so AdamW steps at lr 1e-6 would round away. Sharded ranks compute in bf16 from it;
    the one-process learner computes in fp32."""
    parallel = config.train.parallel
    trains_weights = parallel.ranks > 1 or config.train.finetune == "full"
    if gpu and parallel.mixed_precision and trains_weights:
        return "float32"
    return config.model.dtype


def make_learner(
    model_path: Path,
    settings: LearnerSettings,
    adapters: list[str],
    device: str | None,
    parallel: ParallelSettings,
) -> Learner | ShardedLearner:
    if launched_by_torchrun() and parallel.ranks != world_size():
        raise UserError(f"train.parallel.ranks: {parallel.ranks}, but torchrun started "
                        f"{world_size()} processes (--nproc-per-node must equal it)")
    if parallel.ranks == 1:
        return Learner(model_path, settings, adapters, device)
    return ShardedLearner(model_path, settings, adapters, parallel)
