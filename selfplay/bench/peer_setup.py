"""What both sides of ``selfplay bench peer`` share: the rlvr experiment they run, checked for
what TRL's ``GRPOTrainer`` can reproduce (before either side starts), its batch sizes, and how
a side measures its steps (resident memory, torch threads) and reports them to the parent.
"""

from __future__ import annotations

import importlib.util
import resource

from selfplay.core.errors import UserError

MISSING_TRL = "bench peer needs TRL: pip install -e '.[peer]' (trl 1.16)"
# our side's run: evaluation, checkpoints between steps, wandb and progress bars off
OURS = ["rollout.mode=sync", "rlvr.eval_size=0", "logging.wandb=disabled", "logging.progress=false"]


def trl_available() -> bool:
    try:
        return importlib.util.find_spec("trl") is not None
    except (ImportError, ValueError):
        return False


def require_trl() -> None:
    if not trl_available():
        raise UserError(MISSING_TRL)


def peer_overrides(
    steps: int, extra: list[str] | None = None, threads: int | None = None
) -> list[str]:
    pinned = [f"threads.torch={threads}"] if threads else []
    return [f"train.steps={steps}", f"checkpoint.every={steps}", *OURS, *pinned, *(extra or [])]


def load_peer_config(
    experiment: str, steps: int, extra: list[str] | None = None, threads: int | None = None
):
    """The experiment both sides run, checked for what TRL's GRPOTrainer can reproduce;
    ``threads``: the torch threads of both (``threads.torch``)."""
    from selfplay.config_files import find_experiment, read_yaml
    from selfplay.loops import load_experiment

    loop = read_yaml(find_experiment(experiment)).get("loop")
    if loop != "rlvr":  # before the rlvr overrides, which other loops' configs refuse
        raise UserError(f"bench peer needs an rlvr experiment (got loop {loop!r})")
    config = load_experiment(experiment, peer_overrides(steps, extra, threads))
    check_config(config)
    return config


def check_config(config) -> None:
    train, settings = config.train, config.settings
    problems = []
    if config.loop != "rlvr":
        problems.append(f"an rlvr experiment (got loop {config.loop!r})")
    elif settings.tool is not None:
        problems.append("no rlvr.tool (TRL gets plain completions)")
    if train.loss != "drgrpo" or config.advantage.estimator not in ("auto", "drgrpo"):
        problems.append(f"train.loss drgrpo (TRL's dr_grpo; got {train.loss})")
    if train.aggregation not in (None, "seq-mean-token-sum-norm"):
        problems.append("the drgrpo aggregation (seq-mean-token-sum-norm)")
    if train.finetune != "lora" or train.parallel.ranks != 1:
        problems.append("LoRA on one learner process")
    if train.epochs != 1:
        problems.append("train.epochs 1 (one optimizer step per batch)")
    if config.engine.backend != "hf" or config.cluster.backend == "ray":
        problems.append("the hf engine in this process")
    if config.curriculum.sampler != "uniform":
        problems.append("curriculum.sampler uniform (TRL draws prompts uniformly)")
    if config.loop == "rlvr":
        batch = per_step(config)
        if batch % micro_batch(config):
            problems.append(
                f"a step's {batch} completions split evenly into micro-batches of "
                f"train.micro_batch_size {train.micro_batch_size}"
            )
    if problems:
        raise UserError("bench peer needs " + "; ".join(problems))


def per_step(config) -> int:
    """Completions per step: prompts per step (at most the task set) × group size."""
    s = config.settings
    return min(s.prompts_per_step, s.dataset_size) * s.group_size


def micro_batch(config) -> int:
    return min(config.train.micro_batch_size, per_step(config))


# ---------------------------------------------------------------- measuring a side
PROGRESS = "[peer] "  # the lines of a side's output that the parent echoes


def progress(side: str, step: int, steps: int, row: dict) -> None:
    print(
        f"{PROGRESS}{side} step {step}/{steps}: {row['seconds']:.1f} s "
        f"(rollout {row['rollout_seconds']:.1f} s), {row['tokens']} tokens",
        flush=True,
    )


def peak_rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def rss_kib() -> int:
    import psutil

    return psutil.Process().memory_info().rss // 1024


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()
