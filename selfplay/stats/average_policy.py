"""The average of several measured policies of a two-player game, exactly: the extensive-form
(realization-weighted) average of Heinrich, Lanctot & Silver 2015, Theorem 7
(docs/algorithms.md#the-average-policy).

Each policy is what ``selfplay.stats.exploitability`` measures: a ``StateCounts`` per information
state. Its behaviour at a state is its valid replies' distribution (``probabilities``), as the
exploitability reads it. The average of policies π_1..π_n with weights w_j is

    π̄(a|s) = Σ_j w_j x_j(s) π_j(a|s) / Σ_j w_j x_j(s),

where x_j(s) is the product of the acting player's *own* probabilities on the way to s (chance
and the opponent left out). A state that the player reaches under no policy (Σ_j w_j x_j(s) = 0)
is reached by π̄ neither, so no payoff depends on what it does there; it gets the plain weighted
mean of the π_j. The plain per-state mean everywhere is *not* the average strategy: a policy
that rarely reaches a state should say little about what the average does there.

``Average`` keeps the two sums per state, so a run can fold one measured policy in at a time
(SPIRAL's ``eval/exploitability/<game>/average``) and save them in a checkpoint.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from selfplay.stats.exploitability import StateCounts, load

# (the player's previous information state, the action taken there), None at its first decision
Parent = tuple[str, int] | None


@functools.cache
def own_parents(game_string: str) -> dict[str, Parent]:
    """Every information state's own-player parent, by a walk of the whole game tree (once per
    game and process; Leduc Poker's takes about 0.1 s), parents first. Perfect recall makes the
    parent the same from every history of the information state; a game where it is not is
    refused."""
    game = load(game_string)
    parents: dict[str, Parent] = {}

    def walk(state, last: tuple[Parent, ...]) -> None:
        if state.is_terminal():
            return
        if state.is_chance_node():
            for action, _ in state.chance_outcomes():
                walk(state.child(action), last)
            return
        player = state.current_player()
        key = state.information_state_string(player)
        if parents.setdefault(key, last[player]) != last[player]:
            raise ValueError(f"{game_string}: information state {key!r} is reached after "
                             "different own moves (no perfect recall)")
        for action in state.legal_actions(player):
            walk(state.child(action), tuple((key, action) if p == player else parent
                                            for p, parent in enumerate(last)))

    walk(game.new_initial_state(), (None,) * game.num_players())
    return parents


def own_reach(game_string: str, states: Sequence[StateCounts]) -> dict[str, float]:
    """x(s) for every information state of a measured policy: the product of its own player's
    probabilities (``StateCounts.probabilities``) on the way to s."""
    probabilities = {s.key: dict(zip(s.actions, s.probabilities(), strict=True))
                     for s in states}
    reach: dict[str, float] = {}
    for key, parent in own_parents(game_string).items():  # parents come first
        if parent is None:
            reach[key] = 1.0
        else:
            before, action = parent
            reach[key] = reach[before] * probabilities[before][action]
    return reach


class Average:
    """The running sums of the average policy of one game: per information state
    Σ_j w_j x_j(s) π_j(·|s) and Σ_j w_j x_j(s), the same without x (for states no policy
    reaches), and the invalid share of the replies, weighted alike."""

    def __init__(self, game_string: str) -> None:
        self.game_string = game_string
        self.policies = 0  # how many were folded in
        self.layout: dict[str, tuple[int, list[int], list[str]]] = {}  # key: player, actions, names
        self.reached: dict[str, list[float]] = {}  # Σ w x π(a), then Σ w x ι, then Σ w x
        self.plain: dict[str, list[float]] = {}  # Σ w π(a), then Σ w ι, then Σ w

    def add(self, states: Sequence[StateCounts], weight: float = 1.0) -> None:
        """Fold one measured policy in (every information state of the game, measured)."""
        if weight < 0:
            raise ValueError(f"an average's weight must be >= 0, not {weight}")
        measured = {s.key: s for s in states}
        missing = sorted(set(own_parents(self.game_string)) - set(measured))
        if missing:
            raise ValueError(f"no measurement for information states {missing[:5]}")
        for state in states:  # the first policy's order of states is the average's
            self.layout.setdefault(state.key, (state.player, list(state.actions),
                                               list(state.names)))
            if self.layout[state.key][1] != list(state.actions):
                raise ValueError(f"state {state.key!r}: actions {state.actions} differ from "
                                 f"the average's {self.layout[state.key][1]}")
        for key, x in own_reach(self.game_string, states).items():
            state = measured[key]
            invalid = state.invalid / state.total if state.total > 0 else 0.0
            terms = [*state.probabilities(), invalid, 1.0]
            for sums, scale in ((self.reached, weight * x), (self.plain, weight)):
                row = sums.setdefault(key, [0.0] * len(terms))
                for i, term in enumerate(terms):
                    row[i] += scale * term
        self.policies += 1

    def states(self) -> list[StateCounts]:
        """The average policy as measured counts: ``counts`` π̄(a|s)·(1 − ῑ), ``invalid`` ῑ (the
        invalid share, averaged with the same weights), so ``probabilities()`` is π̄."""
        if not self.policies:
            raise ValueError("the average of no policy")
        out = []
        for key, (player, actions, names) in self.layout.items():
            sums = self.reached[key] if self.reached[key][-1] > 0 else self.plain[key]
            total = sums[-1]
            average = [v / total for v in sums[:-2]]
            invalid = sums[-2] / total
            out.append(StateCounts(key, player, actions, names,
                                   [p * (1.0 - invalid) for p in average], invalid))
        return out

    def copy(self) -> Average:
        return Average.from_state_dict(self.state_dict())

    def state_dict(self) -> dict[str, Any]:
        return {"game": self.game_string, "policies": self.policies,
                "layout": {k: list(v) for k, v in self.layout.items()},
                "reached": self.reached, "plain": self.plain}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Average:
        average = cls(state["game"])
        average.policies = int(state["policies"])
        average.layout = {k: (int(p), list(a), list(n)) for k, (p, a, n) in state["layout"].items()}
        average.reached = {k: list(v) for k, v in state["reached"].items()}
        average.plain = {k: list(v) for k, v in state["plain"].items()}
        return average


def average_policy(
    game, policies: Sequence[Sequence[StateCounts]], weights: Sequence[float] | None = None
) -> list[StateCounts]:
    """The average of measured ``policies`` of the OpenSpiel ``game`` (uniform weights unless
    ``weights``), one ``StateCounts`` per information state."""
    if not policies:
        raise ValueError("the average of no policy")
    weights = [1.0] * len(policies) if weights is None else list(weights)
    if len(weights) != len(policies):
        raise ValueError(f"{len(weights)} weights for {len(policies)} policies")
    average = Average(str(game))
    for states, weight in zip(policies, weights, strict=True):
        average.add(states, weight)
    return average.states()


def plain_mean(policies: Sequence[Sequence[StateCounts]]) -> list[StateCounts]:
    """The per-state mean of the policies' distributions, each state alike: *not* the average
    strategy (kept to show the difference; docs/algorithms.md#the-average-policy)."""
    out = []
    for rows in zip(*policies, strict=True):
        first = rows[0]
        mean = [sum(p) / len(rows) for p in zip(*(r.probabilities() for r in rows), strict=True)]
        out.append(StateCounts(first.key, first.player, first.actions, first.names, mean))
    return out
