"""`selfplay bench gpu`'s stages on the CPU (their dry run): the sync stage must tell a sync
that reached the engine from one that skipped it, and the sharded stage's checkpoint round trip
must restore the weights a step moved. On a GPU the same code gave docs/scale.md's figures."""

from __future__ import annotations

import pytest

from selfplay.bench import gpu
from selfplay.engines.models import tiny_model_dir


@pytest.fixture
def small_batch(monkeypatch):
    for name, value in (("PROMPT", 16), ("COMPLETION", 8), ("SEQUENCES", 4), ("MICRO", 2)):
        monkeypatch.setattr(gpu, name, value)


def test_sync_stage_tells_a_skipped_sync_from_a_real_one(small_batch):
    result = gpu.stage_sync(tiny_model_dir(), "lora")
    # LoRA B starts at zero: the base on both sides, equal but for fp32 rounding (the engine
    # scores through a prefix tree's 4D mask, the learner another kernel: 1.9e-6 measured)
    assert result["before_step"] < 1e-5
    for transport in ("inprocess", "filesystem"):
        # bf16 on both sides leaves rounding; a skipped sync leaves the trained steps' change
        assert result[transport] < 0.05 < result["planted_skip"], result
        assert result[f"{transport}_mib"] > 0


def test_sharded_stage_restores_its_checkpoint(small_batch, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(29500 + __import__("os").getpid() % 1000))
    result = gpu.stage_sharded(tiny_model_dir(), "lora", steps=1)
    assert result["dcp_moved_after_step"] > 0  # the step after the save changed the weights
    assert result["dcp_gap_after_load"] == 0.0  # and loading the checkpoint undid it exactly
