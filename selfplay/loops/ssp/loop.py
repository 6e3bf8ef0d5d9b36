"""Search Self-Play, SSP (Lu et al. 2025, arXiv:2510.18821; docs/algorithms.md#ssp): a proposer
and a solver, both search agents over one corpus, played by one policy.

Each step:

1. ``proposals_per_step`` target answers are drawn (``curricula/targets.py``: a file, or short
   spans mined from the corpus).
2. The **proposer** gets a target, searches the corpus (``<search>query</search>``; the top-k
   chunks come back in ``<information>``, masked from the loss) and writes
   ``<question>…</question>`` whose answer is the target.
3. Validity (``curricula/ssp_rewards.py``): the question's length in characters and words, the
   target not in it, enough searches, no repeated query, information retrieved; then the **RAG
   check** (``selfplay/engines/rag.py``): a judge (the policy, greedy) answers the question from
   the proposer's documents plus ``noisy_documents`` of other proposers', shuffled, and must
   match the target exactly (normalised).
4. A failed proposal's slot is filled by a pooled earlier valid problem (``reuse``) and its
   proposer gets ``format_penalty``.
5. The **solver** answers every problem ``solver_samples`` times with the same search tool,
   ending with ``<answer>``: reward 1 on a normalised exact match with the target, 0 otherwise,
   /4 with more than 10 answer tags (rule only: no judge LLM).
6. A valid proposal's reward is ``proposer_reward`` of p̂, the share of its solver attempts
   rewarded > 0 (1 − p̂, or 4·p̂·(1 − p̂)). Advantages: the proposer's is its raw reward (the
   release script's GRPO over a one-proposal group, std 1), the solver's GRPO over its
   ``solver_samples`` attempts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from curricula import ssp_rewards as rules
from curricula.targets import Target, mine_targets, read_targets
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.engines.rag import RagVerdict, mixed_documents, retrieval_check
from selfplay.engines.search_tool import SearchCall, open_corpus, queries, search_rollout
from selfplay.engines.tools import ToolRollout
from selfplay.loops.base import Loop, LoopSpec
from selfplay.loops.propose import Proposal, mean, proposal_metrics, proposer_reward, solve_groups
from selfplay.loops.ssp.settings import SspSettings
from selfplay.rl.advantages import group_relative_samples
from selfplay.rl.losses import LOSS_PRESETS
from selfplay.types import Collected, Episode, Sample

PROPOSER, SOLVER, JUDGE = "proposer", "solver", "judge"
RAG_FAILED = "rag check failed"
INVALID = ("no question", "length", "too few words", "contains the answer", "too few searches",
           "repeated query", "no retrieved information", RAG_FAILED)


@dataclass(frozen=True)
class Problem:
    """A question the solver answers, with its target (a valid proposal, this step's or a
    pooled earlier one)."""

    key: str  # the task_id of the proposal that wrote it
    question: str
    target: str


@dataclass(kw_only=True)
class Search(Proposal):
    """One proposer rollout for one target (``answer``), and what came of it: the solver's
    rollouts on the problem its slot got (``problem``: its own, a pooled one, or none)."""

    slot: int
    target: Target
    rollout: ToolRollout
    queries: list[str]
    documents: list[str]  # the distinct chunks its searches returned, in order
    verdict: RagVerdict | None = None
    problem: Problem | None = None
    solves: list[ToolRollout] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)  # the solver's

    @property
    def reused(self) -> bool:
        return self.problem is not None and not self.valid

    def info(self) -> dict:
        """The proposer episode's ``info``."""
        return {"target": self.answer, "question": self.question, "reason": self.reason,
                "queries": self.queries, "p_hat": self.p_hat,
                "rag_answer": self.verdict.answer if self.verdict else None,
                "reused": self.problem.key if self.reused else None} | self.rollout.info()


class SspLoop(Loop):
    name = "ssp"
    Settings = SspSettings
    spec = LoopSpec(
        roles={PROPOSER: ("target",), SOLVER: ("question",), JUDGE: ("documents", "question")},
        estimator="own", tasks="targets",
        fixed_tasks=False,  # the problems are the run's own proposals
    )

    def __init__(self, config) -> None:
        super().__init__(config)
        s: SspSettings = self.settings
        if s.min_question_chars > s.max_question_chars:
            raise UserError(f"ssp.min_question_chars ({s.min_question_chars}) is more than "
                            f"ssp.max_question_chars ({s.max_question_chars})")
        self.reward = proposer_reward(s.proposer_reward, s.solver_samples)
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
    async def propose(self, policy: BatchingPolicy, step: int, slot: int, target: Target
                      ) -> Search:
        """One proposer rollout with the search tool, parsed and checked (but the RAG check)."""
        s = self.settings
        request = self.request(PROPOSER, stop=("</question>",), target=target.answer)
        rollout = await search_rollout(policy, request, self.corpus, s.search)
        reply = rollout.turn.reply
        question = rules.proposed_question(reply, s.lenient)
        documents = list(dict.fromkeys(d for call in rollout.calls for d in call.documents))
        reason = rules.question_problem(question, target.answer, queries(reply), len(documents),
                                        s.rules())
        return Search(task_id=task_key(step, slot), turn=rollout.turn, question=question,
                      reason=reason, answer=target.answer, slot=slot, target=target,
                      rollout=rollout, queries=queries(reply), documents=documents)

    async def rag_checks(self, policy: BatchingPolicy, searches: list[Search]) -> int:
        """The RAG check of every proposal that passed the other checks; a failure makes it
        invalid. Returns how many were checked."""
        checked = [p for p in searches if p.valid]
        if not self.settings.rag_check or not checked:
            return 0
        noise = {p.slot: [d for o in searches if o.slot != p.slot for d in o.documents]
                 for p in checked}
        verdicts = await policy.gather(
            retrieval_check(policy, lambda **fields: self.request(
                JUDGE, greedy=True, stop=("</answer>",), **fields), p.question, p.answer,
                mixed_documents(p.documents, noise[p.slot], self.settings.noisy_documents,
                                self.rng))
            for p in checked)
        for search, verdict in zip(checked, verdicts, strict=True):
            search.verdict = verdict
            search.reason = "" if verdict.passed else RAG_FAILED
        return len(checked)

    def assign_problems(self, searches: list[Search], step: int) -> None:
        """Valid proposals become problems (and join the pool); a failed one's slot gets a
        pooled problem (``reuse``) or nothing (``skip``, or an empty pool)."""
        s = self.settings
        for p in searches:
            if p.valid:
                p.problem = Problem(task_key(step, p.slot), p.question, p.target.answer)
                self.pool.append(p.problem)
        self.pool = self.pool[-s.pool_size:]
        for p in searches:
            if not p.valid and s.failure_strategy == "reuse" and self.pool:
                p.problem = self.rng.choice(self.pool)

    # ---------------------------------------------------------------- one step
    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        s = self.settings
        targets = [self.rng.choice(self.targets) for _ in range(s.proposals_per_step)]
        searches = await policy.gather(
            self.propose(policy, step, slot, target) for slot, target in enumerate(targets))
        checked = await self.rag_checks(policy, searches)
        self.assign_problems(searches, step)
        solving = [p for p in searches if p.problem is not None]
        groups = await solve_groups(policy, solving, s.solver_samples, lambda p: search_rollout(
            policy, self.request(SOLVER, stop=("</answer>",), question=p.problem.question),
            self.corpus, s.search))
        for p, group in zip(solving, groups, strict=True):
            p.solves, p.rewards = group, [rules.solver_reward(r.turn.reply, p.problem.target)
                                          for r in group]
            p.scores = [float(r > 0) for r in p.rewards]
            p.answers = [rules.solver_answer(r.turn.reply) for r in group]
        for p in searches:
            p.reward = self.reward(p.p_hat) if p.valid else s.format_penalty
        episodes = ([self.proposer_episode(step, p) for p in searches]
                    + [self.judge_episode(step, p, policy) for p in searches if p.verdict]
                    + [self.solver_episode(step, p, r, reward) for p in solving
                       for r, reward in zip(p.solves, p.rewards, strict=True)])
        rows = [p.row(step, self.name, PROPOSER, answer_type="string", document=p.target.chunk_id,
                      samples=len(p.scores) if p.valid else 0,
                      solver_answers=p.answers if p.valid else [],
                      tool_calls=mean(r.tool_calls for r in p.solves) if p.valid else None)
                for p in searches]
        return Collected(episodes, self.metrics(searches, checked), rows)

    def metrics(self, searches: list[Search], rag_checked: int) -> dict[str, float]:
        """The shared figures, and SSP's: each check's failures, the RAG check's pass rate,
        searches per rollout, the solver's accuracy and answered share."""
        solves = [(r, reward) for p in searches for r, reward in zip(p.solves, p.rewards,
                                                                     strict=True)]
        metrics = proposal_metrics(self.name, searches) | {
            "ssp/question_rate": mean(p.question is not None for p in searches),
            "ssp/rag_pass_rate": mean(p.valid for p in searches if p.verdict is not None),
            "ssp/rag_checked": float(rag_checked),
            "ssp/reused": float(sum(p.reused for p in searches)),
            "ssp/skipped": float(sum(p.problem is None for p in searches)),
            "ssp/proposer_searches": mean(p.rollout.tool_calls for p in searches),
            "ssp/problems": float(sum(p.problem is not None for p in searches)),
        } | {f"ssp/invalid/{reason.replace(' ', '_')}": float(
            sum(p.reason == reason for p in searches)) for reason in INVALID}
        if solves:
            metrics["ssp/solver_accuracy"] = mean(reward > 0 for _, reward in solves)
            metrics["ssp/solver_answered"] = mean(
                rules.solver_answer(r.turn.reply) is not None for r, _ in solves)
            metrics["ssp/solver_searches"] = mean(r.tool_calls for r, _ in solves)
        return metrics

    # ---------------------------------------------------------------- episodes
    def proposer_episode(self, step: int, p: Search) -> Episode:
        return Episode(self.name, PROPOSER, [p.turn], {PROPOSER: p.reward},
                       task_key(step, p.slot), p.info())

    def solver_episode(self, step: int, p: Search, rollout: ToolRollout,
                       reward: float) -> Episode:
        return Episode(self.name, SOLVER, [rollout.turn], {SOLVER: reward},
                       f"{task_key(step, p.slot)}-solve",
                       {"problem": p.problem.key, "target": p.problem.target,
                        "answer": rules.solver_answer(rollout.turn.reply),
                        "queries": [c.query for c in rollout.calls
                                    if isinstance(c, SearchCall)]} | rollout.info())

    def judge_episode(self, step: int, p: Search, policy: BatchingPolicy) -> Episode:
        """The RAG judge's reply, recorded for reading; it carries no reward (not trained)."""
        verdict = p.verdict
        turn = self.turn(verdict.request, verdict.completion, policy)
        return Episode(self.name, JUDGE, [turn], {}, f"{task_key(step, p.slot)}-rag",
                       {"answer": verdict.answer, "passed": verdict.passed})

    def own_samples(self, episodes: list[Episode]) -> list[Sample]:
        """The proposer's advantage is its raw reward (one proposal per target: verl's
        one-sample group has mean 0, std 1), the solver's the loss preset's group-relative
        estimator over its attempts at one problem."""
        proposers = [e for e in episodes if PROPOSER in e.rewards]
        solvers = [e for e in episodes if PROPOSER not in e.rewards]
        return (group_relative_samples(proposers, advantages_of=list)
                + group_relative_samples(solvers, LOSS_PRESETS[self.config.train.loss][1]))

    def state_dict(self) -> dict:
        return super().state_dict() | {"pool": [vars(p) for p in self.pool]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.pool = [Problem(**p) for p in state.get("pool", [])]


def task_key(step: int, slot: int) -> str:
    return f"s{step}-p{slot}"
