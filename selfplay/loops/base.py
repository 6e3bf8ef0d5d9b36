"""The loop interface: what the runner calls, and the helpers every loop shares.

A loop is one algorithm. Each step the runner calls ``collect(policy, step)``; the loop plays
its episodes (asyncio coroutines that ``await policy(request)``) and returns them as one
``Collected`` with the step's metrics and generated-task rows. The runner writes them, computes
advantages with ``samples`` (group-relative per role, or RAE), trains, syncs weights, and calls
``after_update(step, snapshots)``. A loop never holds the learner or an engine: what it needs
of them (a frozen copy of the policy for an opponent pool, say) it asks of ``Snapshots``, a
service the runner owns. ``evaluate`` gives held-out metrics; ``state_dict`` /
``load_state_dict`` carry whatever the loop must keep across a resume.

A loop declares its settings model as ``Settings`` (a pydantic model); the config's section
named after the loop (``name``) is validated by it and reaches the loop as ``config.settings``.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel

from roles import RolePrompt, load_role
from selfplay.config import ExperimentConfig
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.rl.advantages import RAEBaseline, apply_adpo, group_relative_samples, rae_samples
from selfplay.rl.losses import LOSS_PRESETS
from selfplay.types import Collected, Completion, Episode, Request, Sample, SamplingParams, Turn


class Snapshots(Protocol):
    """Frozen copies of the policy, served by the engine beside it under their own names (the
    runner's ``selfplay.running.snapshots.PolicySnapshots``). Taken snapshots survive a resume."""

    def take(self, name: str, adapter: str) -> None:
        """Copy the current weights of ``adapter`` and serve them as adapter ``name``."""

    def drop(self, name: str) -> None:
        """Stop serving snapshot ``name`` and forget its weights."""


class Loop:
    name: ClassVar[str] = "base"  # also the key of the loop's own config section
    Settings: ClassVar[type[BaseModel] | None] = None  # the model of that section
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
    # The fields the loop fills into each role's prompt ({role: names}); a role prompt whose
    # templates read any other name is refused when the loop is made, before a run folder
    # exists. A role left out is not checked (its prompt then fails when first rendered).
    prompt_fields: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __init__(self, config: ExperimentConfig) -> None:
        self.config = config
        self.settings: Any = config.settings
        if config.advantage.adpo and not self.supplies_pass_rate:
            raise UserError(
                f"advantage.adpo needs per-task pass rates, which the {self.name} loop does not "
                "compute; remove it (ADPO belongs to loops that estimate p̂, e.g. agent0)"
            )
        self.rng = random.Random(config.seed)
        self.prompts: dict[str, RolePrompt] = {
            role: load_role(spec.prompt) for role, spec in config.roles.items()
        }
        self.check_prompt_fields()
        self.baseline = RAEBaseline(config.advantage.rae_alpha, config.advantage.rae_order)

    def check_roles_are_played(self) -> None:
        """Refuse a role this loop never plays (a typo, or a role from another loop's
        experiment): it would be configured, given an adapter, and silently never used."""
        played = set(self.prompt_fields)
        unplayed = sorted(set(self.config.roles) - played) if played else []
        if unplayed:
            raise UserError(
                f"roles.{unplayed[0]}: the {self.name} loop has no `{unplayed[0]}` role "
                f"(its roles: {', '.join(sorted(played))})"
            )

    def check_prompt_fields(self) -> None:
        """Refuse, in one line, a role prompt that reads a field this loop never fills."""
        for role, filled in self.prompt_fields.items():
            prompt = self.prompts.get(role)
            unfilled = sorted(prompt.fields() - set(filled)) if prompt else []
            if unfilled:
                names = ", ".join("{{ " + name + " }}" for name in unfilled)
                raise UserError(
                    f"role `{role}`: prompt {self.config.roles[role].prompt!r} reads {names}, "
                    f"which the {self.name} loop does not fill (it fills: "
                    f"{', '.join(filled) or 'nothing'})"
                )

    def require_roles(self, *roles: str) -> None:
        """Fail in one line when the experiment lacks a role this loop plays."""
        for role in roles:
            if role not in self.config.roles:
                raise UserError(f"the {self.name} loop needs a `{role}` role in `roles:`")

    # ---------------------------------------------------------------- the interface
    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        """Play one step's episodes."""
        raise NotImplementedError

    async def evaluate(self, policy: BatchingPolicy, step: int) -> dict[str, float]:
        """Held-out metrics (before training, every ``eval_every`` steps and at the end)."""
        return {}

    def after_update(self, step: int, snapshots: Snapshots) -> None:
        """Called after each learner step and weight sync (opponent pools snapshot here)."""

    def close(self) -> None:
        """Release loop resources (sandbox pools, games)."""

    # ---------------------------------------------------------------- requests
    def request(
        self,
        role: str,
        greedy: bool = False,
        stop: tuple[str, ...] = (),
        max_new_tokens: int | None = None,
        **fields: Any,
    ) -> Request:
        """A request for ``role``'s prompt with ``fields`` filled in; a role prompt with a
        ``prefill`` starts the reply (``reply`` gives prefill + completion).
        ``max_new_tokens`` overrides ``sampling.max_new_tokens`` for this request."""
        prompt = self.prompts[role]
        sampling = self.sampling(role, greedy, stop)
        if max_new_tokens is not None:
            sampling = dataclasses.replace(sampling, max_new_tokens=max_new_tokens)
        return Request(
            role=role,
            messages=prompt.render(**fields),
            adapter=self.config.roles[role].adapter_name(role),
            sampling=sampling,
            prefill=prompt.render_prefill(**fields),
        )

    @staticmethod
    def reply(request: Request, completion: Completion) -> str:
        """The whole reply: the request's prefill (if any) followed by the completion."""
        return request.prefill + completion.text

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

    # ---------------------------------------------------------------- state
    def inputs(self) -> dict[str, Path]:
        """Files the loop read at its start that the run folder should keep a copy of, by the
        name they get under ``RUN/inputs/`` (SPICE: its corpus's manifest)."""
        return {}

    def save_artifacts(self, run_dir: Path) -> None:
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
