"""Magnetic mirror descent self-play over scored moves (``spiral.update: mmd``).

Policy-gradient self-play moves a softmax policy slowly wherever it is nearly deterministic:
the gradient of a move the policy rarely plays carries its probability as a factor, so a
policy that starts by calling 97% of the time (the embedded model in Kuhn Poker) needs
thousands of hands to learn to fold a Jack. Magnetic mirror descent (MMD, Sokota et al., ICLR
2023) takes the mirror-descent step in the policy's own space instead: at every information
state s the step's games visited,

    π*(· | s) ∝ [ π_t(· | s) · ρ(· | s)^{αη} · exp(η · Q̂(s, ·)) ]^{1 / (1 + αη)}

with π_t the policy that played (its exact distribution over the legal moves, recorded with
each scored move), ρ the magnet (uniform over the legal moves), η the step size in units of
the game's payoff and α the magnet's pull (with α > 0 the iterates converge to a regularised
equilibrium, which approaches a Nash equilibrium as α shrinks). Q̂(s, a) is the mean return
of the step's visits to s that played a (the acting seat's payoff, self-play both sides), and
a legal move no visit played gets the state's mean return V̂(s): no push either way.

The learner then fits the policy to π* by cross-entropy, −Σ_a π*(a | s) log π_θ(a | s), each
visited state weighing the same: one sample per (state, move) whose advantage is π*(a | s), so
the policy-gradient term Σ_a π*(a | s) ∇log π_θ(a | s) is the cross-entropy's gradient (the
same samples as the imitation ceiling, ``spiral/imitation.py``, with a target the games made).
Every target comes from self-play outcomes; no bot or solver is consulted.

``values: exact`` (full feedback, as in the paper's tabular experiments) plays no hands: every
information state of the game is scored by the current policy and Q(s, a) computed over the
game tree (``spiral/exact.py``). The targets are then free of sampling noise and every state
gets one each step, so what is left is the model's own ability to follow them; the game must
have an exact view (Kuhn, Leduc Poker).
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from typing import Literal

from pydantic import Field

from selfplay.config import Strict
from selfplay.loops.spiral.moves import played_as
from selfplay.types import Episode, Sample, Turn


class MMDSettings(Strict):
    eta: float = Field(2.0, gt=0)  # step size η, per unit of the game's payoff
    alpha: float = Field(0.1, ge=0)  # the magnet's pull α (0: plain mirror descent)
    magnet: Literal["uniform"] = "uniform"
    # Q̂ from the step's hands (``sampled``: bandit feedback) or Q exactly from the game tree
    # under the current policy at every information state (``exact``: full feedback, no hands)
    values: Literal["sampled", "exact"] = "sampled"


@dataclasses.dataclass
class Visits:
    """One information state's visits in a step: its turn (prompt and candidates), the policy
    that played there, and the returns of each move played."""

    turn: Turn
    returns: dict[int, list[float]] = dataclasses.field(default_factory=lambda: defaultdict(list))


def visited_states(episodes: list[Episode]) -> dict[tuple, Visits]:
    """The step's scored turns grouped by (seat role, prompt): an information state each."""
    states: dict[tuple, Visits] = {}
    for episode in episodes:
        for turn in episode.turns:
            if turn.choice is None or turn.role not in episode.rewards:
                continue
            key = (turn.role, tuple(turn.prompt_ids))
            visits = states.setdefault(key, Visits(turn))
            visits.returns[turn.choice.chosen].append(episode.rewards[turn.role])
    return states


def mmd_target(log_pi: list[float], q: list[float], eta: float, alpha: float) -> list[float]:
    """π* over the legal moves (uniform magnet): the MMD step from π_t with values ``q``."""
    log_magnet = -math.log(len(log_pi))
    logits = [(lp + alpha * eta * log_magnet + eta * v) / (1 + alpha * eta)
              for lp, v in zip(log_pi, q, strict=True)]
    top = max(logits)
    weights = [math.exp(x - top) for x in logits]
    total = sum(weights)
    return [w / total for w in weights]


def state_values(visits: Visits) -> list[float]:
    """Q̂(s, a) for every legal move: its visits' mean return, else the state's mean V̂(s)."""
    every = [r for returns in visits.returns.values() for r in returns]
    mean = sum(every) / len(every)
    moves = len(visits.turn.choice.candidates)
    return [sum(visits.returns[a]) / len(visits.returns[a]) if visits.returns.get(a) else mean
            for a in range(moves)]


def mmd_samples(
    episodes: list[Episode], settings: MMDSettings
) -> tuple[list[Sample], dict[str, float]]:
    """One sample per (visited state, legal move) with advantage π*(move | state), and the
    step's figures: states visited, the mean KL(π* ‖ π_t) the step asks for, the mean share of
    legal moves whose value was measured."""
    samples, kl, measured = [], 0.0, 0.0
    states = visited_states(episodes)
    for visits in states.values():
        choice = visits.turn.choice
        target = mmd_target(choice.log_pi, state_values(visits), settings.eta, settings.alpha)
        kl += sum(p * (math.log(p) - lp) for p, lp in zip(target, choice.log_pi, strict=True)
                  if p > 0)
        measured += len(visits.returns) / len(target)
        for move, p in enumerate(target):
            samples.append(Sample(turn=played_as(visits.turn, move), advantage=p,
                                  info={"env": "mmd"}))
    n = max(len(states), 1)
    return samples, {"mmd/states": float(len(states)), "mmd/target_kl": kl / n,
                     "mmd/moves_measured": measured / n}
