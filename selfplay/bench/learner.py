"""``selfplay bench learner``: train tokens/s and peak memory, chunked vs naive log-probs.

The batch is GRPO-shaped: groups of 8 completions share a prompt (3/4 of each sequence).
Both sides run the same LoRA model, batch and loss (−Σ Â·log π over completion tokens, one
forward and backward). The naive side materialises the batch's full [B, T, V] log-softmax, as
most RL trainers do; ours runs each group's shared prompt once (its KV cache expanded to the
group, gradients flowing through it), selects completion positions, and runs the vocabulary
projection in checkpointed chunks. Peak memory is measured in a fresh subprocess per side
(ru_maxrss on CPU, torch.cuda.max_memory_allocated on GPU).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import torch
from rich.console import Console
from rich.table import Table


def _batch(vocab: int, batch: int, seq_len: int, prompt_len: int, group: int, seed: int = 0):
    """GRPO-shaped batch: ``batch // group`` prompts, ``group`` sampled completions each."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(100, vocab - 1, (batch, seq_len), generator=generator)
    for row in range(batch):
        ids[row, :prompt_len] = ids[row - row % group, :prompt_len]
    return ids, prompt_len


def _run_side(
    side: str, model: str, batch: int, seq_len: int, repeats: int, group: int = 8
) -> dict:
    import transformers

    transformers.logging.set_verbosity_error()
    from selfplay.engines.lora import LoraSpec
    from selfplay.engines.models import resolve_model_path
    from selfplay.training.learner import LearnerSettings, LocalLearner, naive_logprobs
    from selfplay.types import Sample, Turn

    torch.set_num_threads(max(torch.get_num_threads(), 1))
    path = resolve_model_path(model)
    learner = LocalLearner(
        path,
        LearnerSettings(
            lora=LoraSpec(),
            micro_batch_size=batch,
            tis_cap=None,
            objective="reinforce",
            aggregation="token-mean",
        ),
        adapters=["shared"],
    )
    vocab = learner.model.get_base_model().config.vocab_size
    ids, prompt_len = _batch(vocab, batch, seq_len, seq_len * 3 // 4, group)
    completion = seq_len - prompt_len
    tokens = batch * completion
    if side == "chunked":
        samples = [
            Sample(
                turn=Turn(
                    role="r",
                    prompt_ids=row[:prompt_len].tolist(),
                    completion_ids=row[prompt_len:].tolist(),
                    engine_logprobs=[0.0] * completion,
                    loss_mask=[1] * completion,
                    text="",
                ),
                advantage=1.0,
            )
            for row in ids
        ]
        learner.step(samples)  # warm-up
        start = time.perf_counter()
        for _ in range(repeats):
            learner.step(samples)
    else:
        model_ = learner.model
        attention = torch.ones_like(ids)
        optimizer = learner.optimizer

        def one_step():
            optimizer.zero_grad()
            logp = naive_logprobs(model_, ids, attention)[:, prompt_len - 1 :]
            (-(logp.sum()) / tokens).backward()
            optimizer.step()

        model_.train()
        one_step()
        start = time.perf_counter()
        for _ in range(repeats):
            one_step()
    elapsed = time.perf_counter() - start
    if torch.cuda.is_available():
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"tokens_per_s": tokens * repeats / elapsed, "peak_mib": peak, "seconds": elapsed}


def bench_learner(
    model: str = "embedded", batch: int = 16, seq_len: int = 256, repeats: int = 3
) -> dict[str, dict]:
    console = Console()
    results = {}
    for side in ("naive", "chunked"):
        code = (
            f"import json; from selfplay.bench.learner import _run_side; print(json.dumps("
            f"_run_side({side!r}, {model!r}, {batch}, {seq_len}, {repeats})))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        results[side] = json.loads(out.stdout.strip().splitlines()[-1])
    table = Table(
        title=f"learner: {batch} sequences of {seq_len} tokens (3/4 prompt, groups "
        f"of 8 sharing a prompt), {model}"
    )
    for column in ("log-probs", "train tokens/s", "peak MiB", "speed ratio", "memory ratio"):
        table.add_column(column, justify="right")
    base = results["naive"]
    for side, r in results.items():
        table.add_row(
            side,
            f"{r['tokens_per_s']:.0f}",
            f"{r['peak_mib']:.0f}",
            f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}x",
            f"{r['peak_mib'] / base['peak_mib']:.2f}x",
        )
    console.print(table)
    return results
