"""Experiment configs: YAML files validated into typed pydantic models, with dotted overrides.

This module holds the sections every experiment shares (model, engine, sampling, train,
advantage, roles, ...). It names no loop: each loop declares the model of its own section in
its own module (``Loop.Settings``), and ``selfplay.loops.validate`` checks that section, under
the key the loop names (``drill:`` for a loop whose class says ``name = "drill"``), the same
way for built-in and plug-in loops.

Every error a user can make (unknown key, wrong type, missing file, malformed YAML) becomes a
``UserError`` whose message is one line naming the file and the key; the CLI exits with code 2.
"""

from __future__ import annotations

import contextlib
import difflib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from curricula.settings import CurriculumSettings
from selfplay.core import plugins
from selfplay.core.errors import UserError


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
    target_modules: list[str] = list(LORA_TARGETS)


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
    kl_coef: float = Field(0.0, ge=0)  # β of a KL term to the initial policy in the loss; 0: off
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    epochs: int = Field(1, ge=1)
    micro_batch_size: int = Field(8, ge=1)
    logprob_chunk_size: int = Field(1024, ge=16)
    max_grad_norm: float = Field(1.0, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    finetune: Literal["lora", "full"] = "lora"
    lora: LoraConfig = LoraConfig()
    gradient_checkpointing: bool = False
    parallel: ParallelConfig = ParallelConfig()


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


def one_line(exc: ValidationError, source: str, prefix: str = "") -> str:
    """A pydantic error as one line naming the source and the key (``prefix``: the section the
    model validated, the loop's name)."""
    error = exc.errors()[0]
    parts = [prefix] if prefix else []
    parts += [str(p) for p in error["loc"] if not str(p).startswith("function-after")]
    key = ".".join(parts)
    if error["type"] == "extra_forbidden":
        return f"{source}: unknown key {key!r}"
    if error["type"] == "missing":
        return f"{source}: missing key {key!r}"
    got = error.get("input")
    got_text = f" (got {got!r})" if not isinstance(got, dict | list) else ""
    where = f"key {key!r}: " if key else ""
    more = f" (+{len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{source}: {where}{error['msg']}{got_text}{more}"


def refuse_unknown_sections(data: dict, source: str, section_of: SectionOf) -> None:
    """One line for a top-level key that is neither a shared section nor the loop's own, with
    the nearest known name (``trian`` -> ``train``)."""
    known = set(ExperimentConfig.model_fields)
    try:
        loop_key = section_of(str(data.get("loop", "")))[0]
    except Exception:  # an unknown loop: its own one-line error says so, after validation
        return
    known |= {loop_key} if loop_key else set()
    for unknown in sorted(set(data) - known):
        near = difflib.get_close_matches(unknown, sorted(known), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise UserError(f"{source}: unknown key {unknown!r}{hint}")


def parse(data: dict, source: str, section_of: SectionOf) -> ExperimentConfig:
    """The shared sections validated here, the loop's own section by the model ``section_of``
    names for the config's loop; any other key is an error. Use ``selfplay.loops.validate``,
    which passes the loop registry."""
    # first: a misspelt section ("trian:") is the cause of the missing key it leaves behind
    refuse_unknown_sections(data, source, section_of)
    try:
        config = ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(one_line(exc, source)) from exc
    key, model = section_of(config.loop)
    extra = config.__pydantic_extra__ if config.__pydantic_extra__ is not None else {}
    if key is None or model is None:
        return config
    raw = extra.get(key)
    if raw is None and any(field.is_required() for field in model.model_fields.values()):
        raise UserError(f"{source}: loop {config.loop!r} needs a `{key}:` section")
    if raw is not None and not isinstance(raw, dict | BaseModel):
        raise UserError(f"{source}: `{key}:` must be a mapping, got {type(raw).__name__}")
    try:
        extra[key] = model.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        raise UserError(one_line(exc, source, prefix=key)) from exc
    config._section = key
    return config


def load(name_or_path: str, overrides: list[str] | None, section_of: SectionOf) -> ExperimentConfig:
    """An experiment by name (``experiments/NAME.yaml``) or path, with dotted overrides.

    Paths in the file (role prompts, input files, local folders) resolve against the file's
    folder, and a plug-in module beside the file is found from any working directory; a path
    given in an override resolves against the working directory. The config holds them as
    absolute paths."""
    path = find_experiment(name_or_path)
    folder = path.resolve().parent
    plugins.add_search_path(folder)  # before parse: a plug-in loop is imported there
    data = read_yaml(path)
    data.setdefault("name", path.stem)
    for override in overrides or []:
        apply_override(data, override)
    config = parse(data, str(path), section_of)
    resolve_paths(config, folder, overridden(overrides))
    return config


# ---------------------------------------------------------------------- paths in a config
Location = tuple[str | int, ...]


def _path_kind(annotation: Any, metadata: list) -> tuple[str, bool] | None:
    """(kind, is a list) when a field holds a ``PathField`` path or a list of them."""
    for item in metadata:
        if isinstance(item, PathField):
            return item.kind, False
    if get_origin(annotation) is Annotated:
        return _path_kind(None, list(annotation.__metadata__))
    if get_origin(annotation) is list:
        found = _path_kind(get_args(annotation)[0], [])
        return (found[0], True) if found else None
    for arg in get_args(annotation):  # X | None
        if arg is not type(None) and (found := _path_kind(arg, [])):
            return found
    return None


def path_fields(config: ExperimentConfig) -> Iterator[tuple[Location, str, str]]:
    """(location, kind, value) of every path the config holds, the loop's section included;
    a list's paths one by one (the location then ends in the index)."""

    def walk(model: BaseModel, where: Location) -> Iterator[tuple[Location, str, str]]:
        for name, field in type(model).model_fields.items():
            value = getattr(model, name)
            found = _path_kind(field.annotation, field.metadata)
            if found and value is not None:
                kind, many = found
                items = enumerate(value) if many else [(None, value)]
                for index, item in items:
                    yield (*where, name) + (() if index is None else (index,)), kind, item
            elif isinstance(value, BaseModel):
                yield from walk(value, (*where, name))
            elif isinstance(value, dict | list):
                pairs = value.items() if isinstance(value, dict) else enumerate(value)
                for key, item in pairs:
                    if isinstance(item, BaseModel):
                        yield from walk(item, (*where, name, key))

    yield from walk(config, ())
    if config._section is not None and isinstance(config.settings, BaseModel):
        yield from walk(config.settings, (config._section,))


def set_path(config: ExperimentConfig, location: Location, value: str) -> None:
    """Put ``value`` at ``location`` (a location ``path_fields`` gave)."""
    *parents, last = location
    node: Any = config
    for key in parents:
        if isinstance(node, ExperimentConfig) and key == config._section:
            node = config.settings
        elif isinstance(node, BaseModel):
            node = getattr(node, str(key))
        else:
            node = node[key]
    if isinstance(last, int):
        node[last] = value
    else:
        setattr(node, last, value)


def is_file_path(kind: str, value: str) -> bool:
    """Whether a path field's value names a file or folder (a role prompt may be a name)."""
    return kind != "prompt" or Path(value).suffix in (".yaml", ".yml")


def overridden(overrides: list[str] | None) -> set[str]:
    """The dotted keys a list of ``key=value`` overrides sets."""
    return {o.partition("=")[0] for o in overrides or []}


def resolve_paths(config: ExperimentConfig, base: Path, keys: set[str] = frozenset()) -> None:
    """Make the config's relative paths absolute: against ``base``, or against the working
    directory for those an override set (``keys``, the overrides' dotted keys). A ``dir`` path
    is resolved only where it exists (``model.path`` may be a hub id)."""
    cwd = Path(os.getcwd())
    for location, kind, value in list(path_fields(config)):
        path = Path(value).expanduser()
        if path.is_absolute() or not is_file_path(kind, value):
            continue
        dotted = ".".join(str(part) for part in location)
        by_override = any(dotted == k or dotted.startswith(f"{k}.") for k in keys)
        resolved = (cwd if by_override else base) / path
        if kind == "dir" and not resolved.exists():
            continue
        set_path(config, location, str(resolved))


def dump(config: ExperimentConfig, relative_to: Path | None = None) -> str:
    """The config as YAML; paths inside ``relative_to`` (a run folder) written relative to it,
    so that the folder can move."""
    data = config.model_dump(mode="json")
    if relative_to is not None:
        root = relative_to.resolve()
        for location, kind, value in path_fields(config):
            path = Path(value)
            if not (path.is_absolute() and is_file_path(kind, value)):
                continue
            with contextlib.suppress(ValueError):  # outside the folder: kept absolute
                node: Any = data
                for key in location[:-1]:
                    node = node[key]
                node[location[-1]] = str(path.resolve().relative_to(root))
    return yaml.safe_dump(data, sort_keys=False)
