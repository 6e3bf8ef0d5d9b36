"""What every loop shares: role prompts → requests, advantages per role, state for checkpoints.

A loop is one file that plays episodes (``collect``), scores them, and says how to evaluate the
policy. It never calls a model directly: it awaits ``policy(request)``.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from roles import RolePrompt, load_role
from selfplay.config import ExperimentConfig
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.rl.advantages import RAEBaseline, apply_adpo, group_relative_samples, rae_samples
from selfplay.rl.losses import LOSS_PRESETS
from selfplay.types import Completion, Episode, Request, Sample, SamplingParams, Turn


class Loop:
    name = "base"
    # the loop's task buffer and sampler (curricula.samplers.Curriculum), if it draws tasks
    # through one; its state goes into checkpoints and its table into the run folder
    curriculum = None
    curriculum_tasks = "tasks"  # what its tasks are, for the resume check's error
    curriculum_fixed_tasks = True  # the task set comes from the config (agent0's grows)
    default_estimator = "group"  # "group": the loss preset's group estimator; "rae": SPIRAL
    # Whether the loop puts a per-task pass rate p̂ in ``Episode.info["pass_rate"]`` (Agent0's
    # self-consistency does). ADPO is a function of p̂: without it every sample would get
    # scale 1 and the global ε_high, so ``advantage.adpo`` would silently do nothing.
    supplies_pass_rate = False

    def __init__(self, config: ExperimentConfig) -> None:
        self.config = config
        if config.advantage.adpo and not self.supplies_pass_rate:
            raise UserError(
                f"advantage.adpo needs per-task pass rates, which the {self.name} loop does not "
                "compute; remove it (ADPO belongs to loops that estimate p̂, e.g. agent0)"
            )
        self.rng = random.Random(config.seed)
        self.prompts: dict[str, RolePrompt] = {
            role: load_role(spec.prompt) for role, spec in config.roles.items()
        }
        self.baseline = RAEBaseline(config.advantage.rae_alpha, config.advantage.rae_order)
        self.run_dir: Path | None = None

    def bind_run(self, run_dir: Path) -> None:
        """The run folder (the runner calls this before the first step): loops that write
        ``tasks.jsonl`` or task pools write them there."""
        self.run_dir = run_dir

    def require_roles(self, *roles: str) -> None:
        """Fail in one line when the experiment lacks a role this loop plays."""
        for role in roles:
            if role not in self.config.roles:
                raise UserError(f"the {self.name} loop needs a `{role}` role in `roles:`")

    # ---------------------------------------------------------------- requests
    def request(
        self,
        role: str,
        greedy: bool = False,
        stop: tuple[str, ...] = (),
        tokenizer=None,
        **fields: Any,
    ) -> Request:
        """A request for ``role``'s prompt with ``fields`` filled in.

        A role with a ``prefill`` gets ready prompt ids: the chat template with its generation
        prompt, then the prefill text, so the model continues the reply (``tokenizer``, e.g.
        ``policy.engine.tokenizer``, is needed then). Parse its reply with ``reply_text``."""
        spec, prompt = self.config.roles[role], self.prompts[role]
        messages = prompt.render(**fields)
        sampling = self.sampling(role, greedy, stop)
        prefill = prompt.render_prefill(**fields)
        if not prefill:
            return Request(
                role=role, messages=messages, adapter=spec.adapter_name(role), sampling=sampling
            )
        if tokenizer is None:
            raise ValueError(f"role {role!r} has a prefill: Loop.request needs the tokenizer")
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(text + prefill, add_special_tokens=False).input_ids
        return Request(
            role=role, prompt_ids=prompt_ids, adapter=spec.adapter_name(role), sampling=sampling
        )

    def reply_text(self, role: str, completion_text: str, **fields: Any) -> str:
        """The whole reply of ``role``: its prefill (if any) followed by the completion."""
        return self.prompts[role].render_prefill(**fields) + completion_text

    def sampling(
        self, role: str, greedy: bool = False, stop: tuple[str, ...] = ()
    ) -> SamplingParams:
        spec, base = self.config.roles[role], self.config.sampling
        temperature = (
            0.0
            if greedy
            else (spec.temperature if spec.temperature is not None else base.temperature)
        )
        return SamplingParams(
            temperature=temperature,
            top_p=base.top_p,
            max_new_tokens=base.max_new_tokens,
            stop=stop,
            seed=self.rng.randrange(2**31),
        )

    @staticmethod
    def turn(request: Request, completion: Completion, policy: BatchingPolicy) -> Turn:
        prompt_text = request.messages[-1]["content"] if request.messages else ""
        return Turn.from_completion(
            request.role,
            completion,
            adapter=request.adapter,
            prompt_text=prompt_text,
            temperature=request.sampling.temperature,
            top_p=request.sampling.top_p,
            policy_version=policy.version,
        )

    # ---------------------------------------------------------------- training data
    def estimator(self) -> str:
        chosen = self.config.advantage.estimator
        if chosen != "auto":
            return chosen
        return "rae" if self.default_estimator == "rae" else LOSS_PRESETS[self.config.train.loss][1]

    def samples(self, episodes: list[Episode]) -> list[Sample]:
        """Advantages per role (group-relative within (group, role), or RAE per (env, role))."""
        estimator = self.estimator()
        if estimator == "rae":
            samples = rae_samples(episodes, self.baseline)
        else:
            samples = group_relative_samples(episodes, estimator)
        if self.config.advantage.adpo:
            apply_adpo(samples, self.config.advantage.adpo_floor)
        return samples

    # ---------------------------------------------------------------- interface
    async def collect(self, policy: BatchingPolicy, step: int) -> list[Episode]:
        raise NotImplementedError

    async def evaluate(self, policy: BatchingPolicy, step: int) -> dict[str, float]:
        return {}

    def summarize(self, episodes: list[Episode]) -> dict[str, float]:
        """Scalar metrics about one step's episodes (rewards per role, lengths...)."""
        metrics: dict[str, float] = {}
        roles = {role for e in episodes for role in e.rewards}
        for role in sorted(roles):
            values = [e.rewards[role] for e in episodes if role in e.rewards]
            metrics[f"reward/{role}"] = sum(values) / len(values)
        turns = [t for e in episodes for t in e.turns]
        if turns:
            metrics["rollout/completion_tokens"] = sum(len(t.completion_ids) for t in turns) / len(
                turns
            )
            metrics["rollout/turns"] = float(len(turns))
        return metrics

    def task_rows(self, step: int, episodes: list[Episode]) -> list[dict]:
        """Rows for the run's ``tasks.jsonl`` (docs/run-folder.md); loops that generate tasks."""
        return []

    def after_update(self, step: int, learner, engine) -> None:
        """Called after each learner step and weight sync (opponent pools snapshot here)."""

    def restore_engine(self, engine) -> None:
        """Re-install loop-owned engine state (e.g. pool adapters) after a resume."""

    def close(self) -> None:
        """Release loop resources (sandbox pools, games)."""

    def save_artifacts(self, run_dir) -> None:
        """Write human-readable loop state into the run folder (called at each checkpoint):
        the curriculum's per-task table, ``curriculum/tasks.csv``, for loops that have one."""
        if self.curriculum is not None:
            self.curriculum.buffer.write_csv(Path(run_dir) / "curriculum" / "tasks.csv")

    def state_dict(self) -> dict:
        state = {"rng": self.rng.getstate(), "baseline": self.baseline.state_dict()}
        if self.curriculum is not None:
            state["curriculum"] = self.curriculum.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.baseline.load_state_dict(state["baseline"])
        if self.curriculum is not None and "curriculum" in state:  # older checkpoints have none
            saved = state["curriculum"]
            if self.curriculum_fixed_tasks and saved["buffer"]["ids"] != self.curriculum.buffer.ids:
                raise UserError(
                    f"the checkpoint's {self.curriculum_tasks} differ from the config's; "
                    "start a new run"
                )
            self.curriculum.load_state_dict(saved)
