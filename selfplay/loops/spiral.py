"""SPIRAL: self-play on zero-sum games with role-conditioned advantage estimation (REFERENCE §2).

One policy plays both seats; the seat reaches the model only through the prompt. Every turn of
a game is one training sample, and every turn of seat p gets the same advantage A_p = R_p − b
from the RAE baseline b[game, seat], shared by all games and saved in checkpoints.

An action is the model's last ``\\boxed{...}`` rewritten to ``[...]``; when the game lists its
legal actions the action must match one (case-insensitively), otherwise the game judges it.
An invalid or unparseable action ends the game: −1.5 for the offender and +0.5 for the other
seat in training (not zero-sum, as in the paper), −1/+1 in evaluation. Games cut off at the
turn limit are draws.

Game mixture: with ``curriculum.sampler: uniform`` games are drawn by their ``weight``; with any
other sampler (``tscl`` is the one made for it: a bandit on learning progress, Matiisen et al.
2017) each game spec is one task of the curriculum's buffer, drawn with replacement from the
sampler's distribution, and scored per step by its trained seats' mean training reward rescaled
to [0, 1] ((r − invalid_penalty) / (1 − invalid_penalty)), so learning progress is the change of
that score. The mixture is logged each step (``curriculum/...`` in metrics.jsonl).

Opponents: ``mirror`` (both seats are the policy and both are trained; the default),
``random`` (random legal actions; only the policy's seat is trained), ``frozen`` (the initial
policy: the base model without LoRA), ``pool`` (a FIFO pool of past LoRA snapshots). Seats are
drawn at random for every game and logged.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

import games
from curricula.answers import grade_answer
from curricula.samplers import Curriculum, Group
from games import CheckpointPool, RandomOpponent, assign_seats, extract_action, match_legal
from roles import load_role
from selfplay.core.errors import UserError
from selfplay.engines.hf import BASE_ADAPTER
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.base import Loop
from selfplay.loops.rlvr import build_tasks
from selfplay.types import Episode, Request

ROLE = "player"
POOL_PREFIX = "pool-"


def seat_role(seat: int) -> str:
    return f"player_{seat}"


@dataclass
class Seat:
    """Who plays one seat: the trained policy, a model adapter (frozen/pool), or random."""

    kind: str  # "policy" | "adapter" | "random"
    adapter: str = "shared"
    rng: random.Random | None = None
    trained: bool = False


@dataclass
class GameRecord:
    turns: list = field(default_factory=list)
    invalid_by: int | None = None
    invalid_reason: str = ""
    moves: int = 0
    parse_failures: int = 0
    random_guessed: bool = False  # the random seat moved where no legal move was known


class SpiralLoop(Loop):
    name = "spiral"
    default_estimator = "rae"
    curriculum_tasks = "games (spiral.games)"

    def __init__(self, config) -> None:
        super().__init__(config)
        self.require_roles(ROLE)
        self.settings = config.spiral
        for spec in [*self.settings.games, *self.settings.eval_ood_games]:
            game_id = spec.id if hasattr(spec, "id") else spec
            games.make(game_id)  # unknown ids fail now, in one line, not mid-run
        opponent = self.settings.opponent.kind
        if opponent in ("frozen", "pool") and config.train.finetune != "lora":
            raise UserError(f"opponent kind {opponent!r} needs train.finetune: lora")
        self.pool = CheckpointPool(
            self.settings.opponent.pool_size, self.settings.opponent.refresh_every
        )
        self.pool_weights: dict[str, dict] = {}
        self.curriculum = Curriculum(config.curriculum, seed=config.seed)
        for index, spec in enumerate(self.settings.games):
            self.curriculum.add(f"{spec.id}#{index}", family=spec.id)
        self._step_metrics: dict[int, dict] = {}  # step → the game mixture after collect
        self.reasoning_tasks = (
            build_tasks(
                self.settings.eval_reasoning,
                self.settings.eval_reasoning_size,
                config.seed + 10_000,
            )
            if self.settings.eval_reasoning
            else []
        )

    # ------------------------------------------------------------------ seats
    def policy_adapter(self) -> str:
        return self.config.roles[ROLE].adapter_name(ROLE)

    def training_seats(self, rng: random.Random) -> tuple[dict[int, Seat], dict[int, str]]:
        assignment = assign_seats(rng)  # {seat: "model" | "opponent"}
        kind = self.settings.opponent.kind
        seats = {}
        for seat, who in assignment.items():
            if who == "model" or kind == "mirror":
                seats[seat] = Seat("policy", self.policy_adapter(), trained=True)
            elif kind == "random":
                seats[seat] = Seat("random", rng=random.Random(rng.randrange(2**31)))
            elif kind == "frozen" or not len(self.pool):
                seats[seat] = Seat("adapter", BASE_ADAPTER)
            else:
                seats[seat] = Seat("adapter", self.pool.sample(rng))
        return seats, assignment

    # ------------------------------------------------------------------ one game
    def _request(self, seat: int, who: Seat, game, greedy: bool) -> Request:
        example = games.example_action(game, seat)  # a real legal move where one is known
        request = self.request(
            ROLE, greedy=greedy, observation=game.observation(seat), player=seat, example=example
        )
        request.role, request.adapter = seat_role(seat), who.adapter
        return request

    async def play(
        self,
        policy: BatchingPolicy,
        game_id: str,
        spec_kwargs: dict,
        max_turns: int,
        seed: int,
        seats: dict[int, Seat],
        greedy: bool = False,
    ) -> tuple[object, GameRecord]:
        game = games.make(game_id, max_turns=max_turns, **spec_kwargs)
        game.reset(seed)
        record = GameRecord()
        while not game.done:
            seat = game.current_player
            who = seats[seat]
            if who.kind == "random":
                opponent = RandomOpponent(who.rng.randrange(2**31))
                move = opponent.act(game, seat)
                record.random_guessed |= not opponent.verified
                record.moves += 1
                result = game.step(move)
                if not result.valid:  # a free-form game's guess can break the rules too
                    record.invalid_by, record.invalid_reason = seat, result.reason
                continue
            request = self._request(seat, who, game, greedy)
            completion = await policy(request)
            if who.trained:
                record.turns.append(self.turn(request, completion, policy))
            action = extract_action(completion.text, lenient=self.settings.lenient)
            record.moves += 1
            if action is None:
                record.parse_failures += 1
                record.invalid_by, record.invalid_reason = seat, "no \\boxed{} action"
                break
            legal = game.legal_actions(seat)
            result = game.step(match_legal(action, legal) or action if legal else action)
            if not result.valid:
                record.invalid_by, record.invalid_reason = seat, result.reason
        return game, record

    def training_rewards(self, game, record: GameRecord) -> dict[int, float]:
        if record.invalid_by is not None:
            offender = record.invalid_by
            return {
                offender: self.settings.invalid_penalty,
                1 - offender: self.settings.invalid_opponent_reward,
            }
        return game.outcome()

    @staticmethod
    def eval_rewards(game, record: GameRecord) -> dict[int, float]:
        if record.invalid_by is not None:
            return {record.invalid_by: -1.0, 1 - record.invalid_by: 1.0}
        return game.outcome()

    # ------------------------------------------------------------------ training
    async def _training_game(
        self, policy: BatchingPolicy, step: int, index: int, game_index: int | None = None
    ) -> Episode:
        rng = random.Random(self.rng.randrange(2**63))
        specs = self.settings.games
        if game_index is None:
            game_index = rng.choices(range(len(specs)), weights=[g.weight for g in specs])[0]
        spec = specs[game_index]
        seats, assignment = self.training_seats(rng)
        game, record = await self.play(
            policy, spec.id, spec.kwargs, spec.max_turns, rng.randrange(2**31), seats
        )
        rewards = self.training_rewards(game, record)
        trained = [s for s, who in seats.items() if who.trained]
        return Episode(
            loop=self.name,
            env=spec.id,
            turns=record.turns,
            rewards={seat_role(s): rewards[s] for s in trained},
            group_id=f"s{step}-g{index}",
            info={
                "game_index": game_index,
                "seats": assignment,
                "opponent": self.settings.opponent.kind,
                "opponent_adapter": next(
                    (w.adapter for w in seats.values() if w.kind == "adapter"), None
                ),
                "winner": game.winner,
                "invalid_by": record.invalid_by,
                # "policy" (a trained seat), "adapter" (frozen/pool) or "random"
                "invalid_by_kind": None
                if record.invalid_by is None
                else seats[record.invalid_by].kind,
                "invalid_reason": record.invalid_reason,
                "truncated": game.truncated,
                "moves": record.moves,
                "parse_failures": record.parse_failures,
                "outcome": {str(k): v for k, v in game.outcome().items()} if game.done else None,
                "rewards_by_seat": {str(k): v for k, v in rewards.items()},
            },
        )

    async def collect(self, policy: BatchingPolicy, step: int) -> list[Episode]:
        count = self.settings.games_per_step
        chosen: list[int | None] = [None] * count  # uniform: the games' own weights
        if self.config.curriculum.sampler != "uniform":
            chosen = [int(i) for i in self.curriculum.sample(count, step, replace=True)]
        episodes = await policy.gather(
            self._training_game(policy, step, i, game) for i, game in enumerate(chosen)
        )
        self.curriculum.record(self.game_groups(episodes), step)
        self._step_metrics[step] = self.curriculum.metrics(step)
        return episodes

    def game_groups(self, episodes: list[Episode]) -> list[Group]:
        """One group per game spec played this step: its trained seats' rewards, scored in
        [0, 1] as (r − invalid_penalty) / (1 − invalid_penalty)."""
        low = self.settings.invalid_penalty
        rewards: dict[int, list[float]] = {}
        for episode in episodes:
            rewards.setdefault(episode.info["game_index"], []).extend(episode.rewards.values())
        return [
            Group(
                task=game,
                successes=float(np.clip((np.asarray(values) - low) / (1 - low), 0, 1).sum()),
                attempts=len(values),
                rewards=values,
            )
            for game, values in sorted(rewards.items())
            if values
        ]

    def summarize(self, episodes: list[Episode]) -> dict[str, float]:
        metrics = super().summarize(episodes)
        if self._step_metrics:  # the oldest step collected (async: the next may be in flight)
            metrics |= self._step_metrics.pop(min(self._step_metrics))
        n = max(len(episodes), 1)
        metrics["game/invalid_rate"] = sum(e.info["invalid_by"] is not None for e in episodes) / n
        # who broke the rules: the trained policy, or a non-trained opponent (random, frozen, pool)
        policy_invalid = sum(e.info.get("invalid_by_kind") == "policy" for e in episodes)
        metrics["game/policy_invalid_rate"] = policy_invalid / n
        metrics["game/opponent_invalid_rate"] = metrics["game/invalid_rate"] - policy_invalid / n
        metrics["game/draw_rate"] = (
            sum(e.info["winner"] is None and e.info["invalid_by"] is None for e in episodes) / n
        )
        metrics["game/moves"] = sum(e.info["moves"] for e in episodes) / n
        metrics["game/games"] = float(len(episodes))
        model_turns = sum(len(e.turns) for e in episodes)
        metrics["game/parse_failure_rate"] = sum(e.info["parse_failures"] for e in episodes) / max(
            model_turns, 1
        )
        metrics["game/response_chars"] = sum(len(t.text) for e in episodes for t in e.turns) / max(
            model_turns, 1
        )
        return metrics

    # ------------------------------------------------------------------ opponents pool
    def after_update(self, step: int, learner, engine) -> None:
        """Snapshot the policy into the FIFO pool every ``refresh_every`` steps."""
        if self.settings.opponent.kind != "pool":
            return
        name = f"{POOL_PREFIX}{step + 1}"
        before = set(self.pool.ids)
        if not self.pool.maybe_add(step + 1, name):
            return
        weights = learner.adapter_weights(self.policy_adapter())
        self.pool_weights[name] = {k: v.cpu() for k, v in weights.items()}
        self._install(engine, name)
        for evicted in before - set(self.pool.ids):
            self.pool_weights.pop(evicted, None)
            engine.remove_adapter(evicted)

    def _install(self, engine, name: str) -> None:
        engine.add_adapter(name)
        # peft state-dict keys carry no adapter name: the snapshot loads under any name
        engine.load_weights(name, self.pool_weights[name])

    def restore_engine(self, engine) -> None:
        for name in self.pool.ids:
            self._install(engine, name)

    # ------------------------------------------------------------------ evaluation
    async def _eval_game(
        self,
        policy,
        game_id: str,
        kwargs: dict,
        max_turns: int,
        seed: int,
        model_seat: int,
        opponent: str,
    ) -> dict:
        opponent_seat = (
            Seat("random", rng=random.Random(seed))
            if opponent == "random"
            else Seat("adapter", BASE_ADAPTER)
        )
        seats = {model_seat: Seat("policy", self.policy_adapter()), 1 - model_seat: opponent_seat}
        game, record = await self.play(policy, game_id, kwargs, max_turns, seed, seats, greedy=True)
        reward = self.eval_rewards(game, record)[model_seat]
        return {
            "game": game_id,
            "opponent": opponent,
            "seat": model_seat,
            "reward": reward,
            "invalid": record.invalid_by == model_seat,
            # which seat broke the rules: "model", "opponent", or None
            "invalid_by": None
            if record.invalid_by is None
            else ("model" if record.invalid_by == model_seat else "opponent"),
            # vs random, a result measures the model only if the random seat moved legally
            "meaningful": not record.random_guessed,
        }

    async def evaluate(self, policy: BatchingPolicy, step: int) -> dict[str, float]:
        """Win/draw/loss/invalid rates per game, opponent and seat; OOD games; reasoning."""
        jobs = []
        n = self.settings.eval_games
        for spec in self.settings.games:
            for opponent in self.settings.eval_opponents:
                if opponent == "initial" and self.config.train.finetune != "lora":
                    continue
                jobs += [
                    self._eval_game(
                        policy, spec.id, spec.kwargs, spec.max_turns, 90_000 + i, i % 2, opponent
                    )
                    for i in range(n)
                ]
        for game_id in self.settings.eval_ood_games:
            jobs += [
                self._eval_game(policy, game_id, {}, 50, 90_000 + i, i % 2, "random")
                for i in range(n)
            ]
        results = await policy.gather(jobs) if jobs else []
        metrics = game_rates(results)
        if self.reasoning_tasks:
            metrics |= await self._reasoning_eval(policy)
        return metrics

    async def _reasoning_eval(self, policy: BatchingPolicy) -> dict[str, float]:
        prompt = load_role("solver_terse")

        async def solve(family, entry, dataset):
            request = Request(
                role="eval",
                messages=prompt.render(question=entry["question"]),
                adapter=self.policy_adapter(),
                sampling=self.sampling(ROLE, greedy=True),
            )
            completion = await policy(request)
            return family, grade_answer(completion.text, entry, dataset, lenient=True)["correct"]

        results = await policy.gather(solve(*task) for task in self.reasoning_tasks)
        metrics: dict[str, float] = {}
        for family in sorted({f for f, _ in results}):
            scores = [ok for f, ok in results if f == family]
            metrics[f"eval/reasoning/{family}"] = sum(scores) / len(scores)
        metrics["eval/reasoning/mean"] = sum(ok for _, ok in results) / len(results)
        return metrics

    def state_dict(self) -> dict:
        return {
            **super().state_dict(),
            "pool": self.pool.state_dict(),
            "pool_weights": self.pool_weights,
        }

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.pool = CheckpointPool.from_state_dict(state["pool"])
        self.pool_weights = state["pool_weights"]


def game_rates(results: list[dict]) -> dict[str, float]:
    """eval/<game>/<opponent>/{win,draw,loss,invalid,opponent_invalid,reward}, overall and per
    seat; ``invalid`` counts the model's invalid moves, ``opponent_invalid`` the opponent's.

    Where the random seat had to guess moves (the game's legal set was not known), its
    mistakes, not the model, would decide the games: win/draw/loss are left out and
    ``.../not_meaningful`` gives the share of such games instead.
    """
    metrics: dict[str, float] = {}
    keys = {(r["game"], r["opponent"]) for r in results}
    for game_id, opponent in sorted(keys):
        rows = [r for r in results if r["game"] == game_id and r["opponent"] == opponent]
        name = game_id.replace("textarena:", "")
        for seat in (None, 0, 1):
            chosen = [r for r in rows if seat is None or r["seat"] == seat]
            if not chosen:
                continue
            prefix = f"eval/{name}/{opponent}" + ("" if seat is None else f"/seat{seat}")
            count = len(chosen)
            guessed = sum(not r.get("meaningful", True) for r in chosen)
            if guessed:
                metrics[f"{prefix}/not_meaningful"] = guessed / count
                metrics[f"{prefix}/invalid"] = sum(r["invalid"] for r in chosen) / count
                continue
            metrics[f"{prefix}/win"] = sum(r["reward"] > 0 for r in chosen) / count
            metrics[f"{prefix}/draw"] = sum(r["reward"] == 0 for r in chosen) / count
            metrics[f"{prefix}/loss"] = sum(r["reward"] < 0 for r in chosen) / count
            metrics[f"{prefix}/invalid"] = sum(r["invalid"] for r in chosen) / count
            metrics[f"{prefix}/opponent_invalid"] = (
                sum(r.get("invalid_by") == "opponent" for r in chosen) / count
            )
            # mean evaluation reward: +1 win, 0 draw, −1 loss, and −1/+1 for invalid moves
            metrics[f"{prefix}/reward"] = sum(r["reward"] for r in chosen) / count
    return metrics
