"""``selfplay plan``: what an experiment needs in memory per device, whether that fits the devices
named (or seen), and what to change if not. ``selfplay run`` refuses at start-up, in one line, a
config that cannot fit the devices it sees (docs/scale.md has the model and its calibration).

Per learner rank (N ranks share the model with FSDP2; one rank holds it all):

- weights: the model's parameters in ``model.dtype`` / N (LoRA: the frozen base / N, and the
  adapters);
- gradients: trainable parameters / N; optimizer: AdamW's two moments, 2 × trainable / N;
- KL reference (full fine-tuning with ``train.kl_coef`` > 0): a frozen copy of the initial
  weights / N (LoRA's reference is the base with the adapters off: nothing more);
- gathered units (N > 1): two decoder layers (the one running and the one prefetched) and the
  root (embeddings, final norm, head) unsharded while a micro-batch runs;
- activations of one micro-batch (``train.micro_batch_size`` sequences of prompt + new tokens):
  per layer and token ≈ (8·hidden + 4·intermediate) values kept for the backward pass (the
  layer's input only with ``gradient_checkpointing``, plus one layer recomputed at a time), and
  the chunked log-prob pass (``logprob_chunk_size`` × vocabulary logits);
- loading: rank 0 reads the whole model into CPU memory and sends each rank its shards (the
  others build the model on the meta device);
- CPU ranks > 1: about the model's size again, measured on every rank (rank 1, which never reads
  the file, too) and not accounted for by the terms above: gloo's collectives work on full-size
  copies and the allocator keeps some; a calibrated term;
- overhead: per process, the model code and allocator (CPU), or the CUDA context, NCCL buffers
  and fragmentation (GPU).

The CPU terms are calibrated on this machine against ``selfplay bench learner --ranks 2``
(tiny, SmolLM2-135M LoRA and full, 1 and 2 ranks: docs/scale.md has the table).

An engine on the same GPU reserves ``engine.gpu_memory_utilization`` of it (vLLM: bf16 weights,
then KV cache); with ``engine.sleep`` it gives that back while the learner steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from selfplay.config import ExperimentConfig
from selfplay.core.errors import UserError
from selfplay.core.machine import available_cores
from selfplay.training.make import learner_dtype

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
PROMPT_TOKENS = 512  # prompt length assumed per sequence when the plan is not told
CPU_OVERHEAD = 0.25 * GIB  # per process: model code (transformers, peft), threads, allocator
GPU_OVERHEAD = 1.5 * GIB  # per GPU: CUDA context, NCCL buffers, fragmentation
VLLM_SLEEPING = 1.0 * GIB  # what vLLM keeps on the GPU in sleep mode level 1 (context, graphs)

# Shapes of hub models the GPU experiments name, from their published config.json, so a plan
# needs no network: hidden, intermediate, layers, heads, kv heads, head dim, vocabulary, tied.
KNOWN_MODELS = {
    "Qwen/Qwen3-4B-Base": (2560, 9728, 36, 32, 8, 128, 151936, True),
    "Qwen/Qwen3-8B-Base": (4096, 12288, 36, 32, 8, 128, 151936, False),
    "Qwen/Qwen3-1.7B-Base": (2048, 6144, 28, 16, 8, 128, 151936, True),
    # SQLM's model; Qwen2.5 has q/k/v biases where Qwen3 has q/k norms: 2,304 more
    # parameters a layer than the count below (83k in 3.1B), far under the plan's precision
    "Qwen/Qwen2.5-3B-Instruct": (2048, 11008, 36, 16, 2, 128, 151936, True),
    "Qwen/Qwen2.5-7B-Instruct": (3584, 18944, 28, 28, 4, 128, 152064, False),  # SPELL
}


@dataclass(frozen=True)
class Shape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    params: int  # every parameter, the tied head counted once

    @property
    def layer_params(self) -> int:
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        h = self.hidden
        return h * (2 * q + 2 * kv) + 3 * h * self.intermediate + 2 * h

    @property
    def root_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden


def shape_of(spec: str) -> Shape:
    """The model's shape: a known hub model, or a local folder's config (parameters counted
    on the meta device, no weights read)."""
    if spec in KNOWN_MODELS:
        h, i, layers, heads, kv, hd, vocab, tied = KNOWN_MODELS[spec]
        per_layer = h * (2 * heads * hd + 2 * kv * hd) + 3 * h * i + 2 * h + 2 * hd
        params = layers * per_layer + vocab * h * (1 if tied else 2) + h
        return Shape(h, i, layers, heads, kv, hd, vocab, tied, params)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from selfplay.engines.models import resolve_model_path

    path = resolve_model_path(spec)
    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    params = sum(p.numel() for p in model.parameters())  # a tied head counted once
    text = config.get_text_config(decoder=True)
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return Shape(text.hidden_size, text.intermediate_size, text.num_hidden_layers, heads,
                 getattr(text, "num_key_value_heads", heads), head_dim, text.vocab_size,
                 bool(getattr(config, "tie_word_embeddings", False)), params)


def lora_params(shape: Shape, r: int, targets: list[str], adapters: int) -> int:
    """r·(in + out) for every targeted projection of every layer, per adapter."""
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    h, i = shape.hidden, shape.intermediate
    sizes = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
             "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
    per_layer = sum(r * (a + b) for name, (a, b) in sizes.items() if name in targets)
    return per_layer * shape.layers * adapters


@dataclass
class Plan:
    """Bytes per learner rank and per engine, and whether they fit ``device_bytes`` each."""

    experiment: str
    devices: str  # "8 x 80 GiB GPU" / "CPU, 24 GiB"
    gpu: bool
    ranks: int
    learner: dict[str, float] = field(default_factory=dict)
    engine: dict[str, float] = field(default_factory=dict)
    device_bytes: float = 0.0
    advice: list[str] = field(default_factory=list)

    @property
    def learner_peak(self) -> float:
        return self.learner["total"]

    @property
    def phases(self) -> dict[str, float]:
        """What one device holds in each phase of a step: at rest (between steps: the learner's
        state, the engines' weights, or all a vLLM engine reserves), during generation (the
        engines' whole share, the learner at rest beside them) and during the learner step
        (the learner's peak, the engines asleep or not). On a CPU every rank and the engine
        share the machine's memory, and the engine keeps its share while the learner steps
        (async rollouts generate meanwhile)."""
        engines = self.engine.get("per device", 1.0)
        engine = {key: engines * self.engine.get(key, 0.0)
                  for key in ("at rest", "total", "during learning")}
        ranks = 1 if self.gpu else self.ranks  # GPU: one rank per device
        rest = ranks * self.learner["at rest"]
        learning = ranks * self.learner_peak + engine["during learning" if self.gpu else "total"]
        return {"at rest": rest + engine["at rest"], "during generation": rest + engine["total"],
                "during the learner step": learning}

    @property
    def per_device(self) -> float:
        """What one device holds at the worst moment (the largest of the ``phases``)."""
        return max(self.phases.values())

    @property
    def fits(self) -> bool:
        return self.per_device <= self.device_bytes


def plan(
    config: ExperimentConfig,
    gpus: int | None = None,
    gpu_memory_gib: float | None = None,
    prompt_tokens: int = PROMPT_TOKENS,
) -> Plan:
    """The memory ``config`` needs per device on ``gpus`` GPUs of ``gpu_memory_gib`` (default:
    the devices this machine has)."""
    shape = shape_of(config.model.path)
    gpu, count, capacity = _devices(gpus, gpu_memory_gib)
    ranks = config.train.parallel.ranks
    devices = f"{count} x {capacity / GIB:.0f} GiB GPU" if gpu else f"CPU, {capacity / GIB:.0f} GiB"
    result = Plan(config.name, devices, gpu, ranks, device_bytes=capacity)
    result.learner = _learner(config, shape, gpu, prompt_tokens)
    result.engine = _engine(config, shape, gpu, count, capacity, prompt_tokens)
    result.advice = _advice(config, result)
    return result


def _devices(gpus: int | None, gpu_memory_gib: float | None) -> tuple[bool, int, float]:
    if gpus:
        return True, gpus, (gpu_memory_gib or 80.0) * GIB
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return True, torch.cuda.device_count(), (gpu_memory_gib * GIB if gpu_memory_gib
                                                  else float(props.total_memory))
    import psutil

    return False, available_cores(), float(psutil.virtual_memory().total)


def _learner(config: ExperimentConfig, shape: Shape, gpu: bool, prompt: int) -> dict[str, float]:
    train, ranks = config.train, config.train.parallel.ranks
    stored = DTYPE_BYTES[learner_dtype(config, gpu)]  # sharded GPU ranks: an fp32 master copy
    compute = 2 if gpu and train.parallel.mixed_precision and ranks > 1 else stored
    if train.finetune == "lora":
        trainable = lora_params(shape, train.lora.r, train.lora.target_modules,
                                len(config.adapters()))
        weights = shape.params * stored / ranks + trainable * stored / ranks
    else:
        trainable = shape.params
        weights = shape.params * stored / ranks
    rows = {"weights": weights, "gradients": trainable * stored / ranks,
            "optimizer": 2 * trainable * stored / ranks}
    if train.finetune == "full" and train.kl_coef > 0:  # LoRA's reference: the base, adapters off
        rows["KL reference (frozen copy)"] = shape.params * stored / ranks
    if ranks > 1:
        rows["gathered units"] = (2 * shape.layer_params + shape.root_params) * compute
    tokens = train.micro_batch_size * (prompt + config.sampling.max_new_tokens)
    act = compute  # activations in the dtype the layers compute in
    full_layer = tokens * (8 * shape.hidden + 4 * shape.intermediate) * act
    if train.gradient_checkpointing:
        rows["activations"] = shape.layers * tokens * shape.hidden * act + full_layer
    else:
        rows["activations"] = shape.layers * full_layer
    scored = train.micro_batch_size * config.sampling.max_new_tokens  # completion tokens
    rows["log-prob chunk"] = 3 * min(train.logprob_chunk_size, scored) * shape.vocab * 4
    if not gpu and ranks > 1:  # measured, not derived: see the module's docstring
        rows["gloo buffers (calibrated)"] = shape.params * stored
    rows["overhead"] = GPU_OVERHEAD if gpu else CPU_OVERHEAD
    steady = sum(rows.values())
    loading = shape.params * stored + rows["overhead"]
    rows["total"] = steady if gpu else max(steady, loading)  # the load happens in CPU memory
    rows["loading (CPU, rank 0)"] = shape.params * stored
    # between steps (while the engines generate): shards, gradients (kept to the next step's
    # zero_grad) and optimizer, nothing gathered, no activations
    rows["at rest"] = sum(rows[k] for k in ("weights", "gradients", "optimizer", "overhead",
                                            "KL reference (frozen copy)") if k in rows)
    return rows


def _engine(config: ExperimentConfig, shape: Shape, gpu: bool, count: int, capacity: float,
            prompt: int) -> dict[str, float]:
    rows = _one_engine(config, shape, gpu, capacity, prompt)
    cluster = config.cluster
    if cluster.backend == "ray":  # replicas spread over the GPUs, or all in CPU memory
        rows["per device"] = float(-(-cluster.replicas // count) if gpu else cluster.replicas)
    return rows


def _one_engine(config: ExperimentConfig, shape: Shape, gpu: bool, capacity: float,
                prompt: int) -> dict[str, float]:
    engine = config.engine
    seq = prompt + config.sampling.max_new_tokens
    kv_per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim
    if engine.backend == "vllm" and gpu:
        weights = shape.params * 2.0  # vLLM serves bf16
        reserved = engine.gpu_memory_utilization * capacity
        rows = {"weights": weights, "KV cache": max(reserved - weights - GPU_OVERHEAD, 0.0),
                "total": reserved}
        rows["KV cache tokens"] = rows["KV cache"] / (kv_per_token * 2)
        rows["at rest"] = reserved  # vLLM holds its share from start-up
        rows["during learning"] = VLLM_SLEEPING if engine.sleep else reserved
        return rows
    stored = DTYPE_BYTES[config.model.dtype]
    weights = shape.params * stored
    kv = engine.max_batch_size * seq * kv_per_token * stored
    rows = {"weights": weights, "KV cache": kv, "total": weights + kv}
    rows["at rest"] = rows["total"]  # its allocator keeps the cache's blocks between calls
    rows["during learning"] = rows["total"]  # the hf engine keeps its memory
    return rows


def _advice(config: ExperimentConfig, result: Plan) -> list[str]:
    if result.fits:
        return []
    train = config.train
    advice = []
    if train.finetune == "full":
        advice.append("train.finetune: lora (the frozen base needs no gradients or optimizer)")
    if result.gpu:
        advice.append(f"more ranks: train.parallel.ranks: {max(2, 2 * train.parallel.ranks)}")
    if not train.gradient_checkpointing:
        advice.append("train.gradient_checkpointing: true")
    if train.micro_batch_size > 1:
        advice.append(f"train.micro_batch_size: {max(1, train.micro_batch_size // 2)}")
    if config.engine.backend == "vllm" and result.gpu and not config.engine.sleep:
        advice.append("engine.sleep: true (vLLM frees the GPU while the learner steps)")
    if not train.parallel.offload and result.gpu:
        advice.append("train.parallel.offload: true (optimizer and weights in CPU memory)")
    return advice


def check(config: ExperimentConfig) -> None:
    """At start-up, one line for what this machine cannot run: GPU-only features without a GPU,
    more ranks than devices, or a plan that does not fit even with empty prompts (``selfplay
    plan`` shows the whole table). A run on a Ray cluster (``cluster.address``) is checked by
    the cluster when its ranks and engines are placed."""
    if config.cluster.address:
        return
    import torch

    ranks = config.train.parallel.ranks
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not gpus and config.engine.sleep:
        raise UserError("engine.sleep: vLLM's sleep mode frees GPU memory and this machine has "
                        "no GPU; drop engine.sleep")
    if not gpus and config.sync.transport == "nccl":
        raise UserError("sync.transport: nccl broadcasts between GPUs and this machine has "
                        "none; use auto, inprocess, object_store or filesystem")
    devices = gpus or available_cores()
    if ranks > devices:
        kind = f"{gpus} GPUs" if gpus else f"{devices} CPU cores and no GPU"
        raise UserError(f"train.parallel.ranks: {ranks} learner ranks, but this machine has "
                        f"{kind} (one rank per device)")
    # refused only when it cannot fit even with empty prompts (the completions alone); with
    # prompts of PROMPT_TOKENS a warning, since real prompt lengths vary from loop to loop
    least = plan(config, prompt_tokens=0)
    if not least.fits:
        raise UserError(
            f"{config.name} needs at least {least.per_device / GIB:.1f} GiB per device but "
            f"this machine has {least.device_bytes / GIB:.1f} GiB ({least.devices}); "
            f"`selfplay plan {config.name}` says what to change"
        )
    typical = plan(config)
    if not typical.fits:
        from selfplay.running.tracking import console

        console.print(f"[yellow]warning:[/] with prompts of {PROMPT_TOKENS} tokens "
                      f"{config.name} would need {typical.per_device / GIB:.1f} GiB per device "
                      f"of {typical.device_bytes / GIB:.1f} (`selfplay plan {config.name}`)")


def print_plan(result: Plan) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{result.experiment} on {result.devices}: per learner rank "
                        f"({result.ranks} rank{'s' if result.ranks > 1 else ''})")
    table.add_column("learner", justify="left")
    table.add_column("GiB", justify="right")
    for key, value in result.learner.items():
        table.add_row(key, f"{value / GIB:.2f}")
    console.print(table)
    engine = Table(title="engine (per device it runs on)")
    engine.add_column("engine", justify="left")
    engine.add_column("value", justify="right")
    for key, value in result.engine.items():
        shown = (f"{value:,.0f}" if key in ("KV cache tokens", "per device")
                 else f"{value / GIB:.2f} GiB")
        engine.add_row(key, shown)
    console.print(engine)
    phases = ", ".join(f"{name} {value / GIB:.1f} GiB" for name, value in result.phases.items())
    console.print(f"per device: {phases}", soft_wrap=True)
    verdict = "fits" if result.fits else "does NOT fit"
    console.print(f"{result.per_device / GIB:.1f} GiB at the worst moment per device of "
                  f"{result.device_bytes / GIB:.1f} GiB: {verdict}", soft_wrap=True)
    for line in result.advice:
        console.print(f"  to fit: {line}")
