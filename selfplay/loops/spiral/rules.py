"""SPIRAL's rules of play, in one place: how a reply becomes a move, and the training rewards
of a finished game (the invalid-move shaping). The loop and the verifiers environment of our
games (``selfplay/verifiers_envs/games.py``) both play by them.

A move is the reply's last ``\\boxed{...}`` rewritten to ``[...]`` (``lenient``: the last
``[token]`` without a box), matched case-insensitively against the legal moves when the game
lists them; otherwise the game judges it. An invalid or unparseable move ends the game: −1.5
for the offender and +0.5 for the other seat in training (not zero-sum, as in the paper).
"""

from __future__ import annotations

from typing import Literal

import games
from games import extract_action, match_legal

NO_ACTION = "no \\boxed{} action"  # why a reply without a move was refused (nothing is played)


def play_move(game: games.Game, seat: int, reply: str, lenient: bool) -> str | None:
    """Play ``reply``'s move for ``seat``: None when the game took it, else why not
    (``NO_ACTION`` when the reply names no move; else the game's reason, possibly empty)."""
    action = extract_action(reply, lenient=lenient)
    if action is None:
        return NO_ACTION
    legal = game.legal_actions(seat)
    result = game.step(match_legal(action, legal) or action if legal else action)
    return None if result.valid else result.reason


def training_rewards(
    game: games.Game,
    invalid_by: int | None,
    reward: Literal["outcome", "payoff"] = "outcome",
    invalid_penalty: float = -1.5,
    invalid_opponent_reward: float = 0.5,
) -> dict[int, float]:
    """The seats' training rewards of a finished game: the invalid-move shaping when a seat
    broke the rules, else the outcome (+1/−1/0) or the game's payoff so far (``payoff``:
    ``info["returns"]``: Kuhn Poker's chips, an OpenSpiel game's returns)."""
    if invalid_by is not None:
        return {invalid_by: invalid_penalty, 1 - invalid_by: invalid_opponent_reward}
    if reward == "payoff":
        returns = game.info["returns"]
        return {seat: float(returns[seat]) for seat in (0, 1)}
    return game.outcome()
