"""Who sits across from the policy in SPIRAL, by name: the opponents it evaluates against
(``spiral.eval_opponents``) and the bot it may train against (``opponent: {kind: bot, bot:
...}``), checked against every game when the config is loaded (docs/games.md#bots); the pool
of past snapshots (``pool``, ``fictitious``) and the results fictitious self-play keeps."""

from __future__ import annotations

import random

import games
from games import CheckpointPool, FictitiousPool, assign_seats, bots
from games.opponents import MODEL
from selfplay.core.errors import UserError
from selfplay.engines.base import BASE_ADAPTER
from selfplay.loops.spiral.records import Seat
from selfplay.types import Episode

# evaluation opponents that are not bots: the random player, the initial policy (the base model,
# LoRA runs only), and the past snapshots of the opponent pool (opponent kinds pool, fictitious)
NAMED = ("random", "initial", "pool")
POOLED = ("pool", "fictitious")  # the opponent kinds that keep a pool of snapshots


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
    if "pool" in settings.eval_opponents and settings.opponent.kind not in POOLED:
        raise UserError("spiral.eval_opponents: pool plays the opponent pool's snapshots, which "
                        "only opponent kinds pool and fictitious keep; drop it or use opponent: "
                        "{kind: pool}")


def check_pool(opponent, finetune: str, steps: int) -> None:
    """A pool of snapshots needs LoRA (a snapshot is a copy of the adapter), and fictitious
    self-play a first snapshot before the last step (until then it is self-play): one line."""
    if opponent.kind in ("frozen", *POOLED) and finetune != "lora":
        raise UserError(f"opponent kind {opponent.kind!r} needs train.finetune: lora")
    if opponent.kind == "fictitious" and opponent.refresh_every >= steps:
        raise UserError(f"spiral.opponent.refresh_every: {opponent.refresh_every} takes the first "
                        f"snapshot after the last of train.steps: {steps}, so fictitious self-play "
                        "would never play one; snapshot sooner or use kind: mirror")


def make_pool(opponent) -> CheckpointPool:
    """The pool of ``opponent`` settings (kind fictitious: one that keeps results)."""
    if opponent.kind == "fictitious":
        return FictitiousPool(opponent.pool_size, opponent.refresh_every,
                              opponent.weighting or "uniform", opponent.decay or 0.99)
    return CheckpointPool(opponent.pool_size, opponent.refresh_every)


def policy_score(episode: Episode) -> float:
    """A finished training game's result for the policy's seat: 1 win, ½ draw (or a game cut off
    unfinished), 0 loss; an invalid move loses for its mover."""
    info = episode.info
    seat = next(int(s) for s, who in info["seats"].items() if who == MODEL)
    if info["invalid_by"] is not None:
        return 0.0 if int(info["invalid_by"]) == seat else 1.0
    outcome = (info.get("outcome") or {}).get(str(seat), 0.0)
    return (float(outcome) + 1.0) / 2.0


def record_fictitious(pool: FictitiousPool, episodes: list[Episode]) -> dict[str, float]:
    """Record each game the policy played against a snapshot, for that snapshot; the step's
    figures: the share of games against each snapshot (and, before the first one, against the
    policy itself: ``opponents/mirror``) and each snapshot's win rate after the step."""
    drawn: dict[str, int] = {}
    for episode in episodes:
        snapshot = episode.info.get("opponent_adapter")
        drawn[snapshot or "mirror"] = drawn.get(snapshot or "mirror", 0) + 1
        if snapshot is not None:
            pool.record(snapshot, policy_score(episode))
    total = max(len(episodes), 1)
    metrics = {f"opponents/{name}/share": count / total for name, count in drawn.items()}
    metrics |= {f"opponents/{name}/win_rate": pool.win_rate(name) for name in pool.ids}
    return metrics


def training_seats(
    opponent, pool: CheckpointPool, adapter: str, rng: random.Random
) -> tuple[dict[int, Seat], dict[int, str]]:
    """A training game's seats ({seat: Seat}) and who sits where ({seat: "model" |
    "opponent"}, drawn at random): the policy's seat trained, the other by ``opponent.kind``
    (until the pool's first snapshot, fictitious is self-play and pool the initial policy)."""
    assignment = assign_seats(rng)
    kind = opponent.kind
    seats = {}
    mirror = kind == "mirror" or (kind == "fictitious" and not len(pool))
    for seat, who in assignment.items():
        if who == "model" or mirror:
            seats[seat] = Seat("policy", adapter, trained=True)
        elif kind == "random":
            seats[seat] = Seat("random", rng=random.Random(rng.randrange(2**31)))
        elif kind == "bot":
            seats[seat] = bot_seat(opponent.bot, rng.randrange(2**31))
        elif kind == "frozen" or not len(pool):
            seats[seat] = Seat("adapter", BASE_ADAPTER)
        else:
            seats[seat] = Seat("adapter", pool.sample(rng))
    return seats, assignment


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
