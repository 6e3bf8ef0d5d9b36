"""The learner an experiment asks for, and its settings derived from the config: one process,
or N FSDP2 ranks (``train.parallel``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from selfplay.config import ExperimentConfig
from selfplay.core.errors import UserError
from selfplay.engines.lora import lora_spec
from selfplay.rl.losses import LOSS_PRESETS
from selfplay.training.base import Learner, LearnerSettings
from selfplay.training.learner import LocalLearner
from selfplay.training.placement import launched_by_torchrun, world_size
from selfplay.training.rank_worker import ParallelSettings
from selfplay.training.sharded import ShardedLearner


def learner_settings(config: ExperimentConfig) -> LearnerSettings:
    """``LearnerSettings`` from the config: every field named like a ``train:`` key is that key
    (a new learner setting needs only the same name in both), except the ones derived here."""
    objective, _, default_aggregation = LOSS_PRESETS[config.train.loss]
    derived = {
        "objective": objective,
        "aggregation": config.train.aggregation or default_aggregation,
        "max_new_tokens": config.sampling.max_new_tokens,  # Dr. GRPO's constant normaliser
        "dtype": learner_dtype(config, torch.cuda.is_available()),
        "lora": lora_spec(config),  # None when fully fine-tuned
        "schedule_steps": config.train.steps,
    }
    train = config.train.model_dump()
    same = {
        f.name: train[f.name]
        for f in dataclasses.fields(LearnerSettings)
        if f.name in train and f.name not in derived
    }
    return LearnerSettings(**same, **derived)


def parallel_settings(config: ExperimentConfig) -> ParallelSettings:
    return ParallelSettings(**config.train.parallel.model_dump(), address=config.cluster.address)


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


def make_learner(config: ExperimentConfig, model_path: Path) -> Learner:
    """The learner ``config`` asks for, on ``model_path``'s weights."""
    parallel = parallel_settings(config)
    if launched_by_torchrun() and parallel.ranks != world_size():
        raise UserError(f"train.parallel.ranks: {parallel.ranks}, but torchrun started "
                        f"{world_size()} processes (--nproc-per-node must equal it)")
    settings, adapters = learner_settings(config), config.adapters()
    if parallel.ranks == 1:
        return LocalLearner(model_path, settings, adapters, config.engine.device)
    return ShardedLearner(model_path, settings, adapters, parallel)
