"""Core types shared by every loop, engine and the learner (docs/architecture.md).

The data flow is one direction: a loop turns ``Request``s into ``Completion``s through the
policy, records them as ``Turn``s inside ``Episode``s and hands a step's episodes to the runner
as one ``Collected``; the advantage estimators turn the turns into ``Sample``s, and the learner
trains on samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SamplingParams:
    """How one request is sampled. ``max_new_tokens`` bounds the completion length."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()
    seed: int | None = None


@dataclass
class Request:
    """One model call. Give either chat ``messages`` or ready ``prompt_ids`` (continuations).

    ``adapter`` names the LoRA adapter that serves this role ("shared" when roles share weights).
    ``prefill`` starts the assistant's reply after the chat template's generation prompt: the
    model continues it, and the completion holds only what the model wrote (messages only).
    ``reference_ids``: token ids to score after the prompt as well, without changing what is
    generated (the hf engine scores them on the generation's own prefill; the completion's
    ``reference_logprobs``; an engine that cannot leaves those None).
    """

    role: str
    messages: list[dict[str, str]] | None = None
    prompt_ids: list[int] | None = None
    adapter: str = "shared"
    sampling: SamplingParams = field(default_factory=SamplingParams)
    prefill: str = ""
    reference_ids: list[int] | None = None

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt_ids is None):
            raise ValueError("a Request needs exactly one of `messages` or `prompt_ids`")
        if self.prefill and self.messages is None:
            raise ValueError("a Request's `prefill` follows the chat template: give `messages`")


@dataclass
class Completion:
    """What the engine returns for one request: the prompt it really used and what it sampled."""

    text: str
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]  # log π_engine(token) of each sampled token, same length as token_ids
    finish_reason: str  # "stop" (eos or stop string), "length"
    stop_string: str | None = None  # the stop string that ended generation, if any
    policy_version: int | None = None  # weights version that sampled it (set by the scheduler)
    prefill: str = ""  # the request's start of the reply, which the model continued
    # log π(token | prompt, the tokens before it) of the request's reference_ids; None: not asked,
    # or the engine does not score them with generation
    reference_logprobs: list[float] | None = None

    @property
    def reply(self) -> str:
        """The whole reply a loop parses: the prefill followed by what the model wrote."""
        return self.prefill + self.text


@dataclass
class Choice:
    """A move chosen by scoring rather than sampling text (``spiral.action: scored``).

    The policy over a state's legal moves is the softmax, over the ``candidates`` (each legal
    move's reply, as token ids that continue the turn's prompt), of each reply's summed
    log-probability divided by its ``divisors`` entry (1: GLAM's sum; the reply's token or word
    count: TWOSOME's normalisations). ``log_pi`` is log π(· | s) over the candidates under the
    weights that chose (the behaviour policy), ``outside`` the probability the model gave to
    replies outside the legal set, 1 − Σ_k P(candidate_k) (kept for analysis; never trained on).
    """

    candidates: list[list[int]]
    names: list[str]
    chosen: int
    divisors: list[float]
    log_pi: list[float]
    outside: float = 0.0
    # exploration: the move was drawn from (1 − explore)·π + explore·uniform, not π itself
    explore: float = 0.0

    @property
    def logprob(self) -> float:
        """log π(chosen | s) under the weights that played."""
        return self.log_pi[self.chosen]

    @property
    def behaviour_logprob(self) -> float:
        """log μ(chosen | s) of the distribution the move was drawn from (the learner's
        importance weight compares the policy with it)."""
        if not self.explore:
            return self.logprob
        uniform = self.explore / len(self.log_pi)
        return math.log((1 - self.explore) * math.exp(self.logprob) + uniform)


@dataclass
class Turn:
    """One model call as a training-sample candidate.

    ``completion_ids`` may interleave model tokens and tool-output tokens (tool-integrated
    rollouts); ``loss_mask`` is 1 on tokens the model produced and 0 on tool output, and
    ``engine_logprobs`` is 0.0 where the mask is 0.
    """

    role: str
    prompt_ids: list[int]
    completion_ids: list[int]
    engine_logprobs: list[float]
    loss_mask: list[int]
    text: str
    adapter: str = "shared"
    prompt_text: str = ""
    policy_version: int = 0  # learner step whose weights produced it (staleness)
    temperature: float = 1.0  # sampling temperature: the learner scores tokens under the same one
    top_p: float = 1.0  # nucleus sampled from: the learner scores under the same truncation
    # why the reply ended: "stop" (eos or a stop string), "length" (the token budget of this
    # request, which loops set per role), "tool_budget" (tool turns spent); "" when unknown
    finish_reason: str = ""
    prefill: str = ""  # the start of the reply the prompt gave; its tokens end ``prompt_ids``
    # a scored move: the legal replies it chose among (``completion_ids`` is the chosen one's);
    # the learner trains log π(chosen | s) over them instead of the reply's tokens
    choice: Choice | None = None

    @classmethod
    def from_completion(
        cls,
        role: str,
        completion: Completion,
        adapter: str = "shared",
        prompt_text: str = "",
        temperature: float = 1.0,
        policy_version: int = 0,
        top_p: float = 1.0,
    ) -> Turn:
        return cls(
            role=role,
            prompt_ids=list(completion.prompt_ids),
            completion_ids=list(completion.token_ids),
            engine_logprobs=list(completion.logprobs),
            loss_mask=[1] * len(completion.token_ids),
            text=completion.text,
            adapter=adapter,
            prompt_text=prompt_text,
            temperature=temperature,
            top_p=top_p,
            finish_reason=completion.finish_reason,
            prefill=completion.prefill,
            policy_version=(
                completion.policy_version
                if completion.policy_version is not None
                else policy_version
            ),
        )

    @property
    def num_model_tokens(self) -> int:
        """Tokens the loss is taken over: a scored move is one decision, whatever its length."""
        return 1 if self.choice is not None else sum(self.loss_mask)

    @property
    def reply(self) -> str:
        """The whole reply a loop parses: the prefill followed by what the model wrote."""
        return self.prefill + self.text


@dataclass
class Episode:
    """Everything one environment instance produced: all turns of all roles and their rewards.

    ``group_id`` ties episodes that share a prompt/task (group-relative advantages);
    ``env`` is the game id or task family (RAE keys its baselines by (env, role));
    ``pass_rate`` is the task's p̂, which ADPO turns into each sample's advantage scale and
    ε_high (only loops whose ``LoopSpec.pass_rates`` says so set it; on disk it is
    ``info["pass_rate"]``, docs/run-folder.md); ``correct`` is whether the episode's answer
    was right (a solver's episode in a loop that grades answers; None otherwise), which the
    run page reads (on disk ``info["correct"]``); ``info`` is free-form, for analysis only.
    """

    loop: str
    env: str
    turns: list[Turn]
    rewards: dict[str, float]
    group_id: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    pass_rate: float | None = None
    correct: bool | None = None


@dataclass
class Sample:
    """A turn with its advantage, ready for the learner.

    ``pass_rate`` is the episode's p̂; ADPO (``rl.advantages.apply_adpo``) turns it into
    ``advantage_scale`` and ``eps_high`` (None: the loss's global ε_high); ``group_id`` lets
    the learner find the sample's group (``prompt-level`` aggregation divides by the group's
    token count); ``info`` carries the episode's ``env``.
    """

    turn: Turn
    advantage: float
    group_id: str = ""
    pass_rate: float | None = None
    advantage_scale: float = 1.0
    eps_high: float | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskRow:
    """One generated task, a row of the run's ``tasks.jsonl`` (docs/run-folder.md): what was
    asked, its gold answer, whether it was valid and kept, and how the solver fared on it."""

    step: int
    loop: str
    task_id: str
    question: str | None
    phase: str
    kind: str = "qa"
    iteration: int | None = None
    answer: str | None = None
    answer_type: str | None = None
    valid: bool = False
    pseudo_label: str | None = None
    p_hat: float | None = None
    samples: int = 0
    solver_answers: list[str | None] = field(default_factory=list)
    tool_calls: float | None = None
    reward: float | None = None
    kept: bool | None = None
    document: str | None = None


@dataclass
class Collected:
    """What a loop's ``collect`` returns for one step: everything the runner records.

    ``episodes`` are written to ``episodes/step-N.jsonl`` and trained on; ``metrics`` are the
    loop's own figures for the step (the runner adds rewards per role, lengths, timings);
    ``tasks`` are rows of ``tasks.jsonl`` (docs/run-folder.md) for loops that generate tasks;
    ``files`` are JSONL files of the run folder, by relative path, written with the step (e.g.
    Agent0's ``pools/iter-K.jsonl``); ``games`` is how many games the step played (two-player
    loops), which the runner turns into ``game/games_per_minute``.
    """

    episodes: list[Episode]
    metrics: dict[str, float] = field(default_factory=dict)
    tasks: list[TaskRow] = field(default_factory=list)
    files: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    games: int = 0
