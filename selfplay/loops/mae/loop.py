"""Multi-Agent Evolve (Chen et al. 2025, arXiv:2510.23595; docs/algorithms.md#mae): one policy
plays Proposer, Solver and Judge of free-form questions; the judge's parsed scores are the
rewards, and no verifier or data is needed but a few seed questions.

Three roles, by default one set of weights (``adapter: shared``): ``proposer``, ``solver``,
``judge``. Each step:

1. **Propose**: ``proposals_per_step`` replies, each shown with chance ``include_references`` a
   reference question drawn from the pool. A reply's question is its last
   ``<question>…</question>``; a reply without one is an invalid proposal (reward 0).
2. **First wave** (one engine batch): ``judge_samples`` judge replies on every valid question
   (q); ``solver_samples`` fresh solver answers to it (for p̂ and d = 1 − p̂; not trained on);
   one answer to each of ``solves_per_step`` questions drawn from the pool (the solver's batch).
3. **Second wave**: ``judge_samples`` judge replies on every answer of the first wave.
4. **Rewards** (``curricula/mae_rewards.py``): a judge reply's first score s → clip((s−1)/9, 0,
   1), unparsable replies skipped, an item none scored 0.5; solver 0.5·judge + 0.5·format;
   proposer (q + d + f)/3 when q ≥ ``admit_threshold`` (the question joins the pool) else
   (q + f)/3; judge: its format alone, on the first ``judges_per_step`` judge replies.
5. **TRR++** (``samples``): one REINFORCE++ batch per role, whitened within it
   (``selfplay/rl/trr.py``; one task type, so one baseline per role).

Every request of a wave is built before any of its replies is awaited, so the loop's random
stream is drawn in one order whatever order the engine finishes in.
"""

from __future__ import annotations

from pathlib import Path

from curricula.mae_rewards import (
    extract_answer,
    extract_question,
    judge_format,
    judge_score,
    proposer_format,
    proposer_reward,
    solver_reward,
)
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.base import Loop, LoopSpec
from selfplay.loops.mae.pool import DEFAULT_QUESTIONS, Pool, load_questions
from selfplay.loops.mae.records import Answer, Judged, Question, step_metrics
from selfplay.loops.mae.settings import MaeSettings
from selfplay.rl.trr import trr_samples
from selfplay.types import Collected, Episode, Request, Sample, Turn

PROPOSER, SOLVER, JUDGE = "proposer", "solver", "judge"
ENV = "general"  # MAE's one task type: one TRR++ baseline per role


ROLES = {PROPOSER: ("reference",), SOLVER: ("question",), JUDGE: ("question", "answer")}


class MaeLoop(Loop):
    name = "mae"
    Settings = MaeSettings
    # TRR++ (own_samples); the pool of questions grows with the run (no fixed tasks)
    spec = LoopSpec(roles=ROLES, estimator="own", tasks="questions", fixed_tasks=False)

    def __init__(self, config) -> None:
        super().__init__(config)
        s: MaeSettings = self.settings
        self.source = Path(s.seed_questions) if s.seed_questions else DEFAULT_QUESTIONS
        self.pool = Pool(load_questions(self.source), s.pool_cap)

    def inputs(self) -> dict[str, Path]:
        return {"mae_questions.jsonl": self.source}

    def own_samples(self, episodes: list[Episode]) -> list[Sample]:
        """TRR++ per role in the form of ``mae.reward_form``."""
        return trr_samples(episodes, self.settings.reward_form)

    # ---------------------------------------------------------------- requests
    def propose_request(self) -> tuple[Request, str]:
        """A proposer's prompt, shown a pool question with chance ``include_references`` (an
        empty reference otherwise)."""
        s = self.settings
        shown = self.rng.random() < s.include_references
        reference = self.pool.sample(1, self.rng)[0] if shown else ""
        return self.request(PROPOSER, reference=reference), reference

    def solve_request(self, question: str) -> Request:
        return self.request(SOLVER, question=question)

    def judge_requests(self, question: str, answer: str = "") -> list[Request]:
        """``judge_samples`` judge prompts on a question (``answer`` empty) or an answer."""
        return [self.request(JUDGE, question=question, answer=answer)
                for _ in range(self.settings.judge_samples)]

    async def play(self, policy: BatchingPolicy, requests: list[Request]) -> list[Turn]:
        """One engine wave: every request at once, the turns in the requests' order."""
        completions = await policy.gather(policy(request) for request in requests)
        return [self.turn(r, c, policy) for r, c in zip(requests, completions, strict=True)]

    # ---------------------------------------------------------------- one step
    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        s = self.settings
        proposals = await self.propose(policy, step)
        valid = [p for p in proposals if p.valid]
        training = self.pool.sample(s.solves_per_step, self.rng)
        # first wave: judge the questions, answer the new ones (d) and the pool's (trained)
        asked = ([r for p in valid for r in self.judge_requests(p.question)]
                 + [self.solve_request(p.question) for p in valid
                    for _ in range(s.solver_samples)]
                 + [self.solve_request(q) for q in training])
        turns = iter(await self.play(policy, asked))
        for p in valid:
            p.judged = Judged([next(turns) for _ in range(s.judge_samples)])
        for p in valid:
            p.answered([Answer(next(turns), p.question) for _ in range(s.solver_samples)])
        answers = [Answer(next(turns), q) for q in training]
        # second wave: judge every answer
        judged = [a for p in valid for a in p.responses] + answers
        replies = iter(await self.play(policy, [
            r for a in judged for r in self.judge_requests(a.question, extract_answer(
                a.turn.reply))]))
        for a in judged:
            a.judged = Judged([next(replies) for _ in range(s.judge_samples)])
        for p in valid:
            p.judge_scores()
        self.score(proposals, answers)
        judges = ([t for p in valid for t in p.judged.turns] + [
            t for a in answers for t in a.judged.turns] + [
            t for p in valid for a in p.responses for t in a.judged.turns])
        trained = len(judges) if s.judges_per_step is None else min(len(judges),
                                                                    s.judges_per_step)
        episodes = ([self.proposer_episode(step, p) for p in proposals]
                    + [self.solver_episode(step, a) for a in answers]
                    + [self.judge_episode(step, t) for t in judges[:trained]])
        metrics = step_metrics(proposals, answers, judges, trained, len(self.pool))
        return Collected(episodes, metrics, [p.task_row(step) for p in proposals])

    async def propose(self, policy: BatchingPolicy, step: int) -> list[Question]:
        """The step's proposals, their questions parsed (None: an invalid proposal)."""
        asked = [self.propose_request() for _ in range(self.settings.proposals_per_step)]
        turns = await self.play(policy, [request for request, _ in asked])
        return [Question(task_id=f"s{step}-q{i}", turn=turn, reference=reference,
                         question=extract_question(turn.reply, self.settings.lenient))
                for i, (turn, (_, reference)) in enumerate(zip(turns, asked, strict=True))]

    def score(self, proposals: list[Question], answers: list[Answer]) -> None:
        """Rewards of the proposals and training answers; admitted questions join the pool
        (after this step's training questions were drawn)."""
        for a in answers:
            a.reward = solver_reward(a.judged.score, a.turn.reply)
        for p in proposals:
            scored = proposer_reward(p.valid, p.quality, p.difficulty,
                                     proposer_format(p.turn.reply), self.settings.admit_threshold)
            p.reward, p.admitted = scored.reward, scored.admitted
            if p.admitted:
                self.pool.add(p.question)

    # ---------------------------------------------------------------- episodes
    def proposer_episode(self, step: int, proposal: Question) -> Episode:
        """The proposer's turn (trained) and the fresh answers that measured d (context only:
        they carry no reward)."""
        return Episode(
            loop=self.name, env=ENV, turns=[proposal.turn, *(a.turn for a in proposal.responses)],
            rewards={PROPOSER: proposal.reward}, group_id=f"s{step}-propose",
            info=proposal.info(step),
        )

    def solver_episode(self, step: int, answer: Answer) -> Episode:
        return Episode(loop=self.name, env=ENV, turns=[answer.turn],
                       rewards={SOLVER: answer.reward}, group_id=f"s{step}-solve",
                       info=answer.info(step))

    def judge_episode(self, step: int, turn: Turn) -> Episode:
        return Episode(loop=self.name, env=ENV, turns=[turn],
                       rewards={JUDGE: judge_format(turn.reply)}, group_id=f"s{step}-judge",
                       info={"step": step, "score": judge_score(turn.reply),
                             "format": judge_format(turn.reply)})

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict:
        return super().state_dict() | {"pool": self.pool.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.pool.load_state_dict(state["pool"])
