"""Search Self-Play, SSP (Lu et al. 2025, arXiv:2510.18821; docs/algorithms.md#ssp): a proposer
and a solver, both search agents over one corpus, played by one policy.

Each step:

1. ``proposals_per_step`` target answers are drawn (``targets.py``: a file, or short spans
   mined from the corpus).
2. The **proposer** gets a target, searches the corpus (``<search>query</search>``; the top-k
   chunks come back in ``<information>``, masked from the loss) and writes
   ``<question>…</question>`` whose answer is the target.
3. Validity (``curricula/ssp_rewards.py``): the question's length in characters and words, the
   target not in it, enough searches, no repeated query, information retrieved; then the **RAG
   check** (``retrieval.py``): a judge (the policy, greedy) answers the question from the
   proposer's documents plus ``noisy_documents`` of other proposers', shuffled, and must match
   the target exactly (normalised).
4. A failed proposal's slot is filled by a pooled earlier valid problem (``reuse``) and its
   proposer gets ``format_penalty``.
5. The **solver** answers every problem ``solver_samples`` times with the same search tool,
   ending with ``<answer>``: reward 1 on a normalised exact match with the target, 0 otherwise,
   /4 with more than 10 answer tags (rule only: no judge LLM).
6. A valid proposal's reward is 1 − s (or 4·s·(1 − s)), s = share of its solver attempts
   rewarded > 0. Advantages: the proposer's is its raw reward (the release script's GRPO over a
   one-proposal group, std 1), the solver's GRPO over its ``solver_samples`` attempts.
"""

from __future__ import annotations

from pathlib import Path

from curricula.ssp_rewards import (
    proposed_question,
    proposer_reward,
    question_problem,
    solver_answer,
    solver_reward,
)
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.engines.search_tool import SearchCall, open_corpus, queries, search_rollout
from selfplay.engines.tools import ToolRollout
from selfplay.loops.base import Loop, LoopSpec
from selfplay.loops.ssp.records import RAG_FAILED, Problem, Proposal, step_metrics
from selfplay.loops.ssp.retrieval import mixed_documents, retrieval_check
from selfplay.loops.ssp.settings import SspSettings
from selfplay.loops.ssp.targets import Target, mine_targets, read_targets
from selfplay.rl.advantages import group_relative_samples
from selfplay.rl.losses import LOSS_PRESETS
from selfplay.types import Collected, Episode, Sample

PROPOSER, SOLVER, JUDGE = "proposer", "solver", "judge"


class SspLoop(Loop):
    name = "ssp"
    Settings = SspSettings
    spec = LoopSpec(
        roles={PROPOSER: ("target",), SOLVER: ("question",), JUDGE: ("documents", "question")},
        tasks="targets",
        fixed_tasks=False,  # the problems are the run's own proposals
    )

    def __init__(self, config) -> None:
        super().__init__(config)
        s: SspSettings = self.settings
        if s.min_question_chars > s.max_question_chars:
            raise UserError(f"ssp.min_question_chars ({s.min_question_chars}) is more than "
                            f"ssp.max_question_chars ({s.max_question_chars})")
        self.corpus = open_corpus(s.search)  # an unbuilt corpus fails here, in one line
        self.targets: list[Target] = (
            read_targets(s.targets) if s.targets else mine_targets(self.corpus.chunks,
                                                                   s.max_targets))
        if not self.targets:
            raise UserError(f"no target answers could be mined from corpus "
                            f"{self.corpus.name!r}; give ssp.targets (a JSONL file of answers)")
        self.pool: list[Problem] = []  # valid problems so far, newest last (for `reuse`)

    def inputs(self) -> dict[str, Path]:
        found = {"corpus/manifest.json": self.corpus.path / "manifest.json"}
        return found | ({"ssp_targets.jsonl": Path(self.settings.targets)}
                        if self.settings.targets else {})

    # ---------------------------------------------------------------- the proposer
    async def propose(self, policy: BatchingPolicy, slot: int, target: Target) -> Proposal:
        """One proposer rollout with the search tool, parsed and checked (but the RAG check)."""
        s = self.settings
        request = self.request(PROPOSER, stop=("</question>",),
                               max_new_tokens=s.proposer_max_tokens, target=target.answer)
        rollout = await search_rollout(policy, request, self.corpus, s.search)
        reply = rollout.turn.reply
        question = proposed_question(reply, s.lenient)
        documents = list(dict.fromkeys(d for call in rollout.calls for d in call.documents))
        reason = question_problem(question, target.answer, queries(reply), len(documents),
                                  s.rules())
        return Proposal(slot, target, rollout, question, queries(reply), documents, reason)

    async def rag_checks(self, policy: BatchingPolicy, proposals: list[Proposal]) -> int:
        """The RAG check of every proposal that passed the other checks; a failure makes it
        invalid. Returns how many were checked."""
        checked = [p for p in proposals if p.valid]
        if not self.settings.rag_check or not checked:
            return 0
        noise = {p.slot: [d for o in proposals if o.slot != p.slot for d in o.documents]
                 for p in checked}
        verdicts = await policy.gather(
            retrieval_check(policy, self.judge_request, p.question, p.target.answer,
                            mixed_documents(p.documents, noise[p.slot],
                                            self.settings.noisy_documents, self.rng))
            for p in checked)
        for proposal, verdict in zip(checked, verdicts, strict=True):
            proposal.verdict = verdict
            if not verdict.passed:
                proposal.reason = RAG_FAILED
        return len(checked)

    def judge_request(self, **fields):
        return self.request(JUDGE, greedy=True, stop=("</answer>",),
                            max_new_tokens=self.settings.judge_max_tokens, **fields)

    def assign_problems(self, proposals: list[Proposal], step: int) -> None:
        """Valid proposals become problems (and join the pool); a failed one's slot gets a
        pooled problem (``reuse``) or nothing (``skip``, or an empty pool)."""
        s = self.settings
        for p in proposals:
            if p.valid:
                p.problem = Problem(task_key(step, p.slot), p.question, p.target.answer)
                self.pool.append(p.problem)
        self.pool = self.pool[-s.pool_size:]
        for p in proposals:
            if not p.valid and s.failure_strategy == "reuse" and self.pool:
                p.problem = self.rng.choice(self.pool)

    # ---------------------------------------------------------------- the solver
    async def solve(self, policy: BatchingPolicy, problem: Problem) -> ToolRollout:
        request = self.request(SOLVER, stop=("</answer>",),
                               max_new_tokens=self.settings.solver_max_tokens,
                               question=problem.question)
        return await search_rollout(policy, request, self.corpus, self.settings.search)

    # ---------------------------------------------------------------- one step
    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        s = self.settings
        targets = [self.rng.choice(self.targets) for _ in range(s.proposals_per_step)]
        proposals = await policy.gather(
            self.propose(policy, slot, target) for slot, target in enumerate(targets))
        checked = await self.rag_checks(policy, proposals)
        self.assign_problems(proposals, step)
        solving = [p for p in proposals if p.problem is not None]
        rollouts = await policy.gather(  # every solver attempt of the step: one engine wave
            self.solve(policy, p.problem) for p in solving for _ in range(s.solver_samples))
        episodes, rewards = [], []
        for index, p in enumerate(solving):
            group = rollouts[index * s.solver_samples:(index + 1) * s.solver_samples]
            p.solver_rewards = [solver_reward(r.turn.reply, p.problem.target) for r in group]
            p.solver_answers = [solver_answer(r.turn.reply) for r in group]
            p.solver_searches = [r.tool_calls for r in group]
            rewards += p.solver_rewards
            episodes += [self.solver_episode(step, p, r, reward)
                         for r, reward in zip(group, p.solver_rewards, strict=True)]
        for p in proposals:
            p.reward = (proposer_reward(p.s, s.proposer_reward) if p.valid
                        else s.format_penalty)
        episodes = ([self.proposer_episode(step, p) for p in proposals]
                    + [self.judge_episode(step, p, policy) for p in proposals if p.verdict]
                    + episodes)
        return Collected(
            episodes,
            step_metrics(proposals, rollouts, rewards, checked),
            [p.row(step, task_key(step, p.slot)) for p in proposals],
        )

    # ---------------------------------------------------------------- episodes
    def proposer_episode(self, step: int, p: Proposal) -> Episode:
        return Episode(loop=self.name, env=PROPOSER, turns=[p.rollout.turn],
                       rewards={PROPOSER: p.reward}, group_id=task_key(step, p.slot),
                       info=p.info())

    def solver_episode(self, step: int, p: Proposal, rollout: ToolRollout,
                       reward: float) -> Episode:
        return Episode(loop=self.name, env=SOLVER, turns=[rollout.turn],
                       rewards={SOLVER: reward}, group_id=f"{task_key(step, p.slot)}-solve",
                       info={"problem": p.problem.key, "target": p.problem.target,
                             "answer": solver_answer(rollout.turn.reply),
                             "queries": [c.query for c in rollout.calls
                                         if isinstance(c, SearchCall)]} | rollout.info())

    def judge_episode(self, step: int, p: Proposal, policy: BatchingPolicy) -> Episode:
        """The RAG judge's reply, recorded for reading; it carries no reward (not trained)."""
        verdict = p.verdict
        turn = self.turn(verdict.request, verdict.completion, policy)
        return Episode(loop=self.name, env=JUDGE, turns=[turn], rewards={},
                       group_id=f"{task_key(step, p.slot)}-rag",
                       info={"answer": verdict.answer, "passed": verdict.passed})

    # ---------------------------------------------------------------- advantages
    def samples(self, episodes: list[Episode]) -> list[Sample]:
        """``advantage.estimator: auto``: the proposer's advantage is its raw reward (one
        proposal per target: verl's one-sample group has mean 0, std 1), the solver's is the
        loss preset's group-relative estimator over its attempts at one problem."""
        if self.config.advantage.estimator != "auto":
            return super().samples(episodes)
        proposers = [e for e in episodes if PROPOSER in e.rewards]
        solvers = [e for e in episodes if PROPOSER not in e.rewards]
        return (group_relative_samples(proposers, advantages_of=list)
                + group_relative_samples(solvers, LOSS_PRESETS[self.config.train.loss][1]))

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict:
        return super().state_dict() | {"pool": [vars(p) for p in self.pool]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.pool = [Problem(**p) for p in state.get("pool", [])]


def task_key(step: int, slot: int) -> str:
    return f"s{step}-p{slot}"
