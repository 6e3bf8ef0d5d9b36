"""Weight transports and the probe every sync must pass: a sync that does not reach the engine
fails; the filesystem transport's files, marker and pruning; the choice of transport; NCCL's
buckets (planned, packed and unpacked on the CPU) and its refusal without GPUs."""

from __future__ import annotations

import pytest
import torch

from selfplay.core.errors import UserError
from selfplay.engines.base import read_weights_file
from selfplay.engines.buckets import pack, plan, unpack
from selfplay.engines.hf import HFEngine
from selfplay.engines.lora import LoraSpec
from selfplay.engines.policy import BatchingPolicy
from selfplay.training.base import LearnerSettings
from selfplay.training.learner import LocalLearner
from selfplay.training.sync import (
    DirectTransport,
    FilesystemTransport,
    Probe,
    SyncError,
    WeightSync,
    choose_transport,
)
from selfplay.types import Sample, Turn

LORA = LoraSpec(r=4, alpha=8)


class Lost:
    """A transport whose weights never arrive (the bug verl #7495 and TRL #4603 report)."""

    name = "lost"

    def send(self, learner, engine) -> int:
        return 0


def trained(learner: LocalLearner) -> LocalLearner:
    """A large step (lr 0.5), so the new policy's log-probs differ from the old one's."""
    adapter = learner.adapters[0] if learner.adapters else "shared"
    good, bad = ([Turn("r", list(range(200, 220)), c, [-1.0] * 4, [1] * 4, "", adapter=adapter)]
                 for c in ([5, 6, 7, 8], [9, 10, 11, 12]))
    learner.step([Sample(good[0], 1.0), Sample(bad[0], -1.0)])
    return learner


@pytest.fixture
def pair(tiny_model_path):
    learner = LocalLearner(tiny_model_path, LearnerSettings(lora=LORA, lr=0.5), ["shared"])
    engine = HFEngine(tiny_model_path, lora=LORA, adapters=["shared"])
    return learner, engine, BatchingPolicy(engine), Probe.of(engine.tokenizer, 8)


def test_a_sync_that_does_not_reach_the_engine_fails_the_probe(pair) -> None:
    learner, engine, policy, probe = pair
    trained(learner)
    with pytest.raises(SyncError, match="did not reach the engine") as info:
        WeightSync(Lost(), probe, 1e-3)(learner, engine, policy)
    assert "\n" not in str(info.value)
    synced = WeightSync(DirectTransport(), probe, 1e-3)(learner, engine, policy)
    assert synced["sync/probe_gap"] < 1e-4 and synced["sync/bytes"] > 0
    assert policy.version == learner.version == 1


def test_filesystem_transport_writes_marks_loads_and_prunes(pair, tmp_path) -> None:
    learner, engine, policy, probe = pair
    transport = FilesystemTransport(tmp_path / "weights")
    sync = WeightSync(transport, probe, 1e-3)
    for _ in range(3):
        trained(learner)
        synced = sync(learner, engine, policy)
        assert synced["sync/probe_gap"] < 1e-4
    versions = sorted(p.name for p in (tmp_path / "weights").iterdir())
    assert versions == ["v000002", "v000003"]  # the last two kept
    newest = tmp_path / "weights" / "v000003"
    assert (newest / "STABLE").exists()
    on_disk = read_weights_file(newest / "shared.safetensors")
    live = learner.adapter_weights("shared")
    assert on_disk.keys() == live.keys() and all(torch.equal(on_disk[k], live[k]) for k in live)
    (newest / "STABLE").unlink()
    with pytest.raises(FileNotFoundError, match="not complete yet"):
        read_weights_file(newest / "shared.safetensors")


def test_transport_choice(pair, tmp_path) -> None:
    learner, engine, _, _ = pair
    assert choose_transport("auto", engine, tmp_path, learner, 1).name == "inprocess"
    assert choose_transport("filesystem", engine, tmp_path, learner, 1).name == "filesystem"

    class Pool:  # what choose_transport reads of a RayEnginePool
        placement, address = "pool", None

    assert choose_transport("auto", Pool(), tmp_path, learner, 1).name == "object_store"
    Pool.address = "auto"  # replicas on other machines: files they can all read
    assert choose_transport("auto", Pool(), tmp_path, learner, 1).name == "filesystem"
    with pytest.raises(UserError, match="needs a Ray engine pool"):
        choose_transport("object_store", engine, tmp_path, learner, 1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without GPUs")
def test_nccl_is_refused_without_gpus_in_one_line(pair, tmp_path) -> None:
    learner, engine, _, _ = pair
    with pytest.raises(UserError, match="this machine has none") as info:
        choose_transport("nccl", engine, tmp_path, learner, 1)
    assert "\n" not in str(info.value)


def weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {
        "model.embed_tokens.weight": torch.randn(50, 8),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 8),
        "model.layers.0.input_layernorm.weight": torch.randn(8).to(torch.bfloat16),
        "model.layers.0.mlp.up_proj.weight": torch.randn(16, 8),
        "model.layers.1.self_attn.q_proj.weight": torch.randn(8, 8),
        "model.layers.1.input_layernorm.weight": torch.randn(8).to(torch.bfloat16),
        "model.norm.weight": torch.randn(8),
        "lm_head.weight": torch.randn(50, 8),
    }


def test_buckets_follow_the_layers_and_keep_dtypes_apart() -> None:
    buckets = plan(weights(), bucket_bytes=2**20)
    layout = [(b.layer, str(b.dtype), [e.name.split(".")[-2] for e in b.entries]) for b in buckets]
    assert layout == [
        (-1, "torch.float32", ["embed_tokens"]),
        (0, "torch.float32", ["q_proj", "up_proj"]),
        (0, "torch.bfloat16", ["input_layernorm"]),
        (1, "torch.float32", ["q_proj"]),
        (1, "torch.bfloat16", ["input_layernorm"]),
        (10**9, "torch.float32", ["norm", "lm_head"]),
    ]
    names = [e.name for b in buckets for e in b.entries]
    assert sorted(names) == sorted(weights())  # every tensor exactly once


def test_buckets_close_at_their_size_and_round_trip() -> None:
    tensors = weights()
    small = plan(tensors, bucket_bytes=300)  # a 16x8 fp32 tensor (512 B) gets its own bucket
    assert all(b.nbytes <= 300 or len(b.entries) == 1 for b in small)
    assert len(small) > len(plan(tensors, bucket_bytes=2**20))
    for bucket in small:
        for name, tensor in unpack(pack(tensors, bucket), bucket):
            assert tensor.dtype == tensors[name].dtype and torch.equal(tensor, tensors[name])
