"""Self-Questioning Language Models (Chen et al. 2025, arXiv:2508.03682; docs/algorithms.md#sqlm):
one model proposes problems from a single fixed topic prompt and answers them itself.

One policy plays both roles with shared weights. Each step:

1. The **proposer** answers its topic prompt (the role prompt: an arithmetic problem, linear
   word problems ending in "Selected Question: …", or a coding problem with ``input |||
   output`` tests after "Test Cases:") ``proposal_groups × proposal_group_size`` times (a group
   of replies is a GRPO group). A reply that poses no question is *masked*: never trained on.
2. The **solver** answers every valid proposal N = ``solver_samples`` times in one engine wave.
   An answer's reward is 1 iff it equals the majority (strings; ``curricula/sqlm_rewards.py``)
   and that is not None: p̂ = m_maj / N. Coding: the share of the proposal's tests the
   solver's program passes in the sandbox (``program_score``), p̂ their mean.
3. The proposer's reward is ``proposer_reward`` of p̂ (``agreement_band``: the code's
   1 < m_maj < N; ``informative``: the paper's 0 < m_maj < N; coding: 0 < p̂ < 1). It trains
   on every ``proposer_update_every``-th step only (the code's global steps k, 2k, …).

Advantages are GRPO per role: a masked proposal keeps its place in its group with reward 0 (the
group's mean and spread are the code's) but gives no sample (``samples``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from curricula import sqlm_rewards as rules
from curricula.rewards import informative
from curricula.unit_tests import parse_program
from sandbox.stdio import StdioTest, run_matrix
from selfplay.engines.policy import BatchingPolicy
from selfplay.engines.tools import ToolSandbox
from selfplay.loops.base import Loop, LoopSpec
from selfplay.loops.propose import Proposal, mean, proposal_metrics, proposer_reward, solve_groups
from selfplay.loops.sqlm.settings import SqlmSettings
from selfplay.types import Collected, Episode, Sample, Turn

PROPOSER, SOLVER = "proposer", "solver"


@dataclass(kw_only=True)
class Question(Proposal):
    """One proposer reply: its question (None: masked) and, coding, its tests."""

    index: int
    tests: list[tuple[str, str]] = field(default_factory=list)  # coding: (stdin, stdout)


async def program_score(tool: ToolSandbox, policy: BatchingPolicy, reply: str,
                        tests: list[tuple[str, str]]) -> tuple[str | None, float]:
    """(what the reply did, its score): the reply's last ```python block run on each test; the
    score is the share of tests passed (the released code's ``prime`` manager); 0 without one."""
    program = parse_program(reply)
    if program is None:
        return None, 0.0
    row = (await run_matrix(lambda code: tool.run(policy, code), [program],
                            [StdioTest(*test) for test in tests])).matrix[0]
    return f"passed {sum(row)}/{len(row)}", sum(row) / len(row)


class SqlmLoop(Loop):
    name = "sqlm"
    Settings = SqlmSettings
    spec = LoopSpec(roles={PROPOSER: (), SOLVER: ("question",)}, reasoner=SOLVER)

    def __init__(self, config) -> None:
        super().__init__(config)
        s: SqlmSettings = self.settings
        self.reward = proposer_reward(s.proposer_reward, s.solver_samples)
        self.tool = ToolSandbox(s.sandbox)  # coding only; started on its first run

    def close(self) -> None:
        self.tool.close()

    def proposer_trains(self, step: int) -> bool:
        """The code updates the proposer when its 1-based global step is a multiple of k."""
        return (step + 1) % self.settings.proposer_update_every == 0

    async def propose(self, policy: BatchingPolicy, step: int, index: int) -> Question:
        request = self.request(PROPOSER)
        completion = await policy(request)
        reply, topic = completion.reply, self.settings.topic
        problem, tests = (rules.read_coding(reply) or (None, [])) if topic == "coding" else (
            rules.read_proposal(reply, topic), [])
        return Question(task_id=f"s{step}-p{index}", index=index, question=problem, tests=tests,
                        turn=self.turn(request, completion, policy))

    async def solve(self, policy: BatchingPolicy, question: Question
                    ) -> tuple[Turn, str | None, float | None]:
        """One solver reply: (turn, answer, its coding score; math: None, the vote scores)."""
        request = self.request(SOLVER, question=question.question)
        completion = await policy(request)
        turn = self.turn(request, completion, policy)
        if question.tests:
            return turn, *await program_score(self.tool, policy, completion.reply, question.tests)
        return turn, rules.solver_answer(completion.reply, self.settings.lenient), None

    def score(self, question: Question, group: list[tuple]) -> None:
        """p̂ and the proposer's reward from the N solver replies: their agreement with the
        majority (math), or their programs' test scores (coding)."""
        question.answers = [answer for _, answer, _ in group]
        if question.tests:
            question.scores = [score for _, _, score in group]
            question.reward = informative(question.p_hat)
        else:
            question.scores = rules.solver_rewards(question.answers)
            question.reward = self.reward(question.p_hat)

    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        s = self.settings
        count = s.proposal_groups * s.proposal_group_size
        questions = await policy.gather(self.propose(policy, step, i) for i in range(count))
        valid = [q for q in questions if q.valid]
        groups = await solve_groups(policy, valid, s.solver_samples,
                                    lambda q: self.solve(policy, q))
        episodes = []
        for question, group in zip(valid, groups, strict=True):
            self.score(question, group)
            episodes += [Episode(self.name, f"{SOLVER}/{s.topic}", [turn], {SOLVER: reward},
                                 f"s{step}-q{question.index}",
                                 {"answer": answer, "majority": reward == 1.0})
                         for (turn, answer, _), reward in zip(group, question.scores, strict=True)]
        trains = self.proposer_trains(step)
        rows = [q.row(step, self.name, "propose", kind=s.topic, kept=trains and q.valid,
                      pseudo_label=rules.majority(q.answers) if q.valid else None)
                for q in questions]
        return Collected([self.proposer_episode(step, q, trains) for q in questions] + episodes,
                         self.metrics(questions, trains), rows)

    def proposer_episode(self, step: int, question: Question, trains: bool) -> Episode:
        """A proposer reply; its reward is trained only on the proposer's update steps (a
        masked reply stays in its group with reward 0, ``samples`` drops its turn)."""
        reward, group = question.reward or 0.0, question.index // self.settings.proposal_group_size
        return Episode(self.name, f"{PROPOSER}/{self.settings.topic}", [question.turn],
                       {PROPOSER: reward} if trains else {}, f"s{step}-g{group}",
                       {"question": question.question, "masked": not question.valid,
                        "answers": question.answers, "p_hat": question.p_hat, "reward": reward,
                        "trained": trains and question.valid})

    def metrics(self, questions: list[Question], trains: bool) -> dict[str, float]:
        valid, n = [q for q in questions if q.valid], self.settings.solver_samples
        return proposal_metrics(self.name, questions) | {  # the shared figures, and SQLM's
            "sqlm/masked": float(len(questions) - len(valid)),
            "sqlm/proposer_trained": float(trains),
            "sqlm/unanimous_rate": mean(sum(q.scores) == n for q in valid),
            "sqlm/majority_none_rate": mean(rules.majority(q.answers) is None for q in valid),
            "sqlm/answered_rate": mean(a is not None for q in valid for a in q.answers),
            "sqlm/distinct_questions": float(len({q.question for q in valid})),
        }

    def samples(self, episodes: list[Episode]) -> list[Sample]:
        """GRPO per role, then the masked proposals' samples dropped: they shaped their group's
        baseline (the code's loss mask zeroes them after the advantages), never trained."""
        masked = {id(t) for e in episodes if e.info.get("masked") for t in e.turns}
        return [s for s in super().samples(episodes) if id(s.turn) not in masked]
