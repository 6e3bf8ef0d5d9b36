"""The loop contract: what the runner calls, what a loop declares, and the helpers every loop
shares (docs/architecture.md#the-loop).

A loop is one algorithm. Each step the runner calls ``collect(policy, step)``; the loop plays
its episodes (asyncio coroutines that ``await policy(request)``) and returns them as one
``Collected`` with the step's metrics and generated-task rows. The runner writes them, asks the
loop for advantages (``samples``), trains, syncs weights, and calls ``after_update(step,
snapshots)``. A loop never holds the learner or an engine: what it needs of them (a frozen copy
of the policy for an opponent pool, say) it asks of ``Snapshots``, a service the runner owns.

What the runner reads of a loop is typed, never probed: the loop's ``spec`` (``LoopSpec``: its
roles and the prompt fields it fills, its advantage estimator, whether its episodes carry p̂),
``eval_every`` (from its settings, a ``LoopSettings``), and ``Collected``'s fields.
"""

from __future__ import annotations

import dataclasses
import random
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from pydantic import Field

from curricula.curriculum import Curriculum
from roles import RolePrompt, load_role
from selfplay.config import ExperimentConfig, Strict
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.engines.tools import ToolSettings
from selfplay.rl.advantages import RAEBaseline, apply_adpo, group_relative_samples, rae_samples
from selfplay.rl.losses import LOSS_PRESETS
from selfplay.types import Collected, Completion, Episode, Request, Sample, SamplingParams, Turn


class Snapshots(Protocol):
    """Frozen copies of the policy, served by the engine beside it under their own names (the
    runner's ``selfplay.running.snapshots.PolicySnapshots``). Taken snapshots survive a
    resume."""

    def take(self, name: str, adapter: str) -> None:
        """Copy the current weights of ``adapter`` and serve them as adapter ``name``."""

    def drop(self, name: str) -> None:
        """Stop serving snapshot ``name`` and forget its weights."""


class LoopSettings(Strict):
    """The base of every loop's settings section (``Loop.Settings``): what the runner and the
    held-out evaluation (``selfplay evaluate``) read of it."""

    eval_every: int = Field(0, ge=0)  # steps between evaluations; 0: only before and after

    def trained_families(self) -> set[str]:
        """The reasoning-gym families the policy trains on (held-out suites leave them out)."""
        return set()

    def tool_settings(self) -> ToolSettings | None:
        """The Python tool the policy trains with (``evaluate --tool`` uses the same)."""
        return None


@dataclass(frozen=True)
class LoopSpec:
    """What a loop declares about itself, in one place (``Loop.spec``).

    ``roles``: every role the loop plays, with the prompt fields it fills into that role's
    prompt; an experiment must give each of them and no other, and a role prompt reading any
    other field is refused, before a run folder exists. ``estimator``: the advantages it uses
    by default ("group": the loss preset's group-relative estimator; "rae": SPIRAL's).
    ``pass_rates``: its episodes carry the task's p̂ (``Episode.pass_rate``), which ADPO needs.
    ``tasks``: what its curriculum's tasks are (for the resume check's error);
    ``fixed_tasks``: they come from the config (a resumed run must have the same), as opposed
    to tasks the run generates (Agent0's pools). ``eval_files``: the run-folder files its
    evaluations append rows to (``Loop.evaluation_rows``; SPIRAL's ``strategies.jsonl``).
    """

    roles: Mapping[str, tuple[str, ...]]
    estimator: Literal["group", "rae"] = "group"
    pass_rates: bool = False
    tasks: str = "tasks"
    fixed_tasks: bool = True
    eval_files: tuple[str, ...] = ()


class Loop(ABC):
    """One algorithm. Subclasses set ``name``, ``Settings`` and ``spec`` and write ``collect``."""

    name: ClassVar[str] = "base"  # also the key of the loop's own config section
    Settings: ClassVar[type[LoopSettings] | None] = None  # the model of that section
    spec: ClassVar[LoopSpec] = LoopSpec(roles={})

    def __init__(self, config: ExperimentConfig) -> None:
        self.config = config
        self.settings: Any = config.settings
        if config.advantage.adpo and not self.spec.pass_rates:
            raise UserError(
                f"advantage.adpo needs per-task pass rates, which the {self.name} loop does not "
                "compute; remove it (ADPO belongs to loops that estimate p̂, e.g. agent0)"
            )
        self.rng = random.Random(config.seed)
        self.prompts: dict[str, RolePrompt] = {
            role: load_role(spec.prompt) for role, spec in config.roles.items()
        }
        check_roles(self)
        self.baseline = RAEBaseline(config.advantage.rae_alpha, config.advantage.rae_order)
        # the loop's task buffer and sampler, if it draws tasks through one: its state goes
        # into checkpoints and its table into the run folder
        self.curriculum: Curriculum | None = None

    # ---------------------------------------------------------------- what the runner calls
    @property
    def eval_every(self) -> int:
        """Steps between evaluations (0: only before the first step and after the last)."""
        return self.settings.eval_every if self.settings is not None else 0

    @abstractmethod
    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        """Play one step's episodes."""

    async def evaluate(self, policy: BatchingPolicy, step: int) -> dict[str, float]:
        """Held-out metrics (before training, every ``eval_every`` steps and at the end)."""
        return {}

    def evaluation_rows(self) -> dict[str, list[dict]]:
        """Rows the evaluations since the last call produced for run-folder files, by the
        relative path of one of ``spec.eval_files``. The runner appends them beside the
        evaluation's metrics; each row carries its ``step``, so a resume drops those of the steps
        it redoes. (``selfplay evaluate`` writes only ``eval.jsonl``.)"""
        return {}

    def samples(self, episodes: list[Episode]) -> list[Sample]:
        """Advantages per role (group-relative within (group, role), or RAE per (env, role)),
        then ADPO's per-sample scale and ε_high from p̂ when ``advantage.adpo`` is on."""
        chosen = self.config.advantage.estimator
        if chosen == "auto":
            chosen = "rae" if self.spec.estimator == "rae" else LOSS_PRESETS[
                self.config.train.loss][1]
        if chosen == "rae":
            samples = rae_samples(episodes, self.baseline)
        else:
            samples = group_relative_samples(episodes, chosen)
        if self.config.advantage.adpo:
            apply_adpo(samples, self.config.advantage.adpo_floor)
        return samples

    def after_update(self, step: int, snapshots: Snapshots) -> None:
        """Called after each learner step and weight sync (opponent pools snapshot here)."""

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
            if self.spec.fixed_tasks and saved["buffer"]["ids"] != self.curriculum.buffer.ids:
                raise UserError(
                    f"the checkpoint's {self.spec.tasks} differ from the config's; "
                    "start a new run"
                )
            self.curriculum.load_state_dict(saved)

    def close(self) -> None:
        """Release loop resources (sandbox pools, games)."""

    # ---------------------------------------------------------------- helpers for loops
    def request(
        self,
        role: str,
        greedy: bool = False,
        stop: tuple[str, ...] = (),
        max_new_tokens: int | None = None,
        **fields: Any,
    ) -> Request:
        """A request for ``role``'s prompt with ``fields`` filled in; a role prompt with a
        ``prefill`` starts the reply (``completion.reply`` is prefill + what the model wrote).
        ``max_new_tokens`` overrides ``sampling.max_new_tokens`` for this request."""
        sampling = self.sampling(role, greedy, stop)
        if max_new_tokens is not None:
            sampling = dataclasses.replace(sampling, max_new_tokens=max_new_tokens)
        adapter = self.config.roles[role].adapter_name(role)
        return prompt_request(self.prompts[role], role, adapter, sampling, **fields)

    def sampling(
        self, role: str, greedy: bool = False, stop: tuple[str, ...] = ()
    ) -> SamplingParams:
        """The sampling of ``role``'s requests: its temperature (0 when ``greedy``), the
        config's top-p and token budget, and a seed from the loop's random stream."""
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
        """One model call as a training-sample candidate (``Turn``)."""
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


def prompt_request(
    prompt: RolePrompt, role: str, adapter: str, sampling: SamplingParams, **fields: Any
) -> Request:
    """A request for a role prompt with ``fields`` filled in: its chat messages and its
    ``prefill`` (the start of the reply), so ``completion.reply`` is the whole reply. Every
    request made from a role prompt is made here (loops, evaluation, ``selfplay play``)."""
    return Request(
        role=role,
        messages=prompt.render(**fields),
        adapter=adapter,
        sampling=sampling,
        prefill=prompt.render_prefill(**fields),
    )


def check_roles(loop: Loop) -> None:
    """Refuse, in one line, an experiment whose roles do not match what the loop declares: a
    role it plays that is missing, a role it never plays (a typo, or a role from another
    loop's experiment: it would get an adapter and silently never be used), or a role prompt
    that reads a field the loop never fills."""
    declared, given = loop.spec.roles, loop.config.roles
    for role in declared:
        if role not in given:
            raise UserError(f"the {loop.name} loop needs a `{role}` role in `roles:`")
    unplayed = sorted(set(given) - set(declared)) if declared else []
    if unplayed:
        raise UserError(
            f"roles.{unplayed[0]}: the {loop.name} loop has no `{unplayed[0]}` role "
            f"(its roles: {', '.join(sorted(declared))})"
        )
    for role, filled in declared.items():
        unfilled = sorted(loop.prompts[role].fields() - set(filled))
        if unfilled:
            names = ", ".join("{{ " + name + " }}" for name in unfilled)
            raise UserError(
                f"role `{role}`: prompt {given[role].prompt!r} reads {names}, "
                f"which the {loop.name} loop does not fill (it fills: "
                f"{', '.join(filled) or 'nothing'})"
            )
