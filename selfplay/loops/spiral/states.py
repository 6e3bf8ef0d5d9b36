"""Every information state of a small game, scored by the policy as it plays there, turned into
one training sample per (state, legal move) with a target probability as its advantage.

Two updates train this way, both without playing a hand: the imitation ceiling
(``spiral.imitate``: the target is CFR+'s equilibrium) and magnetic mirror descent with exact
values (``spiral.mmd.values: exact``: the target is the mirror-descent step from the policy's
own values, computed over the game tree). The policy-gradient term Σ_a σ(a | s)·∇log π(a | s)
of the samples is the gradient of the cross-entropy −Σ_a σ(a | s)·log π(a | s), every state
weighing the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.spiral.moves import played_as, scored_move
from selfplay.loops.spiral.records import Seat
from selfplay.loops.spiral.strategy import rendered_states, view_of
from selfplay.stats.exploitability import StateCounts
from selfplay.types import Episode, Request, Sample, Turn


@dataclass
class ScoredState:
    """One information state as the policy saw it: OpenSpiel's key, the acting player, one of
    its histories, the legal actions (OpenSpiel ids and move names), the request and the
    scored turn (``turn.choice.log_pi``: log π over the legal moves)."""

    key: str
    player: int
    state: Any
    legal: list[int]
    names: list[str]
    request: Request
    turn: Turn

    def counts(self) -> StateCounts:
        """π at this state, as a measurement (for OpenSpiel's tabular policy)."""
        pi = [math.exp(x) for x in self.turn.choice.log_pi]
        return StateCounts(self.key, self.player, self.legal, self.names, pi)


async def score_every_state(
    loop, policy: BatchingPolicy, game_id: str, kwargs: dict
) -> tuple[Any, list[ScoredState]]:
    """(the OpenSpiel game, every information state scored by the current policy)."""
    view = view_of(game_id, kwargs)
    seat = Seat("policy", loop.policy_adapter())
    asks = []
    for key, player, state, game, legal, names in rendered_states(view):
        asks.append((key, player, state, legal, names,
                     loop.move_request(player, seat, game, greedy=True)))
    turns = await policy.gather(
        scored_move(policy, request, names, loop.settings.action_norm, True, None)
        for *_, names, request in asks
    )
    return view.spiel_game, [ScoredState(*ask, turn) for ask, turn in zip(asks, turns,
                                                                          strict=True)]


def target_episodes(
    loop_name: str, game_id: str, step: int, states: list[ScoredState],
    targets: list[list[float]], kind: str,
) -> tuple[list[Episode], dict[str, float]]:
    """One episode per (state, legal move), rewarded σ(move | state); and the mean
    cross-entropy and KL(σ ‖ π) over states before the update (``<kind>/cross_entropy``,
    ``<kind>/kl``)."""
    episodes, cross, kl = [], 0.0, 0.0
    for scored, sigma in zip(states, targets, strict=True):
        log_pi = scored.turn.choice.log_pi
        cross -= sum(p * lp for p, lp in zip(sigma, log_pi, strict=True))
        kl += sum(p * (math.log(p) - lp) for p, lp in zip(sigma, log_pi, strict=True) if p > 0)
        for move, p in enumerate(sigma):
            episodes.append(Episode(
                loop=loop_name, env=game_id, turns=[played_as(scored.turn, move)],
                rewards={scored.request.role: p}, group_id=f"s{step}-{scored.key}",
                info={kind: {"state": scored.key, "move": scored.names[move], "target": p}}))
    n = max(len(states), 1)
    return episodes, {f"{kind}/cross_entropy": cross / n, f"{kind}/kl": kl / n}


def target_samples(episodes: list[Episode]) -> list[Sample]:
    """Each (state, move) with advantage σ(move | state): the cross-entropy's gradient."""
    return [Sample(turn=e.turns[0], advantage=e.rewards[e.turns[0].role], group_id=e.group_id,
                   info={"env": e.env}) for e in episodes]
