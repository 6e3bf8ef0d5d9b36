"""The learner an experiment asks for: one process, or N FSDP2 ranks (``train.parallel``)."""

from __future__ import annotations

from pathlib import Path

from selfplay.training.learner import Learner, LearnerSettings
from selfplay.training.sharded import ParallelSettings, ShardedLearner


def make_learner(
    model_path: Path,
    settings: LearnerSettings,
    adapters: list[str],
    device: str | None,
    parallel: ParallelSettings,
) -> Learner | ShardedLearner:
    if parallel.ranks == 1:
        return Learner(model_path, settings, adapters, device)
    return ShardedLearner(model_path, settings, adapters, parallel)
