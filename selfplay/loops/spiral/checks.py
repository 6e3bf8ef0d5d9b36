"""SPIRAL's settings checked against its games before a run folder exists: unknown ids, refused
arguments and games that fail to start, and settings a game cannot take, each one line now
rather than mid-run."""

from __future__ import annotations

import games
from selfplay.core.errors import UserError
from selfplay.loops.spiral.exact import check_exact_values
from selfplay.loops.spiral.imitation import check_target
from selfplay.loops.spiral.strategy import view_of


def check_settings(s) -> None:
    """One ``UserError`` line for the first thing in the ``spiral:`` settings ``s`` that its
    games refuse."""
    # unknown ids, refused arguments and games that fail to start: one line now, before a
    # run folder exists, not mid-run
    for spec in s.games:
        game = games.trial(spec.id, max_turns=spec.max_turns, **spec.kwargs)
        if s.action == "scored" and game.legal_actions(game.current_player) is None:
            raise UserError(
                f"spiral.action: scored needs each game's legal moves; game {spec.id!r} "
                "lists none (a free-form game): use action: text"
            )
        if s.reward == "payoff" and "returns" not in game.info:
            raise UserError(
                f"spiral.reward: payoff needs each game's payoff (info['returns']); game "
                f"{spec.id!r} reports none: use reward: outcome"
            )
    for game_id in s.eval_ood_games:
        games.trial(game_id)
    if (s.update == "mmd" or s.explore) and s.action != "scored":
        raise UserError("spiral.update: mmd and spiral.explore work on scored moves: set "
                        "action: scored")
    if s.imitate is not None:
        if s.action != "scored":
            raise UserError("spiral.imitate trains the scored policy: set action: scored")
        for spec in s.games:
            check_target(s.imitate, spec.id, spec.kwargs)
    if s.update == "mmd" and s.mmd.values == "exact":
        check_exact_values(s)
    for spec in s.eval_exploitability:  # a game without an exact best response
        view_of(spec.id, spec.kwargs)
