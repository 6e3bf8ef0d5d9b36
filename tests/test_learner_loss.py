"""The learner's batch loss, value and gradient, against the formulas of docs/algorithms.md#losses
by hand.

Each test builds a batch where the quantity it guards changes the answer: engine log-probs that
differ from the trainer's (TIS), ADPO scales and per-sample ε_high that differ from the defaults,
and gradients large enough that a relative tolerance means something.
"""

import math

import pytest
import torch

from selfplay.engines.lora import LoraSpec
from selfplay.rl.advantages import apply_adpo
from selfplay.training.base import LearnerSettings
from selfplay.training.learner import LocalLearner
from selfplay.types import Sample, Turn

LORA = LoraSpec(r=4, alpha=8)
PROMPT = list(range(200, 220))
COMPLETIONS = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16]]


@pytest.fixture(scope="module")
def base_learner(tiny_model_path) -> LocalLearner:
    torch.manual_seed(0)
    learner = LocalLearner(tiny_model_path, LearnerSettings(lora=LORA), ["shared"])
    _randomise_lora_b(learner)
    return learner


def _randomise_lora_b(learner: LocalLearner) -> None:
    with torch.no_grad():  # nonzero lora_B, so lora_A gets gradient too
        for name, param in learner.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)


@pytest.fixture
def make_learner(base_learner):
    """The module's learner (weights never change here: no optimizer step) with new settings."""

    def make(**settings) -> LocalLearner:
        base_learner.settings = LearnerSettings(lora=LORA, **settings)
        return base_learner

    return make


def _samples(advantages, completions=COMPLETIONS, prompt=PROMPT, engine_shift=0.0):
    return [
        Sample(
            turn=Turn(
                role="r",
                prompt_ids=list(prompt),
                completion_ids=list(c),
                engine_logprobs=[engine_shift] * len(c),
                loss_mask=[1] * len(c),
                text="",
            ),
            advantage=a,
            group_id=f"g{prompt[0]}",
        )
        for c, a in zip(completions, advantages, strict=True)
    ]


def _accumulate(learner, samples, logp_old_shift=None):
    """One gradient accumulation pass; optionally with first-pass log-probs logp − shift."""
    learner.optimizer.zero_grad(set_to_none=True)
    batches = learner._micro_batches(samples)
    if logp_old_shift is not None:
        with torch.no_grad():
            for batch in batches:
                batch.logp_old = learner.scorer.token_logprobs(batch)[0] - logp_old_shift
    return learner._accumulate(batches)


def _grads(learner) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in learner.model.named_parameters() if p.grad is not None}


# ---------------------------------------------------------------- TIS


def test_tis_weight_is_min_of_exp_trainer_minus_engine_and_cap(make_learner):
    """Engine log-probs set to trainer + δ per sample: weight min(exp(−δ), 2) — swapping the
    trainer and engine log-probs would give min(exp(+δ), 2) instead."""
    learner = make_learner(objective="reinforce", aggregation="token-mean")
    samples = _samples([1.0, -0.5, 2.0])
    deltas = [0.5, -1.5, 0.25]  # weights e^-0.5, 2 (capped from e^1.5), e^-0.25
    trainer = learner.score(samples)
    for sample, scored, delta in zip(samples, trainer, deltas, strict=True):
        sample.turn.engine_logprobs = [x + delta for x in scored]
    stats = _accumulate(learner, samples)
    weights = [min(math.exp(-d), 2.0) for d in deltas]
    tokens = sum(len(c) for c in COMPLETIONS)
    expected_mean = sum(w * len(c) for w, c in zip(weights, COMPLETIONS, strict=True)) / tokens
    assert stats["train/tis_weight_mean"] == pytest.approx(expected_mean, rel=1e-5)
    # reinforce, token-mean: loss = Σ_t (1/tokens)·w·(−Â·log π)
    expected_loss = sum(
        w * -s.advantage * sum(scored) / tokens
        for w, s, scored in zip(weights, samples, trainer, strict=True)
    )
    assert stats["train/loss"] == pytest.approx(expected_loss, rel=1e-5)
    # E[engine − trainer]: the mismatch metric has the engine first
    expected_kl = sum(d * len(c) for d, c in zip(deltas, COMPLETIONS, strict=True)) / tokens
    assert stats["train/mismatch_kl"] == pytest.approx(expected_kl, rel=1e-4)
    assert stats["train/mismatch_abs_max"] == pytest.approx(1.5, rel=1e-4)


def test_tis_off_gives_weight_one(make_learner):
    learner = make_learner(objective="reinforce", tis_cap=None)
    samples = _samples([1.0, -0.5, 2.0], engine_shift=-30.0)
    assert _accumulate(learner, samples)["train/tis_weight_mean"] == 1.0


# ---------------------------------------------------------------- ADPO reaches the loss


def test_adpo_scale_and_per_sample_eps_high_reach_the_ppo_loss(make_learner):
    """p̂ = (0.3, 0.55, 0.9): scale s = (0.6, 0.8, 1.0), ε_high = (0.3, 0.25, 0.2). With every
    ratio at 1.5 and Â > 0 the PPO token loss is −(1 + ε_high)·s·Â, so both the scale and
    each sample's own ε_high show in the loss (global ε_high is 0.28: none of the three)."""
    learner = make_learner(objective="ppo", aggregation="token-mean", eps_high=0.28, tis_cap=None)
    samples = _samples([1.0, 2.0, 0.5])
    for sample, p in zip(samples, [0.3, 0.55, 0.9], strict=True):
        sample.pass_rate = p
    apply_adpo(samples)
    assert [s.advantage_scale for s in samples] == pytest.approx([0.6, 0.8, 1.0])
    assert [s.eps_high for s in samples] == pytest.approx([0.3, 0.25, 0.2])
    stats = _accumulate(learner, samples, logp_old_shift=math.log(1.5))
    tokens = sum(len(c) for c in COMPLETIONS)
    expected = sum(
        -(1 + s.eps_high) * s.advantage_scale * s.advantage * len(c) / tokens
        for s, c in zip(samples, COMPLETIONS, strict=True)
    )
    assert stats["train/loss"] == pytest.approx(expected, rel=1e-4)
    assert stats["train/clip_frac"] == 1.0  # every ratio 1.5 is above 1 + ε_high


def test_ppo_lower_clip_binds_for_negative_advantages(make_learner):
    """Ratio 0.5 and Â < 0: −min(0.5·Â, 0.8·Â) = −0.8·Â (ε_low = 0.2); Â > 0: −0.5·Â."""
    learner = make_learner(objective="ppo", aggregation="token-mean", tis_cap=None)
    samples = _samples([-1.0, 1.0, -2.0])
    stats = _accumulate(learner, samples, logp_old_shift=math.log(0.5))
    tokens = sum(len(c) for c in COMPLETIONS)
    per_token = {-1.0: 0.8, 1.0: -0.5, -2.0: 1.6}
    expected = (
        sum(per_token[s.advantage] * len(c) for s, c in zip(samples, COMPLETIONS, strict=True))
        / tokens
    )
    assert stats["train/loss"] == pytest.approx(expected, rel=1e-4)
    assert stats["train/clip_frac"] == pytest.approx((4 + 6) / tokens)


def test_cispo_weight_is_capped_at_the_configured_eps_max(make_learner):
    """Every ratio at 1.5 and ε_max = 1.2: the CISPO weight is 1.2 for every token, so the
    loss is Σ c·(−1.2·Â·log π) and every token counts as clipped (the default 5 would not)."""
    learner = make_learner(
        objective="cispo", cispo_eps_max=1.2, aggregation="token-mean", tis_cap=None
    )
    samples = _samples([1.0, -2.0, 0.5])
    trainer = learner.score(samples)
    stats = _accumulate(learner, samples, logp_old_shift=math.log(1.5))
    tokens = sum(len(c) for c in COMPLETIONS)
    expected = sum(
        -1.2 * s.advantage * sum(scored) / tokens
        for s, scored in zip(samples, trainer, strict=True)
    )
    assert stats["train/loss"] == pytest.approx(expected, rel=1e-4)
    assert stats["train/clip_frac"] == 1.0


def _full_logprobs(learner, turn: Turn) -> torch.Tensor:
    """[completion tokens, vocab]: the model's own T = 1 log-softmax at each completion position."""
    with torch.no_grad():
        ids = torch.tensor([turn.prompt_ids + turn.completion_ids])
        logits = learner.model(input_ids=ids).logits[0, len(turn.prompt_ids) - 1 : -1].float()
    return torch.log_softmax(logits, -1)


def _entropies(learner, sample) -> torch.Tensor:
    """Entropy of the full T = 1 next-token distribution at each completion position."""
    logp = _full_logprobs(learner, sample.turn)
    return -(logp.exp() * logp).sum(-1)


def test_tool_tokens_are_conditioned_on_but_never_scored(make_learner):
    """Completion: model token, two tool-output tokens (mask 0), model token. Only the two
    model tokens are scored, the last one after the tool output it was conditioned on."""
    learner = make_learner()
    (sample,) = _samples([1.0], completions=[[5, 40, 41, 6]])
    sample.turn.loss_mask = [1, 0, 0, 1]
    (scored,) = learner.score([sample])
    full = _full_logprobs(learner, sample.turn)
    assert scored == pytest.approx([float(full[0, 5]), float(full[3, 6])], abs=1e-5)


def test_a_greedy_turn_is_scored_at_temperature_one_without_a_nucleus(make_learner):
    """Greedy turns (T = 0) carry the engine's T = 1 log-probs of the whole distribution,
    whatever top-p the request named; the learner scores them the same way."""
    learner = make_learner()
    (sample,) = _samples([1.0], completions=[[5, 6, 7, 8]])
    sample.turn.temperature, sample.turn.top_p = 0.0, 0.3
    (scored,) = learner.score([sample])
    full = _full_logprobs(learner, sample.turn)
    assert scored == pytest.approx(
        full.gather(1, torch.tensor([[5], [6], [7], [8]]))[:, 0].tolist(), abs=1e-5
    )


def test_metrics_are_token_means_over_every_micro_batch(make_learner):
    """One sample per micro-batch (2, 4 and 6 tokens), each with its own engine offset δ and
    clip state: every metric is a token mean over all three batches, not the last one's."""
    learner = make_learner(aggregation="token-mean", micro_batch_size=1, share_prefix=False)
    samples = _samples([1.0, -1.0, 0.5])
    deltas = [0.5, -0.2, 0.25]  # engine = trainer + δ
    for sample, scored, delta in zip(samples, learner.score(samples), deltas, strict=True):
        sample.turn.engine_logprobs = [x + delta for x in scored]
    assert len(learner._micro_batches(samples)) == 3
    stats = _accumulate(learner, samples, logp_old_shift=math.log(1.5))  # every ratio 1.5
    lengths = [len(c) for c in COMPLETIONS]
    tokens = sum(lengths)
    # engine − π_old = δ + log 1.5; TIS weight min(exp(−(δ + log 1.5)), 2)
    gaps = [d + math.log(1.5) for d in deltas]
    weights = [min(math.exp(-g), 2.0) for g in gaps]

    def mean(per_sample: list[float]) -> float:  # token-weighted
        return sum(v * n for v, n in zip(per_sample, lengths, strict=True)) / tokens

    assert stats["train/tis_weight_mean"] == pytest.approx(mean(weights), rel=1e-5)
    assert stats["train/mismatch_kl"] == pytest.approx(mean(gaps), rel=1e-4)
    assert stats["train/mismatch_abs_mean"] == pytest.approx(mean([abs(g) for g in gaps]), rel=1e-4)
    assert stats["train/mismatch_abs_max"] == pytest.approx(max(abs(g) for g in gaps), rel=1e-4)
    # ratio 1.5 is clipped where Â > 0 (samples of 4 and 6 tokens), not where Â < 0
    assert stats["train/clip_frac"] == pytest.approx((4 + 6) / tokens)
    # PPO per token: −1.28·Â where clipped (ε_high 0.28), −1.5·Â where not; times w, 1/tokens
    per_token_loss = [-1.28 * 1.0, -1.5 * -1.0, -1.28 * 0.5]
    losses = [w * loss for w, loss in zip(weights, per_token_loss, strict=True)]
    assert stats["train/loss"] == pytest.approx(mean(losses), rel=1e-4)
    entropy = sum(float(_entropies(learner, s).sum()) for s in samples) / tokens
    assert stats["train/entropy"] == pytest.approx(entropy, rel=1e-4)


def test_a_one_token_batch_reports_whole_fractions(make_learner):
    """One model token, its ratio 1.5 clipped (Â > 0): clip fraction 1 and TIS weight mean
    exp(−log 1.5) = 2/3 over exactly that one token."""
    learner = make_learner(aggregation="token-mean", tis_cap=2.0)
    (sample,) = _samples([1.0], completions=[[7]])
    sample.turn.engine_logprobs = learner.score([sample])[0]
    stats = _accumulate(learner, [sample], logp_old_shift=math.log(1.5))
    assert stats["train/clip_frac"] == 1.0
    assert stats["train/tis_weight_mean"] == pytest.approx(1 / 1.5, rel=1e-5)


# ---------------------------------------------------------------- gradients


def _reference_gradient(learner, samples) -> dict[str, torch.Tensor]:
    """Σ_samples Σ_t c·(−Â·log π(y_t)) through the model's own forward and a full log-softmax
    (PPO at ratio 1 has the REINFORCE gradient; TIS off), token-mean coefficients."""
    learner.optimizer.zero_grad(set_to_none=True)
    tokens = sum(s.turn.num_model_tokens for s in samples)
    for sample in samples:
        turn = sample.turn
        ids = torch.tensor([turn.prompt_ids + turn.completion_ids])
        logits = learner.model(input_ids=ids).logits[0, len(turn.prompt_ids) - 1 : -1].float()
        logp = torch.log_softmax(logits, -1).gather(1, torch.tensor(turn.completion_ids)[:, None])
        (-sample.advantage * logp.sum() / tokens).backward()
    return _grads(learner)


def _assert_close(got: dict, want: dict, rel: float = 1e-3) -> None:
    assert got.keys() == want.keys() and got
    for name in want:
        scale = want[name].norm()
        assert (got[name] - want[name]).norm() <= rel * scale + 1e-9, name


@pytest.mark.parametrize("share_prefix", [True, False])
def test_gradient_equals_the_formula_for_every_micro_batch_size(make_learner, share_prefix):
    """Prefix-tree and padded batches, micro-batches of 1, 2 and the whole batch (trees: cut
    at 16 and 40 nodes, or not at all): the same gradient, equal (relative tolerance 1e-3) to
    the loss written out by hand. Gradients are of order 1e-1 here, so a loss scaled by 1.5 is
    far outside the tolerance."""
    learner = make_learner(aggregation="token-mean", tis_cap=None)
    samples = _samples([3.0, -2.0, 1.5])
    samples += _samples([2.0], completions=[[1, 2, 3]], prompt=range(300, 310))  # lone prompt
    reference = _reference_gradient(learner, samples)
    largest = max(float(g.abs().max()) for g in reference.values())
    assert largest > 1e-2  # meaningful size: far above float noise
    learner.settings.share_prefix = share_prefix
    for size in (1, 2, len(samples)):
        learner.settings.micro_batch_size = size
        learner.settings.tree_tokens = {1: 16, 2: 40}.get(size, 2048)
        batches = learner._micro_batches(samples)
        if share_prefix:  # 20 + 4, + 2, + 6 and 10 + 3 unique tokens: each row alone when none
            # fits in 16 nodes, the shared prompt's rows and the lone one in 40, all in 2048
            assert all(b.tree is not None for b in batches)
            sizes = {1: [24, 22, 26, 13], 2: [32, 13], 4: [45]}[size]
            assert [b.tree.size for b in batches] == sizes
        else:
            assert len(batches) == math.ceil(4 / size) and all(b.tree is None for b in batches)
        learner.optimizer.zero_grad(set_to_none=True)
        learner._accumulate(batches)
        _assert_close(_grads(learner), reference)


def test_rows_sharing_a_beginning_share_its_nodes_in_one_tree(make_learner):
    """Two completions of one prompt and a lone prompt: one tree holding the shared prompt
    once (20 + 4 + 2 tokens) beside the lone row (10 + 3): 39 nodes, not 55."""
    learner = make_learner(share_prefix=True)
    pair = _samples([1.0, -1.0, 0.5])[:2]
    lone = _samples([2.0], completions=[[1, 2, 3]], prompt=range(300, 310))
    batches = learner._micro_batches(lone + pair)
    assert len(batches) == 1 and batches[0].tree.size == 39
    tree = batches[0].tree
    first, second = tree.nodes[0], tree.nodes[1]  # the pair (collated in token order: first)
    assert first[:20] == second[:20] and first[20] != second[20]


def test_ppo_epochs_measure_ratios_against_the_first_pass(tiny_model_path):
    """Epoch 2 compares π_θ with the log-probs of the first pass (π_old), not with itself: after
    a large first update its ratios leave the trust region and the clip binds."""
    torch.manual_seed(0)
    learner = LocalLearner(
        tiny_model_path,
        LearnerSettings(lora=LORA, lr=0.05, epochs=2, aggregation="token-mean", tis_cap=None),
        ["shared"],
    )
    samples = _samples([3.0, -2.0, 1.5])
    before = learner.score(samples)
    stats = learner.step(samples)
    assert stats["train/clip_frac"] > 0.2  # ratios measured against the first pass
    after = learner.score(samples)
    moved = torch.tensor(sum(after, [])) - torch.tensor(sum(before, []))
    assert moved.abs().max() > 0.2


@pytest.mark.timing  # a time limit: held under load (make test-under-load)
def test_step_counts_versions_and_reports_its_metrics(tiny_model_path):
    """The version counts optimizer steps one by one (async rollouts wait on it, an empty step
    included), and the metrics the dashboard and `selfplay analyze` read have their names and
    values: samples, model tokens, a finite gradient norm, seconds and tokens per second."""
    torch.manual_seed(0)
    learner = LocalLearner(tiny_model_path, LearnerSettings(lora=LORA, lr=1e-3), ["shared"])
    assert learner.version == 0 and learner.device == torch.device("cpu")
    assert learner.step([]) == {"train/samples": 0.0}
    assert learner.version == 1
    stats = learner.step(_samples([1.0, -1.0, 0.5]))
    assert learner.version == 2
    learner.step([])
    assert learner.version == 3
    assert stats["train/samples"] == 3.0
    assert stats["train/tokens"] == sum(len(c) for c in COMPLETIONS)
    assert 0.0 < stats["train/grad_norm"] < math.inf
    assert 0.0 < stats["train/seconds"] < 600.0
    assert stats["train/tokens_per_s"] == pytest.approx(
        stats["train/tokens"] / stats["train/seconds"], rel=1e-6
    )


def test_lora_without_adapter_names_is_refused_in_one_line(tiny_model_path):
    with pytest.raises(ValueError, match="^LoRA training needs at least one adapter name$"):
        LocalLearner(tiny_model_path, LearnerSettings(lora=LORA), [])


def test_a_full_fine_tune_ignores_adapter_names(tiny_model_path):
    learner = LocalLearner(tiny_model_path, LearnerSettings(lora=None), ["shared"])
    assert learner.adapters == []
    assert learner.score(_samples([1.0, 1.0, 1.0]))  # no set_adapter on a model without LoRA


def test_gradient_checkpointing_with_lora_gives_the_same_gradient(tiny_model_path):
    """Turning gradient checkpointing on for LoRA training does not change the gradient, and
    it is really on: the first decoder layer runs again in the backward pass (a forward
    pre-hook counts it; a post-hook would not, as torch stops the recomputation early)."""
    samples = _samples([1.0, -2.0, 0.5])
    grads, runs = [], []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        learner = LocalLearner(
            tiny_model_path,
            LearnerSettings(lora=LORA, gradient_checkpointing=checkpointing, share_prefix=False),
            ["shared"],
        )
        _randomise_lora_b(learner)
        first_layer = learner.model.get_base_model().get_decoder().layers[0]
        calls: list[int] = []
        first_layer.register_forward_pre_hook(lambda *_, calls=calls: calls.append(1))
        learner.model.train()
        _accumulate(learner, samples)  # one micro-batch: one forward
        grads.append(_grads(learner))
        runs.append(len(calls))
    assert runs == [1, 2]
    assert grads[0] and grads[0].keys() == grads[1].keys()
    _assert_close(grads[1], grads[0])
