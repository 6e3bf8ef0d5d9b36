"""``selfplay bench engine``: the hf engine against this machine's matmul roofline, then
tokens/s of an engine against plain ``model.generate``.

The roofline comes first, in the same run: the FLOP/s of the model's own linear-layer shapes at
4096 rows (``torch.nn.functional.linear``, best of 3), then the engine's prefill (32 distinct
prompts of ~128 tokens, one new token) and decode with the FLOPs each really does (decoder
matmuls, causal attention, the output head where logits are taken) over the seconds the engine
counted for it. Goal: prefill ≥ 60% of the roofline at batch 32.

Throughput against ``model.generate``:

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


# ---------------------------------------------------------------- roofline
ROOFLINE_ROWS = 4096  # matmul rows: a batch of 32 prompts of 128 tokens
PREFILL_PROMPT_TOKENS = 128


def matmul_roofline(model, rows: int = ROOFLINE_ROWS, repeats: int = 3) -> float:
    """FLOP/s this machine reaches on the model's own linear layers: every distinct (in, out)
    shape of a decoder layer times ``rows`` tokens, best of ``repeats`` runs per shape."""
    shapes = sorted(
        {
            (m.in_features, m.out_features)
            for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and "layers." in name
        }
    )
    flops, seconds = 0.0, 0.0
    for fan_in, fan_out in shapes:
        x = torch.randn(rows, fan_in)
        w = torch.randn(fan_out, fan_in)
        torch.nn.functional.linear(x, w)  # first call: allocations, kernel choice
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            torch.nn.functional.linear(x, w)
            best = min(best, time.perf_counter() - start)
        flops += 2.0 * rows * fan_in * fan_out
        seconds += best
    return flops / seconds


def linear_flops_per_token(model) -> float:
    """2 x the weights a token multiplies in the decoder layers (embeddings are a lookup)."""
    layers = sum(
        m.weight.numel()
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and "layers." in name
    )
    return 2.0 * layers


def phase_flops(model, tokens_per_row: list[tuple[int, int]], logits_rows: int) -> float:
    """FLOPs of running ``new`` tokens after ``past`` cached ones, per row: the decoder layers'
    matmuls, causal attention (q·k and p·v over the tokens before each), and the output head
    for ``logits_rows`` positions."""
    config = model.config.get_text_config(decoder=True)
    hidden, layers = config.hidden_size, config.num_hidden_layers
    vocab = model.get_output_embeddings().weight.shape[0]
    linear = linear_flops_per_token(model)
    total = 0.0
    for past, new in tokens_per_row:
        attended = new * past + new * (new + 1) / 2  # keys each new token attends to
        total += new * linear + 4.0 * hidden * layers * attended
    return total + 2.0 * hidden * vocab * logits_rows


def bench_roofline(model_path, batch: int, new_tokens: int, console: Console) -> dict[str, float]:
    """Prefill (``batch`` prompts of ~128 distinct tokens, one new token each) and decode
    (``new_tokens`` per row) of the hf engine against the matmul roofline, prefix reuse off."""
    from selfplay.engines.hf import HFEngine

    engine = HFEngine(model_path, max_batch_size=batch, prefix_caching=False)
    peak = matmul_roofline(engine.model)
    words = [w for topic in TOPICS for w in topic.split()]
    prompts = [
        [{"role": "user", "content": " ".join(words[(i + j) % len(words)] for j in range(110))}]
        for i in range(batch)
    ]

    def phase(max_new: int) -> tuple[dict, list]:
        before = dict(engine.stats)
        requests = [
            Request(role="bench", messages=p, sampling=SamplingParams(max_new_tokens=max_new))
            for p in prompts
        ]
        completions = engine.generate(requests)
        return {k: engine.stats[k] - before.get(k, 0) for k in engine.stats}, completions

    phase(2)  # warm-up
    prefill, completions = phase(1)
    prefill_flops = phase_flops(
        engine.model, [(0, len(c.prompt_ids)) for c in completions], len(completions)
    )
    decode, completions = phase(new_tokens)
    decode_rows = [
        (len(c.prompt_ids) + i, 1) for c in completions for i in range(len(c.token_ids) - 1)
    ]
    decode_flops = phase_flops(engine.model, decode_rows, len(decode_rows))
    rates = {
        "roofline": peak,
        "prefill": prefill_flops / prefill["prefill_seconds"],
        "decode": decode_flops / decode["decode_seconds"],
    }
    table = Table(title=f"hf engine against this machine's matmul roofline, batch {batch}")
    for column in ("phase", "tokens", "seconds", "GFLOP/s", "share of roofline"):
        table.add_column(column, justify="right")
    table.add_row(
        "matmul (the model's shapes)", f"{ROOFLINE_ROWS} rows", "-", f"{peak / 1e9:.1f}", "100%"
    )
    table.add_row(
        "prefill",
        f"{prefill['prefill_tokens']:.0f}",
        f"{prefill['prefill_seconds']:.2f}",
        f"{rates['prefill'] / 1e9:.1f}",
        f"{100 * rates['prefill'] / peak:.0f}%",
    )
    table.add_row(
        "decode",
        f"{len(decode_rows)}",
        f"{decode['decode_seconds']:.2f}",
        f"{rates['decode'] / 1e9:.1f}",
        f"{100 * rates['decode'] / peak:.0f}%",
    )
    console.print(table)
    console.print(
        f"prefill reaches [bold]{100 * rates['prefill'] / peak:.0f}%[/] of the matmul roofline "
        f"at batch {batch} (goal >= 60%); decode {100 * rates['decode'] / peak:.0f}% (decode "
        "reads every weight once per step for a few rows: it is bound by memory, not FLOPs)"
    )
    engine.close()
    return rates


def bench_engine(
    backend: str = "hf", prompts: int = 32, new_tokens: int = 128, model: str = "embedded"
) -> dict[str, float]:
    console = Console()
    model_path = resolve_model_path(model)
    roofline = bench_roofline(model_path, prompts, min(new_tokens, 32), console)
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
    return rates | {f"{k}_flops": v for k, v in roofline.items()}
