"""One SPIRAL game played to its end (``SpiralLoop.play``): the model's seats move through the
policy (a scored draw over the legal moves, or a free-text reply parsed into one), a random
seat by a random legal move, a bot by its search or strategy; the first invalid or unparseable
move ends the game."""

from __future__ import annotations

import random

import games
from games import RandomOpponent
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.spiral.moves import scored_move
from selfplay.loops.spiral.records import GameRecord, Seat
from selfplay.loops.spiral.rules import NO_ACTION, play_move


async def play_game(
    loop,
    policy: BatchingPolicy,
    game: games.Game,
    seed: int,
    seats: dict[int, Seat],
    greedy: bool,
) -> GameRecord:
    """Play ``game`` from ``seed`` with ``seats``; the record of its trained turns and faults."""
    game.reset(seed)
    record = GameRecord()
    moves_rng = random.Random(seed * 7919 + 1)  # scored moves' draws, seeded per game
    while not game.done:
        seat = game.current_player
        who = seats[seat]
        record.moves += 1
        if who.kind in ("random", "bot"):
            opponent_move(game, seat, who, record)
            continue
        request = loop.move_request(seat, who, game, greedy)
        if loop.settings.action == "scored":
            await scored_policy_move(loop, policy, game, seat, who, request, greedy, moves_rng,
                                     record)
        elif not await text_policy_move(loop, policy, game, seat, who, request, record):
            break
    return record


def opponent_move(game: games.Game, seat: int, who: Seat, record: GameRecord) -> None:
    """A random seat's or a bot's move (always a legal one where the game lists them)."""
    opponent = who.bot or RandomOpponent(who.rng.randrange(2**31))
    move = opponent.act(game, seat)
    record.random_guessed |= not opponent.verified
    result = game.step(move)
    if not result.valid:  # a free-form game's guess can break the rules too
        record.invalid_by, record.invalid_reason = seat, result.reason


async def scored_policy_move(
    loop, policy: BatchingPolicy, game: games.Game, seat: int, who: Seat, request,
    greedy: bool, rng: random.Random, record: GameRecord,
) -> None:
    """A draw over the legal moves' scores: always a valid move."""
    names = game.legal_actions(seat)
    turn = await scored_move(policy, request, names, loop.settings.action_norm, greedy, rng,
                             loop.settings.explore)
    record.outside.append(turn.choice.outside)
    if who.trained:
        record.turns.append(turn)
    result = game.step(names[turn.choice.chosen])
    if not result.valid:
        record.invalid_by, record.invalid_reason = seat, result.reason


async def text_policy_move(
    loop, policy: BatchingPolicy, game: games.Game, seat: int, who: Seat, request,
    record: GameRecord,
) -> bool:
    """A free-text reply parsed into a move; False when it held none (the game ends)."""
    completion = await policy(request)
    if who.trained:
        record.turns.append(loop.turn(request, completion, policy))
    # the whole reply: a prompt's prefill starts it
    refused = play_move(game, seat, completion.reply, loop.settings.lenient)
    if refused is not None:
        record.invalid_by, record.invalid_reason = seat, refused
    if refused == NO_ACTION:
        record.parse_failures += 1
        return False
    return True
