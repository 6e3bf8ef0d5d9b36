"""What SPIRAL records about its games, beside the algorithm: who sat where, how a game ended
(the episode's ``info``), the step's game metrics, and the per-game scores its curriculum
learns from."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from curricula.curriculum import Group
from selfplay.types import Episode


@dataclass
class Seat:
    """Who plays one seat: the trained policy, a model adapter (frozen/pool), random, or a bot
    (``games.bots``)."""

    kind: str  # "policy" | "adapter" | "random" | "bot"
    adapter: str = "shared"
    rng: random.Random | None = None
    trained: bool = False
    bot: Any = None  # kind "bot": the games.bots.Bot that plays it


@dataclass
class GameRecord:
    """One game as it was played: the trained seats' turns and how it ended."""

    turns: list = field(default_factory=list)
    invalid_by: int | None = None
    invalid_reason: str = ""
    moves: int = 0
    parse_failures: int = 0
    random_guessed: bool = False  # the random seat moved where no legal move was known
    # scored moves: the model's probability outside the legal replies, at each of its moves
    outside: list[float] = field(default_factory=list)

    def info(self, game, game_index: int, seats: dict[int, Seat], assignment, opponent) -> dict:
        """The episode's ``info`` for a training game."""
        return {
            "game_index": game_index,
            "seats": assignment,
            "opponent": opponent,
            "opponent_adapter": next(
                (w.adapter for w in seats.values() if w.kind == "adapter"), None
            ),
            "winner": game.winner,
            "invalid_by": self.invalid_by,
            # "policy" (a trained seat), "adapter" (frozen/pool), "random" or "bot"
            "invalid_by_kind": None if self.invalid_by is None else seats[self.invalid_by].kind,
            "invalid_reason": self.invalid_reason,
            "truncated": game.truncated,
            "moves": self.moves,
            "parse_failures": self.parse_failures,
            "outcome": {str(k): v for k, v in game.outcome().items()} if game.done else None,
            # scored moves only: written replies keep their rows as before (the golden runs)
            **({"outside_mass": self.outside} if self.outside else {}),
        }


def eval_result(game_id: str, opponent: str, seat: int, reward: float, record: GameRecord) -> dict:
    """One evaluation game of the model in ``seat`` (the rows ``stats.games.eval_metrics``
    counts)."""
    return {
        "game": game_id,
        "opponent": opponent,
        "seat": seat,
        "reward": reward,
        "invalid": record.invalid_by == seat,
        # which seat broke the rules: "model", "opponent", or None
        "invalid_by": None
        if record.invalid_by is None
        else ("model" if record.invalid_by == seat else "opponent"),
        # vs random, a result measures the model only if the random seat moved legally
        "meaningful": not record.random_guessed,
    }


def game_metrics(episodes: list[Episode]) -> dict[str, float]:
    """Invalid-move, draw and parse-failure rates, moves and response length of a step's
    training games."""
    n = max(len(episodes), 1)
    invalid = sum(e.info["invalid_by"] is not None for e in episodes) / n
    # who broke the rules: the trained policy, or a non-trained opponent (random, frozen, pool)
    policy_invalid = sum(e.info.get("invalid_by_kind") == "policy" for e in episodes) / n
    model_turns = max(sum(len(e.turns) for e in episodes), 1)
    outside = [p for e in episodes for p in e.info.get("outside_mass", [])]
    scored = {"game/outside_mass": sum(outside) / len(outside)} if outside else {}
    return scored | {
        "game/invalid_rate": invalid,
        "game/policy_invalid_rate": policy_invalid,
        "game/opponent_invalid_rate": invalid - policy_invalid,
        "game/draw_rate": sum(
            e.info["winner"] is None and e.info["invalid_by"] is None for e in episodes
        ) / n,
        "game/moves": sum(e.info["moves"] for e in episodes) / n,
        "game/games": float(len(episodes)),
        "game/parse_failure_rate": sum(e.info["parse_failures"] for e in episodes) / model_turns,
        "game/response_chars": sum(len(t.text) for e in episodes for t in e.turns) / model_turns,
    }


def game_groups(episodes: list[Episode], invalid_penalty: float) -> list[Group]:
    """One curriculum group per game spec played this step: its trained seats' rewards, scored
    in [0, 1] as (r − invalid_penalty) / (1 − invalid_penalty)."""
    rewards: dict[int, list[float]] = {}
    for episode in episodes:
        rewards.setdefault(episode.info["game_index"], []).extend(episode.rewards.values())
    return [
        Group(
            task=game,
            successes=float(
                np.clip((np.asarray(values) - invalid_penalty) / (1 - invalid_penalty), 0, 1).sum()
            ),
            attempts=len(values),
            rewards=values,
        )
        for game, values in sorted(rewards.items())
        if values
    ]
