"""The experiment config's schema: the sections every experiment shares (model, engine,
sampling, train, advantage, roles, ...) as typed pydantic models.

It names no loop: each loop declares the model of its own section in its own module
(``Loop.Settings``), and ``selfplay.loops.validate`` checks that section, under the key the loop
names (``drill:`` for a loop whose class says ``name = "drill"``), the same way for built-in and
plug-in loops. Reading experiment files into this schema (YAML, dotted overrides, one-line
errors, paths) is ``selfplay.config_files``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from curricula.settings import CurriculumSettings


@dataclass(frozen=True)
class PathField:
    """Marks a config field that names something on disk (``Annotated[str, PathField(...)]``).

    A relative value resolves against the folder of the file it was written in: the experiment
    file, or the run folder for a run's saved config.yaml (an override typed on the command line
    resolves against the working directory). ``kind``: ``prompt`` (a role prompt: a name in
    roles/prompts, or a path when it ends in .yaml/.yml; copied into the run), ``file`` (an input
    file the run reads; copied into the run), ``dir`` (a local folder, only when it exists there:
    a model folder, a cache; not copied)."""

    kind: Literal["prompt", "file", "dir"]


RolePromptRef = Annotated[str, PathField("prompt")]
InputFile = Annotated[str, PathField("file")]
LocalDir = Annotated[str, PathField("dir")]


class Strict(BaseModel):
    """A config section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelConfig(Strict):
    path: LocalDir = "embedded"  # embedded | tiny-random | local folder | hub id
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"


class EngineConfig(Strict):
    backend: Literal["hf", "vllm"] = "hf"
    max_batch_size: int = Field(64, ge=1)
    device: str | None = None
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1)  # vllm only
    max_model_len: int = Field(4096, ge=128)  # vllm only
    # vllm on a GPU shared with the learner: free the KV cache and offload the weights while the
    # learner steps, wake before generating (sync rollouts only)
    sleep: bool = False
    # keep the keys/values of shared prompt prefixes and compute them once (vllm: its own
    # prefix cache; hf: selfplay.engines.prefix, holding at most prefix_cache_mb of them)
    prefix_caching: bool = True
    prefix_cache_mb: float = Field(256, ge=0)


class SyncConfig(Strict):
    """How new weights reach the engines after each step (docs/scale.md)."""

    transport: Literal["auto", "inprocess", "object_store", "filesystem", "nccl"] = "auto"
    dir: str | None = None  # filesystem: the shared folder (None: the run folder's weights/)
    verify: bool = True  # after every sync, the engine's probe log-probs must equal the learner's
    probe_tokens: int = Field(8, ge=1)
    tolerance: float | None = Field(None, gt=0)  # None: 1e-3 for fp32 hf, 5e-2 otherwise
    bucket_mb: int = Field(256, ge=1)  # nccl: bytes per broadcast bucket


class SamplingConfig(Strict):
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(64, ge=1)


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraConfig(Strict):
    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.0, ge=0, lt=1)
    # none: peft finds no layer to adapt and fails deep inside the learner
    target_modules: list[str] = Field(default_factory=lambda: list(LORA_TARGETS), min_length=1)


class ParallelConfig(Strict):
    """How many learner ranks and how they shard the model (docs/scale.md). ``ranks: 1`` is the
    one-process learner; more ranks are long-lived Ray actors sharding with FSDP2, one per GPU
    (one per CPU core without GPUs: for tests)."""

    ranks: int = Field(1, ge=1)
    strategy: Literal["fsdp2"] = "fsdp2"
    offload: bool = False  # FSDP2 CPU offload of parameters, gradients and optimizer state
    mixed_precision: bool = True  # GPU ranks: bf16 parameters, fp32 gradient reduction
    threads_per_rank: int = Field(1, ge=1)  # CPU ranks: torch threads each
    # the share of a GPU each rank reserves: below 1 when engine replicas share the GPUs
    # (colocated, e.g. 0.55 beside vLLM at gpu_memory_utilization 0.45)
    gpu_share: float = Field(1.0, gt=0, le=1)


class TrainConfig(Strict):
    steps: int = Field(20, ge=1)  # with token_budget: an upper bound
    # stop after the first step at which the tokens generated for training (every role; tool
    # output and evaluations excluded) reach this many; None: run all ``steps``
    token_budget: int | None = Field(None, ge=1)
    lr: float = Field(1e-5, gt=0)
    # the learning rate over the run's ``steps``: constant, or decayed (linearly or on a cosine)
    # from ``lr`` at the first step to ``lr * lr_final`` at step ``steps`` (with a token_budget
    # that stops the run sooner, the schedule still spans ``steps``). Game self-play needs it: a
    # constant-lr learner steps past the equilibrium and cycles
    # (docs/algorithms.md#the-learner-under-mmd)
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    lr_final: float = Field(0.0, ge=0, le=1)
    # AdamW's (β1, β2); β1 0 drops momentum, which carries a game policy past its target
    adam_betas: tuple[float, float] = (0.9, 0.999)
    loss: Literal["grpo", "drgrpo", "rloo", "reinforce", "cispo"] = "drgrpo"
    aggregation: (
        Literal["token-mean", "seq-mean-token-sum-norm", "seq-mean-token-mean", "prompt-level"]
        | None
    ) = None  # None: the loss preset's default
    eps_low: float = Field(0.2, ge=0)
    eps_high: float = Field(0.28, ge=0)
    cispo_eps_max: float = Field(5.0, gt=0)
    tis_cap: float | None = Field(2.0, gt=0)  # None disables TIS
    kl_coef: float = Field(0.0, ge=0)  # β of a KL term to the initial policy in the loss; 0: off
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    epochs: int = Field(1, ge=1)
    micro_batch_size: int = Field(8, ge=1)  # rows per micro-batch when share_prefix is off
    # the learner packs a micro-batch's sequences into one prefix tree (each shared beginning,
    # a system prompt, a game's history, a group's prompt, computed once), cut at tree_tokens
    # unique tokens; false: padded rows of micro_batch_size sequences
    share_prefix: bool = True
    tree_tokens: int = Field(2048, ge=16)
    # "prompt": trees share only exactly repeated prompts (the learner before prefix trees:
    # `selfplay bench step --compare trees` measures against it)
    tree_scope: Literal["common", "prompt"] = "common"
    logprob_chunk_size: int = Field(1024, ge=16)
    max_grad_norm: float = Field(1.0, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    finetune: Literal["lora", "full"] = "lora"
    lora: LoraConfig = LoraConfig()
    gradient_checkpointing: bool = False
    parallel: ParallelConfig = ParallelConfig()

    @model_validator(mode="after")
    def _betas_in_range(self) -> TrainConfig:
        if not all(0 <= beta < 1 for beta in self.adam_betas):
            raise ValueError(f"train.adam_betas must each be in [0, 1), got {self.adam_betas}")
        return self


class AdvantageConfig(Strict):
    estimator: Literal["auto", "grpo", "drgrpo", "rloo", "reinforce", "rae"] = "auto"
    rae_alpha: float = Field(0.95, ge=0, le=1)
    rae_order: Literal["paper", "code"] = "paper"
    adpo: bool = False
    adpo_floor: float = Field(0.6, ge=0, le=1)


class RoleConfig(Strict):
    prompt: RolePromptRef  # a YAML file name in roles/prompts (without .yaml) or a path
    adapter: Literal["shared", "own"] = "shared"
    temperature: float | None = Field(None, ge=0)  # None: sampling.temperature
    max_tokens: int | None = Field(None, ge=1)  # the role's token budget; None: sampling's
    stop: list[str] = []  # the role's stop strings (beside any its loop's format needs)
    # false: the role plays and is rewarded but never trains (its samples reach no learner
    # step): an ablation of one role's training, e.g. AZR's proposers or CURE's tester
    train: bool = True

    def adapter_name(self, role: str) -> str:
        return role if self.adapter == "own" else "shared"


class LoggingConfig(Strict):
    wandb: Literal["offline", "online", "disabled"] = "offline"
    project: str = "selfplay"
    progress: bool = True


class CheckpointConfig(Strict):
    every: int = Field(1, ge=1)
    keep: int = Field(2, ge=1)
    # also keep the trainable weights (LoRA: a few MB) of every N-th step in
    # checkpoints/archive/, never pruned, for `selfplay crossplay`; 0: off
    archive_every: int = Field(0, ge=0)


class ClusterConfig(Strict):
    backend: Literal["local", "ray"] = "local"
    address: str | None = None  # join an existing Ray cluster ("auto", "host:port", "ray://...")
    replicas: int = Field(2, ge=1)  # engine replicas as Ray actors
    num_cpus_per_replica: float = Field(1.0, gt=0)
    num_gpus_per_replica: float | None = None  # None: 1 when the cluster has GPUs


class RolloutConfig(Strict):
    """Synchronous (collect, then train) or asynchronous rollouts (collect step t+1 while
    training step t). Async trains on samples up to ``max_staleness`` policy versions old and
    corrects for it with TIS: bounded staleness + importance correction
    (docs/algorithms.md#async-rollouts)."""

    mode: Literal["sync", "async"] = "sync"
    max_staleness: int = Field(1, ge=1, le=4)
    # CPU threads for generation and for training while they overlap (None: split the cores);
    # small decode matmuls barely scale past one thread, so two one-thread workers beat one
    # two-thread worker alternating between them.
    engine_threads: int | None = Field(None, ge=1)
    learner_threads: int | None = Field(None, ge=1)


class ThreadsConfig(Strict):
    """CPU threads of the driver process (selfplay.running.threads, docs/speed.md#threads)."""

    # torch threads of the in-process engine and learner (None: the cores this process may use)
    torch: int | None = Field(None, ge=1)
    interop: int = Field(1, ge=1)  # torch's inter-op pool (nothing here runs ops side by side)


# the `curriculum:` section: one model, declared beside the samplers it configures
CurriculumConfig = CurriculumSettings


class LoopSection(NamedTuple):
    """Where a loop's own settings live: the config key and the pydantic model that checks it
    (``None`` for both: the loop has no section of its own)."""

    key: str | None
    model: type[BaseModel] | None


SectionOf = Callable[[str], LoopSection]  # loop name (as written in `loop:`) → its section


class ExperimentConfig(Strict):
    # extra keys are allowed only for the loop's own section; ``parse`` refuses any other
    model_config = ConfigDict(extra="allow", validate_assignment=True)

    name: str
    description: str = ""
    # a registered loop name, "module:Class", or an entry-point name;
    # resolved by the loop registry (selfplay.loops)
    loop: str
    seed: int = 0
    run_dir: str = "runs"
    model: ModelConfig = ModelConfig()
    engine: EngineConfig = EngineConfig()
    sampling: SamplingConfig = SamplingConfig()
    train: TrainConfig = TrainConfig()
    advantage: AdvantageConfig = AdvantageConfig()
    roles: dict[str, RoleConfig]
    logging: LoggingConfig = LoggingConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    cluster: ClusterConfig = ClusterConfig()
    rollout: RolloutConfig = RolloutConfig()
    threads: ThreadsConfig = ThreadsConfig()
    sync: SyncConfig = SyncConfig()
    curriculum: CurriculumConfig = CurriculumConfig()
    _section: str | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _consistent(self) -> ExperimentConfig:
        if self.train.finetune == "full" and any(r.adapter == "own" for r in self.roles.values()):
            raise ValueError("roles with `adapter: own` need train.finetune: lora")
        if self.engine.sleep and self.rollout.mode == "async":
            raise ValueError(
                "engine.sleep frees the engine while the learner steps; async "
                "rollouts generate meanwhile: use rollout.mode: sync"
            )
        if self.engine.sleep and self.engine.backend != "vllm":
            raise ValueError("engine.sleep is vLLM's sleep mode: it needs engine.backend: vllm")
        if self.rollout.mode == "async" and self.train.tis_cap is None:
            raise ValueError(
                "rollout.mode: async trains on stale samples and needs importance correction: "
                "set train.tis_cap"
            )
        return self

    @property
    def settings(self) -> Any:
        """The loop's own section, validated by its settings model (None if it has none)."""
        if self._section is None:
            return None
        return (self.__pydantic_extra__ or {}).get(self._section)

    def adapters(self) -> list[str]:
        """LoRA adapter names the engine and learner hold, in a stable order (none when the
        whole model is fine-tuned)."""
        if self.train.finetune != "lora":
            return []
        return sorted({role.adapter_name(name) for name, role in self.roles.items()})
