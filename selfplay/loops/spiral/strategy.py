"""The policy's strategy in a small OpenSpiel game, measured from the model itself, and its
exploitability (``spiral.eval_exploitability``, ``selfplay strategy RUN``).

At every information state of the game the policy is asked exactly as it is asked in play (the
loop's own role prompt, the observation the game adapter renders for that state) ``samples``
times; each reply's move is parsed from the whole reply as in play and matched to the legal
actions, and a reply with no legal move counts as invalid. ``selfplay.stats.exploitability``
turns the counts into OpenSpiel's exact best response (docs/games.md#exploitability).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import games
from games import extract_action, match_legal
from games.kuhn_poker import from_openspiel, openspiel_move
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.spiral.history import Measured
from selfplay.loops.spiral.moves import Normalisation, candidates, state_policy
from selfplay.loops.spiral.records import Seat
from selfplay.stats.exploitability import (
    StateCounts,
    bootstrap,
    exploitability,
    information_states,
    invalid_mass,
    load,
    value_against_uniform,
)
from selfplay.types import Request


class Player(Protocol):
    """What is measured: the SPIRAL loop's way of asking the policy for a move."""

    settings: Any
    config: Any

    def policy_adapter(self) -> str: ...

    def move_request(self, seat: int, who: Seat, game: games.Game, greedy: bool) -> Request: ...

OPENSPIEL = "openspiel:"
NATIVE_KUHN = "kuhn_poker"  # our one-round Kuhn Poker, measured at OpenSpiel's states


@dataclass
class View:
    """A game as the policy plays it, at any state of an OpenSpiel game: ``at(state)`` gives the
    ``Game`` positioned there (rendering what a player sees), ``name(game, player, action)``
    the legal move of that game that OpenSpiel's ``action`` is."""

    spiel_game: Any
    at: Callable[[Any], games.Game]
    name: Callable[[games.Game, int, int], str]


def view_of(game_id: str, kwargs: dict | None = None) -> View:
    """The view of an ``openspiel:`` game, or of our one-round ``kuhn_poker`` through
    OpenSpiel's ``kuhn_poker``; any other game has no exact best response here (one line)."""
    if game_id.startswith(OPENSPIEL):
        game = games.make(game_id)
        load(game.game_string)  # two-player zero-sum sequential, and small enough: or one line

        def at(state: Any) -> games.Game:
            game.set_state(state)
            return game

        return View(game.spiel_game, at, lambda g, player, action: g.action_name(player, action))
    if game_id == NATIVE_KUHN and (kwargs or {}).get("rounds", 5) == 1:
        return View(load("kuhn_poker"), from_openspiel, openspiel_move)
    raise UserError(f"exploitability of {game_id!r}: only OpenSpiel games (openspiel:...) and "
                    "kuhn_poker with kwargs {rounds: 1} have an exact best response here")


def rendered_states(view: View) -> Iterator[tuple[str, int, Any, games.Game, list[int], list[str]]]:
    """(key, player, one of its OpenSpiel states, the ``Game`` positioned there, the legal
    action ids, their move names) for every information state, in OpenSpiel's order. The
    ``Game`` may be one object moved from state to state: render what is asked of it before
    taking the next item."""
    for key, player, state in information_states(view.spiel_game):
        game = view.at(state)
        legal = state.legal_actions(player)
        yield key, player, state, game, legal, [view.name(game, player, a) for a in legal]


async def measure(
    loop: Player,
    policy: BatchingPolicy,
    game_id: str,
    samples: int,
    scored: bool = False,
    kwargs: dict | None = None,
) -> tuple[Any, list[StateCounts]]:
    """(the OpenSpiel game, the policy's replies at each of its information states): counted
    over ``samples`` sampled replies, or with ``scored`` the probability of replying with each
    legal move in the answer format, the rest of the probability left as other replies. A run
    whose moves are scored (``spiral.action: scored``) is always measured exactly: its policy
    *is* the distribution over the legal moves (``counts`` = π, no invalid mass; the mass the
    model put outside the legal replies is ``outside``)."""
    view = view_of(game_id, kwargs)
    seat = Seat("policy", loop.policy_adapter())
    exact = loop.settings.action == "scored"
    asks, rows = [], []
    for key, player, _, game, legal, names in rendered_states(view):
        rows.append(StateCounts(key, player, legal, names, [0.0] * len(legal)))
        asks += [(rows[-1], loop.move_request(player, seat, game, greedy=False))
                 for _ in range(1 if scored or exact else samples)]
    if scored or exact:
        norm = loop.settings.action_norm if exact else None
        await policy.gather(score_moves(policy, request, counts, norm) for counts, request in asks)
        return view.spiel_game, rows
    completions = await policy.gather(policy(request) for _, request in asks)
    for (counts, _), completion in zip(asks, completions, strict=True):
        counts.replies.append(completion.reply)
        action = extract_action(completion.reply, lenient=loop.settings.lenient)
        chosen = match_legal(action, counts.names) if action is not None else None
        if chosen is None:
            counts.invalid += 1
        else:
            counts.counts[counts.names.index(chosen)] += 1
    return view.spiel_game, rows


async def score_moves(
    policy: BatchingPolicy, request, counts: StateCounts, norm: Normalisation | None = None
) -> None:
    """P(the reply is ``\\boxed{<move>}``) for each legal move, after the prompt's prefill, the
    rest of the probability as invalid; with ``norm`` (a scored-move run) the policy π itself,
    normalised as it plays, and the rest of the probability as ``outside``."""
    replies = candidates(policy.tokenizer, request, counts.names)
    logprobs = (await policy.likelihoods(request, replies)).logprobs
    if norm is not None:
        counts.counts, counts.outside = state_policy(logprobs, counts.names, replies, norm)
        counts.invalid = 0.0
        return
    counts.counts = [math.exp(sum(lp)) for lp in logprobs]
    counts.invalid = max(0.0, 1.0 - sum(counts.counts))


def exploitability_figures(
    game_id: str, spiel: Any, rows: list[StateCounts], seed: int, exact: bool = False,
    samples: int = 16,
) -> dict[str, float]:
    """``eval/exploitability/<game>`` of the measured policy, its 90% bootstrap interval, and
    the invalid mass; ``exact`` (a scored-move policy, measured exactly): the interval is what a
    referee sampling ``samples`` moves per state from π would find (the figure itself has no
    sampling error), and the mass outside the legal replies is reported too."""
    drawn = [as_draws(r, samples) for r in rows] if exact else rows
    low, high = bootstrap(spiel, drawn, seed=seed)
    prefix = f"eval/exploitability/{game_id}"  # openspiel:kuhn_poker and kuhn_poker differ
    outside = {f"{prefix}/outside": sum(r.outside for r in rows) / len(rows)} if exact else {}
    return outside | {
        prefix: exploitability(spiel, rows),
        f"{prefix}/low": low,
        f"{prefix}/high": high,
        f"{prefix}/invalid": invalid_mass(rows),
    }


def as_draws(state: StateCounts, samples: int) -> StateCounts:
    """An exact distribution as the expected counts of ``samples`` draws from it (what the
    bootstrap resamples)."""
    return StateCounts(state.key, state.player, state.actions, state.names,
                       [p * samples for p in state.counts], state.invalid * samples)


async def exploitability_evaluation(loop, policy: BatchingPolicy, step: int) -> dict[str, float]:
    """``spiral.eval_exploitability``: each game's current policy measured (exactly when moves
    are scored) and its exploitability with an interval, its exact expected return against the
    random player (``.../value_vs_random``), then the average policy's exploitability over every
    measurement so far (the loop's strategy history), and the training hands played before it."""
    s, metrics = loop.settings, {}
    for spec in s.eval_exploitability:
        spiel, rows = await measure(loop, policy, spec.id, s.exploitability_samples,
                                    kwargs=spec.kwargs)
        exact = s.action == "scored"  # a scored-move policy is measured exactly
        metrics |= exploitability_figures(spec.id, spiel, rows, loop.config.seed, exact,
                                          s.exploitability_samples)
        metrics[f"eval/exploitability/{spec.id}/value_vs_random"] = value_against_uniform(
            spiel, rows)
        hands = sum(n for earlier, n in loop.games_played.items() if earlier < step)
        measured = Measured(step, hands, spec.id, spec.kwargs,
                            "scored" if exact else "sampled", rows)
        metrics |= loop.strategies.add(measured, spiel)
    return metrics
