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

from typing import Any

from games.bots import BotError, cfr_policy, check, parse
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.spiral.states import score_every_state, target_episodes
from selfplay.loops.spiral.strategy import view_of
from selfplay.types import Episode


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
    spiel_game, states = await score_every_state(loop, policy, game_id, kwargs)
    sigma = []
    for scored in states:
        wanted = targets(bot, spiel_game, scored.state)
        sigma.append([wanted.get(a, 0.0) for a in scored.legal])
    return target_episodes(loop.name, game_id, step, states, sigma, "imitation")
