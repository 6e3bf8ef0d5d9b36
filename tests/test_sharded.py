"""The sharded learner on 2 CPU ranks (Ray actors, gloo, FSDP2) against the one-process learner:
the same step to 1e-5 in fp32 (LoRA, full fine-tuning, two adapters of which one trains), with
unequal micro-batch counts per rank and groups split across ranks; checkpoints that load on
another number of ranks; a dead rank is one line."""

from __future__ import annotations

import dataclasses

import pytest
import torch

ray = pytest.importorskip("ray")

from selfplay.core.errors import UserError  # noqa: E402
from selfplay.engines.lora import LoraSpec  # noqa: E402
from selfplay.training.base import LearnerSettings  # noqa: E402
from selfplay.training.learner import LocalLearner  # noqa: E402
from selfplay.training.rank_worker import ParallelSettings  # noqa: E402
from selfplay.training.sharded import ShardedLearner, deal  # noqa: E402
from selfplay.types import Sample, Turn  # noqa: E402

LORA = LoraSpec(r=4, alpha=8)
TOLERANCE = 1e-5


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    from selfplay.engines.ray_pool import connect

    connect(num_cpus=2)
    yield
    ray.shutdown()


def samples(adapters=("shared",)) -> list[Sample]:
    """Two GRPO groups of three and three lone samples of varied lengths (9 samples: five
    micro-batches of two, so the ranks get three and two, and the groups are split)."""
    out = []
    for g, adapter in zip(range(3), [*adapters, *adapters, *adapters], strict=False):
        prompt = [200 + 7 * g + k for k in range(10 + 3 * g)]
        size = 3 if g < 2 else 1
        for i in range(size):
            completion = [5 + i + g, 6 + g, 7 + i, 8, 9 + g][: 2 + i + g]
            out.append(Sample(
                Turn("r", prompt, completion, [-1.0 - 0.1 * i] * len(completion),
                     [1] * len(completion), "", adapter=adapter),
                advantage=(i - 1) * 0.5 + 0.2 * g, group_id=f"g{g}",
            ))
    out += [
        Sample(Turn("r", [300 + k for k in range(n)], [11, 12, 13][: n % 3 + 1],
                    [-2.0] * (n % 3 + 1), [1] * (n % 3 + 1), "", adapter=adapters[-1]),
               advantage=0.3 * n - 1.0, group_id=f"lone{n}")
        for n in (4, 6)
    ]
    return out


def pair(tiny_model_path, settings: LearnerSettings, adapters: list[str]):
    """A one-process learner and a 2-rank learner built from the same random state (so their
    LoRA initialisations are the same)."""
    torch.manual_seed(0)
    state = torch.get_rng_state()
    one = LocalLearner(tiny_model_path, settings, adapters)
    after = torch.get_rng_state()
    torch.set_rng_state(state)
    two = ShardedLearner(tiny_model_path, settings, adapters, ParallelSettings(ranks=2))
    assert torch.equal(torch.get_rng_state(), after)  # the driver goes on as if built here
    return one, two


def assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys() and a
    scale = max(float(v.abs().max()) for v in a.values()) or 1.0
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert worst <= TOLERANCE * max(scale, 1.0), worst


def assert_same_step(one, two, batch: list[Sample]) -> None:
    first, second = one.step(batch), two.step([dataclasses.replace(s) for s in batch])
    for key in ("train/loss", "train/grad_norm", "train/entropy", "train/tis_weight_mean",
                "train/clip_frac", "train/mismatch_kl", "train/tokens", "train/samples"):
        assert second[key] == pytest.approx(first[key], rel=TOLERANCE, abs=1e-9), key
    assert_close(one.trainable_weights(), two.trainable_weights())


def test_deal_pads_every_rank_to_the_same_number_of_passes() -> None:
    from selfplay.training.batches import micro_batches

    batches = micro_batches(samples(), [], aggregation="token-mean", max_new_tokens=8,
                            micro_batch_size=2, eps_high=0.28, share_prefixes=False)
    shares, weights = deal(batches, 2)
    assert len(batches) == 5 and [len(s) for s in shares] == [3, 3]
    assert sorted(sum(w) for w in weights) == [2.0, 3.0]  # one padding pass, weight 0
    assert sum(b.tokens for share, w in zip(shares, weights, strict=True)
               for b, x in zip(share, w, strict=True) if x) == sum(b.tokens for b in batches)


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
@pytest.mark.parametrize("aggregation", ["seq-mean-token-sum-norm", "token-mean"])
def test_lora_step_on_two_ranks_equals_one_process(tiny_model_path, aggregation) -> None:
    settings = LearnerSettings(lora=LORA, lr=1e-2, micro_batch_size=2, aggregation=aggregation,
                               max_new_tokens=8)
    one, two = pair(tiny_model_path, settings, ["shared"])
    try:
        assert_close(one.trainable_weights(), two.trainable_weights())
        for _ in range(2):  # the second step: Adam's moments and non-zero lora_B
            assert_same_step(one, two, samples())
        assert one.version == two.version == 2
        assert_close(one.adapter_weights("shared"), two.adapter_weights("shared"))
    finally:
        two.close()


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_full_fine_tuning_step_on_two_ranks_equals_one_process(tiny_model_path) -> None:
    settings = LearnerSettings(lora=None, lr=1e-3, micro_batch_size=2, max_new_tokens=8)
    one, two = pair(tiny_model_path, settings, [])
    try:
        assert_same_step(one, two, samples())
        full_one, full_two = one.full_weights(), two.full_weights()
        assert_close({k: full_one[k] for k in full_two}, full_two)
    finally:
        two.close()


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_an_adapter_no_rank_trains_is_left_alone(tiny_model_path) -> None:
    """Two adapters, a step that trains only one: the other gets no update on either learner
    (a zero gradient would still move it through AdamW's weight decay and moments)."""
    settings = LearnerSettings(lora=LORA, lr=1e-2, micro_batch_size=2, weight_decay=0.1,
                               max_new_tokens=8)
    one, two = pair(tiny_model_path, settings, ["a", "b"])
    try:
        before = two.adapter_weights("b")
        assert_same_step(one, two, samples(("a", "b")))  # both adapters train
        assert_same_step(one, two, samples(("a",)))  # only a
        assert not all(torch.equal(before[k], v) for k, v in two.adapter_weights("b").items())
        settled = two.adapter_weights("b")
        assert_same_step(one, two, samples(("a",)))
        assert all(torch.equal(settled[k], v) for k, v in two.adapter_weights("b").items())
    finally:
        two.close()


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_a_checkpoint_loads_on_another_number_of_ranks(tiny_model_path, tmp_path) -> None:
    """Saved on 2 ranks, loaded on 1 and on 2; saved on 1, loaded on 2: the same weights,
    optimizer state and version, and the next step equal to the learner that went on."""
    settings = LearnerSettings(lora=LORA, lr=1e-2, micro_batch_size=2, max_new_tokens=8)
    one, two = pair(tiny_model_path, settings, ["shared"])
    try:
        assert_same_step(one, two, samples())
        two.save(tmp_path / "two")
        one.save(tmp_path / "one")
        reloaded = LocalLearner(tiny_model_path, settings, ["shared"])
        reloaded.load(tmp_path / "two")
        assert reloaded.version == 1
        assert_close(two.trainable_weights(), reloaded.trainable_weights())
        assert_same_step(reloaded, two, samples())  # Adam's state came along too
    finally:
        two.close()
    again = ShardedLearner(tiny_model_path, settings, ["shared"], ParallelSettings(ranks=2))
    try:
        again.load(tmp_path / "one")
        assert again.version == 1
        assert_close(one.trainable_weights(), again.trainable_weights())
        assert_same_step(one, again, samples())
    finally:
        again.close()


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_a_dead_rank_ends_the_step_in_one_line(tiny_model_path) -> None:
    settings = LearnerSettings(lora=LORA, micro_batch_size=2, max_new_tokens=8)
    two = ShardedLearner(tiny_model_path, settings, ["shared"], ParallelSettings(ranks=2))
    try:
        ray.kill(two.group.workers[1])
        with pytest.raises(UserError, match="a learner rank died") as info:
            two.step(samples())
        assert "\n" not in str(info.value) and "selfplay resume" in str(info.value)
    finally:
        two.close()
