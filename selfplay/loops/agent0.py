"""Agent0 (REFERENCE §3): a curriculum agent and a tool-using executor co-evolve from one base.

Both roles are LoRA adapters (``adapter: own``) on one base model, served by the same engine in
the same batches. Training steps map to (iteration, phase): each iteration runs
``curriculum_steps`` curriculum steps, then ``executor_steps`` executor steps.

- **Curriculum phase**: the ``curriculum`` role proposes tasks (question + its own answer); the
  frozen executor answers each one k times with the Python tool (``selfplay.engines.tools``); p̂ and
  the majority answer come from those k samples (``curricula.consistency``); the curriculum
  role trains with GRPO on the composite reward (``curricula.rewards``, paper or code form).
  Only curriculum turns carry rewards, so the executor's weights never change in this phase.
- **Executor phase**: at its first step the frozen curriculum role generates a task pool; every
  task gets p̂ and a majority pseudo-label from k executor samples (all tasks' samples in the
  same engine waves); the band filter keeps the tasks the executor can learn from; the pool is
  written to ``pools/iter-K.jsonl`` and kept in the loop state (a resume uses the same pool).
  Each step trains the executor on a few pool tasks with ADPO: p̂ goes into
  ``episode.info["pass_rate"]``, which sets each sample's advantage scale and ε_high.

Task kind ``code_io`` (Absolute Zero style) replaces pseudo-labels by execution: the proposer
writes a program and an input, the sandbox runs it twice to get the gold output, and the
executor predicts the output (deduction) or an input giving it (abduction), checked by running
it. Every generated task is a row of ``tasks.jsonl`` (schema: docs/run-folder.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

from curricula.answers import answers_equal, extract_answer, grade_answer, last_boxed
from curricula.consistency import answer_classes, in_band_code, in_band_paper
from curricula.rewards import (
    bleu_clusters,
    cluster_shares,
    curriculum_reward_code,
    curriculum_reward_paper,
    resolve_reward,
)
from curricula.samplers import Curriculum, Group, groups_of
from sandbox import SandboxLimits, SandboxPool
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.engines.tools import tool_rollout
from selfplay.loops.base import Loop
from selfplay.loops.rlvr import build_tasks
from selfplay.types import Episode, Request, Turn

CURRICULUM, EXECUTOR = "curriculum", "executor"
PHASES = (CURRICULUM, EXECUTOR)
P_HAT_BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # histogram edges of the pool's p̂


# ---------------------------------------------------------------------- proposals
@dataclass
class Proposal:
    """One parsed proposal. For ``code_io``, ``answer`` is the gold output the sandbox gave."""

    text: str
    valid: bool
    kind: str = "qa"
    question: str | None = None  # what the executor sees
    answer: str | None = None
    answer_type: str | None = None
    program: str | None = None
    input: str | None = None
    output: str | None = None
    mode: str | None = None  # code_io: deduction | abduction
    why_invalid: str = ""


_TAGGED = re.compile(r"<question>(.*?)</question>", re.S)
_QUESTION_ANSWER = re.compile(r"Question:\s*(.+?)\s*\n\s*Answer:[ \t]*([^\n]*)", re.S)
_HAS_WORD = re.compile(r"[0-9A-Za-z]")


def parse_qa(text: str) -> Proposal:
    """``<question>…</question>`` then ``\\boxed{answer}`` (the paper's format), or
    ``Question: … / Answer: …`` on two lines (the CPU prompt's)."""
    tagged = _TAGGED.search(text)
    if tagged:
        question, answer = tagged.group(1).strip(), last_boxed(text[tagged.end() :])
    else:
        match = _QUESTION_ANSWER.search(text)
        if match is None:
            return Proposal(text, False, why_invalid="no question/answer")
        question, answer = match.group(1).strip(), match.group(2).strip()
        answer = last_boxed(answer) or answer.rstrip(".").strip()
    if len(question) < 8:
        return Proposal(text, False, why_invalid="question too short")
    if not answer or not _HAS_WORD.search(answer):
        return Proposal(text, False, question=question, why_invalid="no answer")
    answer_type = "integer" if re.fullmatch(r"-?\d+", answer) else "expression"
    return Proposal(text, True, "qa", question, answer, answer_type)


_CODE_BLOCK = re.compile(r"```(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.S)
_INPUT_LINE = re.compile(r"^[ \t]*Input:[ \t]*(.+?)[ \t]*$", re.M)
_CALL = re.compile(r"f\((?P<args>.*)\)")


def _call_args(line: str) -> str | None:
    """The arguments of ``f(…)`` or ``print(f(…))`` on one line, else None."""
    line = line.strip()
    if line.startswith("print(") and line.endswith(")"):
        line = line[len("print(") : -1].strip()
    match = _CALL.fullmatch(line)
    return match.group("args") if match else None


def parse_code_io(text: str) -> Proposal:
    """A ```python block defining ``f`` and an input: an ``Input:`` line after the block, or
    the block's first top-level call ``f(…)`` / ``print(f(…))`` (the program is then the lines
    before it). Small models write the call far more often than the line (docs/agent0.md)."""
    block = _CODE_BLOCK.search(text)
    if block is None or "def f(" not in block.group(1):
        return Proposal(text, False, "code_io", why_invalid="no program defining f")
    lines = block.group(1).rstrip().splitlines()
    given = _INPUT_LINE.search(text[block.end() :])
    if given:
        argument = given.group(1).strip()
        argument = _call_args(argument) or argument
    else:
        calls = [
            (index, args)
            for index, line in enumerate(lines)
            if not line.startswith((" ", "\t")) and (args := _call_args(line)) is not None
        ]
        if not calls:
            return Proposal(text, False, "code_io", why_invalid="no input")
        index, argument = calls[0]
        lines = lines[:index]
    program = "\n".join(lines).rstrip()
    if not argument.strip():
        return Proposal(text, False, "code_io", program=program, why_invalid="empty input")
    return Proposal(text, True, "code_io", program=program, input=argument.strip())


def run_program_code(program: str, argument: str) -> str:
    """Code printing repr(f(input)); the value must survive eval(repr(·)) to be checkable."""
    return (
        f"{program}\n_value = f({argument})\n"
        "assert eval(repr(_value)) == _value, 'output not comparable'\n"
        "print(repr(_value))"
    )


def check_code(proposal: Proposal, predicted: str) -> str:
    """Code printing True when ``predicted`` solves the task (run in the sandbox: it is model
    text)."""
    if proposal.mode == "deduction":
        return f"print(({predicted}) == ({proposal.output}))"
    return f"{proposal.program}\nprint(f({predicted}) == ({proposal.output}))"


def code_question(proposal: Proposal) -> str:
    program = f"```python\n{proposal.program}\n```"
    if proposal.mode == "deduction":
        return f"{program}\nWhat does f({proposal.input}) return?"
    return f"{program}\nGive an input x such that f(x) returns {proposal.output}."


# ---------------------------------------------------------------------- scored tasks
@dataclass
class Solve:
    """One executor rollout on one task."""

    turn: Turn
    text: str
    answer: str | None
    tool_calls: int
    correct: bool | None = None  # code_io: verified by execution


@dataclass
class ScoredTask:
    proposal: Proposal
    solves: list[Solve] = field(default_factory=list)
    label: str | None = None  # majority answer (qa) / gold output (code_io)
    p_hat: float = 0.0
    agrees: bool | None = None  # majority ≡ the proposer's own answer (qa)

    @property
    def tool_calls(self) -> float:
        return sum(s.tool_calls for s in self.solves) / max(len(self.solves), 1)


class Agent0Loop(Loop):
    name = "agent0"
    supplies_pass_rate = True  # executor episodes carry p̂ in info["pass_rate"] (ADPO)
    curriculum_fixed_tasks = False  # every iteration adds its pool's tasks

    def __init__(self, config) -> None:
        super().__init__(config)
        self.require_roles(CURRICULUM, EXECUTOR)
        self.settings = settings = config.agent0
        for role in (CURRICULUM, EXECUTOR):
            if config.roles[role].adapter != "own":
                raise UserError(f"agent0: role `{role}` needs `adapter: own` (two agents)")
        if config.rollout.mode != "sync":
            raise UserError("agent0 runs its phases in order: rollout.mode must be sync")
        default = "uncertainty" if settings.reward_form == "paper" else "uncertainty_code"
        self.proposer_reward = resolve_reward(settings.proposer_reward or default)
        self.probe = (
            build_tasks(settings.probe, settings.probe_size, config.seed + 7919)[
                : settings.probe_size
            ]
            if settings.probe_size
            else []
        )
        # {"iteration", "tasks", "indices"}: the kept tasks and their indices in the curriculum
        self.pool: dict[str, Any] | None = None
        # every kept pool task of every iteration is a task of the curriculum (docs/curricula.md)
        self.curriculum = Curriculum(config.curriculum, seed=config.seed)
        # tasks.jsonl rows of the step being collected; the runner writes them (task_rows) with
        # the step's episodes, and drops the rows of redone steps on resume
        self._pending_rows: list[dict] = []
        self._sandbox: SandboxPool | None = None
        self._step_metrics: dict[int, dict[str, float]] = {}
        self._collected_step = 0

    # ---------------------------------------------------------------- schedule
    @property
    def steps_per_iteration(self) -> int:
        return self.settings.curriculum_steps + self.settings.executor_steps

    def phase(self, step: int) -> tuple[int, str]:
        """(iteration, phase) of a training step."""
        iteration, offset = divmod(step, self.steps_per_iteration)
        return iteration, CURRICULUM if offset < self.settings.curriculum_steps else EXECUTOR

    # ---------------------------------------------------------------- resources
    def sandbox(self) -> SandboxPool:
        if self._sandbox is None:
            tool = self.settings.tool
            self._sandbox = SandboxPool(
                size=tool.pool_size, limits=SandboxLimits(wall_s=tool.wall_s, cpu_s=tool.wall_s)
            )
        return self._sandbox

    def close(self) -> None:
        pool, self._sandbox = self._sandbox, None
        if pool is not None:
            pool.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    async def _run(self, policy: BatchingPolicy, code: str):
        limits = dataclasses.replace(self.sandbox().limits, wall_s=self.settings.tool.wall_s)
        async with policy.elsewhere():
            return await self.sandbox().arun(code, limits=limits)

    # ---------------------------------------------------------------- model calls
    def _request(self, policy: BatchingPolicy, role: str, max_tokens: int | None, **fields):
        request = self.request(role, tokenizer=policy.engine.tokenizer, **fields)
        if max_tokens is not None:
            sampling = dataclasses.replace(request.sampling, max_new_tokens=max_tokens)
            request = dataclasses.replace(request, sampling=sampling)
        return request

    async def _propose(self, policy: BatchingPolicy) -> tuple[Turn, Proposal]:
        request = self._request(policy, CURRICULUM, self.settings.curriculum_max_tokens)
        completion = await policy(request)
        turn = self.turn(request, completion, policy)
        turn.prompt_text = self.prompts[CURRICULUM].render()[-1]["content"]  # ids-only request
        text = self.reply_text(CURRICULUM, completion.text)
        if self.settings.task_kind == "qa":
            return turn, parse_qa(text)
        proposal = parse_code_io(text)
        if proposal.valid:
            proposal = await self._ground_code(policy, proposal)
        return turn, proposal

    async def _ground_code(self, policy: BatchingPolicy, proposal: Proposal) -> Proposal:
        """Run the program twice: valid when both runs succeed with the same output."""
        code = run_program_code(proposal.program, proposal.input)
        first = await self._run(policy, code)
        second = await self._run(policy, code)
        output = first.stdout.strip()
        if not (first.ok and second.ok) or output != second.stdout.strip() or not output:
            why = "not deterministic" if first.ok and second.ok else "program failed"
            return dataclasses.replace(proposal, valid=False, why_invalid=why)
        if len(output) > 200:
            return dataclasses.replace(proposal, valid=False, why_invalid="output too long")
        mode = self.rng.choice(self.settings.code_io_modes)
        deduction = mode == "deduction"
        grounded = dataclasses.replace(
            proposal,
            output=output,
            mode=mode,
            answer=output if deduction else proposal.input,
            answer_type="code_output" if deduction else "code_input",
        )
        grounded.question = code_question(grounded)
        return grounded

    async def _solve(self, policy: BatchingPolicy, proposal: Proposal) -> Solve:
        request: Request = self._request(
            policy, EXECUTOR, self.settings.executor_max_tokens, question=proposal.question
        )
        rollout = await tool_rollout(
            policy, request, self.sandbox(), policy.engine.tokenizer, self.settings.tool
        )
        rollout.turn.prompt_text = proposal.question or ""
        text = self.reply_text(EXECUTOR, rollout.turn.text, question=proposal.question)
        answer, _ = extract_answer(text, lenient=True)
        solve = Solve(rollout.turn, text, answer, rollout.tool_calls)
        if proposal.kind == "code_io":
            solve.correct = answer is not None and await self._verified(policy, proposal, answer)
        return solve

    async def _verified(self, policy: BatchingPolicy, proposal: Proposal, answer: str) -> bool:
        result = await self._run(policy, check_code(proposal, answer))
        return result.ok and result.stdout.strip() == "True"

    async def _score(
        self, policy: BatchingPolicy, proposals: list[Proposal], extra=()
    ) -> tuple[list[ScoredTask], list]:
        """k executor samples of every valid proposal (and any ``extra`` coroutines) in one
        gather, so the engine sees them in the same waves; then p̂ and labels per task."""
        k = self.settings.samples_per_task
        valid = [p for p in proposals if p.valid]
        coroutines = [self._solve(policy, p) for p in valid for _ in range(k)]
        results = await policy.gather([*coroutines, *extra])
        solves, extra_results = results[: len(coroutines)], results[len(coroutines) :]
        scored = {id(p): self._label(p, solves[i * k : (i + 1) * k]) for i, p in enumerate(valid)}
        return [scored.get(id(p), ScoredTask(p)) for p in proposals], extra_results

    def _label(self, proposal: Proposal, solves: list[Solve]) -> ScoredTask:
        task = ScoredTask(proposal, solves)
        if proposal.kind == "code_io":  # no pseudo-label: the sandbox verified each answer
            task.label = proposal.answer
            task.p_hat = sum(bool(s.correct) for s in solves) / len(solves)
            return task
        timeout = self.settings.verify_timeout_s
        answers = [s.answer for s in solves]
        classes = answer_classes([*answers, proposal.answer], timeout)
        counts: dict[int, int] = {}
        for c in classes[:-1]:
            if c is not None:
                counts[c] = counts.get(c, 0) + 1
        if counts:
            best = max(counts, key=lambda c: (counts[c], -c))
            task.label = next(a for a, c in zip(answers, classes, strict=False) if c == best)
            task.p_hat = counts[best] / len(solves)
            task.agrees = classes[-1] == best
        return task

    # ---------------------------------------------------------------- rewards
    def curriculum_rewards(self, tasks: list[ScoredTask]) -> tuple[list[float], list[float]]:
        """(reward, repetition penalty) per proposal: the composite of curricula/rewards.py."""
        s = self.settings
        questions = [t.proposal.question for t in tasks if t.proposal.valid]
        shares = iter(cluster_shares(bleu_clusters(questions, s.repetition_threshold)))
        rewards, penalties = [], []
        for task in tasks:
            penalty = s.repetition_weight * next(shares) if task.proposal.valid else 0.0
            if s.reward_form == "paper":
                reward = curriculum_reward_paper(
                    task.proposal.valid,
                    task.p_hat,
                    task.tool_calls,
                    penalty,
                    reward=self.proposer_reward,
                    lambda_unc=s.lambda_unc,
                    lambda_tool=s.lambda_tool,
                    gamma=s.tool_gamma,
                    cap=s.tool_cap,
                )
            else:
                reward = curriculum_reward_code(
                    task.proposal.valid,
                    task.p_hat,
                    task.proposal.text,
                    penalty,
                    agrees=task.agrees if s.agreement_gate else None,
                    reward=self.proposer_reward,
                    gamma=s.tool_gamma,
                    cap=s.tool_cap,
                )
            rewards.append(reward)
            penalties.append(penalty)
        return rewards, penalties

    def in_band(self, p_hat: float) -> bool:
        s = self.settings
        if s.band == "paper":
            return in_band_paper(p_hat, s.band_delta)
        return in_band_code(p_hat, s.band_lo, s.band_hi)

    def executor_reward(self, correct: bool) -> float:
        if correct:
            return 1.0
        return -1.0 if self.settings.executor_reward == "signed" else 0.0

    # ---------------------------------------------------------------- the two phases
    async def collect(self, policy: BatchingPolicy, step: int) -> list[Episode]:
        self._collected_step = step  # summarize() follows in the same step (rollouts are sync)
        iteration, phase = self.phase(step)
        if phase == CURRICULUM:
            return await self._curriculum_step(policy, step, iteration)
        return await self._executor_step(policy, step, iteration)

    async def _curriculum_step(
        self, policy: BatchingPolicy, step: int, iteration: int
    ) -> list[Episode]:
        s = self.settings
        count = s.proposal_groups * s.proposal_group_size
        proposed = await policy.gather([self._propose(policy) for _ in range(count)])
        tasks, _ = await self._score(policy, [p for _, p in proposed])
        rewards, penalties = self.curriculum_rewards(tasks)
        episodes, rows = [], []
        for index, ((turn, _), task, reward, penalty) in enumerate(
            zip(proposed, tasks, rewards, penalties, strict=True)
        ):
            task_id = f"s{step}-c{index}"
            info = self._task_info(task, step, iteration, CURRICULUM, task_id)
            info |= {"repetition": penalty, "reward": reward}
            episodes.append(
                Episode(
                    loop=self.name,
                    env=f"agent0-{s.task_kind}",
                    turns=[turn, *(solve.turn for solve in task.solves)],
                    rewards={CURRICULUM: reward},  # executor turns: context, never trained here
                    group_id=f"s{step}-g{index // s.proposal_group_size}",
                    info=info,
                )
            )
            rows.append(self._row(task, step, iteration, CURRICULUM, task_id, reward, None))
        self._pending_rows += rows
        return episodes

    async def _executor_step(
        self, policy: BatchingPolicy, step: int, iteration: int
    ) -> list[Episode]:
        if self.pool is None or self.pool["iteration"] != iteration:
            await self._build_pool(policy, step, iteration)
        pool = self.pool
        count = min(self.settings.executor_tasks_per_step, len(pool["tasks"]))
        current = set(pool["indices"])
        others = [i for i in range(len(self.curriculum.buffer)) if i not in current]
        kept = await self.curriculum.fill(
            count,
            step,
            lambda indices: self._executor_groups(policy, step, iteration, indices),
            exclude=others,
        )
        return [episode for group in kept for episode in group.payload]

    async def _executor_groups(
        self, policy: BatchingPolicy, step: int, iteration: int, indices
    ) -> list[Group]:
        """``executor_group_size`` rollouts of each drawn pool task, graded: one Group each."""
        s = self.settings
        position = {index: k for k, index in enumerate(self.pool["indices"])}
        chosen = [self.pool["tasks"][position[int(index)]] for index in indices]
        coroutines = [
            self._solve(policy, Proposal(**task["proposal"]))
            for task in chosen
            for _ in range(s.executor_group_size)
        ]
        solves = await policy.gather(coroutines)
        episodes = []
        for index, solve in enumerate(solves):
            task = chosen[index // s.executor_group_size]
            correct = self._executor_correct(task, solve)
            episodes.append(
                Episode(
                    loop=self.name,
                    env=f"agent0-{s.task_kind}",
                    turns=[solve.turn],
                    rewards={EXECUTOR: self.executor_reward(correct)},
                    group_id=f"s{step}-{task['task_id']}",
                    info={
                        "step": step,
                        "iteration": iteration,
                        "phase": EXECUTOR,
                        "task_id": task["task_id"],
                        "pass_rate": task["p_hat"],  # ADPO: scale and ε_high from p̂
                        "pseudo_label": task["pseudo_label"],
                        "answer": solve.answer,
                        "correct": correct,
                        "tool_calls": solve.tool_calls,
                    },
                )
            )
        size = s.executor_group_size
        return groups_of(indices, episodes, size, EXECUTOR)

    def _executor_correct(self, task: dict, solve: Solve) -> bool:
        if task["proposal"]["kind"] == "code_io":
            return bool(solve.correct)
        return answers_equal(solve.answer, task["pseudo_label"], self.settings.verify_timeout_s)

    def _add_to_curriculum(self, kept: list[dict], step: int) -> list[int]:
        """Every kept pool task becomes a curriculum task (family = task kind / answer type,
        difficulty = 1 − p̂), its pool estimate (k executor samples) recorded as its first
        group, so that band / learnability / plr see the pool's p̂ from the first draw."""
        samples = self.settings.samples_per_task
        indices = []
        for task in kept:
            proposal = task["proposal"]
            family = f"{proposal['kind']}/{proposal['answer_type'] or proposal['mode'] or '?'}"
            index = self.curriculum.add(task["task_id"], family, 1.0 - task["p_hat"])
            p_hat = task["p_hat"]
            # mean |r − r̄| of k Bernoulli answers with pass rate p̂ (PLR's score)
            self.curriculum.buffer.record(
                index, p_hat * samples, samples, step, 2 * p_hat * (1 - p_hat)
            )
            indices.append(index)
        return indices

    async def _build_pool(self, policy: BatchingPolicy, step: int, iteration: int) -> None:
        """Frozen curriculum → pool; k executor samples per task (and the probe set) in the
        same waves → p̂, pseudo-labels; the band filter; pools/iter-K.jsonl and tasks.jsonl."""
        s = self.settings
        start = time.perf_counter()
        proposed = await policy.gather([self._propose(policy) for _ in range(s.pool_size)])
        proposals = [p for _, p in proposed]
        scoring = time.perf_counter()
        tasks, probe_solves = await self._score(policy, proposals, self._probe_coroutines(policy))
        scored_seconds = time.perf_counter() - scoring
        questions = [t.proposal.question for t in tasks if t.proposal.valid]
        shares = iter(cluster_shares(bleu_clusters(questions, s.repetition_threshold)))
        records, rows, kept = [], [], []
        for index, task in enumerate(tasks):
            task_id = f"it{iteration}-p{index}"
            keep = task.proposal.valid and task.label is not None and self.in_band(task.p_hat)
            record = self._row(task, step, iteration, EXECUTOR, task_id, None, keep)
            record["repetition"] = next(shares) if task.proposal.valid else None
            records.append(record)
            rows.append({k: v for k, v in record.items() if k != "repetition"})
            if keep:
                kept.append(
                    {
                        "task_id": task_id,
                        "p_hat": task.p_hat,
                        "pseudo_label": task.label,
                        "proposal": dataclasses.asdict(task.proposal),
                    }
                )
        indices = self._add_to_curriculum(kept, step)
        self.pool = {"iteration": iteration, "tasks": kept, "indices": indices}
        self._write_pool(iteration, records)
        self._pending_rows += rows
        valid_tasks = [t for t in tasks if t.proposal.valid]
        self._step_metrics[step] = self._pool_metrics(
            tasks, valid_tasks, kept, records, probe_solves, scored_seconds
        ) | {"pool/seconds": time.perf_counter() - start}

    def _pool_metrics(self, tasks, valid_tasks, kept, records, probe_solves, seconds) -> dict:
        solves = [solve for t in valid_tasks for solve in t.solves]
        metrics = {
            "pool/size": float(len(tasks)),
            "pool/validity": sum(t.proposal.valid for t in tasks) / max(len(tasks), 1),
            "pool/kept": float(len(kept)),
            "pool/kept_share": len(kept) / max(len(valid_tasks), 1),
            "pool/repetition_share": _mean([r["repetition"] for r in records if r["repetition"]]),
            "pool/tool_calls_per_rollout": _mean([s.tool_calls for s in solves]),
            "pool/degenerate_rate": _mean([degenerate(s.answer) for s in solves]),
            "pool/p_hat_mean": _mean([t.p_hat for t in valid_tasks]),
            # tasks scored for p̂ (k samples each, pool and probe together) per minute
            "pool/tasks_per_minute": 60 * (len(valid_tasks) + len(self.probe)) / max(seconds, 1e-9),
        }
        if self.settings.task_kind == "qa":
            metrics["pool/agreement"] = _mean([t.agrees is True for t in valid_tasks])
        for low, high in zip(P_HAT_BINS, P_HAT_BINS[1:], strict=False):
            last = high == P_HAT_BINS[-1]
            share = _mean(
                [low <= t.p_hat < high or (last and t.p_hat == high) for t in valid_tasks]
            )
            metrics[f"pool/p_hat_hist_{low:.1f}_{high:.1f}"] = share
        if probe_solves:
            metrics |= self._probe_metrics(probe_solves)
        return metrics

    # ---------------------------------------------------------------- the probe set
    def _probe_coroutines(self, policy: BatchingPolicy) -> list:
        """k executor rollouts per probe task, flat (one gather, shared engine waves)."""
        k = self.settings.samples_per_task
        return [
            self._solve(policy, Proposal("", True, "qa", entry["question"], str(entry["answer"])))
            for _, entry, _ in self.probe
            for _ in range(k)
        ]

    def _probe_metrics(self, solves: list[Solve]) -> dict[str, float]:
        """Pseudo-label accuracy: the executor's majority answer vs the gold (R-Zero's
        79% → 63% decay is measured this way)."""
        k = self.settings.samples_per_task
        correct, p_hats = [], []
        for index, (_, entry, dataset) in enumerate(self.probe):
            proposal = Proposal("", True, "qa", entry["question"], None)
            task = self._label(proposal, solves[index * k : (index + 1) * k])
            correct.append(
                task.label is not None
                and grade_answer(f"\\boxed{{{task.label}}}", entry, dataset)["correct"]
            )
            p_hats.append(task.p_hat)
        return {
            "probe/pseudo_label_accuracy": _mean(correct),
            "probe/p_hat_mean": _mean(p_hats),
            "probe/tasks": float(len(self.probe)),
        }

    async def evaluate(self, policy: BatchingPolicy, step: int) -> dict[str, float]:
        """Pseudo-label accuracy on the probe set (before training it is measured with the
        first pool; here at ``eval_every`` steps and at the end)."""
        if not self.probe or step == 0:
            return {}
        results = await policy.gather(self._probe_coroutines(policy))
        return {f"eval/{k.split('/', 1)[1]}": v for k, v in self._probe_metrics(results).items()}

    # ---------------------------------------------------------------- records
    def _task_info(self, task: ScoredTask, step, iteration, phase, task_id) -> dict:
        proposal = task.proposal
        return {
            "step": step,
            "iteration": iteration,
            "phase": phase,
            "task_id": task_id,
            "valid": proposal.valid,
            "why_invalid": proposal.why_invalid,
            "question": proposal.question,
            "proposer_answer": proposal.answer,
            "pseudo_label": task.label,
            "p_hat": task.p_hat if proposal.valid else None,
            "agrees": task.agrees,
            "tool_calls": task.tool_calls if task.solves else None,
            "solver_answers": [s.answer for s in task.solves],
        }

    def _row(self, task: ScoredTask, step, iteration, phase, task_id, reward, kept) -> dict:
        """One tasks.jsonl row (docs/run-folder.md)."""
        proposal = task.proposal
        return {
            "step": step,
            "iteration": iteration,
            "phase": phase,
            "loop": self.name,
            "kind": self.settings.task_kind,
            "task_id": task_id,
            "question": proposal.question or proposal.text,
            "answer": proposal.answer,
            "answer_type": proposal.answer_type,
            "valid": proposal.valid,
            "pseudo_label": task.label if proposal.kind == "qa" else None,
            "p_hat": task.p_hat if proposal.valid else None,
            "samples": len(task.solves),
            "solver_answers": [s.answer for s in task.solves],
            "tool_calls": task.tool_calls if task.solves else None,
            "reward": reward,
            "kept": kept,
            "document": None,
        }

    def task_rows(self, step: int, episodes: list[Episode]) -> list[dict]:
        rows, self._pending_rows = self._pending_rows, []
        return rows

    def _write_pool(self, iteration: int, records: list[dict]) -> None:
        if self.run_dir is None:
            return
        folder = self.run_dir / "pools"
        folder.mkdir(exist_ok=True)
        path = folder / f"iter-{iteration}.jsonl"
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
        os.replace(tmp, path)

    # ---------------------------------------------------------------- metrics and state
    def summarize(self, episodes: list[Episode]) -> dict[str, float]:
        metrics = super().summarize(episodes)
        step = self._collected_step
        iteration, phase = self.phase(step)
        metrics |= {"agent0/iteration": float(iteration), "agent0/phase": float(phase == EXECUTOR)}
        metrics |= self._step_metrics.pop(step, {})
        if phase == EXECUTOR:  # the executor's draws: effective-prompt ratio, top tasks, ...
            metrics |= self.curriculum.metrics(step)
        if not episodes:
            return metrics
        if phase == CURRICULUM:
            infos = [e.info for e in episodes]
            valid = [i for i in infos if i["valid"]]
            metrics |= {
                "curriculum/validity": len(valid) / len(infos),
                "curriculum/p_hat_mean": _mean([i["p_hat"] for i in valid]),
                "curriculum/in_band": _mean([self.in_band(i["p_hat"]) for i in valid]),
                "curriculum/repetition": _mean([i["repetition"] for i in valid]),
                "curriculum/executor_tool_calls": _mean([i["tool_calls"] for i in valid]),
                "curriculum/reward_valid": _mean([i["reward"] for i in valid]),
            }
            if self.settings.task_kind == "qa":
                metrics["curriculum/agreement"] = _mean([i["agrees"] is True for i in valid])
        else:
            infos = [e.info for e in episodes]
            metrics |= {
                "executor/accuracy": _mean([i["correct"] for i in infos]),
                "executor/tool_calls": _mean([i["tool_calls"] for i in infos]),
                "executor/tool_use_rate": _mean([i["tool_calls"] > 0 for i in infos]),
                "executor/degenerate_rate": _mean([degenerate(i["answer"]) for i in infos]),
                "executor/p_hat_mean": _mean([i["pass_rate"] for i in infos]),
            }
        return metrics

    def state_dict(self) -> dict:
        return super().state_dict() | {"pool": self.pool}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.pool = state["pool"]
        if self.pool is not None and "indices" not in self.pool:  # a checkpoint from before
            raise UserError("this agent0 checkpoint predates the curriculum; start a new run")


def degenerate(answer: str | None) -> bool:
    """No answer, or one with no letter or digit, or a null word (``None`` from a print of
    nothing): what a collapsing executor writes."""
    if answer is None or not _HAS_WORD.search(answer):
        return True
    return answer.strip().lower() in ("none", "null", "nan")


def _mean(values) -> float:
    values = [float(v) for v in values if v is not None]
    return sum(values) / len(values) if values else 0.0
