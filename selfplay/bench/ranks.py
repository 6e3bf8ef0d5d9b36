"""``selfplay bench learner --ranks N``: the sharded learner against one rank on the same batch:
peak memory per rank, seconds per step, and ``selfplay plan``'s prediction beside each.

One rank is today's learner in a fresh process; N ranks are the FSDP2 learner's Ray actors
(gloo on a CPU). Memory is what the learner adds to its process: the peak of its resident
memory above the level before the model was read (CPU, sampled every millisecond), or the CUDA
allocator's peak (GPU). On 2 CPU
cores N ranks cannot be faster (gloo's collectives and each rank's own passes share the cores):
the figure to read there is memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from rich.console import Console
from rich.table import Table

GIB = 2**30
PROMPT, COMPLETION, SEQUENCES = 48, 16, 8  # a GRPO-shaped batch: 8 completions of one prompt
MICRO = 4  # sequences per micro-batch: one rank runs two after another, two ranks one each


def learner_experiment(model: str, finetune: str, ranks: int, *, micro: int = MICRO,
                       completion: int = COMPLETION, dtype: str | None = None,
                       lr: float = 1e-4):
    """The experiment config a learner benchmark's plan reads (the learner's shape, batch and
    dtype; the loop is a placeholder the learner never sees)."""
    from selfplay.loops import validate

    model_section = {"path": model} | ({"dtype": dtype} if dtype else {})
    return validate({
        "name": f"bench-{finetune}", "loop": "rlvr", "model": model_section,
        "sampling": {"max_new_tokens": completion},
        "train": {"finetune": finetune, "micro_batch_size": micro, "lr": lr,
                  "parallel": {"ranks": ranks}, "lora": {"r": 16, "alpha": 32}},
        "roles": {"solver": {"prompt": "solver_terse"}},
        "rlvr": {"tasks": [{"name": "chain_sum"}]},
    }, "bench")


def group_samples(high: int, prompt: int = PROMPT, completion: int = COMPLETION,
                  sequences: int = SEQUENCES, seed: int = 0):
    """A GRPO-shaped batch: ``sequences`` random completions of one random prompt, token ids
    in [100, high − 1), advantages −1, 0, 1 in turn."""
    import torch

    from selfplay.types import Sample, Turn

    generator = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(100, high - 1, (prompt,), generator=generator).tolist()
    out = []
    for i in range(sequences):
        ids = torch.randint(100, high - 1, (completion,), generator=generator).tolist()
        out.append(Sample(Turn("r", prompt_ids, ids, [-1.0] * completion, [1] * completion, ""),
                          advantage=(i % 3) - 1.0, group_id="g"))
    return out


def _settings(config):
    from selfplay.training.make import learner_settings

    return learner_settings(config)


def one_rank(model: str, finetune: str, steps: int) -> dict:
    """Today's learner in this (fresh) process."""
    import torch  # noqa: F401  (imported before the baseline, as in a rank)

    from selfplay.engines.models import resolve_model_path
    from selfplay.training.learner import LocalLearner
    from selfplay.training.rank_worker import MemoryWatch

    config = learner_experiment(model, finetune, 1)
    watch = MemoryWatch()
    learner = LocalLearner(resolve_model_path(model), _settings(config), config.adapters())
    samples = group_samples(learner.model.config.vocab_size)
    learner.step(samples)  # warm-up
    start = time.perf_counter()
    for _ in range(steps):
        learner.step(samples)
    seconds = (time.perf_counter() - start) / steps
    return {"peaks": [watch.used()], "seconds": seconds}


def n_ranks(model: str, finetune: str, ranks: int, steps: int) -> dict:
    from selfplay.engines.models import resolve_model_path
    from selfplay.training.rank_worker import ParallelSettings
    from selfplay.training.sharded import ShardedLearner

    config = learner_experiment(model, finetune, ranks)
    learner = ShardedLearner(resolve_model_path(model), _settings(config), config.adapters(),
                             ParallelSettings(ranks=ranks))
    try:
        from transformers import AutoConfig

        vocab = AutoConfig.from_pretrained(resolve_model_path(model)).vocab_size
        samples = group_samples(vocab)
        learner.step(samples)
        start = time.perf_counter()
        for _ in range(steps):
            learner.step(samples)
        seconds = (time.perf_counter() - start) / steps
        peaks = learner.memory()
    finally:
        learner.close()
    return {"peaks": peaks, "seconds": seconds}


def _fresh(call: str) -> dict:
    code = f"import json; from selfplay.bench.ranks import *; print(json.dumps({call}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_ranks(model: str = "embedded", ranks: int = 2, steps: int = 2,
                finetunes: tuple[str, ...] = ("full", "lora")) -> list[dict]:
    """Each fine-tuning mode on one rank and on ``ranks``: measured and planned bytes per rank."""
    from selfplay.running.plan import plan

    console = Console()
    rows = []
    for finetune in finetunes:
        for count in (1, ranks):
            call = (f"one_rank({model!r}, {finetune!r}, {steps})" if count == 1
                    else f"n_ranks({model!r}, {finetune!r}, {count}, {steps})")
            measured = _fresh(call)
            predicted = plan(learner_experiment(model, finetune, count), prompt_tokens=PROMPT)
            rows.append({"finetune": finetune, "ranks": count, "seconds": measured["seconds"],
                         "peak": max(measured["peaks"]), "planned": predicted.learner_peak})
    table = Table(title=f"learner on {model}: {SEQUENCES} sequences of {PROMPT}+{COMPLETION} "
                        f"tokens per step in micro-batches of {MICRO}, 1 rank vs {ranks}")
    for column in ("fine-tuning", "ranks", "s/step", "peak GiB/rank", "vs 1 rank",
                   "planned GiB", "plan error"):
        table.add_column(column, justify="right")
    for row in rows:
        single = next(r for r in rows if r["finetune"] == row["finetune"] and r["ranks"] == 1)
        table.add_row(row["finetune"], str(row["ranks"]), f"{row['seconds']:.2f}",
                      f"{row['peak'] / GIB:.3f}", f"{row['peak'] / single['peak']:.2f}x",
                      f"{row['planned'] / GIB:.3f}",
                      f"{(row['planned'] - row['peak']) / row['peak']:+.0%}")
    console.print(table)
    return rows
