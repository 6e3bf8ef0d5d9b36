"""``selfplay bench gpu``: the GPU path measured in one short run (docs/scale.md's GPU column).

Each stage runs in a fresh process (clean CUDA peaks) on models in the shapes the experiments
name, their weights random (a device without a network, and a 64 MiB limit on what travels to
it: memory and seconds depend on the shape, not on the values; nothing here measures learning):

- ``engine``: the ``hf`` engine in bf16 on CUDA, batched sampling, tokens/s and peak memory;
- ``local``: the one-process learner on CUDA (full fine-tuning keeps an fp32 master copy,
  LoRA computes in bf16): seconds per step, the CUDA allocator's peak, ``selfplay plan``'s
  prediction beside it;
- ``sharded``: the FSDP2 learner under torchrun on NCCL with bf16 mixed precision (one rank:
  one GPU), the same batch and the same figures, plus a DCP checkpoint saved and loaded back
  (weights equal after the load) and its first loss against the one-process learner's;
- ``sync``: a step of the learner, then the inprocess and filesystem transports into the
  engine, each followed by the probe check (the largest engine−learner log-prob gap), and a
  planted transport that skips the engine, which the check must catch.

Results go to ``--out`` as JSON lines (one per stage) and a table at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from selfplay.bench.ranks import group_samples, learner_experiment

GIB = 2**30
# a GRPO group per step; SELFPLAY_BENCH_GPU_BATCH="16,8,4,2" shrinks it for a CPU dry run
PROMPT, COMPLETION, SEQUENCES, MICRO = (
    int(n) for n in os.environ.get("SELFPLAY_BENCH_GPU_BATCH", "256,256,8,4").split(","))
SHAPES = {  # name: (transformers config class, its arguments) or the embedded model's config
    "smollm2-135m": None,
    "qwen3-1.7b": ("Qwen3Config", dict(hidden_size=2048, intermediate_size=6144,
                                       num_hidden_layers=28, num_attention_heads=16,
                                       num_key_value_heads=8, head_dim=128, vocab_size=151936,
                                       tie_word_embeddings=True, max_position_embeddings=4096)),
}


def build_model(shape: str, folder: Path, tokenizer_dir: Path) -> Path:
    """A random-weight model of ``shape`` in bf16 with the embedded tokenizer, saved once."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    target = folder / shape
    if (target / "config.json").exists():
        return target
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if SHAPES[shape] is None:
        config = AutoConfig.from_pretrained(tokenizer_dir)
    else:
        cls, kwargs = SHAPES[shape]
        config = getattr(transformers, cls)(**kwargs, bos_token_id=tokenizer.bos_token_id,
                                            eos_token_id=tokenizer.eos_token_id,
                                            pad_token_id=tokenizer.pad_token_id)
    config.dtype = torch.bfloat16
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


def experiment(model: Path, finetune: str, ranks: int):
    return learner_experiment(str(model), finetune, ranks, micro=MICRO, completion=COMPLETION,
                              dtype="bfloat16", lr=1e-5)


def samples(vocab: int, seed: int = 0):
    """The step's batch; token ids below the embedded tokenizer's 49,152 (the shapes with a
    larger vocabulary share its tokenizer)."""
    return group_samples(min(vocab, 49152), PROMPT, COMPLETION, SEQUENCES, seed)


def _planned(model: Path, finetune: str, ranks: int) -> float:
    from selfplay.running.plan import plan

    return plan(experiment(model, finetune, ranks), prompt_tokens=PROMPT).learner["total"]


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: a dry run of the plumbing


def _synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def _peak() -> float:
    import torch

    return float(torch.cuda.max_memory_allocated()) if torch.cuda.is_available() else 0.0


def _timed_steps(learner, batch, steps: int) -> tuple[dict, float]:
    first = learner.step(batch)  # warm-up (kernels, allocator)
    _synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        learner.step(batch)
    _synchronize()
    return first, (time.perf_counter() - start) / steps


def stage_engine(model: Path) -> dict:

    from selfplay.engines.hf import HFEngine
    from selfplay.types import Request, SamplingParams

    _reset_peak()
    engine = HFEngine(model, dtype="bfloat16", max_batch_size=64, device=_device())
    ids = engine.tokenizer("Count from one to ten, in words. " * 16).input_ids[:128]
    requests = [Request(role="r", prompt_ids=list(ids), adapter="shared",
                        sampling=SamplingParams(temperature=1.0, max_new_tokens=128))
                for _ in range(64)]
    engine.generate(requests[:8])  # warm-up
    _synchronize()
    start = time.perf_counter()
    completions = engine.generate(requests)
    _synchronize()
    seconds = time.perf_counter() - start
    tokens = sum(len(c.token_ids) for c in completions)
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
            "peak_gib": _peak() / GIB}


def stage_local(model: Path, finetune: str, steps: int = 3) -> dict:

    from selfplay.training.learner import LocalLearner
    from selfplay.training.make import learner_settings

    config = experiment(model, finetune, 1)
    _reset_peak()
    learner = LocalLearner(model, learner_settings(config), config.adapters(), _device())
    first, seconds = _timed_steps(learner, samples(learner.model.config.vocab_size), steps)
    peak = _peak()
    return {"finetune": finetune, "ranks": 1, "seconds": seconds, "peak_gib": peak / GIB,
            "planned_gib": _planned(model, finetune, 1) / GIB,
            "first_loss": first.get("train/loss"), "grad_norm": first.get("train/grad_norm"),
            "dtype": learner_settings(config).dtype}


def stage_sharded(model: Path, finetune: str, steps: int = 3) -> dict:
    """Under torchrun: FSDP2 on NCCL, one rank per GPU; checkpoint round trip."""
    from transformers import AutoConfig

    from selfplay.training.make import learner_settings, parallel_settings
    from selfplay.training.placement import TorchrunRanks
    from selfplay.training.sharded import ShardedLearner

    # torchrun with one process: the runner would take the one-process learner; here the FSDP2
    # ranks' code runs on the one GPU there is (NCCL, fully_shard, mixed precision, DCP)
    config = experiment(model, finetune, 1)
    parallel = parallel_settings(config)
    learner = ShardedLearner(model, learner_settings(config), config.adapters(), parallel,
                             where=TorchrunRanks)
    try:
        batch = samples(AutoConfig.from_pretrained(model).vocab_size)
        first, seconds = _timed_steps(learner, batch, steps)
        peak = max(learner.memory())
        before = {k: v.clone() for k, v in learner.trainable_weights().items()}
        with tempfile.TemporaryDirectory() as folder:
            learner.save(Path(folder))
            learner.step(batch)  # moves the weights away from the checkpoint
            moved = _max_gap(before, learner.trainable_weights())
            learner.load(Path(folder))
            restored = _max_gap(before, learner.trainable_weights())
    finally:
        learner.close()
    backend = "nccl" if _device() == "cuda" else "gloo"
    return {"finetune": finetune, "ranks": 1, "backend": backend, "seconds": seconds,
            "peak_gib": peak / GIB, "planned_gib": _planned(model, finetune, 1) / GIB,
            "first_loss": first.get("train/loss"), "grad_norm": first.get("train/grad_norm"),
            "dcp_moved_after_step": moved, "dcp_gap_after_load": restored,
            "mixed_precision": parallel.mixed_precision}


def _max_gap(a: dict, b: dict) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


class SkippingTransport:
    """The planted failure: says it sent, installs nothing."""

    name = "planted-skip"

    def send(self, learner, engine) -> int:
        return 0


def stage_sync(model: Path, finetune: str) -> dict:

    from selfplay.engines.hf import HFEngine
    from selfplay.engines.lora import lora_spec
    from selfplay.engines.policy import BatchingPolicy
    from selfplay.training.learner import LocalLearner
    from selfplay.training.make import learner_settings
    from selfplay.training.sync import DirectTransport, FilesystemTransport, Probe, probe_gap

    config = experiment(model, finetune, 1)
    # a step the probe can see
    settings = replace(learner_settings(config), lr=1e-2 if finetune == "lora" else 1e-4)
    learner = LocalLearner(model, settings, config.adapters(), _device())
    engine = HFEngine(model, dtype="bfloat16", lora=lora_spec(config),
                      adapters=config.adapters(), device=_device())
    policy = BatchingPolicy(engine)
    probe = Probe.of(engine.tokenizer, 8)
    out = {"finetune": finetune, "before_step": probe_gap(learner, engine, policy, probe)}
    for seed in range(3):
        learner.step(samples(learner.model.config.vocab_size, seed))
    out["planted_skip"] = probe_gap(learner, engine, policy, probe)
    with tempfile.TemporaryDirectory() as folder:
        for transport in (FilesystemTransport(Path(folder)), DirectTransport()):
            _synchronize()
            start = time.perf_counter()
            moved = transport.send(learner, engine)
            _synchronize()
            out[f"{transport.name}_seconds"] = time.perf_counter() - start
            out[f"{transport.name}_mib"] = moved / 2**20
            out[transport.name] = probe_gap(learner, engine, policy, probe)
    return out


STAGES = {"engine": stage_engine, "local": stage_local, "sharded": stage_sharded,
          "sync": stage_sync}


STAGE_TIMEOUT_S = 150  # one stage's wall clock: a hung stage leaves the others their time


def _run_stage(stage: str, model: Path, args: list[str], out: Path) -> None:
    call = [sys.executable, "-m", "selfplay.bench.gpu", stage, str(model), *args]
    if stage == "sharded":
        call = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", "1", "-m", "selfplay.bench.gpu", stage, str(model), *args]
    start = time.perf_counter()
    try:
        done = subprocess.run(call, capture_output=True, text=True, timeout=STAGE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout if isinstance(exc.stdout, str) else ""
        done = subprocess.CompletedProcess(call, -9, stdout, f"timed out after "
                                           f"{STAGE_TIMEOUT_S} s: {str(exc.stderr)[-1000:]}")
    row = {"stage": stage, "model": model.name, "args": args,
           "wall_s": round(time.perf_counter() - start, 1)}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode == 0 and lines:
        row |= json.loads(lines[-1])
    else:
        row["error"] = done.stderr[-1500:]
    print(json.dumps(row), flush=True)
    with out.open("a") as f:
        f.write(json.dumps(row) + "\n")


def bench_gpu(shapes: tuple[str, ...], out: Path, tokenizer_dir: Path | None = None,
              folder: Path | None = None) -> None:
    """Every stage on every model shape, each in a fresh process; rows appended to ``out``."""
    from selfplay.engines.models import embedded_model_dir

    folder = folder or Path(tempfile.mkdtemp(prefix="selfplay-gpu-"))
    tokenizer_dir = tokenizer_dir or embedded_model_dir()
    for shape in shapes:
        model = build_model(shape, folder, tokenizer_dir)
        _run_stage("engine", model, [], out)
        for finetune in ("lora", "full"):
            _run_stage("local", model, [finetune], out)
            _run_stage("sharded", model, [finetune], out)
        if shape == shapes[0]:
            for finetune in ("lora", "full"):
                _run_stage("sync", model, [finetune], out)
    print_table(out)


def print_table(out: Path) -> None:
    """The learner rows as a table: seconds per step, measured and planned peak."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{SEQUENCES} sequences of {PROMPT}+{COMPLETION} tokens per step, "
                        f"micro-batches of {MICRO}")
    for column in ("model", "learner", "fine-tuning", "s/step", "peak GiB", "planned GiB",
                   "plan error"):
        table.add_column(column, justify="right")
    for line in out.read_text().splitlines():
        row = json.loads(line)
        if row["stage"] in ("local", "sharded") and "peak_gib" in row:
            table.add_row(row["model"], row["stage"], row["finetune"], f"{row['seconds']:.2f}",
                          f"{row['peak_gib']:.2f}", f"{row['planned_gib']:.2f}",
                          f"{(row['planned_gib'] - row['peak_gib']) / row['peak_gib']:+.0%}")
    Console().print(table)


def main(argv: list[str]) -> int:
    stage, model, *args = argv
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers

    transformers.logging.set_verbosity_error()
    result = STAGES[stage](Path(model), *args)
    if stage != "sharded" or int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "all":  # python -m selfplay.bench.gpu all OUT TOKENIZER_DIR SHAPE...
        bench_gpu(tuple(sys.argv[4:]) or tuple(SHAPES), Path(sys.argv[2]), Path(sys.argv[3]))
        raise SystemExit(0)
    raise SystemExit(main(sys.argv[1:]))
