"""The runner: builds the pieces an experiment names and runs its steps; ``step`` is one step of
the algorithm, stage by stage: collect → write → advantages → learn → sync and verify →
after-update → log → checkpoint (docs/architecture.md#one-step)."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import torch

from selfplay.analysis.report import write_report
from selfplay.config import ExperimentConfig
from selfplay.config_files import apply_override, overridden, read_yaml, resolve_paths
from selfplay.core.errors import RunInterrupted, RunStopped, UserError, disk_full
from selfplay.core.paths import make_folder
from selfplay.engines.base import Engine
from selfplay.engines.hf import HFEngine
from selfplay.engines.lora import lora_spec
from selfplay.engines.models import resolve_model_path
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops import make_loop, validate
from selfplay.loops.base import Loop
from selfplay.rl.advantages import drop_zero_advantage
from selfplay.running import inputs
from selfplay.running.checkpoint import LEARNER, Checkpointer, restore_rng, rng_state
from selfplay.running.plan import check as check_fits
from selfplay.running.rollouts import AsyncRollouts, Rollout, Rollouts, SyncRollouts
from selfplay.running.snapshots import PolicySnapshots
from selfplay.running.stopping import StopRequested, StopSignals
from selfplay.running.threads import apply_thread_policy
from selfplay.running.tracking import RunLogger, console, episode_metrics, read_metrics
from selfplay.training.base import Learner
from selfplay.training.make import make_learner
from selfplay.training.sync import Probe, WeightSync, choose_transport, default_tolerance
from selfplay.types import Sample


def build_engine(config: ExperimentConfig, model_path: Path) -> Engine:
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
    engine: Engine
    learner: Learner
    loop: Loop
    policy: BatchingPolicy
    snapshots: PolicySnapshots
    logger: RunLogger
    checkpointer: Checkpointer
    sync: WeightSync
    tokens: int = 0  # generated for training so far (train.token_budget); in the checkpoint
    # SIGINT/SIGTERM seen during the run: the step stops at the end of the stage in progress
    stops: StopSignals = field(default_factory=StopSignals)


def weight_sync(config: ExperimentConfig, run_dir: Path, engine: Engine,
                learner: Learner) -> WeightSync:
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
    learner = make_learner(config, model_path)
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
        "engine_rng": world.engine.rng_state(),
        "tokens": world.tokens,
    }


def restore(world: World) -> int:
    loaded = world.checkpointer.load()
    if loaded is None:
        return 0
    next_step, state, path = loaded
    if not (path / LEARNER).is_dir():
        raise UserError(f"{path} was written before learner checkpoints had their own folder "
                        "(selfplay before wave 3); start a new run")
    world.learner.load(path / LEARNER)
    world.loop.load_state_dict(state["loop"])
    world.tokens = state.get("tokens", 0)  # a checkpoint from before token budgets: 0
    restore_rng(state["rng"])
    if state.get("engine_rng") is not None:
        world.engine.set_rng_state(state["engine_rng"])
    world.logger.log_sync(next_step, world.sync(world.learner, world.engine, world.policy))
    world.snapshots.load_state_dict(state.get("snapshots", {"weights": {}}))
    return next_step


# ---------------------------------------------------------------------- one step
def step(world: World, number: int, rollouts: Rollouts) -> dict[str, float]:
    """One step of the algorithm, its stages in order (docs/architecture.md#one-step). After each
    stage, a run asked to stop (SIGINT, SIGTERM) stops there (``StopSignals.after``)."""
    start = time.perf_counter()
    stop_after = world.stops.after
    # collect: the step's episodes (sync: played now; async: played ahead on another thread)
    rollout = rollouts.take(number)
    world.tokens += rollout.tokens
    stop_after("collect", number)
    # write: episodes, task rows and the loop's files, on disk before anything trains on them
    world.logger.write_collected(number, rollout.collected)
    world.logger.append_rows(rollout.eval_rows, world.loop.spec.eval_files)
    stop_after("write", number)
    # advantages: per role, by the loop's estimator; zero advantages carry no gradient
    samples = trained_roles(world.loop.samples(rollout.collected.episodes), world.config)
    kept = drop_zero_advantage(samples)
    staleness = [world.learner.version - s.turn.policy_version for s in samples]
    # learn: one optimizer update (an engine that shares the GPU sleeps meanwhile)
    world.engine.sleep()
    with rollouts.learning():
        learned = world.learner.step(kept)
    world.engine.wake_up()
    stop_after("learn", number)
    # sync and verify: the engine serves the new weights, or the probe stops the run
    synced = world.sync(world.learner, world.engine, world.policy)
    world.logger.log_sync(number, synced)  # sync.jsonl: transport, bytes, probe gap
    rollouts.weights_synced()
    stop_after("sync", number)
    # after update: the loop's turn (SPIRAL's opponent pool snapshots the policy here)
    world.loop.after_update(number, world.snapshots)
    # log: metrics.jsonl, wandb, the progress bar
    seconds = time.perf_counter() - start
    metrics = step_metrics(rollout, len(samples) - len(kept), staleness, learned, synced, seconds)
    metrics |= rollouts.metrics()
    if world.config.train.token_budget is not None:  # (not otherwise: golden runs' metrics stay)
        metrics["rollout/tokens"] = float(rollout.tokens)
        metrics["rollout/tokens_total"] = float(world.tokens)  # what the budget counts
    world.logger.log(number, metrics)
    world.logger.advance(mean_reward(metrics), metrics["rollout/tokens_per_s"])
    stop_after("log", number)
    # checkpoint: atomically, every ``checkpoint.every`` steps and after the last
    if checkpoint_due(world.config, number) or budget_spent(world):
        world.checkpointer.save(number + 1, checkpoint_state(world), world.learner)
        world.loop.save_artifacts(world.run_dir)  # e.g. curriculum/tasks.csv
        stop_after("checkpoint", number)
    return metrics


def trained_roles(samples: list[Sample], config: ExperimentConfig) -> list[Sample]:
    """The samples of roles that train (``roles.<role>.train``, default true); a role that
    does not still played and was rewarded, and its advantages were computed with the rest."""
    frozen = {role for role, spec in config.roles.items() if not spec.train}
    return [s for s in samples if s.turn.role not in frozen] if frozen else samples


def step_metrics(
    rollout: Rollout,
    dropped: int,
    staleness: list[int],
    learned: dict[str, float],
    synced: dict[str, float],
    seconds: float,
) -> dict[str, float]:
    """What one step reports: evaluation (when due), rewards and lengths, the loop's own
    figures, the learner's, and the step's times, staleness (learner versions between the
    weights that sampled a turn and those it trained) and throughput."""
    collected = rollout.collected
    metrics = rollout.eval_metrics | episode_metrics(collected.episodes) | collected.metrics
    metrics |= learned | {
        "rollout/seconds": rollout.seconds,
        "rollout/tokens_per_s": rollout.tokens / max(rollout.seconds, 1e-9),
        "train/samples_dropped_zero_adv": float(dropped),
        "sync/seconds": synced["sync/seconds"],
        "sync/wait_seconds": synced["sync/wait_seconds"],  # async: the batch in flight first
        "staleness/mean": sum(staleness) / len(staleness) if staleness else 0.0,
        "staleness/max": float(max(staleness, default=0)),
        "time/step_seconds": seconds,
        "sync/share": synced["sync/seconds"] / seconds,
    }
    if collected.games:
        metrics["game/games_per_minute"] = 60 * collected.games / seconds
    return metrics


def mean_reward(metrics: dict[str, float]) -> float | None:
    """The first role's mean reward, for the progress bar."""
    return next((v for k, v in metrics.items() if k.startswith("reward/")), None)


def checkpoint_due(config: ExperimentConfig, number: int) -> bool:
    return (number + 1) % config.checkpoint.every == 0 or number + 1 == config.train.steps


def budget_spent(world: World) -> bool:
    """``train.token_budget`` reached: the run ends after the step that reached it."""
    budget = world.config.train.token_budget
    return budget is not None and world.tokens >= budget


# ---------------------------------------------------------------------- a run
def run(world: World, start_step: int) -> list[dict]:
    """Steps ``start_step`` to ``train.steps`` (or until ``train.token_budget`` is spent),
    then the final evaluation and the report. SIGINT or SIGTERM stops the run at the end of the
    stage in progress, and a full disk stops it; each in one line that says how to resume."""
    config, logger = world.config, world.logger
    logger.truncate_to(start_step, world.loop.spec.eval_files)
    logger.start_progress(config.train.steps, start_step)
    end = start_step
    try:
        with world.stops.installed():
            with rollouts_for(world, start_step) as rollouts:
                # a resumed run whose budget was spent before its final row takes no step
                while end < config.train.steps and not budget_spent(world):
                    step(world, end, rollouts)
                    end += 1
            if start_step <= config.train.steps and not _final_logged(world):
                final = asyncio.run(world.loop.evaluate(world.policy, end))
                logger.append_rows(world.loop.evaluation_rows(), world.loop.spec.eval_files)
                logger.log(end, {"final": 1.0, **final})
                world.stops.after("final evaluation", end)
    except StopRequested as stop:
        raise RunInterrupted(stopped_message(world, stop), stop.signum) from None
    except BaseException as exc:  # torch's CheckpointException is a BaseException
        if not isinstance(exc, KeyboardInterrupt | SystemExit) and disk_full(exc):
            # every file is written atomically: the last checkpoint is whole
            raise RunStopped(f"the disk is full ({world.stops.where(end)}): free space on "
                             f"the disk of {world.run_dir}, then {resume_hint(world)}") from exc
        raise
    finally:
        logger.close()
        world.loop.close()
        world.learner.close()  # sharded ranks: their actors and placement group
    rows = read_metrics(world.run_dir)
    write_report(world.run_dir, rows)
    return rows


def resume_hint(world: World) -> str:
    """Where ``selfplay resume`` would continue this run: its last checkpoint."""
    latest = world.checkpointer.latest()
    next_step = int(latest.name.split("-")[1]) if latest is not None else 0
    return f"`selfplay resume {world.run_dir}` continues from step {next_step}"


def stopped_message(world: World, stop: StopRequested) -> str:
    name = signal.Signals(stop.signum).name
    return (f"stopped by {name} at the end of the {stop.stage} stage of step {stop.step}; "
            f"{resume_hint(world)}")


def rollouts_for(world: World, start_step: int) -> Rollouts:
    """Where the steps' episodes come from: collected when the step asks (``rollout.mode:
    sync``) or on a producer thread a bounded number of versions ahead (``async``)."""
    due = lambda number: eval_due(world.loop, number)  # noqa: E731
    if world.config.rollout.mode != "async":
        return SyncRollouts(world.loop, world.policy, due)
    settings = world.config.rollout
    return AsyncRollouts(
        world.loop,
        world.policy,
        range(start_step, world.config.train.steps),
        settings.max_staleness,
        evaluate_at=due,
        engine=world.engine,
        engine_threads=settings.engine_threads,
        learner_threads=settings.learner_threads,
    )


def eval_due(loop: Loop, number: int) -> bool:
    """Evaluate before the first step and every ``eval_every`` steps."""
    return number == 0 or (bool(loop.eval_every) and number % loop.eval_every == 0)


def _final_logged(world: World) -> bool:
    return any(row.get("final") for row in read_metrics(world.run_dir))


def new_run_dir(config: ExperimentConfig, loop: Loop | None = None) -> Path:
    """A new run folder with the run's inputs frozen into it (``selfplay.running.inputs``):
    the config, the role prompts' text, plug-in sources, the environment."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = Path(config.run_dir) / f"{config.name}-{stamp}"
    for again in range(2, 100):  # runs of one experiment started in the same second
        if not run_dir.exists():
            break
        run_dir = Path(config.run_dir) / f"{config.name}-{stamp}-{again}"
    make_folder(run_dir, f"run_dir {config.run_dir}")  # /proc/nope: one line, not a traceback
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
    except RunStopped:  # its line already says how to resume
        raise
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
    """``selfplay evaluate``: the loop's evaluation on the run's latest checkpoint."""
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
