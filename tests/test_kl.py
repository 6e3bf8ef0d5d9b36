"""The KL term to the initial policy (``train.kl_coef``; docs/algorithms.md, "KL to the
initial policy"): the three estimators against numbers worked by hand, the learner's loss
against the policy loss plus β·Σ c_t·KL_t computed from an independently scored reference, the
sign of its gradient, the sharded learner against the one-process one, and no reference at all
when it is off.

Float tolerances: the learner sums in float32 in its own order (chunks, micro-batches, shared
prompts run once), the hand computation in float64 from log-probs scored one sample at a time;
MKL (Intel) and OpenBLAS/AOCL (AMD) round matmuls differently. 1e-5 relative is a hundred times
float32's rounding on these sums and far below any planted bug's effect (≥ 1e-2 relative).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from selfplay.core.errors import UserError
from selfplay.engines.lora import LoraSpec
from selfplay.rl.losses import kl_estimate
from selfplay.training.base import LearnerSettings
from selfplay.training.learner import LocalLearner
from selfplay.types import Sample, Turn

LORA = LoraSpec(r=4, alpha=8)
REL = 1e-5  # see the module docstring
# Weights after two AdamW steps at lr 1e-2: the first step's gradient is ~1e-9 on some LoRA
# elements (B = 0, zero KL), so their second-moment estimate is below ε² and the second update
# lr·m̂/(√v̂ + ε) turns a 1e-6 relative rounding difference of the gradient into ~1e-3 of lr.
# The same gap (5.9e-5) separates one process with and without shared prompts; a wrong
# reference on the ranks moves the weights by the order of lr (1e-2), and train/kl with them.
WEIGHTS_ABS = 2e-4
PROMPT = list(range(200, 220))
COMPLETIONS = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16]]


# ---------------------------------------------------------------- the estimators


@pytest.mark.parametrize(
    "log_ratio, k1, k2, k3",
    [
        (0.0, 0.0, 0.0, 0.0),
        (0.5, 0.5, 0.125, math.exp(-0.5) - 0.5),  # 0.1065...
        (-1.0, -1.0, 0.5, math.e - 2.0),  # 0.7182...: k3 > k2 where π_θ < π_ref
        (2.0, 2.0, 2.0, math.exp(-2.0) + 1.0),  # 1.1353...
        (-2.0, -2.0, 2.0, math.exp(2.0) - 3.0),  # 4.3890...
        (-3.0, -3.0, 4.5, 10.0),  # e³ − 4 = 16.09, clamped to 10
        (30.0, 30.0, 450.0, 10.0),  # ℓ clamped to 20: 19.0000..., then to 10
    ],
)
def test_estimators_equal_the_hand_computed_values(log_ratio, k1, k2, k3) -> None:
    """k1 = ℓ, k2 = ℓ²/2, k3 = e^{−ℓ} − 1 + ℓ, capped at 10 (float64 here: exact to 1e-12)."""
    logp_ref = torch.tensor([-1.5], dtype=torch.float64)
    logp = logp_ref + log_ratio
    for estimator, expected in (("k1", k1), ("k2", k2), ("k3", k3)):
        value = kl_estimate(logp, logp_ref, estimator)
        assert float(value) == pytest.approx(expected, rel=1e-12, abs=1e-12), estimator


def test_k3_clamps_the_log_ratio_so_a_far_token_has_a_finite_gradient() -> None:
    """ℓ = −100 in float32: e^{100} overflows to inf, and the capped value's zero gradient times
    inf would be NaN; clamping ℓ to ±20 first (as verl) keeps it 0. Inside the caps the gradient
    is 1 − e^{−ℓ}."""
    logp = torch.tensor([-101.0, -0.5, 0.0], requires_grad=True)
    logp_ref = torch.tensor([-1.0, -1.0, 0.0])
    values = kl_estimate(logp, logp_ref, "k3")
    values.sum().backward()
    assert values[0].item() == 10.0
    assert torch.isfinite(logp.grad).all()
    assert logp.grad.tolist() == pytest.approx([0.0, 1 - math.exp(-0.5), 0.0], abs=1e-6)


def test_the_reference_gets_no_gradient() -> None:
    logp = torch.tensor([-0.3], requires_grad=True)
    logp_ref = torch.tensor([-1.0], requires_grad=True)
    kl_estimate(logp, logp_ref, "k3").sum().backward()
    assert logp_ref.grad is None and logp.grad is not None


# ---------------------------------------------------------------- the learner's loss


def _samples(advantages: list[float]) -> list[Sample]:
    """A GRPO group of three (its prompt runs once) plus the same completions unshared."""
    out = []
    for c, a in zip(COMPLETIONS, advantages, strict=True):
        out.append(Sample(Turn("r", list(PROMPT), list(c), [0.0] * len(c), [1] * len(c), ""),
                          advantage=a, group_id="g"))
    return out


def _reference_logprobs(tiny_model_path, samples: list[Sample]) -> list[list[float]]:
    """The initial policy, scored by a learner of its own: the plain model, no adapters."""
    return LocalLearner(tiny_model_path, LearnerSettings(lora=None), [], "cpu").score(samples)


def _hand_loss(samples, policy, reference, beta: float, estimator: str) -> tuple[float, float]:
    """reinforce, token-mean, no TIS: Σ_t c·(−Â·log π_θ + β·KL_t) with c = 1/tokens, and the
    token mean of KL_t, in float64."""
    tokens = sum(len(p) for p in policy)
    loss = kl_sum = 0.0
    for sample, logp, logp_ref in zip(samples, policy, reference, strict=True):
        for lp, lr in zip(logp, logp_ref, strict=True):
            kl = float(kl_estimate(torch.tensor(lp, dtype=torch.float64),
                                   torch.tensor(lr, dtype=torch.float64), estimator))
            loss += (-sample.advantage * lp + beta * kl) / tokens
            kl_sum += kl
    return loss, kl_sum / tokens


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_loss_is_the_policy_loss_plus_beta_times_the_coefficient_weighted_kl(
    tiny_model_path, finetune, estimator
) -> None:
    """A step that moves the policy, then a step whose loss must be the policy loss plus
    β·Σ c_t·KL_t from a reference scored by another learner (the plain initial model)."""
    torch.manual_seed(0)
    beta = 0.5
    settings = LearnerSettings(
        lora=LORA if finetune == "lora" else None, lr=1e-2 if finetune == "lora" else 1e-3,
        objective="reinforce", aggregation="token-mean", tis_cap=None, kl_coef=beta,
        kl_estimator=estimator,
    )
    learner = LocalLearner(tiny_model_path, settings, ["shared"], "cpu")
    samples = _samples([1.0, -0.5, 2.0])
    learner.step(samples)
    policy = learner.score(samples)
    reference = _reference_logprobs(tiny_model_path, samples)
    expected_loss, expected_kl = _hand_loss(samples, policy, reference, beta, estimator)
    assert abs(expected_kl) > 1e-3  # the first step moved the policy: the test can see β·KL
    stats = learner.step(samples)
    assert stats["train/kl"] == pytest.approx(expected_kl, rel=REL)
    assert stats["train/loss"] == pytest.approx(expected_loss, rel=REL)


def test_kl_is_zero_at_the_start_and_its_gradient_pulls_the_policy_back(tiny_model_path) -> None:
    """LoRA B starts at 0, so the policy is the base and KL = 0 exactly, with no gradient under
    zero advantages. After a step that moved the adapter, KL > 0, and a small step along minus
    the gradient of the KL term alone (zero advantages) brings the policy nearer the base."""
    torch.manual_seed(0)
    settings = LearnerSettings(lora=LORA, lr=1e-2, objective="reinforce",
                               aggregation="token-mean", tis_cap=None, kl_coef=1.0)
    learner = LocalLearner(tiny_model_path, settings, ["shared"], "cpu")
    still = _samples([0.0, 0.0, 0.0])
    first = learner.step(still)
    # LoRA's term is exactly +0 while B = 0: the same numbers as the adapter-free pass
    assert first["train/kl"] == 0.0 and first["train/grad_norm"] == 0.0
    learner.step(_samples([1.0, -0.5, 2.0]))
    learner.optimizer.zero_grad(set_to_none=True)
    before = learner._accumulate(learner._micro_batches(still))["train/kl"]
    assert before > 1e-4
    params = [p for p in learner.model.parameters() if p.grad is not None]
    with torch.no_grad():
        for param in params:
            param -= 1.0 * param.grad  # gives after/before ≈ 0.63 here; ascent would raise it
    learner.optimizer.zero_grad(set_to_none=True)
    after = learner._accumulate(learner._micro_batches(still))["train/kl"]
    assert after < 0.8 * before, (before, after)


# ---------------------------------------------------------------- off means off


def _count_decoder_passes(learner: LocalLearner) -> list[int]:
    calls = [0]
    decoder = learner.model.get_base_model().get_decoder() if learner.adapters else (
        learner.model.get_decoder())
    decoder.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_kl_coef_zero_scores_no_reference(tiny_model_path, finetune) -> None:
    """Off: one decoder pass per micro-batch (shared prompts: two, prefix then completions), no
    reference log-probs, no frozen copy, no train/kl; on: the reference pass doubles them."""
    samples = _samples([1.0, -0.5, 2.0])
    passes = {}
    for beta in (0.0, 0.1):
        settings = LearnerSettings(lora=LORA if finetune == "lora" else None, kl_coef=beta)
        learner = LocalLearner(tiny_model_path, settings, ["shared"], "cpu")
        assert (learner.scorer.reference is None) == (beta == 0.0 or finetune == "lora")
        calls = _count_decoder_passes(learner)  # the policy's (full: the copy has its own)
        batches = learner._micro_batches(samples)
        stats = learner._accumulate(batches)
        assert all((b.logp_ref is None) == (beta == 0.0) for b in batches)
        assert ("train/kl" in stats) == (beta > 0.0)
        passes[beta] = calls[0]
    assert passes[0.0] > 0
    assert passes[0.1] == (2 if finetune == "lora" else 1) * passes[0.0]


def test_full_fine_tuning_settings_changed_to_kl_after_building_are_refused(
    tiny_model_path,
) -> None:
    learner = LocalLearner(tiny_model_path, LearnerSettings(lora=None), [], "cpu")
    learner.settings = LearnerSettings(lora=None, kl_coef=0.1)
    with pytest.raises(ValueError, match="frozen initial weights"):
        learner._accumulate(learner._micro_batches(_samples([1.0, -0.5, 2.0])))


# ---------------------------------------------------------------- config


def test_config_passes_kl_settings_to_the_learner_and_refuses_bad_ones(tmp_path) -> None:
    import yaml

    from selfplay.loops import load_experiment
    from selfplay.training.make import learner_settings
    from tests.conftest import tiny_config

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(tiny_config(tmp_path)))
    config = load_experiment(str(path), ["train.kl_coef=0.01", "train.kl_estimator=k2"])
    settings = learner_settings(config)
    assert (settings.kl_coef, settings.kl_estimator) == (0.01, "k2")
    assert learner_settings(load_experiment(str(path))).kl_coef == 0.0  # off by default
    for bad, key in (("train.kl_coef=-0.1", "train.kl_coef"),
                     ("train.kl_estimator=k4", "train.kl_estimator")):
        with pytest.raises(UserError) as info:
            load_experiment(str(path), [bad])
        assert key in str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------- two ranks


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_two_ranks_give_the_one_process_kl_loss_and_update(tiny_model_path, finetune) -> None:
    """The reference on 2 gloo ranks (LoRA: adapters disabled on each rank; full: a frozen
    FSDP2-sharded copy) against the one-process learner, over two steps (the first moves the
    policy, the second has KL > 0). The step's numbers to 1e-5 relative as in
    tests/test_sharded.py: fp32 sums of the same terms in another order (micro-batches dealt to
    ranks, prompts run in full rather than once per group, gradients summed by
    reduce-scatter). The weights to WEIGHTS_ABS: see there."""
    pytest.importorskip("ray")
    import ray

    from selfplay.engines.ray_pool import connect
    from selfplay.training.rank_worker import ParallelSettings
    from selfplay.training.sharded import ShardedLearner
    from tests.test_sharded import samples

    settings = LearnerSettings(lora=LORA if finetune == "lora" else None,
                               lr=1e-2 if finetune == "lora" else 1e-3, micro_batch_size=2,
                               max_new_tokens=8, kl_coef=0.5)
    adapters = ["shared"] if finetune == "lora" else []
    connect(num_cpus=2)
    torch.manual_seed(0)
    state = torch.get_rng_state()
    one = LocalLearner(tiny_model_path, settings, adapters, "cpu")
    torch.set_rng_state(state)
    two = ShardedLearner(tiny_model_path, settings, adapters, ParallelSettings(ranks=2))
    try:
        for step in range(2):
            batch = samples()
            first = one.step(batch)
            second = two.step([dataclasses.replace(s) for s in batch])
            assert (first["train/kl"] > 1e-4) == (step == 1)
            for key in ("train/kl", "train/loss", "train/grad_norm"):
                assert second[key] == pytest.approx(first[key], rel=REL, abs=1e-9), key
            a, b = one.trainable_weights(), two.trainable_weights()
            assert a.keys() == b.keys() and a
            assert max(float((a[k] - b[k]).abs().max()) for k in a) <= WEIGHTS_ABS
    finally:
        two.close()
        ray.shutdown()


# ---------------------------------------------------------------- selfplay plan


def test_plan_counts_the_frozen_copy_only_for_full_fine_tuning() -> None:
    """spiral-kuhn fully fine-tunes Qwen3-4B in fp32 on 8 ranks: the copy adds an eighth of the
    weights to each rank, kept between steps too; LoRA's reference (the base) adds nothing."""
    from selfplay.loops import load_experiment
    from selfplay.running.plan import plan, shape_of

    config = load_experiment("spiral-kuhn")
    off = plan(config, gpus=8)
    config.train.kl_coef = 0.01
    on = plan(config, gpus=8)
    copy = shape_of("Qwen/Qwen3-4B-Base").params * 4 / 8
    assert on.learner["KL reference (frozen copy)"] == pytest.approx(copy)
    assert on.learner_peak - off.learner_peak == pytest.approx(copy)
    assert on.learner["at rest"] - off.learner["at rest"] == pytest.approx(copy)
    lora = load_experiment("spice-1gpu", ["train.kl_coef=0.01"])
    assert plan(lora, gpus=1).learner == plan(load_experiment("spice-1gpu"), gpus=1).learner
