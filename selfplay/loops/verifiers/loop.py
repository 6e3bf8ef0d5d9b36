"""A verifiers v1 environment as a loop (docs/verifiers.md): ``loop: verifiers`` with
``verifiers: {env: NAME, args: {...}}``.

The environment (single-agent, or a multi-agent verifiers ``Env``) is loaded from its name: an
installed verifiers id (``alphabet-sort``) or an import path of a module written in the
verifiers style (``selfplay.loops.verifiers.envs.arithmetic``); ``args`` are its taskset's
settings. Every agent of the environment is a role of ours (the experiment's ``roles:`` names
each agent, and nothing else): the role's prompt settings (its system text, its user template
around each user message, its prefill), its temperature, its adapter (``adapter: own``: one
LoRA adapter per agent) and whether it trains.

Each step draws ``tasks_per_step`` tasks of the taskset (through the experiment's curriculum:
samplers and ``curriculum/tasks.csv`` as in any loop) and plays each ``group_size`` times; all
episodes run concurrently and share engine batches (``policy.gather``). A sampler that keeps
only some groups (DAPO) draws again for the rest, as in rlvr (``Curriculum.play``). verifiers
scores each agent's trace with its rubric (``@vf.reward`` functions, ``record_reward`` in
``finalize``); an agent's reward is its trace's weighted sum (the mean over its traces when it
ran more than once), and reaches the learner unchanged as the episode's reward for that role.
The turns the learner sees are the engine's own token ids and log-probs, which also fill the
tokens of the traces' responses (``bridge.PolicyClient``). Advantages are the experiment's:
group-relative per role by default, RAE with ``advantage.estimator: rae``, ADPO's scaling by
the task's p̂ (its share of successful episodes in the step) with ``advantage.adpo: true``.

An episode that fails (its rubric or the environment's code raised, a harness error) is kept:
written with its errors in ``info``, counted in ``verifiers/failed_episodes``, never trained on.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
from typing import Any

import verifiers.v1 as vf
from pydantic import Field

import selfplay.loops.verifiers.bridge as bridge
from curricula.curriculum import Curriculum, Group
from selfplay.config import ExperimentConfig
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.base import Loop, LoopSettings, LoopSpec
from selfplay.loops.propose import grouped
from selfplay.types import Collected, Episode, Request

FIELD = "message"  # the one field a role prompt reads: one user message of the environment


class VerifiersSettings(LoopSettings):
    env: str = Field(min_length=1)  # a verifiers id, or an import path of a verifiers module
    args: dict[str, Any] = {}  # the taskset's settings (its TasksetConfig fields)
    # per-agent verifiers settings (AgentConfig fields: max_turns, sampling, timeout, ...)
    agents: dict[str, dict[str, Any]] = {}
    tasks_per_step: int = Field(4, ge=1)
    group_size: int = Field(4, ge=1)  # episodes per task: the groups of group-relative advantages
    max_tasks: int = Field(1024, ge=1)  # tasks read from the taskset (it may be endless)
    score_agent: str | None = None  # whose reward the curriculum grades (None: the first agent)
    success_at: float = 1.0  # an episode succeeded when that reward is at least this
    eval_size: int = Field(0, ge=0)  # greedy episodes on the first tasks at evaluations


class VerifiersLoop(Loop):
    name = "verifiers"
    Settings = VerifiersSettings
    # a single-agent environment's one role (verifiers' SingleAgentEnv names its agent
    # "agent"); each experiment's environment replaces it: one role per agent (``__init__``)
    spec = LoopSpec(roles={"agent": (FIELD,)}, pass_rates=True)

    def __init__(self, config: ExperimentConfig) -> None:
        settings: VerifiersSettings = config.settings
        self.env_id = bridge.taskset_id(settings.env)
        self.agents = bridge.agent_names(bridge.env_class(self.env_id))
        self.spec = LoopSpec(roles={agent: (FIELD,) for agent in self.agents},
                             pass_rates=True, tasks=f"tasks of {settings.env}")
        for agent in self.agents:
            if agent not in config.roles:
                raise UserError(f"roles: agent `{agent}` of {settings.env} has no role; name "
                                f"every agent in `roles:` (its agents: {', '.join(self.agents)})")
        for agent in settings.agents:
            if agent not in self.agents:
                raise UserError(f"verifiers.agents.{agent}: {settings.env} has no such agent "
                                f"(its agents: {', '.join(self.agents)})")
        super().__init__(config)
        self.score_agent = settings.score_agent or self.agents[0]
        if self.score_agent not in self.agents:
            raise UserError(f"verifiers.score_agent: {settings.env} has no agent "
                            f"{self.score_agent!r} (its agents: {', '.join(self.agents)})")
        overrides = {agent: {**settings.agents.get(agent, {}), "model": agent}
                     for agent in self.agents}  # the request's model names its agent
        self.env = bridge.load_env(self.env_id, settings.args, overrides)
        self.tasks = bridge.read_tasks(self.env, settings.max_tasks, settings.env)
        if not self.tasks:
            raise UserError(f"verifiers.env: {settings.env} has no tasks (args: {settings.args})")
        self.curriculum = Curriculum(config.curriculum, seed=config.seed)
        self.curriculum.buffer.add_many([f"task-{i}" for i in range(len(self.tasks))],
                                        [self.env_id] * len(self.tasks),
                                        [float("nan")] * len(self.tasks))

    # ---------------------------------------------------------------- one model call
    def role_request(self, role: str, messages: list[dict[str, str]], greedy: bool,
                     vf_max_tokens: int | None, origin: str) -> Request:
        """The request for one of ``role``'s calls: the environment's conversation under the
        role's prompt settings (its system text when the conversation has none, its user
        template around each user message, its prefill) and sampling, seeded by the call's
        ``origin`` (episode, agent run, call: the same whatever order calls arrive in)."""
        if role not in self.agents:
            raise ValueError(f"no role for model {role!r}")
        prompt = self.prompts[role]
        rendered = [
            {"role": "user", "content": prompt.render(**{FIELD: m["content"]})[-1]["content"]}
            if m["role"] == "user" else m
            for m in messages
        ]
        if prompt.system and not any(m["role"] == "system" for m in rendered):
            rendered.insert(0, {"role": "system", "content": prompt.system})
        seed = random.Random(f"{self.config.seed}/{origin}").randrange(2**31)
        sampling = dataclasses.replace(self.sampling(role, greedy), seed=seed)
        sampling = bridge.sampling_for(sampling, vf_max_tokens)
        return Request(role=role, messages=rendered, sampling=sampling,
                       adapter=self.config.roles[role].adapter_name(role),
                       prefill=prompt.render_prefill(**{FIELD: ""}))

    # ---------------------------------------------------------------- one episode
    async def episode(self, client: bridge.PolicyClient, index: int, group: str,
                      key: str) -> Episode:
        """One verifiers episode of task ``index`` as our ``Episode`` (``key``: its name in
        the step, which seeds its sampling)."""
        context = vf.ModelContext(model="selfplay", client=client.config(),
                                  sampling=vf.Sampling())
        played = await self.env.run_episode(self.tasks[index], context,
                                            on_trace=client.watch(key))
        return self.to_episode(played, client, index, group)

    def to_episode(self, played: vf.Episode, client: bridge.PolicyClient, index: int,
                   group: str) -> Episode:
        """Turns from the engine's calls under each trace's id, rewards per agent."""
        info: dict[str, Any] = {"task": index, "env": self.env_id, "ok": played.ok,
                                "prompt": self.tasks[index].data.prompt_text}
        if not played.ok:
            errors = [e.message for e in played.errors] + [
                e.message for t in played.traces for e in t.errors]
            info |= {"failed": True, "errors": [" ".join(m.split())[:300] for m in errors]}
            return Episode(self.name, self.env_id, [], {}, f"{group}-failed", info)
        turns, rewards = [], {}
        by_agent: dict[str, list[float]] = {}
        for trace in played.traces:
            agent = trace.agent.name
            by_agent.setdefault(agent, []).append(trace.reward)
            if trace.agent.trainable:
                turns += client.turns.pop(trace.id, [])
            info.setdefault("rewards", {})[agent] = {k: r.value for k, r in trace.rewards.items()
                                                     if r is not None}
            info.setdefault("replies", {})[agent] = trace.last_reply
        for agent, values in by_agent.items():
            rewards[agent] = statistics.fmean(values)
        return Episode(self.name, self.env_id, turns, rewards, group, info)

    # ---------------------------------------------------------------- one step
    async def play(self, policy: BatchingPolicy, tasks: list[int], size: int, prefix: str,
                   greedy: bool = False) -> list[Episode]:
        """``size`` episodes of each task, all at once, inside the environment's serving."""
        client = bridge.PolicyClient(
            policy,
            lambda role, messages, cap, origin: self.role_request(role, messages, greedy, cap,
                                                                  origin),
            lambda request, completion: self.turn(request, completion, policy),
        )
        try:
            async with self.env.serving():
                return await policy.gather(
                    self.episode(client, task, f"{prefix}-t{task}", f"{prefix}-t{task}-{j}")
                    for task in tasks for j in range(size))
        finally:
            client.forget()

    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        """Draw tasks, play each ``group_size`` times, report the groups to the curriculum; a
        sampler that keeps only some (DAPO) draws again for the rest. Every episode played is
        counted in the metrics; failed ones are written, never trained on."""
        played: list[Episode] = []

        async def play(drawn) -> list[Group]:
            tasks = [int(t) for t in drawn]
            episodes = await self.play(policy, tasks, self.settings.group_size, f"s{step}")
            played.extend(episodes)
            return self.groups(tasks, episodes)

        wanted = min(self.settings.tasks_per_step, len(self.tasks))
        kept = await self.curriculum.play(wanted, step, play)
        trained = [e for g in kept for e in g.payload]
        failed = [e for e in played if e.info.get("failed")]
        metrics = self.curriculum.metrics(step) | step_metrics(played, self.agents)
        return Collected(trained + failed, metrics)

    def groups(self, tasks: list[int], episodes: list[Episode]) -> list[Group]:
        """One ``Group`` per task of its episodes that did not fail, graded on the score
        agent's reward (``success_at``), their share of successes the task's p̂ (ADPO reads it
        from every episode of the group); a task whose episodes all failed has none (the
        curriculum learns nothing from it)."""
        groups = []
        for task, played in zip(tasks, grouped(episodes, self.settings.group_size), strict=True):
            members = [e for e in played if not e.info.get("failed")]
            rewards = [e.rewards.get(self.score_agent, 0.0) for e in members]
            successes = float(sum(r >= self.settings.success_at for r in rewards))
            if members:
                groups.append(Group(task, successes, len(members), rewards, members))
            for episode in members:
                episode.pass_rate = successes / len(members)
        return groups

    async def evaluate(self, policy: BatchingPolicy, step: int) -> dict[str, float]:
        """Greedy episodes of the first ``eval_size`` tasks: each agent's mean reward."""
        size = min(self.settings.eval_size, len(self.tasks))
        if not size:
            return {}
        episodes = await self.play(policy, list(range(size)), 1, "eval", greedy=True)
        return {f"eval/{k.split('/', 1)[1]}": v
                for k, v in step_metrics(episodes, self.agents).items()
                if k.startswith(("verifiers/reward/", "verifiers/played_rate/"))
                or k == "verifiers/failed_rate"}

    def close(self) -> None:
        self.env = None  # type: ignore[assignment]


def step_metrics(episodes: list[Episode], agents: list[str]) -> dict[str, float]:
    """Failed episodes; each agent's play rate, and its mean reward and reply length (tokens)
    over the episodes it played in (none when it played in none: a 0 would read as a reward)."""
    count = max(len(episodes), 1)
    done = [e for e in episodes if not e.info.get("failed")]
    metrics = {"verifiers/episodes": float(len(episodes)),
               "verifiers/failed_episodes": float(len(episodes) - len(done)),
               "verifiers/failed_rate": (len(episodes) - len(done)) / count}
    for agent in agents:
        rewards = [e.rewards[agent] for e in done if agent in e.rewards]
        turns = [t for e in done for t in e.turns if t.role == agent]
        metrics[f"verifiers/played_rate/{agent}"] = len(rewards) / count
        if rewards:
            metrics[f"verifiers/reward/{agent}"] = statistics.fmean(rewards)
        if turns:
            metrics[f"verifiers/reply_tokens/{agent}"] = statistics.fmean(
                len(t.completion_ids) for t in turns)
    return metrics
