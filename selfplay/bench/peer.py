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

The experiment and its checks are in ``peer_setup``, TRL's side in ``peer_trl``, ours in
``peer_ours``; this module runs each side in its own process and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from selfplay.bench.peer_ours import run_ours
from selfplay.bench.peer_setup import PROGRESS, load_peer_config, per_step, require_trl
from selfplay.bench.peer_trl import run_trl
from selfplay.core.errors import UserError

SIDES = ("ours", "trl")
GOAL = "goal >= 2x at <= 1x"


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
