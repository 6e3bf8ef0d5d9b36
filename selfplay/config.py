"""Experiment configs: YAML files validated into typed pydantic models, with dotted overrides.

Every error a user can make (unknown key, wrong type, missing file, malformed YAML) becomes a
``UserError`` whose message is one line naming the file and the key; the CLI exits with code 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from selfplay.core.errors import UserError


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelConfig(Strict):
    path: str = "embedded"  # embedded | tiny-random | local folder | hub id
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"


class EngineConfig(Strict):
    backend: Literal["hf", "vllm"] = "hf"
    max_batch_size: int = Field(64, ge=1)
    device: str | None = None
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1)  # vllm only
    max_model_len: int = Field(4096, ge=128)  # vllm only


class SamplingConfig(Strict):
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(64, ge=1)


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraConfig(Strict):
    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] = list(LORA_TARGETS)


class TrainConfig(Strict):
    steps: int = Field(20, ge=1)
    lr: float = Field(1e-5, gt=0)
    loss: Literal["grpo", "drgrpo", "rloo", "reinforce", "cispo"] = "drgrpo"
    aggregation: (
        Literal["token-mean", "seq-mean-token-sum-norm", "seq-mean-token-mean", "prompt-level"]
        | None
    ) = None  # None: the loss preset's default
    eps_low: float = Field(0.2, ge=0)
    eps_high: float = Field(0.28, ge=0)
    cispo_eps_max: float = Field(5.0, gt=0)
    tis_cap: float | None = Field(2.0, gt=0)  # None disables TIS
    epochs: int = Field(1, ge=1)
    micro_batch_size: int = Field(8, ge=1)
    logprob_chunk_size: int = Field(1024, ge=16)
    max_grad_norm: float = Field(1.0, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    finetune: Literal["lora", "full"] = "lora"
    lora: LoraConfig = LoraConfig()
    gradient_checkpointing: bool = False


class AdvantageConfig(Strict):
    estimator: Literal["auto", "grpo", "drgrpo", "rloo", "reinforce", "rae"] = "auto"
    rae_alpha: float = Field(0.95, ge=0, le=1)
    rae_order: Literal["paper", "code"] = "paper"
    adpo: bool = False
    adpo_floor: float = Field(0.6, ge=0, le=1)


class RoleConfig(Strict):
    prompt: str  # a YAML file name in roles/prompts (without .yaml) or a path
    adapter: Literal["shared", "own"] = "shared"
    temperature: float | None = Field(None, ge=0)  # None: sampling.temperature

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
    corrects for it with TIS (REFERENCE §7: bounded staleness + importance correction)."""

    mode: Literal["sync", "async"] = "sync"
    max_staleness: int = Field(1, ge=1, le=4)
    # CPU threads for generation and for training while they overlap (None: split the cores);
    # small decode matmuls barely scale past one thread, so two one-thread workers beat one
    # two-thread worker alternating between them.
    engine_threads: int | None = Field(None, ge=1)
    learner_threads: int | None = Field(None, ge=1)


class TaskSpec(Strict):
    name: str  # a reasoning-gym dataset name
    weight: float = Field(1.0, gt=0)
    config: dict[str, Any] = {}
    # difficulty levels: each a config merged over `config` (level k = difficulty label k)
    levels: list[dict[str, Any]] = []


class ToolConfig(Strict):
    """The Python tool for tool-integrated rollouts (Agent0 §3): fenced code runs in the sandbox."""

    max_tool_turns: int = Field(4, ge=1)
    max_observation_tokens: int = Field(512, ge=16)
    wall_s: float = Field(10.0, gt=0)
    pool_size: int = Field(2, ge=1)
    sessions: bool = False  # variables persist between the tool calls of one episode


class RlvrConfig(Strict):
    tasks: list[TaskSpec]
    dataset_size: int = Field(64, ge=1)  # a small fixed set → the "sanity check" setting
    prompts_per_step: int = Field(4, ge=1)
    group_size: int = Field(8, ge=2)
    lenient: bool = True  # accept the last number when no \boxed{} is given
    format_reward: float = Field(0.0, ge=0)  # bonus for a \boxed{} answer
    eval_size: int = Field(32, ge=0)
    eval_every: int = Field(0, ge=0)  # 0: only before and after training
    # train: the first eval_size training tasks (the sanity check); heldout: eval_size other
    # tasks from the same families and levels, never trained on
    eval_split: Literal["train", "heldout"] = "train"
    tool: ToolConfig | None = None  # set to give the solver a Python interpreter


class GameSpec(Strict):
    id: str  # a native id (kuhn_poker, tictactoe, simple_negotiation) or textarena:<Id>
    weight: float = Field(1.0, gt=0)
    max_turns: int = Field(50, ge=1)  # cut-off → draw (SPIRAL: 50)
    kwargs: dict[str, Any] = {}  # passed to the game's constructor (e.g. rounds: 3)


class OpponentConfig(Strict):
    kind: Literal["mirror", "random", "frozen", "pool"] = "mirror"
    pool_size: int = Field(25, ge=1)  # FIFO pool of past checkpoints
    refresh_every: int = Field(5, ge=1)  # steps between snapshots into the pool


class SpiralConfig(Strict):
    games: list[GameSpec]
    games_per_step: int = Field(8, ge=1)
    opponent: OpponentConfig = OpponentConfig()
    invalid_penalty: float = -1.5  # offender's training reward for an invalid/unparseable move
    invalid_opponent_reward: float = 0.5  # the other seat's training reward then
    lenient: bool = False  # accept the last [token] when no \boxed{} is given
    eval_every: int = Field(0, ge=0)  # 0: only before and after training
    eval_games: int = Field(16, ge=0)  # per game and opponent, seats alternating
    eval_opponents: list[Literal["random", "initial"]] = ["random", "initial"]
    eval_ood_games: list[str] = []  # out-of-domain game ids, against the random opponent
    eval_reasoning: list[TaskSpec] = []  # held-out reasoning-gym families (transfer)
    eval_reasoning_size: int = Field(16, ge=0)


class SpiceContaminationConfig(Strict):
    """Generated questions that nearly copy an evaluation item are dropped (and counted).

    The items are the held-out reasoning-gym questions of ``spice.eval_reasoning`` plus the
    ``question`` field of every row of the JSONL files in ``eval_files``."""

    enabled: bool = True
    threshold: float = Field(0.9, gt=0, le=1)  # cosine similarity (MiniLM) that counts as a copy
    eval_files: list[str] = []  # local JSONL files of {"question": ..., "answer": ...} rows


class SpiceConfig(Strict):
    """SPICE (REFERENCE §4): a challenger grounded in corpus chunks vs a reasoner without them."""

    corpus: str | None = None  # None: corpora.DEFAULT_CORPUS (built on first use)
    corpus_cache: str | None = None  # None: the corpora package's cache folder
    grounded: bool = True  # false: no document in the challenger's prompt ("no corpus" ablation)
    chunk_max_tokens: int = Field(5992, ge=16)  # the chunk is cut to this many tokens in the prompt
    documents_per_step: int = Field(4, ge=1)
    attempts_per_document: int = Field(4, ge=1)  # challenger samples per document per round
    max_rounds: int = Field(1, ge=1)  # more rounds only for documents still without a valid one
    formats: Literal["mc", "free", "both"] = "both"  # "both": attempts alternate mc / free-form
    reasoner_samples: int = Field(8, ge=2)  # K = G
    invalid_reward: float = -0.1  # ρ; negative ρ has caused collapse elsewhere (docs/spice.md)
    challenger_reward: str = "variance"  # variance | uncertainty | learnability | threshold | m:f
    # documents are drawn by `curriculum.sampler`; near_half = an alias of its `learnability`
    sampler: Literal["uniform", "near_half"] = "uniform"
    challenger_max_tokens: int | None = Field(None, ge=8)  # None: sampling.max_new_tokens
    reasoner_max_tokens: int | None = Field(None, ge=1)
    lenient: bool = True  # reasoner answers without \boxed{}: the last number / option letter
    verify_timeout_s: float = Field(2.0, gt=0)  # math-verify per comparison
    contamination: SpiceContaminationConfig = SpiceContaminationConfig()
    eval_every: int = Field(0, ge=0)  # 0: only before and after training
    eval_reasoning: list[TaskSpec] = []  # held-out reasoning-gym families (greedy accuracy)
    eval_reasoning_size: int = Field(32, ge=0)


class CorpusSettings(Strict):
    """How `selfplay corpus build` turns documents into a searchable corpus (docs/corpora.md).

    Chunk sizes are in tokens of ``tokenizer`` (the policy's tokenizer by default, because the
    challenger reads the chunk); SPICE's chunks are up to 5,992 tokens (REFERENCE §4)."""

    chunk_tokens: int = Field(256, ge=16, le=5992)
    overlap_tokens: int = Field(32, ge=0)
    tokenizer: str = "embedded"  # a model spec (see selfplay.engines.models) or "embedding"
    embedding_model: str = "minilm"  # the offline MiniLM package, or a local model folder
    batch_size: int = Field(32, ge=1)  # chunks per embedding batch
    # near-duplicates: cosine of the chunk embeddings at or above this is one chunk (1.0: off)
    dedup_threshold: float = Field(0.95, gt=0, le=1)
    text_field: str = "text"  # the column holding the text in jsonl / parquet / datasets
    index: Literal["auto", "flat", "ivf", "hnsw"] = "auto"
    exact_max_chunks: int = Field(100_000, ge=1)  # auto: exact search up to this many chunks
    approximate: Literal["ivf", "hnsw"] = "ivf"  # auto: the index past exact_max_chunks
    ivf_nlist: int = Field(0, ge=0)  # 0: 4·√n lists
    ivf_nprobe: int = Field(64, ge=1)
    hnsw_m: int = Field(32, ge=4)
    hnsw_ef_construction: int = Field(80, ge=8)
    hnsw_ef_search: int = Field(128, ge=1)

    @model_validator(mode="after")
    def _overlap_below_chunk(self) -> CorpusSettings:
        if self.overlap_tokens >= self.chunk_tokens:
            raise ValueError(
                f"overlap_tokens ({self.overlap_tokens}) must be below chunk_tokens "
                f"({self.chunk_tokens})"
            )
        return self


class Agent0Config(Strict):
    """Agent0 (REFERENCE §3): a curriculum role and a tool-using executor role, alternating.

    Steps map to (iteration, phase): each iteration is ``curriculum_steps`` curriculum steps
    then ``executor_steps`` executor steps (train.steps = iterations × their sum)."""

    task_kind: Literal["qa", "code_io"] = "qa"  # code_io: program + input, verified by running it
    curriculum_steps: int = Field(5, ge=1)
    executor_steps: int = Field(5, ge=1)
    samples_per_task: int = Field(8, ge=2)  # k executor samples for p̂ and the pseudo-label
    # curriculum phase: GRPO groups of proposals from the curriculum prompt
    proposal_groups: int = Field(1, ge=1)
    proposal_group_size: int = Field(8, ge=2)
    curriculum_max_tokens: int | None = Field(None, ge=1)  # None: sampling.max_new_tokens
    # the composite curriculum reward (curricula/rewards.py)
    reward_form: Literal["paper", "code"] = "paper"
    proposer_reward: str | None = None  # p̂ → reward by name; None: the form's uncertainty
    lambda_unc: float = Field(1.0, ge=0)
    lambda_tool: float = Field(1.0, ge=0)
    tool_gamma: float = Field(0.05, ge=0)
    tool_cap: int = Field(4, ge=0)
    repetition_weight: float = Field(1.0, ge=0)
    repetition_threshold: float = Field(0.5, gt=0, le=1)
    agreement_gate: bool = False  # code form: p̂ ← 0 when the executor majority disagrees
    # executor phase
    pool_size: int = Field(64, ge=1)  # proposals generated per iteration for the task pool
    band: Literal["paper", "code"] = "paper"  # |p̂ − ½| ≤ band_delta, or band_lo ≤ p̂ ≤ band_hi
    band_delta: float = Field(0.25, ge=0, le=0.5)
    band_lo: float = Field(0.3, ge=0, le=1)
    band_hi: float = Field(0.8, ge=0, le=1)
    executor_tasks_per_step: int = Field(4, ge=1)
    executor_group_size: int = Field(8, ge=2)
    executor_reward: Literal["binary", "signed"] = "binary"  # 1/0 (paper) or +1/−1 (code)
    executor_max_tokens: int | None = Field(None, ge=1)  # None: sampling.max_new_tokens
    verify_timeout_s: float = Field(5.0, gt=0)  # math-verify, per comparison
    code_io_modes: list[Literal["deduction", "abduction"]] = ["deduction", "abduction"]
    tool: ToolConfig = ToolConfig()
    # pseudo-label accuracy: executor majority vs gold on reasoning-gym tasks, per iteration
    probe: list[TaskSpec] = [TaskSpec(name="basic_arithmetic")]
    probe_size: int = Field(16, ge=0)
    eval_every: int = Field(0, ge=0)  # steps between probe evaluations (0: only at the end)

    @model_validator(mode="after")
    def _band_ordered(self) -> Agent0Config:
        if self.band_lo > self.band_hi:
            raise ValueError(f"band_lo {self.band_lo} > band_hi {self.band_hi}")
        if not self.code_io_modes:
            raise ValueError("code_io_modes needs at least one of deduction, abduction")
        return self


class CurriculumConfig(Strict):
    """Difficulty-adaptive task sampling for every loop (docs/curricula.md, REFERENCE §5)."""

    sampler: Literal["uniform", "band", "dapo", "learnability", "plr", "tscl"] = "uniform"
    retire_at: float | None = Field(None, gt=0, le=1)  # ScaleRL: 0.9; None keeps every task
    retire_min_attempts: int = Field(1, ge=1)
    prior_p: float = Field(0.5, ge=0, le=1)  # p̂ of a task (and level) never seen
    pool_strength: float = Field(8.0, ge=0)  # pseudo-attempts of a task's level in its p̂
    ema: float = Field(0.5, gt=0, le=1)  # weight of the newest group in p̂
    band_lo: float = Field(0.3, ge=0, le=1)
    band_hi: float = Field(0.7, ge=0, le=1)
    dapo_max_rounds: int = Field(3, ge=0)  # refill rounds after the first draw
    learnability_oversample: int = Field(4, ge=1)  # LILO: m×batch candidates, keep the top
    plr_beta: float = Field(0.1, gt=0)  # rank temperature β
    plr_rho: float = Field(0.1, ge=0, le=1)  # staleness mix ρ
    tscl_mode: Literal["epsilon", "thompson"] = "epsilon"
    tscl_epsilon: float = Field(0.1, ge=0, le=1)
    tscl_alpha: float = Field(0.1, gt=0, le=1)
    tscl_window: int = Field(10, ge=1)
    tscl_arms: Literal["level", "family"] = "level"
    top_k: int = Field(5, ge=1)  # top tasks by priority in metrics.jsonl

    @model_validator(mode="after")
    def _band_ordered(self) -> CurriculumConfig:
        if self.band_lo > self.band_hi:
            raise ValueError(f"band_lo {self.band_lo} > band_hi {self.band_hi}")
        return self


class ExperimentConfig(Strict):
    name: str
    description: str = ""
    # a built-in loop (rlvr, spiral, agent0, spice), "module:Class", or an entry-point name;
    # checked against the loop registry when the loop is built (selfplay.loops.loop_class)
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
    curriculum: CurriculumConfig = CurriculumConfig()
    rlvr: RlvrConfig | None = None
    spiral: SpiralConfig | None = None
    settings: dict[str, Any] = {}  # a plug-in loop's own section (selfplay.loops.loop_settings)
    agent0: Agent0Config | None = None
    spice: SpiceConfig | None = None

    @model_validator(mode="after")
    def _loop_section_present(self) -> ExperimentConfig:
        if self.loop in type(self).model_fields and getattr(self, self.loop) is None:
            raise ValueError(f"loop {self.loop!r} needs a `{self.loop}:` section")
        if self.train.finetune == "full" and any(r.adapter == "own" for r in self.roles.values()):
            raise ValueError("roles with `adapter: own` need train.finetune: lora")
        if self.rollout.mode == "async" and self.train.tis_cap is None:
            raise ValueError(
                "rollout.mode: async trains on stale samples and needs importance correction: "
                "set train.tis_cap"
            )
        return self

    def adapters(self) -> list[str]:
        """LoRA adapter names the engine and learner hold, in a stable order (none when the
        whole model is fine-tuned)."""
        if self.train.finetune != "lora":
            return []
        return sorted({role.adapter_name(name) for name, role in self.roles.items()})


# ---------------------------------------------------------------------- loading
def experiments_dir() -> Path:
    """The experiments/ folder of the checkout this package runs from (editable install)."""
    return Path(__file__).resolve().parent.parent / "experiments"


def list_experiments() -> list[str]:
    return sorted(p.stem for p in experiments_dir().glob("*.yaml"))


def find_experiment(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.exists():
            raise UserError(f"experiment file {path} does not exist")
        return path
    candidate = experiments_dir() / f"{name_or_path}.yaml"
    if not candidate.exists():
        known = ", ".join(list_experiments()) or "none"
        raise UserError(f"unknown experiment {name_or_path!r} (known: {known})")
    return candidate


def read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError as exc:
        raise UserError(f"{path}: file not found") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{path}:{where} malformed YAML: {problem}") from exc
    if not isinstance(data, dict):
        raise UserError(f"{path}: an experiment must be a YAML mapping, got {type(data).__name__}")
    return data


def apply_override(data: dict, override: str) -> None:
    """``a.b.c=value`` sets data[a][b][c] = YAML-parsed value (so 1e-5, true, [1, 2] work)."""
    key, sep, raw = override.partition("=")
    if not sep or not key:
        raise UserError(f"override {override!r} must look like key.path=value")
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise UserError(f"override {key}: {part} is not a section")
        node = child
    node[parts[-1]] = value


def _one_line(exc: ValidationError, source: str) -> str:
    error = exc.errors()[0]
    key = ".".join(str(p) for p in error["loc"] if not str(p).startswith("function-after"))
    if error["type"] == "extra_forbidden":
        return f"{source}: unknown key {key!r}"
    if error["type"] == "missing":
        return f"{source}: missing key {key!r}"
    got = error.get("input")
    got_text = f" (got {got!r})" if not isinstance(got, dict | list) else ""
    where = f"key {key!r}: " if key else ""
    more = f" (+{len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{source}: {where}{error['msg']}{got_text}{more}"


def validate(data: dict, source: str) -> ExperimentConfig:
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(_one_line(exc, source)) from exc


def load_experiment(name_or_path: str, overrides: list[str] | None = None) -> ExperimentConfig:
    path = find_experiment(name_or_path)
    data = read_yaml(path)
    data.setdefault("name", path.stem)
    for override in overrides or []:
        apply_override(data, override)
    return validate(data, str(path))


def dump(config: ExperimentConfig) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
