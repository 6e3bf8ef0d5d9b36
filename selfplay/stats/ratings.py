"""openskill ratings of players from two-player games: cross-play's snapshots rated against each
other (``selfplay crossplay``) and SPIRAL's ladder, the policy rated among its evaluation
opponents (``eval/ladder/<player>/...``)."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass
class GameResult:
    first: int  # index of one player (cross-play: the snapshot in seat 0)
    second: int  # index of the other (cross-play: the snapshot in seat 1)
    reward_first: float  # +1 win, 0 draw, −1 loss for ``first`` (an invalid move: −1 for its mover)


def rate(results: list[GameResult], names: list[str], seed: int = 0) -> list[dict]:
    """openskill Plackett–Luce ratings from the games, played through in a seeded shuffled
    order (so no player profits from the order the games were played in), every player from
    openskill's prior (μ 25, σ 25/3). One row per name, in the order of ``names``:
    {name, mu, sigma, ordinal (μ − 3σ), games}."""
    from openskill.models import PlackettLuce

    model = PlackettLuce()
    players = [model.rating(name=name) for name in names]
    played = [0] * len(names)
    order = list(results)
    random.Random(seed).shuffle(order)
    for r in order:
        ranks = [0, 0] if r.reward_first == 0 else ([0, 1] if r.reward_first > 0 else [1, 0])
        [[a], [b]] = model.rate([[players[r.first]], [players[r.second]]], ranks=ranks)
        players[r.first], players[r.second] = a, b
        played[r.first] += 1
        played[r.second] += 1
    return [{"name": p.name, "mu": p.mu, "sigma": p.sigma, "ordinal": p.ordinal(), "games": n}
            for p, n in zip(players, played, strict=True)]


POLICY = "policy"  # the ladder's name for the policy being evaluated
LADDER = "eval/ladder/"


def ladder(results: list[dict], seed: int = 0) -> list[dict]:
    """The policy and its evaluation opponents rated from SPIRAL's evaluation games (each
    result: opponent, reward (the policy's: +1, 0, −1), meaningful), best first by ordinal.

    Only games that measure the policy count: a game the random seat played by guessing
    (``meaningful`` False) is left out. Every opponent met only the policy, so the opponents'
    ratings say how they fared against it, not against each other."""
    counted = [r for r in results if r.get("meaningful", True)]
    if not counted:
        return []
    names = [POLICY, *sorted({r["opponent"] for r in counted})]
    index = {name: i for i, name in enumerate(names)}
    games = [GameResult(0, index[r["opponent"]], float(r["reward"])) for r in counted]
    return sorted(rate(games, names, seed), key=lambda row: -row["ordinal"])


def ladder_metrics(results: list[dict], seed: int = 0) -> dict[str, float]:
    """``eval/ladder/<player>/{mu,sigma,ordinal}`` for the policy and each opponent."""
    return {f"{LADDER}{row['name']}/{key}": float(row[key])
            for row in ladder(results, seed) for key in ("mu", "sigma", "ordinal")}


def ladder_rows(metrics_rows: list[dict]) -> list[dict]:
    """The ladder as logged in ``metrics.jsonl``: {step, player, mu, sigma, ordinal} per
    evaluation and player."""
    out = []
    for row in metrics_rows:
        players: dict[str, dict] = {}
        for key, value in row.items():
            if key.startswith(LADDER):
                player, _, stat = key[len(LADDER):].rpartition("/")
                if stat in ("mu", "sigma", "ordinal") and player:
                    players.setdefault(player, {})[stat] = float(value)
        out += [{"step": row.get("step"), "player": player, **stats}
                for player, stats in sorted(players.items())]
    return out
