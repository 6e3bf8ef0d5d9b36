"""Magnetic mirror descent from exact values (``spiral.mmd.values: exact``), against the policy
itself or a fixed or averaged opponent.

No hands are played: every information state of the game is scored by the current policy π,
and Q(s, a) is the exact expected return of playing a at s when the acting seat then follows π
and the other seat follows the opponent's policy σ, each state's histories weighted by their
reach (the tree walk of OpenSpiel's action_value module; a seat's states are valued in a walk
where it plays π, the other seat σ). The opponent is, by ``spiral.opponent.kind``:

- ``mirror``: σ = π (self-play: the MMD step of Sokota et al., ICLR 2023, full feedback);
- ``fictitious``: σ = the extensive-form average of the policy's past iterates π_0..π_{t-1}
  (fictitious play's opponent, Heinrich, Lanctot & Silver 2015, computed exactly from each
  step's scored states; self-play at step 0, before there is a past);
- ``random``: σ uniform over the legal moves (a fixed opponent: MMD then converges to a
  regularised best response to it, which an opponent that adapts can exploit);
- ``bot`` ``cfr[:<iterations>]``: σ = CFR+'s equilibrium (a fixed, unexploitable opponent).

Any other opponent has no policy to walk with and is refused in one line.
"""

from __future__ import annotations

from typing import Any

from games.bots import BotError, parse
from selfplay.core.errors import UserError
from selfplay.loops.spiral.history import PendingAverages, game_key
from selfplay.loops.spiral.imitation import targets
from selfplay.loops.spiral.mmd import mmd_target
from selfplay.loops.spiral.states import ScoredState, score_every_state, target_episodes
from selfplay.loops.spiral.strategy import view_of
from selfplay.stats.exploitability import StateCounts, tabular
from selfplay.types import Episode

EXACT_OPPONENTS = ("mirror", "fictitious", "random", "bot")


def check_exact_values(settings) -> None:
    """One line unless exact values can be computed: no imitation target, an opponent with a
    policy to walk with (mirror, fictitious, random, a cfr bot), every game with an exact
    view."""
    if settings.imitate is not None:
        raise UserError("spiral.imitate and spiral.mmd.values: exact both set every state's "
                        "target: choose one")
    opponent = settings.opponent
    if opponent.kind not in EXACT_OPPONENTS:
        raise UserError("spiral.mmd.values: exact values the policy against an opponent's "
                        f"policy at every state: opponent kind {opponent.kind!r} has none; use "
                        "mirror, fictitious, random or {kind: bot, bot: cfr}")
    if opponent.kind == "bot":
        try:
            kind = parse(opponent.bot).kind
        except BotError as exc:
            raise UserError(f"spiral.opponent.bot: {exc}") from None
        if kind != "cfr":
            raise UserError(f"spiral.mmd.values: exact needs the opponent's policy at every "
                            f"state: bot {opponent.bot!r} has none; use cfr or cfr:<iterations>")
    for spec in settings.games:
        try:
            view_of(spec.id, spec.kwargs)
        except UserError as exc:
            raise UserError(f"spiral.mmd.values: exact walks the game tree: {exc}") from None


def _walk(spiel_game, seat_policies: list) -> Any:
    from open_spiel.python.algorithms.action_value import TreeWalkCalculator

    walk = TreeWalkCalculator(spiel_game)
    walk.compute_all_states_action_values(seat_policies)
    return walk


def exact_values(
    spiel_game, states: list[ScoredState], opponent: list[StateCounts] | None = None
) -> tuple[list[list[float]], float]:
    """(Q(s, a) for every scored state and legal move, the policy's expected return averaged
    over its two seats) when the acting seat plays the scored policy and the other seat plays
    ``opponent`` (None: the scored policy too; then the return is the first seat's)."""
    mine = tabular(spiel_game, [scored.counts() for scored in states])
    if opponent is None:
        walks = [_walk(spiel_game, [mine, mine])] * 2
    else:
        theirs = tabular(spiel_game, opponent)
        walks = [_walk(spiel_game, [mine, theirs]), _walk(spiel_game, [theirs, mine])]
    values = []
    for scored in states:
        walk = walks[scored.player]
        key = (scored.player, scored.key)
        reach = walk.info_state_prob[key]  # > 0: a softmax policy reaches every state
        weighted = walk.weighted_action_values[key]
        values.append([float(weighted[a][scored.player]) / reach for a in scored.legal])
    if opponent is None:
        return values, float(walks[0].root_values[0])
    return values, float(walks[0].root_values[0] + walks[1].root_values[1]) / 2


class PastIterates(PendingAverages):
    """Fictitious play's opponent: the extensive-form average of the policy's scored iterates,
    per game; each step's iterate settles once its update is done, as measured strategies do."""

    def opponent(self, key: str, before: int) -> list[StateCounts] | None:
        """The average of the iterates of steps before ``before`` (None: there are none)."""
        average = self.average(key, before)
        return None if average is None else average.states()


def fixed_opponent(opponent, spiel_game, states: list[ScoredState]) -> list[StateCounts]:
    """The random player's or a CFR bot's policy at every scored state (the bot's is the
    imitation ceiling's target, ``imitation.targets``)."""
    rows = []
    for scored in states:
        if opponent.kind == "random":
            probabilities = [1.0 / len(scored.legal)] * len(scored.legal)
        else:
            solved = targets(opponent.bot, spiel_game, scored.state)
            probabilities = [solved.get(a, 0.0) for a in scored.legal]
        rows.append(StateCounts(scored.key, scored.player, scored.legal, scored.names,
                                probabilities))
    return rows


async def exact_mmd_episodes(
    loop, policy, game_id: str, kwargs: dict, step: int, settings, past: PastIterates
) -> tuple[list[Episode], dict[str, float]]:
    """The MMD step at every information state from exact values: one episode per (state,
    legal move) rewarded π*(move | state), and the step's figures."""
    spiel_game, states = await score_every_state(loop, policy, game_id, kwargs)
    opponent, kind = None, loop.settings.opponent.kind
    if kind == "fictitious":
        key = game_key(game_id, kwargs)
        past.hold(step, key, str(spiel_game), [scored.counts() for scored in states])
        opponent = past.opponent(key, before=step)
    elif kind != "mirror":
        opponent = fixed_opponent(loop.settings.opponent, spiel_game, states)
    values, value = exact_values(spiel_game, states, opponent)
    targets = [mmd_target(scored.turn.choice.log_pi, q, settings.eta, settings.alpha)
               for scored, q in zip(states, values, strict=True)]
    episodes, figures = target_episodes(loop.name, game_id, step, states, targets, "mmd")
    name = "mmd/self_play_value" if opponent is None else "mmd/value_against_opponent"
    return episodes, {"mmd/states": float(len(states)), "mmd/target_kl": figures["mmd/kl"],
                      name: value}
