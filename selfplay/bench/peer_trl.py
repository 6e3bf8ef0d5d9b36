"""TRL's side of ``selfplay bench peer``: ``GRPOTrainer`` given the work of our rlvr loop (its
prompts, its grader as the reward, the settings that make one TRL step one of ours), timed
step by step, in the process ``python -m selfplay.bench.peer --side trl`` starts.
"""

from __future__ import annotations

import tempfile
import time

from selfplay.bench.peer_setup import (
    micro_batch,
    peak_rss_kib,
    per_step,
    progress,
    rss_kib,
    torch_threads,
)
from selfplay.core.errors import UserError


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
            self.threads = torch_threads()

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
