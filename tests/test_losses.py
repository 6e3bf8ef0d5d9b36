import pytest
import torch

from selfplay.rl.losses import (
    LogitTransform,
    chunked_logprobs,
    nucleus_mask,
    tis_weights,
    token_coefficients,
    token_losses,
)
from selfplay.types import Sample, Turn


def _sample(length, group="g", masked=0):
    mask = [1] * length + [0] * masked
    turn = Turn(
        role="r",
        prompt_ids=[1],
        completion_ids=[5] * (length + masked),
        engine_logprobs=[0.0] * (length + masked),
        loss_mask=mask,
        text="",
    )
    return Sample(turn=turn, advantage=1.0, group_id=group)


LENGTHS = [2, 6]


def _batch_loss(mode, token_loss=1.0, max_len=10):
    samples = [_sample(n) for n in LENGTHS]
    coefficients = token_coefficients(samples, mode, max_len)
    return sum(c * token_loss * n for c, n in zip(coefficients, LENGTHS, strict=True))


def test_token_mean_weights_every_token_equally():
    assert token_coefficients([_sample(n) for n in LENGTHS], "token-mean", 10) == [1 / 8, 1 / 8]
    assert _batch_loss("token-mean") == pytest.approx(1.0)


def test_seq_mean_token_sum_norm_divides_by_constant_not_length():
    coefficients = token_coefficients([_sample(n) for n in LENGTHS], "seq-mean-token-sum-norm", 10)
    assert coefficients == [1 / 20, 1 / 20]
    # Dr. GRPO: a longer sequence contributes more in total (no per-length normalisation)
    assert _batch_loss("seq-mean-token-sum-norm") == pytest.approx((2 + 6) / 20)


def test_seq_mean_token_mean_normalises_each_sequence():
    coefficients = token_coefficients([_sample(n) for n in LENGTHS], "seq-mean-token-mean", 10)
    assert coefficients == [pytest.approx(1 / 4), pytest.approx(1 / 12)]
    assert _batch_loss("seq-mean-token-mean") == pytest.approx(1.0)


def test_prompt_level_divides_by_group_tokens():
    samples = [_sample(2, "a"), _sample(6, "a"), _sample(4, "b")]
    coefficients = token_coefficients(samples, "prompt-level", 10)
    assert coefficients == [pytest.approx(1 / 16)] * 2 + [pytest.approx(1 / 8)]


def test_masked_tool_tokens_do_not_count_as_length():
    coefficients = token_coefficients([_sample(2, masked=30), _sample(6)], "token-mean", 10)
    assert coefficients == [1 / 8, 1 / 8]


def test_tis_weights_are_truncated_ratio():
    old = torch.tensor([-1.0, -1.0, -3.0])
    engine = torch.tensor([-1.0, -2.0, -1.0])
    weights = tis_weights(old, engine, cap=2.0)
    assert weights.tolist() == pytest.approx([1.0, 2.0, float(torch.exp(torch.tensor(-2.0)))])
    assert tis_weights(old, engine, None).tolist() == [1.0, 1.0, 1.0]


def test_ppo_clip_only_binds_outside_trust_region():
    logp_old = torch.zeros(3)
    logp = torch.log(torch.tensor([1.5, 1.1, 0.5]))
    adv = torch.tensor([1.0, 1.0, -1.0])
    loss, clipped = token_losses("ppo", logp, logp_old, adv, 0.2, torch.full((3,), 0.28))
    assert loss.tolist() == pytest.approx([-1.28, -1.1, 0.8])
    assert clipped.tolist() == [1.0, 0.0, 1.0]


def test_cispo_stops_gradient_through_capped_ratio():
    logp = torch.tensor([0.0], requires_grad=True)
    loss, _ = token_losses(
        "cispo",
        logp,
        torch.tensor([-3.0]),
        torch.tensor([1.0]),
        0.2,
        torch.tensor([0.28]),
        cispo_eps_max=5.0,
    )
    loss.sum().backward()
    assert logp.grad.item() == pytest.approx(-5.0)  # −min(e³, 5)·Â


def test_chunked_logprobs_match_full_softmax_values_and_gradients():
    torch.manual_seed(0)
    hidden = torch.randn(37, 8, requires_grad=True)
    weight = torch.randn(50, 8, requires_grad=True)
    targets = torch.randint(0, 50, (37,))
    chunked, _ = chunked_logprobs(hidden, weight, targets, temperature=0.7, chunk_size=5)
    chunked.sum().backward()
    grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad, weight.grad = None, None
    full = torch.log_softmax(hidden @ weight.T / 0.7, -1).gather(1, targets[:, None]).squeeze(1)
    full.sum().backward()
    assert torch.allclose(chunked, full, atol=1e-5)
    assert torch.allclose(grads[0], hidden.grad, atol=1e-5)
    assert torch.allclose(grads[1], weight.grad, atol=1e-5)


def test_chunked_logprobs_with_top_p_score_the_renormalised_nucleus():
    """Values and gradients equal a masked log-softmax over each row's nucleus; the target is
    never masked; rows with top_p = 1 and per-token temperatures are plain log-softmax."""
    from tests.test_hf_engine_fast import nucleus_logprobs

    torch.manual_seed(1)
    hidden = torch.randn(6, 8, requires_grad=True)
    weight = torch.randn(40, 8, requires_grad=True)
    temperature = torch.tensor([1.0, 0.5, 2.0, 1.0, 0.7, 1.0])
    top_p = torch.tensor([0.5, 0.9, 0.3, 1.0, 0.6, 0.2])
    scaled = (hidden @ weight.T) / temperature[:, None]
    reference = torch.stack(
        [nucleus_logprobs(row, float(p)) for row, p in zip(scaled, top_p, strict=True)]
    )
    inside = torch.isfinite(reference)
    targets = torch.stack([torch.nonzero(row)[-1, 0] for row in inside])  # last nucleus token
    targets[5] = int(scaled[5].argmin())  # outside its nucleus: kept, not −inf
    chunked, _ = chunked_logprobs(hidden, weight, targets, temperature, chunk_size=4, top_p=top_p)
    chunked.sum().backward()
    grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    keep = inside.clone()
    keep[5, targets[5]] = True
    masked = ((hidden @ weight.T) / temperature[:, None]).masked_fill(~keep, float("-inf"))
    expected = torch.log_softmax(masked, -1).gather(1, targets[:, None]).squeeze(1)
    expected.sum().backward()
    assert torch.allclose(
        chunked[:5], reference.gather(1, targets[:, None]).squeeze(1)[:5].float(), atol=1e-5
    )
    assert torch.allclose(chunked, expected, atol=1e-5) and torch.isfinite(chunked).all()
    assert torch.allclose(grads[0], hidden.grad, atol=1e-5)
    assert torch.allclose(grads[1], weight.grad, atol=1e-5)
    plain = torch.log_softmax(scaled, -1).gather(1, targets[:, None]).squeeze(1)
    assert chunked[3].item() == pytest.approx(plain[3].item(), abs=1e-5)  # top_p = 1
    assert (chunked - plain)[[0, 1, 2, 4]].min() > 0.05  # truncation raises every other log-prob


def test_chunked_logprobs_apply_bias_scale_and_softcap():
    torch.manual_seed(2)
    hidden, weight = torch.randn(5, 8), torch.randn(30, 8)
    bias, targets = torch.randn(30), torch.randint(0, 30, (5,))
    transform = LogitTransform(scale=0.5, softcap=2.0)
    got, _ = chunked_logprobs(hidden, weight, targets, 0.8, bias=bias, transform=transform)
    logits = 2.0 * torch.tanh((hidden @ weight.T + bias) * 0.5 / 2.0) / 0.8
    want = torch.log_softmax(logits, -1).gather(1, targets[:, None]).squeeze(1)
    assert torch.allclose(got, want, atol=1e-5)


def test_chunked_logprobs_entropy_is_that_of_the_sampled_distribution():
    """Entropy per token equals H of softmax(logits / T) over the whole row, and with top-p < 1
    H of the renormalised nucleus (finite: the masked −inf logits must not meet a zero prob)."""
    torch.manual_seed(3)
    hidden, weight = torch.randn(7, 8), torch.randn(30, 8)
    targets = torch.randint(0, 30, (7,))
    top_p = torch.tensor([0.5, 1.0, 0.3, 0.9, 1.0, 0.7, 0.4])
    scaled = hidden @ weight.T / 0.8
    _, plain = chunked_logprobs(hidden, weight, targets, 0.8, chunk_size=3)
    want_plain = torch.distributions.Categorical(logits=scaled).entropy()
    assert torch.allclose(plain, want_plain, atol=1e-5)
    outside = nucleus_mask(scaled, top_p, targets)
    _, nucleus = chunked_logprobs(hidden, weight, targets, 0.8, chunk_size=3, top_p=top_p)
    kept = torch.distributions.Categorical(logits=scaled.masked_fill(outside, float("-inf")))
    want_nucleus = -(kept.probs * kept.logits.masked_fill(outside, 0.0)).sum(-1)
    assert torch.isfinite(nucleus).all()
    assert torch.allclose(nucleus, want_nucleus, atol=1e-5)
    assert (nucleus < plain - 0.05)[top_p < 1].all()  # a nucleus is narrower than its row


def test_chunked_logprobs_apply_a_logit_scale_of_two():
    """Cohere-style scale exactly 2 (a value a `!= 2` slip would skip)."""
    torch.manual_seed(4)
    hidden, weight, targets = torch.randn(4, 8), torch.randn(20, 8), torch.randint(0, 20, (4,))
    got, _ = chunked_logprobs(hidden, weight, targets, transform=LogitTransform(scale=2.0))
    want = torch.log_softmax(2.0 * hidden @ weight.T, -1).gather(1, targets[:, None]).squeeze(1)
    assert torch.allclose(got, want, atol=1e-5)


def test_nucleus_keeps_the_token_whose_preceding_mass_equals_p():
    """The hf engine's rule (engines/sampling.py `top_p_filter`): outside iff preceding mass > p, so
    with p equal to the mass before the k-th token that token is still drawn."""
    torch.manual_seed(5)
    logits = torch.randn(1, 12)
    sorted_probs, order = torch.softmax(logits, -1).sort(dim=-1, descending=True)
    before = sorted_probs.cumsum(-1) - sorted_probs
    p = before[0, 3].reshape(1)  # exactly the mass ahead of the 4th most likely token
    outside = nucleus_mask(logits, p, keep=order[:, 0])
    assert outside[0, order[0, :4]].tolist() == [False] * 4
    assert outside[0, order[0, 4:]].all()


def test_cispo_default_cap_is_five_and_a_ratio_at_the_cap_is_not_clipped():
    """docs/algorithms.md#losses: ε_max = 5; weight·Â with Â = 2 (|Â| ≠ 1, so Â and 1/Â differ)."""
    logp = torch.log(torch.tensor([5.0, 5.5, 0.5]))
    adv = torch.tensor([2.0, 2.0, -2.0])
    loss, clipped = token_losses("cispo", logp, torch.zeros(3), adv, 0.2, torch.full((3,), 0.28))
    assert loss.tolist() == pytest.approx(
        [-5.0 * 2.0 * logp[0].item(), -5.0 * 2.0 * logp[1].item(), 0.5 * 2.0 * logp[2].item()]
    )
    assert clipped.tolist() == [0.0, 1.0, 0.0]


def test_unknown_objective_and_aggregation_errors_name_the_bad_value():
    with pytest.raises(ValueError, match="'ppo2'"):
        token_losses("ppo2", torch.zeros(1), torch.zeros(1), torch.ones(1), 0.2, torch.ones(1))
    with pytest.raises(ValueError, match="'token-sum'.*token-mean"):
        token_coefficients([_sample(2)], "token-sum", 10)
