"""``selfplay bench peer``: TRL's ``GRPOTrainer`` and our ``rlvr`` loop on the same work.

Both sides train the same model on the same prompts with the same settings, read from one rlvr
experiment (default ``rlvr-sanity``: the embedded SmolLM2-135M-Instruct, eight reasoning-gym
``chain_sum`` tasks, eight answers each, 24 new tokens at temperature 1, LoRA r16 on every
projection, Dr. GRPO, lr 5e-4):

- the prompts are the chat messages our loop sends (``RlvrLoop.request``), and TRL's reward
  function is our loop's own grader (``RlvrLoop.grade``) on TRL's completions;
- one TRL step is one of ours: ``prompts_per_step × group_size`` completions generated at once,
  then one optimizer step over micro-batches of ``train.micro_batch_size``;
- Dr. GRPO on both: advantages ``r − mean`` of the group (TRL ``scale_rewards="none"``), loss
  normalised by a constant (TRL ``loss_type="dr_grpo"``), no KL term and no reference model
  (our loss has none; TRL ``beta=0``), PPO clip ε 0.2 / 0.28, constant learning rate, AdamW,
  gradient norm clipped at 1, fp32, no gradient checkpointing, the same thread policy.

Each side runs in its own process (``python -m selfplay.bench.peer --side ours|trl``), so its
peak RSS is its own. Step 0 is a warm-up; the figures are the median seconds per step over steps
1..N-1, generated tokens per second of step time, and the peak RSS (taken at the end of the last
step). docs/peer.md says what each side does per step and holds a measured table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from selfplay.core.errors import UserError

SIDES = ("ours", "trl")
MISSING_TRL = "bench peer needs TRL: pip install -e '.[peer]' (trl 1.16)"
GOAL = "goal >= 2x at <= 1x"
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
    from selfplay.config import find_experiment, read_yaml
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


# ---------------------------------------------------------------- the work TRL is given
def peer_dataset(loop) -> list[dict]:
    """One row per task of the loop's fixed set: the chat messages our loop sends for it
    (``RlvrLoop.request``, exactly as ``RlvrLoop.episode`` builds them) and its index."""
    from selfplay.loops.rlvr import ROLE

    rows = []
    for index, task in enumerate(loop.pool_tasks):
        request = loop.request(ROLE, question=task.entry["question"])
        if request.prefill:
            raise UserError("bench peer needs a solver prompt without a prefill")
        rows.append({"prompt": request.messages, "task": index})
    return rows


def completion_text(completion) -> str:
    """TRL's completion: the assistant message of a conversational prompt, or plain text."""
    if isinstance(completion, str):
        return completion
    return completion[-1]["content"]


def peer_reward(loop, counter: dict | None = None):
    """TRL's reward function: our loop's grader (``RlvrLoop.grade``: the verifier's score plus
    the format bonus) on each completion; counts generated tokens into ``counter``."""

    def rlvr_reward(prompts, completions, task, completion_ids=None, **_) -> list[float]:
        if counter is not None and completion_ids is not None:
            counter["tokens"] = counter.get("tokens", 0) + sum(len(ids) for ids in completion_ids)
        return [
            loop.grade(completion_text(c), loop.pool_tasks[int(i)])["reward"]
            for c, i in zip(completions, task, strict=True)
        ]

    return rlvr_reward


def trl_arguments(config, steps: int, output_dir: str) -> dict:
    """GRPOConfig keyword arguments for the same work as one of our steps."""
    train, sampling, s = config.train, config.sampling, config.settings
    micro = micro_batch(config)
    accumulation = per_step(config) // micro
    return {
        "output_dir": output_dir,
        "max_steps": steps,
        "seed": config.seed,
        # one step: prompts × group completions generated at once, one optimizer step over
        # `accumulation` micro-batches of `micro` completions each
        "num_generations": s.group_size,
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": accumulation,
        "steps_per_generation": accumulation,
        "num_iterations": train.epochs,
        "max_completion_length": sampling.max_new_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": 0,
        # Dr. GRPO: r − mean advantages, constant normaliser, no KL term (no reference model)
        "loss_type": "dr_grpo",
        "scale_rewards": "none",
        "beta": 0.0,
        "epsilon": train.eps_low,
        "epsilon_high": train.eps_high,
        "mask_truncated_completions": False,
        # our optimizer: AdamW at a constant learning rate, gradient norm clipped
        "learning_rate": train.lr,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "weight_decay": train.weight_decay,
        "max_grad_norm": train.max_grad_norm,
        "optim": "adamw_torch",
        # on this machine, in fp32, like ours
        "use_vllm": False,
        "use_cpu": True,
        "bf16": False,
        "fp16": False,
        "gradient_checkpointing": train.gradient_checkpointing,
        "shuffle_dataset": True,
        "dataloader_num_workers": 0,
        "report_to": [],
        "save_strategy": "no",
        "logging_steps": 1,
        "disable_tqdm": True,
        "log_completions": False,
    }


def build_trl_trainer(config, steps: int, output_dir: str):
    """TRL's GRPOTrainer on the experiment's model, prompts, reward and settings, with a
    callback that times every step (``trainer.peer_timer``)."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from selfplay.engines.models import load_causal_lm, load_tokenizer, resolve_model_path
    from selfplay.loops import make_loop

    path = resolve_model_path(config.model.path)
    loop = make_loop(config)
    counter: dict = {"tokens": 0}
    lora = config.train.lora

    class StepTimer(TrainerCallback):
        """Seconds, generated tokens and generation+scoring seconds of every optimizer step."""

        def __init__(self) -> None:
            self.steps: list[dict] = []
            self.rewards: list[float] = []
            self.rollout = 0.0
            self.peak_kib = 0
            self.ready_kib = 0

        def on_train_begin(self, args, state, control, **kwargs):
            self.ready_kib = rss_kib()

        def on_step_begin(self, args, state, control, **kwargs):
            self.start, self.tokens_before, self.rollout = time.perf_counter(), counter["tokens"], 0
            self.threads = _torch_threads()

        def on_step_end(self, args, state, control, **kwargs):
            row = {
                "seconds": time.perf_counter() - self.start,
                "rollout_seconds": self.rollout,
                "tokens": counter["tokens"] - self.tokens_before,
                "threads": self.threads,
            }
            self.steps.append(row)
            self.peak_kib = peak_rss_kib()
            progress("trl", len(self.steps), args.max_steps, row)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                self.rewards.append(float(logs["reward"]))

    timer = StepTimer()
    trainer = GRPOTrainer(
        model=load_causal_lm(path, config.model.dtype),
        reward_funcs=peer_reward(loop, counter),
        args=GRPOConfig(**trl_arguments(config, steps, output_dir)),
        train_dataset=Dataset.from_list(peer_dataset(loop)),
        processing_class=load_tokenizer(path),
        peft_config=LoraConfig(
            r=lora.r,
            lora_alpha=lora.alpha,
            lora_dropout=lora.dropout,
            target_modules=list(lora.target_modules),
            task_type="CAUSAL_LM",
        ),
        callbacks=[timer],
    )
    generate = trainer._generate_and_score_completions

    def timed(inputs):  # generation, reward, advantages: TRL's rollout
        start = time.perf_counter()
        try:
            return generate(inputs)
        finally:
            timer.rollout += time.perf_counter() - start

    trainer._generate_and_score_completions = timed
    trainer.peer_timer = timer
    return trainer


# ---------------------------------------------------------------- one side, in its own process
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


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def run_trl(config, steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-peer-trl-") as tmp:
        trainer = build_trl_trainer(config, steps, tmp)
        trainer.train()
    timer = trainer.peer_timer
    rows = [
        {
            **row,
            "train_seconds": row["seconds"] - row["rollout_seconds"],
            "trained": per_step(config),  # TRL trains on every completion
        }
        for row in timer.steps
    ]
    return {
        "steps": rows,
        "rewards": timer.rewards,
        "peak_kib": timer.peak_kib,
        "ready_kib": timer.ready_kib,
    }


def run_ours(config, steps: int) -> dict:
    """Our synchronous steps (``runner.step``: collect, learn, weight sync), as ``run`` takes
    them, without the checkpoints and the report ``run`` writes."""
    from selfplay.running.rollouts import SyncRollouts
    from selfplay.running.runner import build, eval_due, new_run_dir, step

    rows, rewards = [], []
    with tempfile.TemporaryDirectory(prefix="bench-peer-ours-") as tmp:
        config.run_dir = tmp
        config.checkpoint.every = config.train.steps = steps + 1  # no checkpoint is due
        world = build(config, new_run_dir(config), resume=False)
        rollouts = SyncRollouts(world.loop, world.policy, lambda n: eval_due(world.loop, n))
        ready = rss_kib()
        try:
            for number in range(steps):
                threads = _torch_threads()
                m = step(world, number, rollouts)
                rows.append(
                    {
                        "seconds": m["time/step_seconds"],
                        "rollout_seconds": m["rollout/seconds"],
                        "train_seconds": m.get("train/seconds", 0.0),
                        "sync_seconds": m["sync/seconds"],
                        "tokens": round(m["rollout/completion_tokens"] * m["rollout/turns"]),
                        "trained": int(m.get("train/samples", 0)),
                        "threads": threads,
                    }
                )
                rewards.append(m.get("reward/solver", float("nan")))
                progress("ours", number + 1, steps, rows[-1])
            peak = peak_rss_kib()
        finally:
            world.logger.close()
            world.loop.close()
            world.learner.close()
    return {"steps": rows, "rewards": rewards, "peak_kib": peak, "ready_kib": ready}


def side_main(argv: list[str] | None = None) -> int:
    """``python -m selfplay.bench.peer --side ours|trl --steps N --json OUT``."""
    parser = argparse.ArgumentParser(prog="python -m selfplay.bench.peer")
    parser.add_argument("--side", choices=SIDES, required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--experiment", default="rlvr-sanity")
    parser.add_argument(
        "--threads", type=int, default=0, help="torch threads (0: the thread policy)"
    )
    parser.add_argument("--set", action="append", default=[], help="key=value override")
    parser.add_argument("--json", required=True, help="where to write the figures")
    args = parser.parse_args(argv)

    import torch
    import transformers

    from selfplay.running.threads import apply_thread_policy

    transformers.logging.set_verbosity_error()
    config = load_peer_config(args.experiment, args.steps, args.set, args.threads or None)
    apply_thread_policy(config)  # both sides: the run's thread policy (ours applies it again)
    result = run_ours(config, args.steps) if args.side == "ours" else run_trl(config, args.steps)
    result |= {
        "side": args.side,
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
    }
    Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


# ---------------------------------------------------------------- both sides, one table
def summarise(result: dict) -> dict:
    """Figures over steps 1..N-1 (step 0: warm-up)."""
    timed = result["steps"][1:]
    seconds = sum(r["seconds"] for r in timed)
    return {
        "step_s": statistics.median(r["seconds"] for r in timed),
        "rollout_s": statistics.median(r["rollout_seconds"] for r in timed),
        "train_s": statistics.median(r["train_seconds"] for r in timed),
        "tokens_per_s": sum(r["tokens"] for r in timed) / max(seconds, 1e-9),
        "tokens_per_step": statistics.mean(r["tokens"] for r in timed),
        "trained": statistics.mean(r["trained"] for r in timed),
        "peak_gib": result["peak_kib"] / 2**20,
        "ready_gib": result["ready_kib"] / 2**20,
        "threads": result["threads"],
    }


def run_side(
    side: str,
    experiment: str,
    steps: int,
    threads: int,
    overrides: list[str],
    folder: Path,
    echo=print,
) -> dict:
    out, log = folder / f"{side}.json", folder / f"{side}.log"
    command = [sys.executable, "-m", "selfplay.bench.peer", "--side", side, "--steps", str(steps)]
    command += ["--experiment", experiment, "--threads", str(threads), "--json", str(out)]
    for override in overrides:
        command += ["--set", override]
    env = os.environ | {
        "OMP_NUM_THREADS": str(threads),
        "TOKENIZERS_PARALLELISM": "false",
        "WANDB_MODE": "disabled",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        # the `selfplay` command's OpenMP wait policy, on both sides (docs/speed.md#threads)
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
    }
    with open(log, "w") as handle:
        child = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True
        )
        for line in child.stdout:
            handle.write(line)
            if line.startswith(PROGRESS):
                echo(line[len(PROGRESS) :].rstrip())
        code = child.wait()
    if code != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        raise RuntimeError(f"bench peer: the {side} side failed (exit {code}):\n{tail}")
    return json.loads(out.read_text())


def bench_peer(
    experiment: str = "rlvr-sanity",
    steps: int = 6,
    overrides: list[str] | None = None,
    threads: int | None = None,
) -> dict:
    from rich.console import Console
    from rich.table import Table

    require_trl()
    if steps < 2:
        raise UserError(f"bench peer needs --steps >= 2 (step 0 is a warm-up), got {steps}")
    extra = list(overrides or [])
    config = load_peer_config(experiment, steps, extra)  # bad settings: one line, nothing run
    if threads is None:
        from selfplay.running.threads import available_cores

        threads = config.threads.torch or available_cores()
    console = Console(width=max(100, Console().width))
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp:
        for side in SIDES:
            console.print(f"{side}: {steps} steps of {experiment} in a fresh process ...")
            start = time.perf_counter()
            results[side] = run_side(
                side,
                experiment,
                steps,
                threads,
                extra,
                Path(tmp),
                lambda text: console.print(f"  {text}", highlight=False),
            )
            results[side]["wall"] = time.perf_counter() - start
    figures = {side: summarise(results[side]) for side in SIDES}
    table = Table(
        title=(
            f"{experiment}: {per_step(config)} completions x {config.sampling.max_new_tokens} "
            f"new tokens per step, steps 1..{steps - 1} (step 0: warm-up), {threads} threads, "
            f"trl {version('trl')}"
        ),
        caption=(
            "s/step, rollout, train: medians; tok/s: generated tokens / step seconds; "
            "trained: completions the optimizer step saw (ours drops zero-advantage ones); "
            "RSS: each side's own process, when its models are loaded and at its peak"
        ),
    )
    columns = ("side", "s/step", "rollout", "train", "tok/step", "tok/s", "trained")
    for column in (*columns, "RSS ready", "peak RSS"):
        table.add_column(column, justify="right")
    for side in SIDES:
        f = figures[side]
        table.add_row(
            side,
            f"{f['step_s']:.2f}",
            f"{f['rollout_s']:.2f}",
            f"{f['train_s']:.2f}",
            f"{f['tokens_per_step']:.0f}",
            f"{f['tokens_per_s']:.1f}",
            f"{f['trained']:.1f}",
            f"{f['ready_gib']:.2f} GiB",
            f"{f['peak_gib']:.2f} GiB",
        )
    console.print(table)
    speed = figures["trl"]["step_s"] / figures["ours"]["step_s"]
    memory = figures["ours"]["peak_gib"] / figures["trl"]["peak_gib"]
    console.print(f"ours vs TRL: {speed:.2f}x steps/s, {memory:.2f}x peak memory ({GOAL})")
    return {"speed": speed, "memory": memory, "figures": figures, "results": results}


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `selfplay` sets it, before torch
    sys.exit(side_main())
