"""Agent0 (Xia et al. 2025, arXiv:2511.16043; docs/algorithms.md#agent0): a curriculum agent
and a tool-using executor co-evolve from one base model.

Both roles are LoRA adapters (``adapter: own``) on one base model, served by the same engine in
the same batches. Training steps map to (iteration, phase): each iteration runs
``curriculum_steps`` curriculum steps, then ``executor_steps`` executor steps.

1. **Curriculum phase**: the ``curriculum`` role proposes tasks; the frozen executor answers
   each one k = ``solver_samples`` times with the Python tool; the task kind (``kinds.py``)
   turns those answers into p̂ (``qa``: with a majority pseudo-label); the curriculum role
   trains with GRPO on the composite reward of ``curricula/rewards.py`` (paper or code form);
   only its turns carry rewards, so the executor's weights never change in this phase.
2. **Executor phase**: at its first step the frozen curriculum role generates a task pool, each
   task scored like above (all tasks' samples and the probe set's in the same engine waves); the
   band filter keeps the tasks the executor can learn from; the pool is written to
   ``pools/iter-K.jsonl`` and kept in the loop state (a resume uses the same pool). Each step
   trains the executor on a few pool tasks, drawn by the curriculum sampler, with ADPO: p̂ goes
   into ``episode.pass_rate``, which sets each sample's advantage scale and ε_high.

Every generated task is a row of ``tasks.jsonl``; metrics and records: ``records.py``, reward
forms: ``rewards.py``. With ``executor_tool: false`` and R-Zero's forms: R-Zero (docs/rzero.md).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import selfplay.loops.agent0.records as records
import selfplay.loops.agent0.rewards as forms
from curricula.answers import extract_answer
from curricula.curriculum import Curriculum, Group, groups_of
from curricula.proposals import Proposal
from curricula.rewards import bleu_clusters, cluster_shares
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.engines.tools import ToolSandbox
from selfplay.loops.agent0.kinds import CodeIoTasks, QaTasks, ScoredTask, Solve
from selfplay.loops.agent0.settings import Agent0Settings
from selfplay.loops.base import Loop, LoopSpec
from selfplay.loops.propose import grouped, proposer_reward
from selfplay.loops.reasoning import build_tasks
from selfplay.types import Collected, Episode, TaskRow

CURRICULUM, EXECUTOR = "curriculum", "executor"


class Agent0Loop(Loop):
    name = "agent0"
    Settings = Agent0Settings
    spec = LoopSpec(
        roles={CURRICULUM: (), EXECUTOR: ("question",)},
        pass_rates=True,  # executor episodes carry their task's p̂ (ADPO)
        fixed_tasks=False,  # every iteration adds its pool's tasks
        reasoner=EXECUTOR,  # eval_reasoning: the executor answers (without its tool)
    )

    def __init__(self, config) -> None:
        super().__init__(config)
        s: Agent0Settings = self.settings
        for role in (CURRICULUM, EXECUTOR):
            if config.roles[role].adapter != "own":
                raise UserError(f"agent0: role `{role}` needs `adapter: own` (two agents)")
        if config.rollout.mode != "sync":
            raise UserError("agent0 runs its phases in order: rollout.mode must be sync")
        default = "uncertainty" if s.reward_form == "paper" else "uncertainty_code"
        self.proposer_reward = proposer_reward(s.proposer_reward or default)
        self.probe = build_tasks(s.probe, s.probe_size, config.seed + 7919)[: s.probe_size]
        self.tool = ToolSandbox(s.tool)
        self.kinds = {"qa": QaTasks(s.verify_timeout_s),
                      "code_io": CodeIoTasks(self.tool, s.code_io_modes, self.rng)}
        self.kind = self.kinds[s.task_kind]
        # {"iteration", "tasks", "indices"}: the kept tasks and their indices in the curriculum
        self.pool: dict[str, Any] | None = None
        # every kept pool task of every iteration is a task of the curriculum (docs/curricula.md)
        self.curriculum = Curriculum(config.curriculum, seed=config.seed)

    def close(self) -> None:
        self.tool.close()

    def phase(self, step: int) -> tuple[int, str]:
        """(iteration, phase) of a training step."""
        s = self.settings
        iteration, offset = divmod(step, s.curriculum_steps + s.executor_steps)
        return iteration, CURRICULUM if offset < s.curriculum_steps else EXECUTOR

    # ---------------------------------------------------------------- the two roles
    async def proposals(self, policy: BatchingPolicy, count: int) -> list[tuple]:
        """``count`` proposals of the curriculum role in one engine wave, (turn, task) each;
        the tasks posed once all are checked, in proposal order (checks end in any order)."""

        async def propose() -> tuple:
            request = self.request(CURRICULUM)
            completion = await policy(request)
            task = await self.kind.task(policy, completion.reply)
            return self.turn(request, completion, policy), task

        proposed = await policy.gather([propose() for _ in range(count)])
        return [(turn, self.kind.pose(task)) for turn, task in proposed]

    async def solve(self, policy: BatchingPolicy, proposal: Proposal) -> Solve:
        """One executor rollout (with the Python tool unless ``executor_tool`` is off), judged
        by the task's kind."""
        s = self.settings
        request = self.request(EXECUTOR, question=proposal.question)
        if s.executor_tool:
            rollout = await self.tool.rollout(policy, request)
            turn, calls = rollout.turn, rollout.tool_calls
        else:
            turn, calls = self.turn(request, await policy(request), policy), 0
        answer, _ = extract_answer(turn.reply, lenient=s.lenient_answers)
        solve = Solve(turn, turn.reply, answer, calls)
        solve.correct = await self.kinds[proposal.kind].check(policy, proposal, answer)
        return solve

    async def score(
        self, policy: BatchingPolicy, proposals: list[Proposal], extra=()
    ) -> tuple[list[ScoredTask], list]:
        """k executor samples of every valid proposal (and any ``extra`` coroutines) in one
        gather, so the engine sees them in the same waves; then p̂ and labels per task."""
        k = self.settings.solver_samples
        valid = [p for p in proposals if p.valid]
        coroutines = [self.solve(policy, p) for p in valid for _ in range(k)]
        results = await policy.gather([*coroutines, *extra])
        solves, extra_results = results[: len(coroutines)], results[len(coroutines) :]
        scored = {id(p): self.kinds[p.kind].score(p, group)
                  for p, group in zip(valid, grouped(solves, k), strict=True)}
        return [scored.get(id(p), ScoredTask(p)) for p in proposals], extra_results

    # ---------------------------------------------------------------- rewards
    def curriculum_rewards(self, tasks: list[ScoredTask]) -> tuple[list[float], list[float]]:
        """(reward, repetition penalty) per proposal (``rewards.py``: the settings' form)."""
        return forms.curriculum_rewards(self.settings, tasks, self.proposer_reward)

    # ---------------------------------------------------------------- one step
    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        iteration, phase = self.phase(step)
        step_of = {"agent0/iteration": float(iteration), "agent0/phase": float(phase == EXECUTOR)}
        if phase == CURRICULUM:
            collected = await self.curriculum_step(policy, step, iteration)
        else:
            collected = await self.executor_step(policy, step, iteration)
        collected.metrics = step_of | collected.metrics
        return collected

    async def curriculum_step(self, policy: BatchingPolicy, step: int, iteration: int) -> Collected:
        s = self.settings
        count = s.proposal_groups * s.proposal_group_size
        proposed = await self.proposals(policy, count)
        tasks, _ = await self.score(policy, [p for _, p in proposed])
        rewards, penalties = self.curriculum_rewards(tasks)
        episodes, rows = [], []
        for index, ((turn, _), task, reward, penalty) in enumerate(
            zip(proposed, tasks, rewards, penalties, strict=True)
        ):
            task_id = f"s{step}-c{index}"
            info = records.task_info(task, step, iteration, CURRICULUM, task_id)
            episodes.append(Episode(  # the executor turns: context, never trained here
                self.name, f"agent0-{s.task_kind}", [turn, *(t.turn for t in task.solves)],
                {CURRICULUM: reward}, f"s{step}-g{index // s.proposal_group_size}",
                info | {"repetition": penalty, "reward": reward}))
            rows.append(self.row(task, step, iteration, CURRICULUM, task_id, reward, None))
        qa = s.task_kind == "qa"
        return Collected(episodes, records.curriculum_metrics(episodes, s.in_band, qa)
                         if episodes else {}, rows)

    async def executor_step(self, policy: BatchingPolicy, step: int, iteration: int) -> Collected:
        """The iteration's pool (built at its first executor step); then tasks drawn from it by
        the curriculum, answered ``executor_group_size`` times each, outcomes reported (DAPO
        draws again for the groups it does not keep)."""
        built = Collected([])
        if self.pool is None or self.pool["iteration"] != iteration:
            built = await self.build_pool(policy, step, iteration)
        wanted = min(self.settings.executor_tasks_per_step, len(self.pool["tasks"]))
        current = set(self.pool["indices"])
        earlier = [i for i in range(len(self.curriculum.buffer)) if i not in current]
        kept = await self.curriculum.play(  # this iteration's pool only
            wanted, step, lambda tasks: self.executor_groups(policy, step, iteration, tasks),
            exclude=earlier)
        episodes = [episode for group in kept for episode in group.payload]
        metrics = built.metrics | self.curriculum.metrics(step)
        if episodes:
            metrics |= records.executor_metrics(episodes)
        return Collected(episodes, metrics, built.tasks, built.files)

    async def executor_groups(
        self, policy: BatchingPolicy, step: int, iteration: int, indices
    ) -> list[Group]:
        """``executor_group_size`` rollouts of each drawn pool task, graded: one Group each."""
        size = self.settings.executor_group_size
        position = {index: k for k, index in enumerate(self.pool["indices"])}
        chosen = [self.pool["tasks"][position[int(index)]] for index in indices]
        solves = await policy.gather(
            self.solve(policy, Proposal(**task["proposal"])) for task in chosen for _ in range(size)
        )
        episodes = []
        for index, solve in enumerate(solves):
            task = chosen[index // size]
            correct = self.kinds[task["proposal"]["kind"]].correct(task, solve)
            episodes.append(Episode(
                self.name, f"agent0-{self.settings.task_kind}", [solve.turn],
                {EXECUTOR: forms.executor_reward(self.settings, correct, solve.text)},
                f"s{step}-{task['task_id']}",
                {"step": step, "iteration": iteration, "phase": EXECUTOR,
                 "task_id": task["task_id"], "pseudo_label": task["pseudo_label"],
                 "answer": solve.answer, "tool_calls": solve.tool_calls},
                pass_rate=task["p_hat"],  # ADPO: scale and ε_high from p̂
                correct=correct))
        return groups_of(indices, episodes, [e.correct for e in episodes], EXECUTOR)

    # ---------------------------------------------------------------- the task pool
    async def build_pool(self, policy: BatchingPolicy, step: int, iteration: int) -> Collected:
        """Frozen curriculum → pool; k executor samples per task (and the probe set) in the
        same waves → p̂, labels; the band filter; the pool file and its tasks.jsonl rows."""
        s = self.settings
        start = time.perf_counter()
        proposed = await self.proposals(policy, s.pool_size)
        scoring = time.perf_counter()
        tasks, probe_solves = await self.score(
            policy, [p for _, p in proposed], self.probe_coroutines(policy)
        )
        scored_seconds = time.perf_counter() - scoring
        questions = [t.proposal.question for t in tasks if t.proposal.valid]
        shares = iter(cluster_shares(bleu_clusters(questions, s.repetition_threshold)))
        pool_file, rows, kept = [], [], []
        for index, task in enumerate(tasks):
            task_id = f"it{iteration}-p{index}"
            keep = task.proposal.valid and task.label is not None and s.in_band(task.p_hat)
            row = self.row(task, step, iteration, EXECUTOR, task_id, None, keep)
            repetition = next(shares) if task.proposal.valid else None
            pool_file.append(records.pool_record(row, repetition))
            rows.append(row)
            if keep:
                kept.append({"task_id": task_id, "p_hat": task.p_hat, "pseudo_label": task.label,
                             "proposal": dataclasses.asdict(task.proposal)})
        indices = self.add_to_curriculum(kept, step)
        self.pool = {"iteration": iteration, "tasks": kept, "indices": indices}
        metrics = records.pool_metrics(tasks, kept, pool_file, len(self.probe), scored_seconds,
                                       s.task_kind == "qa")
        metrics["agent0/pool/seconds"] = time.perf_counter() - start
        if probe_solves:
            metrics |= self.probe_metrics(probe_solves)
        return Collected([], metrics, rows, {f"pools/iter-{iteration}.jsonl": pool_file})

    def add_to_curriculum(self, kept: list[dict], step: int) -> list[int]:
        """Every kept pool task becomes a curriculum task (family = task kind / answer type,
        difficulty = 1 − p̂), its pool estimate (k executor samples) recorded as its first
        group, so that band / learnability / plr see the pool's p̂ from the first draw."""
        samples = self.settings.solver_samples
        indices = []
        for task in kept:
            proposal, p_hat = task["proposal"], task["p_hat"]
            family = f"{proposal['kind']}/{proposal['answer_type'] or proposal['mode'] or '?'}"
            index = self.curriculum.add(task["task_id"], family, 1.0 - p_hat)
            # mean |r − r̄| of k Bernoulli answers with pass rate p̂ (PLR's score)
            self.curriculum.buffer.record(
                index, p_hat * samples, samples, step, 2 * p_hat * (1 - p_hat)
            )
            indices.append(index)
        return indices

    def row(self, task: ScoredTask, step, iteration, phase, task_id, reward, kept) -> TaskRow:
        return records.task_row(task, step, iteration, phase, task_id, self.settings.task_kind,
                                reward, kept)

    # ---------------------------------------------------------------- the probe set
    def probe_coroutines(self, policy: BatchingPolicy) -> list:
        """k executor rollouts per probe task, flat (one gather, shared engine waves)."""
        k = self.settings.solver_samples
        questions = [Proposal("", True, "qa", t.entry["question"], str(t.entry["answer"]))
                     for t in self.probe]
        return [self.solve(policy, question) for question in questions for _ in range(k)]

    def probe_metrics(self, solves: list[Solve]) -> dict[str, float]:
        """Pseudo-label accuracy: the executor's consensus on each probe item vs its gold."""
        s = self.settings
        return records.probe_metrics(self.probe, grouped(solves, s.solver_samples),
                                     s.verify_timeout_s)

    async def evaluate(self, policy: BatchingPolicy, step: int) -> dict[str, float]:
        """Pseudo-label accuracy on the probe set (before training it is measured with the
        first pool; here at ``eval_every`` steps and at the end), and the held-out reasoning
        accuracy of ``eval_reasoning`` when set."""
        metrics = await super().evaluate(policy, step)
        if not self.probe or step == 0:
            return metrics
        results = await policy.gather(self.probe_coroutines(policy))
        return metrics | {f"eval/{k.rsplit('/', 1)[1]}": v
                          for k, v in self.probe_metrics(results).items()}

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict:
        return super().state_dict() | {"pool": self.pool}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.pool = state["pool"]
        if self.pool is not None and "indices" not in self.pool:  # a checkpoint from before
            raise UserError("this agent0 checkpoint predates the curriculum; start a new run")
