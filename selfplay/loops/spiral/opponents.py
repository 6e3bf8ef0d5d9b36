"""Who sits across from the policy in SPIRAL, by name: the opponents it evaluates against
(``spiral.eval_opponents``) and the bot it may train against (``opponent: {kind: bot, bot:
...}``), checked against every game when the config is loaded (docs/games.md#bots)."""

from __future__ import annotations

import random

import games
from games import bots
from selfplay.core.errors import UserError
from selfplay.engines.base import BASE_ADAPTER
from selfplay.loops.spiral.records import Seat

# evaluation opponents that are not bots: the random player, the initial policy (the base model,
# LoRA runs only), and the past snapshots of the opponent pool (opponent kind pool only)
NAMED = ("random", "initial", "pool")


def opponent_name(name: str) -> str:
    """An evaluation opponent's name as the metrics spell it: one of ``NAMED``, or a bot by
    its canonical name (``mcts`` is ``mcts:1000``); anything else is a ``ValueError`` (the
    config's own one-line error)."""
    if name in NAMED:
        return name
    try:
        return bots.parse(name).name
    except bots.UnknownBotError:
        raise ValueError(f"{name!r} is no evaluation opponent: {', '.join(NAMED)}, or a bot "
                         "(mcts:<simulations>, alphabeta, cfr:<iterations>; docs/games.md#bots)"
                         ) from None
    except bots.BotError as exc:  # a bot's name, with a wrong number
        raise ValueError(str(exc)) from None


def bot_name(name: str) -> str:
    """A training bot's canonical name; a name that is no bot is a ``ValueError``."""
    try:
        return bots.parse(name).name
    except bots.BotError as exc:
        raise ValueError(str(exc)) from None


def check_opponents(settings, game_specs) -> None:
    """Every bot named (to train or evaluate against) can play every game of ``spiral.games``
    (alphabeta and cfr solve the game now, once per process), and ``pool`` is evaluated only
    where the pool exists; else a one-line `UserError` before a run folder exists."""
    named = [o for o in settings.eval_opponents if o not in NAMED]
    if settings.opponent.kind == "bot":
        named.insert(0, settings.opponent.bot)
    for spec in game_specs if named else []:
        game = games.make(spec.id, max_turns=spec.max_turns, **spec.kwargs)
        for name in dict.fromkeys(named):
            bots.check(name, game)
    if "pool" in settings.eval_opponents and settings.opponent.kind != "pool":
        raise UserError("spiral.eval_opponents: pool plays the opponent pool's snapshots, which "
                        "only opponent kind pool keeps; drop it or use opponent: {kind: pool}")


def bot_seat(name: str, seed: int) -> Seat:
    """A seat played by the bot ``name`` with its own seeded stream."""
    return Seat("bot", bot=bots.make(name, seed))


def eval_seat(opponent: str, seed: int, index: int, pool: list[str]) -> Seat:
    """The seat of evaluation opponent ``opponent`` in evaluation game ``index`` (seed
    ``seed``): ``pool`` takes the pool's snapshots in turn, two games (one per seat) each."""
    if opponent == "random":
        return Seat("random", rng=random.Random(seed))
    if opponent == "initial":
        return Seat("adapter", BASE_ADAPTER)
    if opponent == "pool":
        return Seat("adapter", pool[(index // 2) % len(pool)])
    return bot_seat(opponent, seed)
