"""The runner: builds the pieces an experiment names and runs the outer loop of
docs/architecture.md: collect → write → advantages → learn → sync → log → checkpoint."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import torch

from selfplay.analysis.report import write_report
from selfplay.config import (
    ExperimentConfig,
    apply_override,
    overridden,
    read_yaml,
    resolve_paths,
)
from selfplay.core.errors import UserError
from selfplay.engines.hf import HFEngine, lora_spec
from selfplay.engines.models import resolve_model_path
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops import make_loop, validate
from selfplay.loops.base import Loop
from selfplay.rl.advantages import drop_zero_advantage
from selfplay.rl.losses import LOSS_PRESETS
from selfplay.running import inputs
from selfplay.running.checkpoint import LEARNER, Checkpointer, restore_rng, rng_state
from selfplay.running.plan import check as check_fits
from selfplay.running.rollouts import AsyncRollouts, Rollout, collect
from selfplay.running.snapshots import PolicySnapshots
from selfplay.running.threads import apply_thread_policy
from selfplay.running.tracking import RunLogger, console, episode_metrics, read_metrics
from selfplay.running.transports import (
    Probe,
    WeightSync,
    choose_transport,
    default_tolerance,
)
from selfplay.training.learner import Learner, LearnerSettings
from selfplay.training.make import learner_dtype, make_learner
from selfplay.training.sharded import ParallelSettings, ShardedLearner


def learner_settings(config: ExperimentConfig) -> LearnerSettings:
    train = config.train
    objective, _, default_aggregation = LOSS_PRESETS[train.loss]
    return LearnerSettings(
        lr=train.lr,
        weight_decay=train.weight_decay,
        max_grad_norm=train.max_grad_norm,
        objective=objective,
        aggregation=train.aggregation or default_aggregation,
        eps_low=train.eps_low,
        eps_high=train.eps_high,
        cispo_eps_max=train.cispo_eps_max,
        tis_cap=train.tis_cap,
        kl_coef=train.kl_coef,
        kl_estimator=train.kl_estimator,
        epochs=train.epochs,
        micro_batch_size=train.micro_batch_size,
        logprob_chunk_size=train.logprob_chunk_size,
        max_new_tokens=config.sampling.max_new_tokens,
        dtype=learner_dtype(config, torch.cuda.is_available()),
        gradient_checkpointing=train.gradient_checkpointing,
        lora=lora_spec(config),
    )


def parallel_settings(config: ExperimentConfig) -> ParallelSettings:
    return ParallelSettings(**config.train.parallel.model_dump(), address=config.cluster.address)


def build_engine(config: ExperimentConfig, model_path: Path):
    adapters = config.adapters()
    if config.cluster.backend == "ray":
        from selfplay.engines.ray_pool import build_ray_engine

        return build_ray_engine(config, model_path)
    if config.engine.backend == "vllm":
        from selfplay.engines.vllm_engine import VLLMEngine

        return VLLMEngine(
            model_path,
            dtype=config.model.dtype,
            lora=lora_spec(config),
            adapters=adapters,
            seed=config.seed,
            gpu_memory_utilization=config.engine.gpu_memory_utilization,
            max_model_len=config.engine.max_model_len,
            sleep=config.engine.sleep,
            prefix_caching=config.engine.prefix_caching,
            nccl_sync=config.sync.transport == "nccl",
        )
    return HFEngine(
        model_path,
        dtype=config.model.dtype,
        lora=lora_spec(config),
        adapters=adapters,
        max_batch_size=config.engine.max_batch_size,
        seed=config.seed,
        device=config.engine.device,
        prefix_caching=config.engine.prefix_caching,
        prefix_cache_mb=config.engine.prefix_cache_mb,
    )


@dataclass
class World:
    """Everything one run is made of; the runner owns it, a loop sees only ``policy`` and
    ``snapshots``."""

    config: ExperimentConfig
    run_dir: Path
    engine: object
    learner: Learner | ShardedLearner
    loop: Loop
    policy: BatchingPolicy
    snapshots: PolicySnapshots
    logger: RunLogger
    checkpointer: Checkpointer
    sync: WeightSync


def weight_sync(config: ExperimentConfig, run_dir: Path, engine, learner) -> WeightSync:
    """The transport ``sync.transport`` names (or the one where the engines are) and, with
    ``sync.verify``, the probe every sync must pass."""
    sync = config.sync
    folder = Path(sync.dir) if sync.dir else run_dir / "weights"
    transport = choose_transport(sync.transport, engine, folder, learner, sync.bucket_mb * 2**20)
    probe = Probe.of(engine.tokenizer, sync.probe_tokens) if sync.verify else None
    tolerance = sync.tolerance or default_tolerance(config.model.dtype, config.engine.backend)
    return WeightSync(transport, probe, tolerance)


def build(config: ExperimentConfig, run_dir: Path, resume: bool, loop: Loop | None = None) -> World:
    torch.manual_seed(config.seed)
    apply_thread_policy(config)
    model_path = resolve_model_path(config.model.path)
    loop = loop or make_loop(config)
    engine = build_engine(config, model_path)
    learner = make_learner(
        model_path,
        learner_settings(config),
        config.adapters(),
        config.engine.device,
        parallel_settings(config),
    )
    policy = BatchingPolicy(engine)
    return World(
        config,
        run_dir,
        engine,
        learner,
        loop,
        policy,
        PolicySnapshots(learner, engine, policy),
        RunLogger(run_dir, config, resume),
        Checkpointer(run_dir, config.checkpoint.keep, config.checkpoint.archive_every),
        weight_sync(config, run_dir, engine, learner),
    )


def checkpoint_state(world: World) -> dict:
    """Everything a checkpoint holds besides the learner (which writes its own folder)."""
    return {
        "loop": world.loop.state_dict(),
        "snapshots": world.snapshots.state_dict(),
        "rng": rng_state(),
        "engine_rng": world.engine.generator.get_state()
        if hasattr(world.engine, "generator")
        else None,
    }


def restore(world: World) -> int:
    loaded = world.checkpointer.load()
    if loaded is None:
        return 0
    next_step, state, path = loaded
    if (path / LEARNER).is_dir():
        world.learner.load(path / LEARNER)
    else:  # a checkpoint written before learner folders
        world.learner.load_state_dict(state["learner"])
    world.loop.load_state_dict(state["loop"])
    restore_rng(state["rng"])
    if state.get("engine_rng") is not None and hasattr(world.engine, "generator"):
        world.engine.generator.set_state(state["engine_rng"])
    world.logger.log_sync(next_step, world.sync(world.learner, world.engine, world.policy))
    world.snapshots.load_state_dict(state.get("snapshots", {"weights": {}}))
    return next_step


def learn(world: World, rollout: Rollout, training=contextlib.nullcontext) -> dict[str, float]:
    """Write → advantages → learn → sync: the rest of one step of the data flow.

    ``training()`` wraps the learner's computation (async rollouts lend its CPU cores to
    generation outside it)."""
    collected = rollout.collected
    world.logger.write_episodes(rollout.step, collected.episodes)  # on disk before training
    world.logger.write_tasks(collected.tasks)
    world.logger.write_files(collected.files)
    samples = world.loop.samples(collected.episodes)
    kept = drop_zero_advantage(samples)
    staleness = [world.learner.version - s.turn.policy_version for s in samples]
    metrics = rollout.eval_metrics | episode_metrics(collected.episodes) | collected.metrics
    sleep(world.engine)  # one GPU for both: the engine frees it while the learner steps
    with training():
        metrics |= world.learner.step(kept)
    wake_up(world.engine)
    synced = world.sync(world.learner, world.engine, world.policy)
    world.logger.log_sync(rollout.step, synced)  # sync.jsonl: transport, bytes, probe gap
    world.loop.after_update(rollout.step, world.snapshots)
    return metrics | {
        "rollout/seconds": rollout.seconds,
        "rollout/tokens_per_s": rollout.tokens / max(rollout.seconds, 1e-9),
        "train/samples_dropped_zero_adv": float(len(samples) - len(kept)),
        "sync/seconds": synced["sync/seconds"],
        "sync/wait_seconds": synced["sync/wait_seconds"],  # async: the batch in flight first
        "staleness/mean": sum(staleness) / len(staleness) if staleness else 0.0,
        "staleness/max": float(max(staleness, default=0)),
    }


def sleep(engine) -> None:
    if getattr(engine, "sleep", None) is not None and getattr(engine, "sleep_enabled", False):
        engine.sleep()


def wake_up(engine) -> None:
    if getattr(engine, "sleeping", False):
        engine.wake_up()


def train_step(world: World, step: int) -> dict[str, float]:
    """One synchronous step: evaluate if due, collect, then learn from what was collected."""
    start = time.perf_counter()
    metrics = learn(world, collect(world.loop, world.policy, step, _eval_due(world, step)))
    return metrics | _step_time(metrics, time.perf_counter() - start)


def _step_time(metrics: dict[str, float], seconds: float) -> dict[str, float]:
    timing = {"time/step_seconds": seconds, "sync/share": metrics["sync/seconds"] / seconds}
    if "game/games" in metrics:
        timing["game/games_per_minute"] = 60 * metrics["game/games"] / seconds
    return timing


def run(world: World, start_step: int) -> list[dict]:
    config, logger = world.config, world.logger
    logger.truncate_to(start_step)
    logger.start_progress(config.train.steps, start_step)
    steps = (
        async_steps(world, start_step)
        if config.rollout.mode == "async"
        else (train_step(world, step) for step in range(start_step, config.train.steps))
    )
    try:
        for step, metrics in zip(range(start_step, config.train.steps), steps, strict=True):
            logger.log(step, metrics)
            reward = next((v for k, v in metrics.items() if k.startswith("reward/")), None)
            logger.advance(reward, metrics["rollout/tokens_per_s"])
            if (step + 1) % config.checkpoint.every == 0 or step + 1 == config.train.steps:
                world.checkpointer.save(step + 1, checkpoint_state(world), world.learner)
                world.loop.save_artifacts(world.run_dir)  # e.g. curriculum/tasks.csv
        if start_step <= config.train.steps and not _final_logged(world):
            final = asyncio.run(world.loop.evaluate(world.policy, config.train.steps))
            logger.log(config.train.steps, {"final": 1.0, **final})
    finally:
        steps.close()  # stops the async producer thread, if any
        logger.close()
        world.loop.close()
        world.learner.close()  # sharded ranks: their actors and placement group
    rows = read_metrics(world.run_dir)
    write_report(world.run_dir, rows)
    return rows


def async_steps(world: World, start_step: int) -> Iterator[dict[str, float]]:
    """Steps whose rollouts were collected on a background thread while earlier steps trained."""
    settings = world.config.rollout
    rollouts = AsyncRollouts(
        world.loop,
        world.policy,
        range(start_step, world.config.train.steps),
        settings.max_staleness,
        evaluate_at=lambda step: _eval_due(world, step),
        engine_threads=settings.engine_threads,
        learner_threads=settings.learner_threads,
        engine=world.engine,
    )
    with rollouts:
        last = time.perf_counter()
        for rollout in rollouts:
            metrics = learn(world, rollout, rollouts.learner_training)
            rollouts.weights_synced()
            now = time.perf_counter()
            metrics |= _step_time(metrics, now - last) | rollouts.metrics()
            last = now
            yield metrics


def _eval_due(world: World, step: int) -> bool:
    """Evaluate before the first step and every ``eval_every`` steps (a loop setting)."""
    every = getattr(world.config.settings, "eval_every", 0)
    return step == 0 or (bool(every) and step % every == 0)


def _final_logged(world: World) -> bool:
    return any(row.get("final") for row in read_metrics(world.run_dir))


def new_run_dir(config: ExperimentConfig, loop: Loop | None = None) -> Path:
    """A new run folder with the run's inputs frozen into it (``selfplay.running.inputs``):
    the config, the role prompts' text, plug-in sources, the environment."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = Path(config.run_dir) / f"{config.name}-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=False)
    try:
        inputs.freeze(config, run_dir, loop)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return run_dir


def start(config: ExperimentConfig) -> tuple[Path, list[dict]]:
    # bad games (ids, arguments, a first reset), roles, prompt fields or tasks fail here, in
    # one line, before a run folder exists and before the model loads
    loop = make_loop(config)
    resolve_model_path(config.model.path)
    check_fits(config)  # more ranks than devices, or more memory than they have: one line
    run_dir = new_run_dir(config, loop)
    console.print(f"[bold]run[/] {run_dir}")
    try:
        world = build(config, run_dir, resume=False, loop=loop)
        return run_dir, run(world, 0)
    except Exception:
        # a run with no checkpoint has nothing to resume: leave no folder behind (a model head
        # the learner refuses, a game that raises in step 0); one with a checkpoint stays
        if Checkpointer(run_dir).latest() is None:
            shutil.rmtree(run_dir, ignore_errors=True)
            console.print(f"removed {run_dir}: it failed before its first checkpoint")
        else:
            console.print(f"{run_dir} stopped; `selfplay resume {run_dir}` continues it")
        raise


def load_run_config(
    run_dir: Path, overrides: list[str] | None = None, logging: bool = True
) -> ExperimentConfig:
    """The resolved config a run folder holds, with dotted overrides (``logging=False``: no
    wandb, no progress bar, for evaluations of a finished run).

    Relative paths in it resolve against the run folder (its ``inputs/``; a run made before
    those existed: against the working directory, as before), paths in overrides against the
    working directory; the run's copies of its plug-in modules are imported first. So it works
    from any folder, and after the run folder moved."""
    path = run_dir / "config.yaml"
    if not path.exists():
        raise UserError(f"{run_dir} is not a run folder (no config.yaml)")
    inputs.pin_plugins(run_dir)  # before validate: a plug-in loop is imported there
    data = read_yaml(path)
    for override in overrides or []:
        apply_override(data, override)
    config = validate(data, str(path))
    if (run_dir / inputs.INPUTS).is_dir():
        resolve_paths(config, Path(run_dir).resolve(), overridden(overrides))
    if not logging:
        config.logging.wandb = "disabled"
        config.logging.progress = False
    return config


def resume(run_dir: Path, overrides: list[str] | None = None) -> tuple[Path, list[dict]]:
    """Continue ``run_dir`` from its last checkpoint; ``overrides`` change its config from here
    on (``train.parallel.ranks``: the learner resumes on any number of ranks) and are written
    into its config.yaml (a prompt given by an override is copied into the run first; a run
    made before ``inputs/`` existed gets its inputs frozen now)."""
    config = load_run_config(run_dir, overrides)
    loop = make_loop(config)  # a bad override fails here, before config.yaml is touched
    inputs.freeze(config, run_dir, loop)
    world = build(config, run_dir, resume=True, loop=loop)
    next_step = restore(world)
    console.print(f"[bold]resume[/] {run_dir} at step {next_step}")
    return run_dir, run(world, next_step)


def evaluate_run(run_dir: Path, overrides: list[str] | None = None) -> dict[str, float]:
    """``selfplay eval``: the loop's evaluation on the run's latest checkpoint."""
    config = load_run_config(run_dir, overrides, logging=False)
    world = build(config, run_dir, resume=True)
    step = restore(world)
    metrics = asyncio.run(world.loop.evaluate(world.policy, step))
    world.loop.close()
    world.learner.close()
    with (run_dir / "eval.jsonl").open("a") as handle:
        handle.write(json.dumps({"step": step, "time": time.time(), **metrics}) + "\n")
    from rich.table import Table

    table = Table(title=f"eval of {run_dir} at step {step}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in sorted(metrics.items()):
        table.add_row(key, f"{value:.3f}")
    console.print(table)
    return metrics
