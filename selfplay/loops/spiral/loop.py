"""SPIRAL: self-play on zero-sum games with role-conditioned advantage estimation
(Liu et al. 2025, arXiv:2506.24119; docs/algorithms.md#spiral).

One policy plays both seats; the seat reaches the model only through the prompt. Every turn of
a game is one training sample, and every turn of seat p gets the same advantage A_p = R_p − b
from the RAE baseline b[game, seat], shared by all games and saved in checkpoints.

An action is the model's last ``\\boxed{...}`` rewritten to ``[...]``; when the game lists its
legal actions the action must match one (case-insensitively), otherwise the game judges it.
An invalid or unparseable action ends the game: −1.5 for the offender and +0.5 for the other
seat in training (not zero-sum, as in the paper), −1/+1 in evaluation. Games cut off at the
turn limit are draws. ``reward: payoff`` trains on the game's payoff (``info["returns"]``: chips
in Kuhn Poker, an OpenSpiel game's returns) instead of +1/−1/0.

Game mixture: with ``curriculum.sampler: uniform`` games are drawn by their ``weight``; with any
other sampler (``tscl`` is the one made for it: a bandit on learning progress, Matiisen et al.
2017) each game spec is one task of the curriculum's buffer, drawn with replacement from the
sampler's distribution, and scored per step by its trained seats' mean training reward rescaled
to [0, 1] (``records.game_groups``), so learning progress is the change of that score.

Opponents: ``mirror`` (both seats are the policy and both are trained; the default),
``random`` (random legal actions; only the policy's seat is trained), ``frozen`` (the initial
policy: the base model without LoRA), ``pool`` (a FIFO pool of past LoRA snapshots),
``fictitious`` (the same pool, drawn uniformly or by AlphaStar's PFSP weightings of each
snapshot's recorded results; self-play until the first snapshot), ``bot`` (one of
``games.bots``: MCTS, exact alpha-beta, a CFR+ solution). Seats are drawn at random for
every game and logged. Evaluation plays ``eval_opponents`` (the same kinds, by name; and
``pool``, the pool's snapshots) and rates the policy among them with openskill (the ladder,
``eval/ladder/<player>/...``); ``eval_reasoning`` (transfer) is answered by the optional
``reasoner`` role (``roles.reasoner: {prompt: solver_terse}``), with the player's weights.
Every evaluation that measures exploitability writes the strategy it measured to
``strategies.jsonl`` and reports its average policy's beside it.

The turns of seat p are labelled ``player_p`` (RAE keeps a baseline per seat); they are the
``player`` role's (``config_role``): ``roles.player.train: false`` freezes both seats.
"""

from __future__ import annotations

import random

import games
from curricula.curriculum import Curriculum
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.base import Loop, LoopSpec, Snapshots
from selfplay.loops.spiral.checks import check_settings
from selfplay.loops.spiral.exact import PastIterates, exact_mmd_episodes
from selfplay.loops.spiral.history import STRATEGIES, StrategyHistory
from selfplay.loops.spiral.imitation import imitation_episodes
from selfplay.loops.spiral.mmd import mmd_samples
from selfplay.loops.spiral.opponents import (
    POOLED,
    check_opponents,
    check_pool,
    eval_seat,
    make_pool,
    record_fictitious,
    training_seats,
)
from selfplay.loops.spiral.play import play_game
from selfplay.loops.spiral.records import GameRecord, Seat, eval_result, game_groups, game_metrics
from selfplay.loops.spiral.rules import training_rewards
from selfplay.loops.spiral.settings import GameSpec, SpiralSettings
from selfplay.loops.spiral.states import target_samples
from selfplay.loops.spiral.strategy import exploitability_evaluation
from selfplay.rl.advantages import state_baseline_samples
from selfplay.stats.games import eval_metrics
from selfplay.stats.ratings import ladder_metrics
from selfplay.types import Collected, Episode, Request, Sample

ROLE, REASONER = "player", "reasoner"
POOL_PREFIX = "pool-"


def seat_role(seat: int) -> str:
    return f"player_{seat}"


class SpiralLoop(Loop):
    name = "spiral"
    Settings = SpiralSettings
    spec = LoopSpec(
        roles={ROLE: ("observation", "player", "example")},
        estimator="rae",
        tasks="games (spiral.games)",
        eval_files=(STRATEGIES,),
        reasoner=REASONER, optional_roles={REASONER: ("question",)},  # eval_reasoning only
    )
    held_out_seed = 10_000  # the offset SPIRAL's held-out set was drawn with before it was shared

    def __init__(self, config) -> None:
        super().__init__(config)
        s: SpiralSettings = self.settings
        check_settings(s)
        check_pool(s.opponent, config.train.finetune, config.train.steps)
        check_opponents(s, s.games)  # every bot plays every game; pool only with its pool
        self.pool = make_pool(s.opponent)
        self.strategies = StrategyHistory()  # what eval_exploitability measured, in order
        self.past = PastIterates()  # exact fictitious play's opponent: the average iterate
        self.games_played: dict[int, int] = {}  # training games per step
        self.curriculum = Curriculum(config.curriculum, seed=config.seed)
        for index, spec in enumerate(s.games):
            self.curriculum.add(f"{spec.id}#{index}", family=spec.id)
        if REASONER in config.roles and "own" in (config.roles[REASONER].adapter,
                                                   config.roles[ROLE].adapter):
            raise UserError("roles.reasoner answers with the player's weights: both roles need "
                            "`adapter: shared`")

    # ------------------------------------------------------------------ seats
    def config_role(self, turn_role: str) -> str:
        """A seat's turns (``player_0``, ``player_1``) are the ``player`` role's."""
        return ROLE if turn_role in (seat_role(0), seat_role(1)) else turn_role

    def policy_adapter(self) -> str:
        return self.config.roles[ROLE].adapter_name(ROLE)

    def training_seats(self, rng: random.Random) -> tuple[dict[int, Seat], dict[int, str]]:
        return training_seats(self.settings.opponent, self.pool, self.policy_adapter(), rng)

    # ------------------------------------------------------------------ one game
    def move_request(self, seat: int, who: Seat, game, greedy: bool) -> Request:
        if self.settings.example == "legal":  # as before issue 31: a legal move (it steers)
            example = games.legal_example_action(game, seat)
        else:  # the move format with a placeholder, never a move of this state
            example = games.example_action(game, seat)
        request = self.request(
            ROLE, greedy=greedy, observation=game.observation(seat), player=seat, example=example
        )
        request.role, request.adapter = seat_role(seat), who.adapter
        return request

    async def play(self, policy: BatchingPolicy, spec: GameSpec, seed: int,
                   seats: dict[int, Seat], greedy: bool = False) -> tuple[games.Game, GameRecord]:
        """One game to its end: the model's seats move through the policy, a random seat by a
        random legal move, a bot by its search or strategy; the first invalid or unparseable
        move ends it. An exception the game's own code raises is one line naming the game and
        the call."""
        game = games.make(spec.id, max_turns=spec.max_turns, **spec.kwargs)
        with games.guarded(game, spec.id):
            return game, await play_game(self, policy, game, seed, seats, greedy)

    def training_rewards(self, game: games.Game, record: GameRecord) -> dict[int, float]:
        s = self.settings
        return training_rewards(game, record.invalid_by, s.reward, s.invalid_penalty,
                                s.invalid_opponent_reward)

    @staticmethod
    def eval_rewards(game: games.Game, record: GameRecord) -> dict[int, float]:
        if record.invalid_by is not None:
            return {record.invalid_by: -1.0, 1 - record.invalid_by: 1.0}
        return game.outcome()

    # ------------------------------------------------------------------ training
    async def training_game(
        self, policy: BatchingPolicy, step: int, index: int, game_index: int | None
    ) -> Episode:
        rng = random.Random(self.rng.randrange(2**63))
        specs = self.settings.games
        if game_index is None:
            game_index = rng.choices(range(len(specs)), weights=[g.weight for g in specs])[0]
        spec = specs[game_index]
        seats, assignment = self.training_seats(rng)
        game, record = await self.play(policy, spec, rng.randrange(2**31), seats)
        with games.guarded(game, spec.id):
            rewards = self.training_rewards(game, record)
            opponent = self.settings.opponent.bot or self.settings.opponent.kind  # mcts:100
            info = record.info(game, game_index, seats, assignment, opponent)
        trained = [s for s, who in seats.items() if who.trained]
        return Episode(loop=self.name, env=spec.id, turns=record.turns,
                       rewards={seat_role(s): rewards[s] for s in trained},
                       group_id=f"s{step}-g{index}",
                       info=info | {"rewards_by_seat": {str(k): v for k, v in rewards.items()}})

    async def collect(self, policy: BatchingPolicy, step: int) -> Collected:
        """Draw the step's games (by their weights, or from the curriculum's sampler), play
        them, and report each game's score to the curriculum."""
        if self.settings.every_state:  # the ceiling, or MMD from exact values: no hands
            return await self.collect_every_state(policy, step)
        count = self.settings.games_per_step
        chosen: list[int | None] = [None] * count  # uniform: the games' own weights
        if self.config.curriculum.sampler != "uniform":
            chosen = [int(i) for i in self.curriculum.draw(count, step, replace=True)]
        episodes = await policy.gather(
            self.training_game(policy, step, i, game) for i, game in enumerate(chosen)
        )
        self.curriculum.report(game_groups(episodes, self.settings.invalid_penalty), step)
        metrics = self.curriculum.metrics(step) | game_metrics(episodes)
        self.games_played[step] = len(episodes)
        if self.settings.update == "mmd":  # what the step's mirror-descent targets ask for
            metrics |= mmd_samples(episodes, self.settings.mmd)[1]
        if self.settings.opponent.kind == "fictitious":  # each game's result, for its snapshot
            metrics |= record_fictitious(self.pool, episodes)
        return Collected(episodes, metrics, games=len(episodes))

    async def collect_every_state(self, policy: BatchingPolicy, step: int) -> Collected:
        """A target at every information state of each game: CFR+'s (``imitate``) or the MMD
        step's from exact values (``mmd.values: exact``)."""
        s, episodes, metrics = self.settings, [], {}
        for spec in s.games:
            if s.imitate is not None:
                more, figures = await imitation_episodes(self, policy, s.imitate, spec.id,
                                                         spec.kwargs, step)
            else:
                more, figures = await exact_mmd_episodes(self, policy, spec.id, spec.kwargs,
                                                         step, s.mmd, self.past)
            episodes += more
            metrics |= figures
        self.games_played[step] = 0
        return Collected(episodes, metrics)

    def samples(self, episodes: list[Episode]) -> list[Sample]:
        """SPIRAL's RAE advantages (the base class), or: the imitation ceiling's targets, the
        MMD step's targets (``update: mmd``), or per-state baselines (``baseline: state``)."""
        s = self.settings
        if s.imitate is None and s.update == "pg" and s.baseline == "rae":
            return super().samples(episodes)
        if s.every_state:
            samples = target_samples(episodes)
        elif s.update == "mmd":
            samples = mmd_samples(episodes, s.mmd)[0]
        else:
            samples = state_baseline_samples(episodes, self.baseline)
        frozen = {role for role, spec in self.config.roles.items() if not spec.train}
        return [x for x in samples if self.config_role(x.turn.role) not in frozen]

    # ------------------------------------------------------------------ opponent pool
    def after_update(self, step: int, snapshots: Snapshots) -> None:
        """Settle the strategies measured up to this step (the checkpoint after it keeps them);
        snapshot the policy into the FIFO pool every ``refresh_every`` steps."""
        self.strategies.settle(step)
        self.past.settle(step)
        if self.settings.opponent.kind not in POOLED or self.settings.every_state:
            return  # (the every-state updates play no games: a snapshot would sit unused)
        name = f"{POOL_PREFIX}{step + 1}"
        before = set(self.pool.ids)
        if not self.pool.maybe_add(step + 1, name):
            return
        snapshots.take(name, self.policy_adapter())
        for evicted in sorted(before - set(self.pool.ids)):
            snapshots.drop(evicted)

    # ------------------------------------------------------------------ evaluation
    async def eval_game(
        self, policy: BatchingPolicy, spec: GameSpec, seed: int, seat: int, opponent: str,
        index: int = 0,
    ) -> dict:
        other = eval_seat(opponent, seed, index, self.pool.ids)
        seats = {seat: Seat("policy", self.policy_adapter()), 1 - seat: other}
        game, record = await self.play(policy, spec, seed, seats, greedy=True)
        with games.guarded(game, spec.id):
            reward = self.eval_rewards(game, record)[seat]
        return eval_result(spec.id, opponent, seat, reward, record)

    async def evaluate(self, policy: BatchingPolicy, step: int) -> dict[str, float]:
        """Win/draw/loss/invalid rates per game, opponent and seat; the ladder (the policy's
        openskill rating among its opponents, from the games of ``spiral.games``); OOD games;
        reasoning."""
        s, jobs = self.settings, []
        against = [  # initial: LoRA runs only; pool: once it holds a snapshot
            o for o in s.eval_opponents
            if (o != "initial" or self.config.train.finetune == "lora")
            and (o != "pool" or len(self.pool))
        ]
        matches = [(spec, opponent) for spec in s.games for opponent in against]
        ladder_games = len(matches) * s.eval_games
        matches += [(GameSpec(id=game_id), "random") for game_id in s.eval_ood_games]
        for spec, opponent in matches:
            jobs += [
                self.eval_game(policy, spec, 90_000 + i, i % 2, opponent, i)
                for i in range(s.eval_games)
            ]
        results = await policy.gather(jobs) if jobs else []
        metrics = eval_metrics(results) | ladder_metrics(results[:ladder_games])
        metrics |= await super().evaluate(policy, step)  # eval_reasoning, by the reasoner
        return metrics | await exploitability_evaluation(self, policy, step)

    def evaluation_rows(self) -> dict[str, list[dict]]:
        """The strategies measured since the last call, for ``strategies.jsonl``."""
        rows = self.strategies.take_rows()
        return {STRATEGIES: rows} if rows else {}

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {**super().state_dict(), "pool": self.pool.state_dict(),
                "strategies": self.strategies.state_dict(),
                "past_iterates": self.past.state_dict(),
                "games_played": dict(self.games_played)}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.pool = type(self.pool).from_state_dict(state["pool"])
        if self.settings.opponent.kind == "fictitious":  # a resume's settings win
            self.pool.weighting = self.settings.opponent.weighting
            self.pool.decay = self.settings.opponent.decay
        self.strategies.load_state_dict(state.get("strategies", {}))  # none before issue 39
        self.past.load_state_dict(state.get("past_iterates", {}))
        self.games_played = {int(k): int(v) for k, v in state.get("games_played", {}).items()}
