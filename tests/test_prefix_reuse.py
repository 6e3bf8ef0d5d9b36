"""Shared prompt prefixes computed once in the hf engine (selfplay.engines.prefix): the same
tokens and log-probs as every row computed alone, never shared across adapters or weights, and
a store that stays within its budget."""

import pytest
import torch

from selfplay.engines.hf import MIN_SHARED_PREFIX, HFEngine
from selfplay.engines.lora import LoraSpec
from selfplay.engines.prefix import PrefixStore, common_prefix_length, group_by_prefix
from selfplay.types import Request, SamplingParams

RULES = " ".join(f"rule {i}: never move a piece twice." for i in range(12))  # a long system text
LORA = LoraSpec(r=4, alpha=8)


def _request(suffix: str, temperature: float = 0.0, budget: int = 8, adapter: str = "") -> Request:
    return Request(
        role="player",
        adapter=adapter,
        messages=[
            {"role": "system", "content": RULES},
            {"role": "user", "content": f"Game state: {suffix}. Your move?"},
        ],
        sampling=SamplingParams(temperature=temperature, max_new_tokens=budget),
    )


SUFFIXES = ["pawn on a2", "king on e1 and a queen on d8, with a long story", "x", "y z"]


def _engines(path, **kwargs) -> tuple[HFEngine, HFEngine]:
    reuse = HFEngine(path, seed=7, prefix_caching=True, **kwargs)
    plain = HFEngine(path, seed=7, prefix_caching=False, **kwargs)
    return reuse, plain


def _assert_same(got, want) -> None:
    for a, b in zip(got, want, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
        assert a.finish_reason == b.finish_reason


def test_group_by_prefix_shares_only_within_an_adapter():
    shared = list(range(100))
    prompts = [shared + [1, 2], shared + [3], shared + [1, 2, 3], [5] * 50, shared + [9]]
    adapters = ["a", "a", "a", "a", "b"]
    groups = group_by_prefix(adapters, prompts, min_prefix=32)
    by_members = {tuple(sorted(g.members)): g for g in groups}
    assert set(by_members) == {(0, 1, 2), (3,), (4,)}
    assert by_members[(0, 1, 2)].prefix == tuple(shared)
    assert by_members[(3,)].prefix == () and by_members[(4,)].prefix == ()
    # a prompt that is entirely a prefix of another still keeps one token of its own
    groups = group_by_prefix(["a", "a"], [shared, shared + [7, 8]], min_prefix=32)
    assert len(groups) == 1 and groups[0].prefix == tuple(shared[:-1])


def test_greedy_and_sampled_outputs_equal_the_engine_without_reuse(tiny_model_path):
    reuse, plain = _engines(tiny_model_path)
    for temperature in (0.0, 1.0):
        requests = [_request(s, temperature, budget=3 + 2 * i) for i, s in enumerate(SUFFIXES)]
        requests += [_request(SUFFIXES[0], temperature)] * 3  # a GRPO group: one prompt, 3 rows
        got, want = reuse.generate(requests), plain.generate(requests)
        _assert_same(got, want)
    # the shared rules were computed once per wave (in the greedy wave, then found stored)
    assert reuse.stats["prefill_tokens"] < 0.5 * plain.stats["prefill_tokens"]
    assert reuse.stats["prompt_tokens"] == plain.stats["prompt_tokens"]


def test_a_later_wave_starts_from_stored_prefixes(tiny_model_path):
    reuse, plain = _engines(tiny_model_path)
    first = [_request(s) for s in SUFFIXES[:2]]
    _assert_same(reuse.generate(first), plain.generate(first))
    assert len(reuse.prefix_store) == 1
    before = reuse.stats["prefill_tokens"]
    alone = [_request("a lone row, longer history")]  # one row: only the store can help
    _assert_same(reuse.generate(alone), plain.generate(alone))
    shared = common_prefix_length(reuse.encode(first[0]), reuse.encode(alone[0]))
    assert shared >= MIN_SHARED_PREFIX
    assert reuse.stats["prefill_tokens"] - before == len(reuse.encode(alone[0])) - shared


def _randomise(engine: HFEngine, adapter: str, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    weights = {
        name.replace(f".{adapter}", ""): torch.randn(p.shape, generator=generator) * 0.5
        for name, p in engine.model.named_parameters()
        if "lora_" in name and f".{adapter}." in name
    }
    engine.load_weights(adapter, weights)


def test_a_prefix_is_not_shared_across_adapters(tiny_model_path):
    """Same prompts under two adapters with different weights, in one batch and in consecutive
    waves: each row equals the engine without reuse, so no row used the other adapter's
    keys/values (with them the log-probs move by far more than the tolerance)."""
    reuse, plain = _engines(tiny_model_path, lora=LORA, adapters=["alpha", "beta"])
    for engine in (reuse, plain):
        _randomise(engine, "alpha", 1)
        _randomise(engine, "beta", 2)
    mixed = [_request(s, adapter=a) for s in SUFFIXES[:2] for a in ("alpha", "beta")]
    _assert_same(reuse.generate(mixed), plain.generate(mixed))
    for adapter in ("beta", "alpha"):  # one adapter per wave: merged weights, stored prefixes
        wave = [_request(s, adapter=adapter) for s in SUFFIXES]
        _assert_same(reuse.generate(wave), plain.generate(wave))
    alpha, beta = plain.generate([_request("x", adapter=a) for a in ("alpha", "beta")])
    assert alpha.logprobs[0] != pytest.approx(beta.logprobs[0], abs=1e-2)  # they do differ


def test_new_weights_empty_the_store(tiny_model_path):
    reuse, plain = _engines(tiny_model_path, lora=LORA, adapters=["alpha"])
    wave = [_request(s, adapter="alpha") for s in SUFFIXES]
    _assert_same(reuse.generate(wave), plain.generate(wave))
    assert len(reuse.prefix_store) > 0
    for engine in (reuse, plain):
        _randomise(engine, "alpha", 3)
    assert len(reuse.prefix_store) == 0
    _assert_same(reuse.generate(wave), plain.generate(wave))


def test_the_store_stays_within_its_budget(tiny_model_path):
    engine = HFEngine(tiny_model_path, seed=0, prefix_cache_mb=0.25)
    budget = engine.prefix_store.budget
    sizes = []
    for wave in range(12):  # every wave brings new prefixes (a new rules text)
        system = f"wave {wave}: " + RULES
        requests = [
            Request(
                role="p",
                messages=[{"role": "system", "content": system}, {"role": "user", "content": s}],
                sampling=SamplingParams(temperature=0.0, max_new_tokens=2),
            )
            for s in SUFFIXES
        ]
        engine.generate(requests)
        sizes.append(engine.prefix_store.nbytes)
        assert 0 < engine.prefix_store.nbytes <= budget
    assert len(engine.prefix_store) < 12  # older prefixes were evicted


def test_store_evicts_the_least_recently_used_and_never_crosses_adapters():
    def kv(tokens: int):
        return [(torch.zeros(1, 1, tokens, 4), torch.zeros(1, 1, tokens, 4))]

    entry = 2 * 4 * 10 * 4  # bytes of a 10-token entry (keys and values, float32)
    store = PrefixStore(budget_bytes=2 * entry)
    store.put("a", range(10), kv(10))
    store.put("a", range(100, 110), kv(10))
    assert store.longest("b", range(10)) == (None, 0)
    found, shared = store.longest("a", [0, 1, 2, 99])  # touches the first entry
    assert shared == 3 and found[0][0].shape[-2] == 3
    store.put("a", range(200, 210), kv(10))  # evicts the second, least recently used
    assert store.longest("a", range(100, 110))[1] == 0
    assert store.longest("a", range(10))[1] == 10
    assert store.nbytes == 2 * entry
