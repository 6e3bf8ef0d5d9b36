"""The ceiling (``spiral.imitate: cfr``): the same LoRA, the same prompts and the same scored
moves, trained by supervised imitation of CFR+'s equilibrium instead of by self-play.

At every information state s of the game (OpenSpiel's enumeration, rendered as in play), the
policy's candidates are scored and each legal move a becomes one sample whose advantage is the
target's probability σ(a | s), so the policy-gradient term Σ_a σ(a | s)·∇log π(a | s) is the
gradient of the cross-entropy −Σ_a σ(a | s)·log π(a | s): every state weighs the same. How low
this drives exploitability is what the model can reach through this interface at all; the gap
between self-play and it belongs to the method (docs/games.md#the-imitation-ceiling).
"""

from __future__ import annotations

import math
from typing import Any

from games.bots import BotError, cfr_policy, check, parse
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.spiral.mmd import played_as
from selfplay.loops.spiral.moves import scored_move
from selfplay.loops.spiral.records import Seat
from selfplay.loops.spiral.strategy import view_of
from selfplay.stats.exploitability import information_states
from selfplay.types import Episode, Sample


def check_target(bot: str, game_id: str, kwargs: dict) -> None:
    """One line unless ``bot`` is a CFR bot that solves ``game_id`` and the game has an exact
    view (every information state can be asked)."""
    try:
        spec = parse(bot)
    except BotError as exc:
        raise UserError(f"spiral.imitate: {exc}") from None
    if spec.kind != "cfr":
        raise UserError(f"spiral.imitate: {bot!r} is not an equilibrium to imitate; use cfr or "
                        "cfr:<iterations> (OpenSpiel's CFR+)")
    view_of(game_id, kwargs)  # a game without an exact view: one line
    import games

    try:
        check(spec.name, games.make(game_id, **kwargs))
    except BotError as exc:
        raise UserError(f"spiral.imitate: {exc}") from None


def targets(bot: str, spiel_game: Any, state: Any) -> dict[int, float]:
    """σ(· | s) of the CFR+ solution, by OpenSpiel action id."""
    return {int(a): float(p) for a, p in
            cfr_policy(spiel_game, parse(bot).number).get_state_policy(state)}


async def imitation_episodes(
    loop, policy: BatchingPolicy, bot: str, game_id: str, kwargs: dict, step: int
) -> tuple[list[Episode], dict[str, float]]:
    """One episode per (information state, legal move), rewarded σ(move | state); and the
    step's cross-entropy and KL(σ ‖ π) averaged over states (before this step's update)."""
    view = view_of(game_id, kwargs)
    seat = Seat("policy", loop.policy_adapter())
    asks = []
    for key, player, state in information_states(view.spiel_game):
        game = view.at(state)
        legal = state.legal_actions(player)
        names = [view.name(game, player, a) for a in legal]
        wanted = targets(bot, view.spiel_game, state)
        request = loop.move_request(player, seat, game, greedy=True)
        asks.append((key, legal, names, [wanted.get(a, 0.0) for a in legal], request))
    turns = await policy.gather(
        scored_move(policy, request, names, loop.settings.action_norm, True, None)
        for _, _, names, _, request in asks
    )
    episodes, cross, kl = [], 0.0, 0.0
    for (key, _, names, sigma, request), turn in zip(asks, turns, strict=True):
        log_pi = turn.choice.log_pi
        cross -= sum(p * lp for p, lp in zip(sigma, log_pi, strict=True))
        kl += sum(p * (math.log(p) - lp) for p, lp in zip(sigma, log_pi, strict=True) if p > 0)
        for move, p in enumerate(sigma):
            chosen = played_as(turn, move)
            episodes.append(Episode(
                loop=loop.name, env=game_id, turns=[chosen], rewards={request.role: p},
                group_id=f"s{step}-{key}", info={"imitation": {"state": key,
                                                               "move": names[move],
                                                               "target": p}}))
    n = max(len(asks), 1)
    return episodes, {"imitation/cross_entropy": cross / n, "imitation/kl": kl / n}


def imitation_samples(episodes: list[Episode]) -> list[Sample]:
    """Each (state, move) with advantage σ(move | state): the cross-entropy's gradient."""
    return [Sample(turn=e.turns[0], advantage=e.rewards[e.turns[0].role], group_id=e.group_id,
                   info={"env": e.env}) for e in episodes]
