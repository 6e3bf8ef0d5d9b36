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

Per-role generation settings (``roles.<role>``: temperature, ``max_tokens``, ``stop``) are
applied here, in ``sampling``, for every request a loop builds with ``request``; the held-out
reasoning evaluation (``eval_reasoning``) any loop can run is here too (``evaluate``).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from curricula.curriculum import Curriculum
from roles import RolePrompt, load_role
from selfplay.config import ExperimentConfig, Strict
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.engines.tools import ToolSettings
from selfplay.loops.reasoning import TaskSpec, build_tasks, reasoning_accuracy
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
    held-out evaluation (``selfplay evaluate``) read of it.

    ``eval_reasoning``: held-out reasoning-gym families the loop's ``spec.reasoner`` answers,
    greedily, at every evaluation (``eval/reasoning/<family>``), for any loop that declares
    one. ``renamed``: keys this section used to have, by their new name, and
    ``renamed_values``: values of a key the same way (``{key: {old: new}}``): a config that
    still sets one is refused in one line naming the new one
    (docs/architecture.md#vocabulary)."""

    renamed: ClassVar[Mapping[str, str]] = {}
    renamed_values: ClassVar[Mapping[str, Mapping[str, str]]] = {}

    eval_every: int = Field(0, ge=0)  # steps between evaluations; 0: only before and after
    eval_reasoning: list[TaskSpec] = []  # held-out reasoning-gym families (greedy accuracy)
    eval_reasoning_size: int = Field(16, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _refuse_renamed(cls, data: Any) -> Any:
        for old, new in cls.renamed.items() if isinstance(data, dict) else ():
            if old in data:
                raise PydanticCustomError("renamed_key", "{old} is now {new}",
                                          {"old": old, "new": new})
        for key, values in cls.renamed_values.items() if isinstance(data, dict) else ():
            new = values.get(data.get(key)) if isinstance(data.get(key), str) else None
            if new is not None:
                raise PydanticCustomError("renamed_value", "{key}: {old!r} is now {new!r}",
                                          {"key": key, "old": data[key], "new": new})
        return data

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
    other field is refused, before a run folder exists; ``optional_roles`` the same for roles
    an experiment may leave out (SPIRAL's ``reasoner``, needed only by ``eval_reasoning``).
    ``estimator``: the advantages it uses under ``advantage.estimator: auto`` ("group": the
    loss preset's group-relative estimator; "rae": SPIRAL's; "own": the loop's
    ``own_samples``; any other estimator the config names replaces it, an ablation).
    ``pass_rates``: its episodes carry the task's p̂ (``Episode.pass_rate``), which ADPO needs.
    ``tasks``: what its curriculum's tasks are (for the resume check's error);
    ``fixed_tasks``: they come from the config (a resumed run must have the same), as opposed
    to tasks the run generates (Agent0's pools). ``eval_files``: the run-folder files its
    evaluations append rows to (``Loop.evaluation_rows``; SPIRAL's ``strategies.jsonl``).
    ``reasoner``: the role that answers the held-out reasoning questions (its ``question``
    field; ``reasoner_fields`` fills the others), None when none can.
    """

    roles: Mapping[str, tuple[str, ...]]
    estimator: Literal["group", "rae", "own"] = "group"
    pass_rates: bool = False
    tasks: str = "tasks"
    fixed_tasks: bool = True
    eval_files: tuple[str, ...] = ()
    reasoner: str | None = None
    reasoner_fields: Mapping[str, str] = field(default_factory=dict)
    optional_roles: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class Loop(ABC):
    """One algorithm. Subclasses set ``name``, ``Settings`` and ``spec`` and write ``collect``."""

    name: ClassVar[str] = "base"  # also the key of the loop's own config section
    Settings: ClassVar[type[LoopSettings] | None] = None  # the model of that section
    spec: ClassVar[LoopSpec] = LoopSpec(roles={})
    held_out_seed: ClassVar[int] = 20_000  # the held-out set is drawn with seed + this

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
        self.held_out = self._held_out_tasks()

    def _held_out_tasks(self) -> list:
        """The held-out reasoning-gym set of ``eval_reasoning`` (refused in one line when no
        role of the loop can answer it)."""
        s = self.settings
        if s is None or not s.eval_reasoning or not s.eval_reasoning_size:
            return []
        role = self.spec.reasoner
        if role is None:
            raise UserError(f"{self.name}.eval_reasoning: the {self.name} loop has no role that "
                            "answers questions; remove it")
        if role not in self.config.roles:
            raise UserError(f"{self.name}.eval_reasoning needs a `{role}` role to answer the "
                            f"questions (e.g. roles.{role}: {{prompt: solver_terse}})")
        return build_tasks(s.eval_reasoning, s.eval_reasoning_size,
                           self.config.seed + self.held_out_seed)

    # ---------------------------------------------------------------- what the runner calls
    @property
    def eval_every(self) -> int:
        """Steps between evaluations (0: only before the first step and after the last)."""
        return self.settings.eval_every if self.settings is not None else 0

    @abstractmethod
    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        """Play one step's episodes."""

    async def evaluate(self, policy: BatchingPolicy, step: int) -> dict[str, float]:
        """Held-out metrics (before training, every ``eval_every`` steps and at the end): by
        default the greedy accuracy of ``spec.reasoner`` on ``eval_reasoning``'s tasks, per
        family (``eval/reasoning/<family>``) and overall (none when it is not set)."""
        if not self.held_out:
            return {}
        role, fields = self.spec.reasoner, self.spec.reasoner_fields
        return await reasoning_accuracy(policy, self.held_out, lambda entry: self.request(
            role, greedy=True, **fields, question=entry["question"]))

    def evaluation_rows(self) -> dict[str, list[dict]]:
        """Rows the evaluations since the last call produced for run-folder files, by the
        relative path of one of ``spec.eval_files``. The runner appends them beside the
        evaluation's metrics; each row carries its ``step``, so a resume drops those of the steps
        it redoes. (``selfplay evaluate`` writes only ``eval.jsonl``.)"""
        return {}

    def samples(self, episodes: list[Episode]) -> list[Sample]:
        """Advantages per role (group-relative within (group, role), RAE per (env, role), or
        the loop's own), then ADPO's per-sample scale and ε_high from p̂ when
        ``advantage.adpo`` is on; the samples of a role with ``train: false`` are dropped."""
        chosen = self.config.advantage.estimator
        if chosen == "auto" and self.spec.estimator == "own":
            samples = self.own_samples(episodes)
        else:
            if chosen == "auto":
                chosen = "rae" if self.spec.estimator == "rae" else LOSS_PRESETS[
                    self.config.train.loss][1]
            if chosen == "rae":
                samples = rae_samples(episodes, self.baseline)
            else:
                samples = group_relative_samples(episodes, chosen)
        if self.config.advantage.adpo:
            apply_adpo(samples, self.config.advantage.adpo_floor)
        frozen = {role for role, spec in self.config.roles.items() if not spec.train}
        return [s for s in samples if self.config_role(s.turn.role) not in frozen]

    def own_samples(self, episodes: list[Episode]) -> list[Sample]:
        """The loop's own advantages, for a ``spec.estimator`` of "own"."""
        raise NotImplementedError(f"the {self.name} loop declares estimator 'own' but has no "
                                  "own_samples")

    def config_role(self, turn_role: str) -> str:
        """The ``roles:`` entry a turn of ``turn_role`` belongs to (its settings, whether it
        trains): the same name, unless the loop labels turns otherwise (SPIRAL: its seats)."""
        return turn_role

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
        self, role: str, greedy: bool = False, stop: tuple[str, ...] = (), **fields: Any
    ) -> Request:
        """A request for ``role``'s prompt with ``fields`` filled in, sampled as ``sampling``
        says; a role prompt with a ``prefill`` starts the reply (``completion.reply`` is
        prefill + what the model wrote). ``stop``: stop strings the loop's format needs."""
        sampling = self.sampling(role, greedy, stop)
        adapter = self.config.roles[role].adapter_name(role)
        return prompt_request(self.prompts[role], role, adapter, sampling, **fields)

    def sampling(
        self, role: str, greedy: bool = False, stop: tuple[str, ...] = ()
    ) -> SamplingParams:
        """The sampling of ``role``'s requests, the one place a role's generation settings
        apply: its temperature (0 when ``greedy``), the config's top-p, its token budget
        (``roles.<role>.max_tokens``, else ``sampling.max_new_tokens``), the loop's ``stop``
        strings and its own (``roles.<role>.stop``), and a seed from the loop's random
        stream."""
        spec, base = self.config.roles[role], self.config.sampling
        temperature = (
            0.0
            if greedy
            else (spec.temperature if spec.temperature is not None else base.temperature)
        )
        return SamplingParams(
            temperature=temperature,
            top_p=base.top_p,
            max_new_tokens=spec.max_tokens or base.max_new_tokens,
            stop=tuple(dict.fromkeys((*stop, *spec.stop))),
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
    known = {**loop.spec.optional_roles, **declared}
    unplayed = sorted(set(given) - set(known)) if declared else []
    if unplayed:
        raise UserError(
            f"roles.{unplayed[0]}: the {loop.name} loop has no `{unplayed[0]}` role "
            f"(its roles: {', '.join(sorted(known))})"
        )
    for role, filled in known.items():
        if role not in given:
            continue
        unfilled = sorted(loop.prompts[role].fields() - set(filled))
        if unfilled:
            names = ", ".join("{{ " + name + " }}" for name in unfilled)
            raise UserError(
                f"role `{role}`: prompt {given[role].prompt!r} reads {names}, "
                f"which the {loop.name} loop does not fill (it fills: "
                f"{', '.join(filled) or 'nothing'})"
            )
