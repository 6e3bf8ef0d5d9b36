"""Absolute Zero Reasoner (Zhao et al. 2025, arXiv:2505.03335; docs/algorithms.md#azr): one
policy proposes programs and solves them, in three modes, with no data but a seed program.

Six roles, one set of weights (``adapter: shared``): ``propose_<mode>`` and ``solve_<mode>``
for mode ∈ {deduction, abduction, induction}. Each step:

1. **Seeding** (first step only): the identity ``f(a) = a`` on "Hello world" is the reference
   for proposals that are checked and kept, not trained on, until each mode's buffer holds
   ``seed_size`` tasks (or ``seed_rounds`` rounds have run).
2. **Propose**: ``proposals_per_mode`` replies per mode. Deduction and abduction proposers see
   K triplets from their buffer and write a program and an input; the induction proposer is
   given a program from those buffers and writes inputs and a message. The sandbox checks each
   (``tasks.Checker``: parse, one function renamed ``f``, the ban list, ``f(i)`` twice in one
   process with equal results, within the time limit).
3. **Learnability**: ``solver_samples`` fresh solver samples of every valid task give p̂ = r̄;
   the proposer's reward is 1 − r̄ for 0 < r̄ < 1 (``learnability`` of ``curricula/rewards.py``;
   ``curricula/azr_rewards.py``). Valid tasks join their mode's buffer (newest last,
   ``buffer_cap`` kept).
4. **Solve**: ``solves_per_mode`` tasks per mode, newest first; reward 1 / −0.5 / −1.
5. **TRR++** (``samples``): one baseline per (mode, role), six in all (``selfplay/rl/trr.py``).

Every model call is made from a request built before any sandbox result is awaited, so the
loop's random stream is drawn in one order however the sandbox's runs finish.
"""

from __future__ import annotations

from curricula.azr_rewards import proposer_reward, solver_reward
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.azr.records import Proposed, proposal_figures, solve_metrics
from selfplay.loops.azr.settings import MODES, AzrSettings
from selfplay.loops.azr.tasks import (
    ABDUCTION,
    DEDUCTION,
    INDUCTION,
    Buffers,
    Checker,
    Judged,
    Task,
    seed_task,
)
from selfplay.loops.base import Loop, LoopSpec
from selfplay.loops.propose import grouped
from selfplay.rl.trr import trr_samples
from selfplay.types import Collected, Episode, Request, Sample, Turn

PROPOSE_FIELDS = {DEDUCTION: ("references",), ABDUCTION: ("references",),
                  INDUCTION: ("program", "count")}
SOLVE_FIELDS = {DEDUCTION: ("program", "input"), ABDUCTION: ("program", "output"),
                INDUCTION: ("message", "pairs")}


PROPOSE = {mode: f"propose_{mode}" for mode in MODES}  # each mode's two roles
SOLVE = {mode: f"solve_{mode}" for mode in MODES}


class AzrLoop(Loop):
    name = "azr"
    Settings = AzrSettings
    spec = LoopSpec(
        roles={**{PROPOSE[m]: PROPOSE_FIELDS[m] for m in MODES},
               **{SOLVE[m]: SOLVE_FIELDS[m] for m in MODES}},
        estimator="own", tasks="programs",
        fixed_tasks=False,  # the buffers grow with the run
    )

    def __init__(self, config) -> None:
        super().__init__(config)
        s: AzrSettings = self.settings
        for role, spec in config.roles.items():
            if spec.adapter != "shared":
                raise UserError(f"azr: role `{role}` needs `adapter: shared` (one policy "
                                "proposes and solves)")
        self.checker = Checker(s)
        self.buffers = Buffers(s.buffer_cap)
        for mode in (DEDUCTION, ABDUCTION):
            self.buffers.add(seed_task(mode))
        self.seeded = False

    def close(self) -> None:
        self.checker.close()

    def own_samples(self, episodes: list[Episode]) -> list[Sample]:
        """TRR++ per (mode, role) in the form of ``azr.reward_form``."""
        return trr_samples(episodes, self.settings.reward_form)

    # ---------------------------------------------------------------- proposing
    def propose_request(self, mode: str) -> tuple[Request, Task | None]:
        """A proposer's prompt: K references (deduction, abduction) or a program to find
        inputs for (induction), drawn from the buffers by the loop's random stream."""
        s, role = self.settings, PROPOSE[mode]
        if mode == INDUCTION:
            programs = self.buffers.programs()
            source = programs[self.rng.randrange(len(programs))]
            fields = {"program": source.program, "count": str(s.induction_inputs)}
        else:
            source = None
            shown = self.buffers.sample(mode, s.references, self.rng)
            fields = {"references": "\n\n".join(t.reference() for t in shown)}
        return self.request(role, **fields), source

    async def proposals(self, policy: BatchingPolicy, step: int, counts: dict[str, int],
                        phase: str) -> list[Proposed]:
        """``counts[mode]`` proposals per mode in one engine wave, each checked in the sandbox."""
        asked = [(mode, *self.propose_request(mode))
                 for mode in MODES for _ in range(counts.get(mode, 0))]
        completions = await policy.gather(policy(request) for _, request, _ in asked)
        checked = await policy.gather(
            self.checker.propose(policy, mode, completion.reply, source)
            for (mode, _, source), completion in zip(asked, completions, strict=True))
        made = []
        for index, ((mode, request, source), completion, proposed) in enumerate(
                zip(asked, completions, checked, strict=True)):
            task_id, task = f"s{step}-{phase}-{mode}-{index}", proposed.task
            if task is not None:
                task.task_id = task_id
            made.append(Proposed(task_id=task_id, turn=self.turn(request, completion, policy),
                                 question=task.question() if task else None, reason=proposed.why,
                                 answer=task.gold() if task else None, mode=mode, phase=phase,
                                 checked=proposed, source=source))
        return made

    async def seed(self, policy: BatchingPolicy, step: int) -> list[Proposed]:
        """Before the first step: proposals from the seed triplet, kept when valid (never
        trained on), until every buffer holds ``seed_size`` tasks or the rounds run out."""
        s, made = self.settings, []
        for round_ in range(s.seed_rounds):
            sizes = self.buffers.sizes()
            counts = {m: s.seed_proposals for m in MODES if sizes[m] < s.seed_size}
            if not counts:
                break
            found = await self.proposals(policy, step, counts, f"seed{round_}")
            for proposal in found:
                proposal.phase = "seed"
                if proposal.valid:
                    self.buffers.add(proposal.checked.task)
            made += found
        self.seeded = True
        return made

    # ---------------------------------------------------------------- solving
    async def answer(self, policy: BatchingPolicy, request: Request, task: Task
                     ) -> tuple[Turn, Judged]:
        completion = await policy(request)
        judged = await self.checker.judge(policy, task, completion.reply)
        return self.turn(request, completion, policy), judged

    async def answers(self, policy: BatchingPolicy, tasks: list[Task]) -> list[tuple[Turn, Judged]]:
        """One solver sample of each task, in one engine wave."""
        requests = [self.request(SOLVE[t.mode], **t.fields()) for t in tasks]
        return await policy.gather(self.answer(policy, r, t)
                                   for r, t in zip(requests, tasks, strict=True))

    # ---------------------------------------------------------------- one step
    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        s = self.settings
        seeded = [] if self.seeded else await self.seed(policy, step)
        proposals = await self.proposals(
            policy, step, dict.fromkeys(MODES, s.proposals_per_mode), "propose")
        valid = [p for p in proposals if p.valid]
        fresh = await self.answers(  # p̂ = r̄: n fresh samples per valid task, not trained on
            policy, [p.checked.task for p in valid for _ in range(s.solver_samples)])
        for proposal, group in zip(valid, grouped(fresh, s.solver_samples), strict=True):
            proposal.judged(group)
        for proposal in proposals:
            proposal.reward = proposer_reward(
                proposal.checked.outcome, proposal.p_hat, s.reward_form)
            if proposal.valid:
                self.buffers.add(proposal.checked.task)
        tasks = [t for mode in MODES for t in self.buffers.newest(mode, s.solves_per_mode)]
        solved = await self.answers(policy, tasks)
        episodes = [self.proposer_episode(step, p) for p in proposals]
        scored = []
        for task, (turn, judged) in zip(tasks, solved, strict=True):
            reward = solver_reward(judged.outcome)
            scored.append((task, judged, reward))
            episodes.append(self.solver_episode(step, task, turn, judged, reward))
        metrics = (proposal_figures(proposals, "azr") | proposal_figures(seeded, "azr/seed")
                   | solve_metrics(scored)
                   | {f"azr/{m}/buffer_size": float(n) for m, n in self.buffers.sizes().items()})
        return Collected(episodes, metrics, [p.task_row(step) for p in seeded + proposals])

    def proposer_episode(self, step: int, proposal: Proposed) -> Episode:
        """The proposer's turn (trained) and the fresh solver turns that measured r̄ (context
        only: they carry no reward)."""
        return Episode(
            loop=self.name, env=proposal.mode,
            turns=[proposal.turn, *(turn for turn, _ in proposal.solves)],
            rewards={PROPOSE[proposal.mode]: proposal.reward},
            group_id=f"s{step}-{proposal.mode}-propose", info=proposal.info(step),
        )

    def solver_episode(self, step: int, task: Task, turn: Turn, judged: Judged,
                       reward: float) -> Episode:
        return Episode(
            loop=self.name, env=task.mode, turns=[turn], rewards={SOLVE[task.mode]: reward},
            group_id=f"s{step}-{task.mode}-solve",
            info={"step": step, "mode": task.mode, "task_id": task.task_id,
                  "answer": judged.answer, "outcome": judged.outcome},
            correct=judged.outcome == "passed",
        )

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict:
        return super().state_dict() | {"buffers": self.buffers.state_dict(), "seeded": self.seeded}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.buffers.load_state_dict(state["buffers"])
        self.seeded = state["seeded"]
