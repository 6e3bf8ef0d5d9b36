"""Self-Questioning Language Models (Chen et al. 2025, arXiv:2508.03682; docs/algorithms.md#sqlm):
one model proposes problems from a single fixed topic prompt and answers them itself.

One policy plays both roles with shared weights. Each step:

1. The **proposer** answers its topic prompt (the role prompt: a three-digit arithmetic problem,
   linear word problems ending in "Selected Question: …", or a coding problem with ``input |||
   output`` tests after "Test Cases:") ``proposal_groups ×
   proposal_group_size`` times; replies of one group form a GRPO group. A reply with no
   question in it (algebra: no "Selected Question"; coding: no test) is *masked*: counted,
   never trained on.
2. The **solver** answers every valid proposal N = ``solver_samples`` times, all in one engine
   wave. The answers are counted as strings; the solver reward is 1 iff an answer equals the
   majority and the majority is not None (``curricula/sqlm_rewards.py``). Coding: the share
   of the proposal's tests the solver's program passes in the sandbox (``coding.py``).
3. The proposer reward is 1 iff 1 < m_maj < N (released code; ``proposer_reward: paper``:
   0 < m_maj < N), m_maj the solver reward's sum; coding: 1 iff 0 < mean score < 1. The
   proposer trains on every ``proposer_update_every``-th step only (steps k−1, 2k−1, …: the
   code's global steps k, 2k); the solver on every step.

Advantages are GRPO per role: a masked proposal keeps its place in its group with reward 0 (the
group's mean and spread are the code's) but gives no sample (``samples``).
"""

from __future__ import annotations

from curricula.sqlm_rewards import (
    proposer_reward,
    proposer_reward_coding,
    read_coding,
    read_proposal,
    solver_answer,
    solver_rewards,
)
from selfplay.engines.policy import BatchingPolicy
from selfplay.engines.tools import ToolSandbox
from selfplay.loops.base import Loop, LoopSpec
from selfplay.loops.reasoning import build_tasks, reasoning_accuracy
from selfplay.loops.sqlm.coding import program_score
from selfplay.loops.sqlm.records import Proposal, step_metrics, task_row
from selfplay.loops.sqlm.settings import SqlmSettings
from selfplay.types import Collected, Episode, Sample, Turn

PROPOSER, SOLVER = "proposer", "solver"


class SqlmLoop(Loop):
    name = "sqlm"
    Settings = SqlmSettings
    spec = LoopSpec(roles={PROPOSER: (), SOLVER: ("question",)})

    def __init__(self, config) -> None:
        super().__init__(config)
        s: SqlmSettings = self.settings
        self.eval_tasks = build_tasks(s.eval_reasoning, s.eval_reasoning_size, config.seed + 20_000)
        self.tool = ToolSandbox(s.sandbox)  # coding only; started on its first run

    def close(self) -> None:
        self.tool.close()

    def proposer_trains(self, step: int) -> bool:
        """The code updates the proposer when its 1-based global step is a multiple of k."""
        return (step + 1) % self.settings.proposer_update_every == 0

    # ------------------------------------------------------------------ the two roles
    async def propose(self, policy: BatchingPolicy, index: int) -> Proposal:
        request = self.request(PROPOSER, max_new_tokens=self.settings.proposer_max_tokens)
        completion = await policy(request)
        turn, reply = self.turn(request, completion, policy), completion.reply
        if self.settings.topic != "coding":
            return Proposal(index, turn, reply, read_proposal(reply, self.settings.topic))
        problem, tests = read_coding(reply) or (None, [])
        return Proposal(index, turn, reply, problem, tests=tests)

    async def solve(
        self, policy: BatchingPolicy, proposal: Proposal
    ) -> tuple[Turn, str | None, float | None]:
        """One solver reply: (turn, answer, score); coding scores the program on the
        proposal's tests, math leaves the score to the majority vote."""
        request = self.request(
            SOLVER, max_new_tokens=self.settings.solver_max_tokens, question=proposal.question
        )
        completion = await policy(request)
        turn = self.turn(request, completion, policy)
        if proposal.tests:
            answer, score = await program_score(self.tool, policy, completion.reply, proposal.tests)
            return turn, answer, score
        return turn, solver_answer(completion.reply, self.settings.lenient), None

    # ------------------------------------------------------------------ one step
    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        s = self.settings
        count = s.proposal_groups * s.proposal_group_size
        proposals = await policy.gather(self.propose(policy, i) for i in range(count))
        valid = [p for p in proposals if p.valid]
        n = s.solver_samples
        solved = await policy.gather(  # every solver sample of the step: one engine wave
            self.solve(policy, p) for p in valid for _ in range(n)
        )
        episodes = []
        for k, proposal in enumerate(valid):
            group = solved[k * n : (k + 1) * n]
            self.score(proposal, group)
            episodes += [
                self.solver_episode(step, proposal, turn, answer, reward)
                for (turn, answer, _), reward in zip(group, proposal.solver_rewards, strict=True)
            ]
        trains = self.proposer_trains(step)
        episodes = [self.proposer_episode(step, p, trains) for p in proposals] + episodes
        rows = [task_row(step, p, s.topic, n, trains) for p in proposals]
        return Collected(episodes, step_metrics(proposals, trains, n), rows)

    def score(self, proposal: Proposal, group: list[tuple]) -> None:
        """Both rewards of one proposal from its N solver replies: the majority's (math) or
        the programs' test scores (coding: proposer 1 iff 0 < their mean < 1)."""
        proposal.answers = [answer for _, answer, _ in group]
        if proposal.tests:
            proposal.solver_rewards = [score for _, _, score in group]
            mean_score = proposal.m_maj / len(group)
            proposal.reward = proposer_reward_coding(mean_score)
            return
        proposal.solver_rewards = solver_rewards(proposal.answers)
        proposal.reward = proposer_reward(proposal.m_maj, len(group), self.settings.proposer_reward)

    def proposer_episode(self, step: int, proposal: Proposal, trains: bool) -> Episode:
        """A proposer reply; its reward is trained only on the proposer's update steps (a
        masked reply stays in its group with reward 0, ``samples`` drops its turn)."""
        group = proposal.index // self.settings.proposal_group_size
        return Episode(
            loop=self.name,
            env=f"{PROPOSER}/{self.settings.topic}",
            turns=[proposal.turn],
            rewards={PROPOSER: proposal.reward} if trains else {},
            group_id=f"s{step}-g{group}",
            info={
                "question": proposal.question,
                "masked": not proposal.valid,
                "answers": proposal.answers,
                "m_maj": proposal.m_maj if proposal.valid else None,
                "reward": proposal.reward,
                "trained": trains and proposal.valid,
            },
        )

    def solver_episode(
        self, step: int, proposal: Proposal, turn: Turn, answer: str | None, reward: float
    ) -> Episode:
        return Episode(
            loop=self.name,
            env=f"{SOLVER}/{self.settings.topic}",
            turns=[turn],
            rewards={SOLVER: reward},
            group_id=f"s{step}-q{proposal.index}",  # the N answers to one proposal
            info={"answer": answer, "majority": reward == 1.0},
        )

    def samples(self, episodes: list[Episode]) -> list[Sample]:
        """GRPO per role, then the masked proposals' samples dropped: they shaped their
        group's baseline (as in the code, where the loss mask zeroes them after the
        advantages) but are not trained on."""
        masked = {id(t) for e in episodes if e.info.get("masked") for t in e.turns}
        return [s for s in super().samples(episodes) if id(s.turn) not in masked]

    # ------------------------------------------------------------------ evaluation
    async def evaluate(self, policy: BatchingPolicy, step: int) -> dict[str, float]:
        """Greedy accuracy of the solver on held-out reasoning-gym tasks, per family."""
        if not self.eval_tasks:
            return {}
        return await reasoning_accuracy(
            policy,
            self.eval_tasks,
            lambda entry: self.request(
                SOLVER, greedy=True, max_new_tokens=self.settings.solver_max_tokens,
                question=entry["question"],
            ),
        )
