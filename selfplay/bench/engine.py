"""``selfplay bench engine``: tokens/s of an engine against plain ``model.generate``.

Both sides get the same chat prompts, sampling settings (temperature 1, top-p 1) and token
budget; both count the tokens each row really generated (up to and including its end-of-text
token). The baseline pads every row to the longest one, as ``generate`` does. Before its timed
run each side generates a few tokens for the same prompts, untimed, so neither pays one-time
start-up costs (thread pools, kernel selection, first allocations) inside its figure.
"""

from __future__ import annotations

import time

import torch
from rich.console import Console
from rich.table import Table

from selfplay.engines.models import load_causal_lm, load_tokenizer, resolve_model_path
from selfplay.types import Request, SamplingParams

TOPICS = [
    "the moon",
    "prime numbers",
    "a lost cat",
    "rain",
    "chess openings",
    "bread",
    "volcanoes",
    "a robot",
    "the ocean",
    "winter",
    "bees",
    "trains",
    "a library",
    "mountains",
    "coffee",
    "a dragon",
]


def bench_prompts(n: int) -> list[list[dict[str, str]]]:
    return [
        [
            {
                "role": "user",
                "content": f"Write a short story about {TOPICS[i % len(TOPICS)]} (number {i}).",
            }
        ]
        for i in range(n)
    ]


WARMUP_TOKENS = 4  # untimed generation per side before its timed run


def generated_tokens(row: list[int], eos_ids: set[int]) -> int:
    for i, token in enumerate(row):
        if token in eos_ids:
            return i + 1
    return len(row)


def run_generate_baseline(model_path, prompts, new_tokens: int, seed: int = 0) -> tuple[int, float]:
    tokenizer = load_tokenizer(model_path)
    tokenizer.padding_side = "left"
    model = load_causal_lm(model_path)
    texts = [
        tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False)
        for p in prompts
    ]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    eos = {tokenizer.eos_token_id}

    def generate(max_new_tokens: int) -> torch.Tensor:
        with torch.inference_mode():
            return model.generate(
                **batch,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
            )

    generate(WARMUP_TOKENS)
    torch.manual_seed(seed)
    start = time.perf_counter()
    out = generate(new_tokens)
    elapsed = time.perf_counter() - start
    new = out[:, batch.input_ids.shape[1] :].tolist()
    return sum(generated_tokens(row, eos) for row in new), elapsed


def run_engine(engine, prompts, new_tokens: int) -> tuple[int, float]:
    def requests(max_new_tokens: int) -> list[Request]:
        return [
            Request(
                role="bench",
                messages=p,
                sampling=SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens),
            )
            for p in prompts
        ]

    engine.generate(requests(WARMUP_TOKENS))
    start = time.perf_counter()
    completions = engine.generate(requests(new_tokens))
    elapsed = time.perf_counter() - start
    return sum(len(c.token_ids) for c in completions), elapsed


def bench_engine(
    backend: str = "hf", prompts: int = 32, new_tokens: int = 128, model: str = "embedded"
) -> dict[str, float]:
    console = Console()
    model_path = resolve_model_path(model)
    chats = bench_prompts(prompts)
    results: dict[str, tuple[int, float]] = {}
    results["model.generate"] = run_generate_baseline(model_path, chats, new_tokens)
    from selfplay.engines.hf import HFEngine

    results["hf engine"] = run_engine(
        HFEngine(model_path, max_batch_size=prompts), chats, new_tokens
    )
    if backend == "vllm":
        from selfplay.engines.vllm_engine import VLLMEngine

        results["vllm engine"] = run_engine(VLLMEngine(model_path), chats, new_tokens)
    table = Table(title=f"engine throughput: {prompts} prompts x {new_tokens} new tokens, {model}")
    for column in ("engine", "tokens", "seconds", "tokens/s", "ratio vs baseline"):
        table.add_column(column, justify="right")
    base_tps = results["model.generate"][0] / results["model.generate"][1]
    rates = {}
    for name, (tokens, seconds) in results.items():
        rates[name] = tokens / seconds
        table.add_row(
            name,
            str(tokens),
            f"{seconds:.1f}",
            f"{rates[name]:.1f}",
            f"{rates[name] / base_tps:.2f}x",
        )
    console.print(table)
    if "vllm engine" in rates:
        console.print(f"vllm vs hf engine: {rates['vllm engine'] / rates['hf engine']:.2f}x")
    return rates
