"""``selfplay export``'s folders load in vLLM as they are: the merged folder as a model, the
adapter folder through a ``LoRARequest`` over the base; both give transformers' greedy
continuation of the merged model, with its log-probs.

The folders come from ``tests/integration/make_export.py``, run in the project's venv by
``make test-vllm`` (``SELFPLAY_TEST_EXPORT_DIR``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("vllm")

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

EXPORT_DIR = os.environ.get("SELFPLAY_TEST_EXPORT_DIR")


@pytest.fixture(scope="module")
def expected() -> dict:
    if not EXPORT_DIR or not (Path(EXPORT_DIR) / "expected.json").exists():
        pytest.skip("no exported folders (SELFPLAY_TEST_EXPORT_DIR; `make test-vllm` makes them)")
    return json.loads((Path(EXPORT_DIR) / "expected.json").read_text())


def _greedy(llm, prompt_ids: list[int], tokens: int, lora=None):
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=tokens, logprobs=0)
    (out,) = llm.generate([TokensPrompt(prompt_token_ids=prompt_ids)], params,
                          lora_request=lora, use_tqdm=False)
    completion = out.outputs[0]
    logprobs = [step[token].logprob for step, token in zip(completion.logprobs,
                                                           completion.token_ids, strict=True)]
    return list(completion.token_ids), logprobs


def _llm(model: str, **kwargs):
    from vllm import LLM

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return LLM(model=model, dtype="float32", enforce_eager=True, kv_cache_memory_bytes=2**30,
               seed=0, **kwargs)


def test_merged_folder_is_a_vllm_model(expected) -> None:
    llm = _llm(expected["merged"])
    tokens, logprobs = _greedy(llm, expected["prompt_ids"], len(expected["tokens"]))
    assert tokens == expected["tokens"]
    assert logprobs == pytest.approx(expected["logprobs"], abs=2e-3)
    del llm


def test_adapter_folder_is_a_vllm_lora(expected) -> None:
    from vllm.lora.request import LoRARequest

    llm = _llm(expected["base"], enable_lora=True, max_lora_rank=8)
    lora = LoRARequest("exported", 1, expected["adapter"])
    tokens, logprobs = _greedy(llm, expected["prompt_ids"], len(expected["tokens"]), lora)
    assert tokens == expected["tokens"]
    assert logprobs == pytest.approx(expected["logprobs"], abs=2e-3)
