"""The hf engine's fast paths (preallocated KV cache with row pruning, grouped decode attention,
inverse-CDF sampling) give the same results as the plain transformers path."""

import pytest
import torch
from transformers.cache_utils import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from selfplay.engines.fast_decode import PreallocatedLayer, grouped_decode_attention
from selfplay.engines.hf import HFEngine
from selfplay.engines.models import load_causal_lm
from selfplay.engines.sampling import sample_rows
from selfplay.types import Request, SamplingParams


def _request(i: int, temperature: float, max_new_tokens: int) -> Request:
    return Request(
        role="r",
        # prompts of clearly different lengths, so the batch is left-padded
        messages=[{"role": "user", "content": "word " * (3 * i + 1)}],
        sampling=SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens),
    )


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    return HFEngine(tiny_model_path, seed=0)


def test_batched_greedy_rows_equal_rows_run_alone(engine):
    """Rows of different prompt lengths that finish at different steps (so the cache is
    compacted several times mid-batch) decode exactly as each row does alone."""
    budgets = [9, 3, 14, 6, 11]
    requests = [_request(i, 0.0, n) for i, n in enumerate(budgets)]
    batched = engine.generate(requests)
    for request, completion, budget in zip(requests, batched, budgets, strict=True):
        (alone,) = engine.generate([request])
        assert len(completion.token_ids) == budget
        assert completion.token_ids == alone.token_ids
        assert completion.logprobs == pytest.approx(alone.logprobs, abs=1e-5)


def test_sampled_logprobs_equal_a_plain_forward(engine, tiny_model_path):
    """Log-probs of sampled tokens (mixed temperatures, pruned rows) equal log_softmax(logits / T)
    of one plain forward pass over prompt + completion with transformers' stock attention."""
    temperatures = [1.0, 0.7, 0.0, 1.3]
    budgets = [12, 4, 8, 10]
    pairs = enumerate(zip(temperatures, budgets, strict=True))
    requests = [_request(i, t, n) for i, (t, n) in pairs]
    completions = engine.generate(requests)
    plain = load_causal_lm(tiny_model_path)
    assert plain.config._attn_implementation == "sdpa"
    for completion, temperature in zip(completions, temperatures, strict=True):
        ids = completion.prompt_ids + completion.token_ids
        with torch.inference_mode():
            logits = plain(input_ids=torch.tensor([ids])).logits[0].float()
        scaled = logits / (temperature if temperature > 0 else 1.0)
        logprobs = torch.log_softmax(scaled, -1)[len(completion.prompt_ids) - 1 : -1]
        expected = logprobs.gather(1, torch.tensor(completion.token_ids)[:, None]).squeeze(1)
        assert completion.logprobs == pytest.approx(expected.tolist(), abs=1e-4)


def test_grouped_decode_attention_equals_stock_sdpa():
    class Module(torch.nn.Module):
        num_key_value_groups = 3
        is_causal = True

    torch.manual_seed(0)
    batch, kv_heads, length, dim = 4, 2, 9, 8
    query = torch.randn(batch, kv_heads * 3, 1, dim)
    # a view into a longer buffer, as the preallocated cache hands out
    key = torch.randn(batch, kv_heads, 20, dim)[:, :, :length]
    value = torch.randn(batch, kv_heads, 20, dim)[:, :, :length]
    mask = torch.ones(batch, 1, 1, length, dtype=torch.bool)
    mask[1, ..., :4] = False  # left padding
    mask[3, ..., :7] = False
    for attention_mask in (mask, None):
        ours, _ = grouped_decode_attention(Module(), query, key, value, attention_mask, scaling=0.3)
        stock, _ = sdpa_attention_forward(Module(), query, key, value, attention_mask, scaling=0.3)
        assert ours.shape == stock.shape == (batch, 1, kv_heads * 3, dim)
        assert torch.allclose(ours, stock, atol=1e-6)


def test_preallocated_layer_tracks_dynamic_layer_through_pruning():
    torch.manual_seed(0)
    ours, reference = PreallocatedLayer(capacity=8), DynamicLayer()
    steps = [(5, 4), (5, 1), (3, 1), (3, 1), (2, 1)]  # (rows, new tokens); rows shrink
    keeps = {2: [0, 2, 4], 4: [2, 0]}  # before steps 2 and 4: keep these rows, in this order
    for step, (rows, new) in enumerate(steps):
        if step in keeps:
            index = torch.tensor(keeps[step])
            ours.batch_select_indices(index)
            reference.batch_select_indices(index)
        k, v = torch.randn(rows, 2, new, 3), torch.randn(rows, 2, new, 3)
        got, want = ours.update(k, v), reference.update(k, v)
        assert ours.get_seq_length() == reference.get_seq_length()
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    with pytest.raises(RuntimeError, match="holds 8 tokens"):
        ours.update(torch.randn(2, 2, 1, 3), torch.randn(2, 2, 1, 3))


def test_inverse_cdf_sampling_follows_the_weights():
    weights = torch.tensor([[0.0, 1.0, 0.0, 3.0, 0.0], [2.0, 0.0, 0.0, 0.0, 2.0]])
    generator = torch.Generator().manual_seed(0)
    draws = torch.stack([sample_rows(weights, generator) for _ in range(4000)])
    counts = torch.stack([torch.bincount(draws[:, row], minlength=5) for row in range(2)])
    assert counts[0, [0, 2, 4]].sum() == 0 and counts[1, 1:4].sum() == 0  # zero weight: never
    assert counts[0, 3] / 4000 == pytest.approx(0.75, abs=0.03)
    assert counts[1, 0] / 4000 == pytest.approx(0.5, abs=0.03)


def nucleus_logprobs(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Reference: log-probs of the renormalised top-p nucleus of softmax(logits), in float64
    (−inf outside it); the token whose preceding mass crosses p is inside."""
    probs = torch.softmax(logits.double(), -1)
    sorted_probs, order = probs.sort(-1, descending=True)
    inside_sorted = sorted_probs.cumsum(-1) - sorted_probs <= top_p
    inside = torch.zeros_like(inside_sorted).scatter(-1, order, inside_sorted)
    kept = torch.where(inside, probs, 0.0)
    return (kept / kept.sum(-1, keepdim=True)).log()


def test_top_p_logprobs_are_those_of_the_renormalised_nucleus(engine, tiny_model_path):
    """With top_p < 1 the engine reports log p(token) / (nucleus mass): the probability the token
    was drawn with, which TIS divides by. Greedy rows keep the untruncated T = 1 log-probs."""
    settings = [(1.0, 0.3), (0.7, 0.9), (1.3, 1.0), (0.0, 0.5), (1.0, 0.5)]
    requests = [
        Request(
            role="r",
            messages=[{"role": "user", "content": "word " * (2 * i + 1)}],
            sampling=SamplingParams(temperature=t, top_p=p, max_new_tokens=8),
        )
        for i, (t, p) in enumerate(settings)
    ]
    completions = engine.generate(requests)
    plain = load_causal_lm(tiny_model_path)
    gaps = []
    for completion, (temperature, top_p) in zip(completions, settings, strict=True):
        ids = completion.prompt_ids + completion.token_ids
        with torch.inference_mode():
            logits = plain(input_ids=torch.tensor([ids])).logits[0].float()
        logits = logits[len(completion.prompt_ids) - 1 : -1]
        tokens = torch.tensor(completion.token_ids)[:, None]
        greedy = temperature == 0.0
        reference = nucleus_logprobs(
            logits / (1.0 if greedy else temperature), 1.0 if greedy else top_p
        )
        expected = reference.gather(1, tokens).squeeze(1)
        assert torch.isfinite(expected).all()  # every sampled token lies in its nucleus
        assert completion.logprobs == pytest.approx(expected.tolist(), abs=2e-4)
        untruncated = torch.log_softmax(logits / (1.0 if greedy else temperature), -1)
        gaps.append(float((expected - untruncated.gather(1, tokens).squeeze(1)).abs().min()))
    # the nucleus matters: log(1/0.3) ≈ 1.2 nats for top_p 0.3 on a near-uniform model
    assert gaps[0] == pytest.approx(-torch.log(torch.tensor(0.3)).item(), abs=0.02)
    assert gaps[2] < 1e-6 and gaps[3] < 1e-6  # top_p 1 and greedy rows: untruncated
