"""Magnetic mirror descent self-play (``spiral.update: mmd``) and exploration of scored moves:
the target at a state worked by hand, the values of moves no visit played, one sample per
(state, move) carrying π*, the explored behaviour's log-prob, and the settings' bad inputs."""

import math

import pytest

from selfplay.core.errors import UserError
from selfplay.loops import validate
from selfplay.loops.spiral import SpiralLoop
from selfplay.loops.spiral.mmd import MMDSettings, Visits, mmd_samples, mmd_target, state_values
from selfplay.types import Choice, Episode, Turn
from tests.conftest import run_tiny_spiral, tiny_config


def test_the_mirror_descent_target_by_hand():
    # π = (0.8, 0.2), Q̂ = (1, −1), η = 2, α = 0.1, uniform magnet over 2 moves:
    # π* ∝ (0.8·0.5^0.2·e^2)^(1/1.2) : (0.2·0.5^0.2·e^−2)^(1/1.2); the magnet cancels here
    a = (0.8 * math.e ** 2) ** (1 / 1.2)
    b = (0.2 * math.e ** -2) ** (1 / 1.2)
    got = mmd_target([math.log(0.8), math.log(0.2)], [1.0, -1.0], 2.0, 0.1)
    assert got == pytest.approx([a / (a + b), b / (a + b)], rel=1e-12)
    # equal values: the magnet pulls toward uniform, (0.8^(1/1.2) : 0.2^(1/1.2))
    flat = mmd_target([math.log(0.8), math.log(0.2)], [0.5, 0.5], 2.0, 0.1)
    assert flat == pytest.approx([0.8 ** (1 / 1.2) / (0.8 ** (1 / 1.2) + 0.2 ** (1 / 1.2)),
                                  0.2 ** (1 / 1.2) / (0.8 ** (1 / 1.2) + 0.2 ** (1 / 1.2))])
    # α = 0: plain mirror descent, π·e^{ηQ} renormalised
    assert mmd_target([math.log(0.5)] * 2, [1.0, 0.0], 1.0, 0.0) == pytest.approx(
        [math.e / (math.e + 1), 1 / (math.e + 1)])


def _turn(prompt, chosen, log_pi, role="player_0"):
    candidates = [[7], [8], [9]][: len(log_pi)]
    return Turn(role, list(prompt), candidates[chosen], [0.0], [1], "",
                choice=Choice(candidates, ["a", "b", "c"][: len(log_pi)], chosen,
                              [1.0] * len(log_pi), log_pi))


def test_a_move_no_visit_played_gets_the_state_mean():
    visits = Visits(_turn([1, 2], 0, [math.log(1 / 3)] * 3))
    visits.returns[0] += [1.0, 2.0]
    visits.returns[2] += [-3.0]
    assert state_values(visits) == pytest.approx([1.5, 0.0, -3.0])


def test_one_sample_per_state_and_move_carrying_the_target():
    log_pi = [math.log(0.6), math.log(0.4)]
    episodes = [  # state [1, 2]: move 0 won 1 and 2 chips, move 1 lost 1; state [3] once
        Episode("spiral", "kuhn", [_turn([1, 2], 0, log_pi)], {"player_0": 1.0}),
        Episode("spiral", "kuhn", [_turn([1, 2], 0, log_pi)], {"player_0": 2.0}),
        Episode("spiral", "kuhn", [_turn([1, 2], 1, log_pi), _turn([3], 1, log_pi, "player_1")],
                {"player_0": -1.0, "player_1": 1.0}),
    ]
    settings = MMDSettings(eta=1.0, alpha=0.0)
    samples, figures = mmd_samples(episodes, settings)
    assert figures["mmd/states"] == 2.0 and figures["mmd/moves_measured"] == pytest.approx(0.75)
    first = mmd_target(log_pi, [1.5, -1.0], 1.0, 0.0)
    second = mmd_target(log_pi, [1.0, 1.0], 1.0, 0.0)  # move 0 never played: V̂ = 1
    by_state = {}
    for sample in samples:
        by_state.setdefault(tuple(sample.turn.prompt_ids), []).append(
            (sample.turn.choice.chosen, sample.advantage))
    assert [p for _, p in sorted(by_state[(1, 2)])] == pytest.approx(first)
    assert [p for _, p in sorted(by_state[(3,)])] == pytest.approx(second)
    for sample in samples:  # each sample plays its own move, at π_t (importance weight 1)
        choice = sample.turn.choice
        assert sample.turn.completion_ids == choice.candidates[choice.chosen]
        assert choice.behaviour_logprob == pytest.approx(choice.log_pi[choice.chosen])


def test_an_explored_move_records_the_mixture_it_was_drawn_from():
    choice = Choice([[1], [2]], ["a", "b"], 1, [1.0, 1.0], [math.log(0.9), math.log(0.1)],
                    explore=0.2)
    assert choice.logprob == pytest.approx(math.log(0.1))
    assert choice.behaviour_logprob == pytest.approx(math.log(0.8 * 0.1 + 0.1))


def _config(tmp_path, **spiral):
    config = tiny_config(tmp_path, loop="spiral", advantage={"estimator": "rae"},
                         spiral={"games": [{"id": "kuhn_poker", "kwargs": {"rounds": 1}}],
                                 "games_per_step": 4, "eval_games": 0, **spiral})
    del config["rlvr"]
    config["roles"] = {"player": {"prompt": "player"}}
    return validate(config, "test")


@pytest.mark.parametrize("setting", [{"update": "mmd"}, {"explore": 0.2}])
def test_mirror_descent_and_exploration_need_scored_moves(tmp_path, setting):
    with pytest.raises(UserError, match="work on scored moves: set action: scored"):
        SpiralLoop(_config(tmp_path, **setting))


def test_the_imitation_target_must_be_a_cfr_bot(tmp_path):
    with pytest.raises(UserError, match="not an equilibrium to imitate"):
        SpiralLoop(_config(tmp_path, action="scored", imitate="mcts:10"))
    with pytest.raises(UserError, match="trains the scored policy"):
        SpiralLoop(_config(tmp_path, imitate="cfr"))


# ------------------------------------------------------------------ exact values (full feedback)
def _kuhn_q(policy: dict[str, list[float]],
            opponent: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Q(s, a) for the acting seat at every Kuhn information state, written out by hand (an
    independent reference for OpenSpiel's tree walk): the six deals equally likely, the
    histories of a state weighted by the opponent's reach, chips won as the payoff. ``policy``
    maps OpenSpiel's keys ("0", "1pb", ...) to (pass, bet) probabilities; the other seat plays
    ``opponent`` (default: ``policy`` too)."""
    moves = "pb"
    opponent = opponent or policy

    def payoff(cards, history):  # to seat 0, at a terminal history
        win = 1 if cards[0] > cards[1] else -1
        return {"pp": win, "pbp": -1, "pbb": 2 * win, "bp": 1, "bb": 2 * win}[history]

    def value(cards, history, me):  # to seat 0: seat ``me`` follows policy, the other opponent
        if history in ("pp", "pbp", "pbb", "bp", "bb"):
            return payoff(cards, history)
        seat = len(history) % 2
        pi = (policy if seat == me else opponent)[f"{cards[seat]}{history}"]
        return sum(p * value(cards, history + m, me) for p, m in zip(pi, moves, strict=True))

    q: dict[str, list[float]] = {}
    for key in policy:
        card, history = int(key[0]), key[1:]
        seat = len(history) % 2
        totals, reach_sum = [0.0, 0.0], 0.0
        for other in (c for c in range(3) if c != card):
            cards = (card, other) if seat == 0 else (other, card)
            reach = 1.0  # the opponent's probability of playing into this history
            for i, m in enumerate(history):
                if i % 2 != seat:
                    reach *= opponent[f"{cards[1 - seat]}{history[:i]}"][moves.index(m)]
            reach_sum += reach
            for a, m in enumerate(moves):
                sign = 1 if seat == 0 else -1
                totals[a] += reach * sign * value(cards, history + m, seat)
        q[key] = [t / reach_sum for t in totals]
    return q


def test_exact_values_are_the_hand_written_kuhn_values():
    import random as random_module

    from selfplay.loops.spiral.exact import exact_values
    from selfplay.loops.spiral.states import ScoredState
    from selfplay.stats.exploitability import information_states, load

    spiel = load("kuhn_poker")
    rng = random_module.Random(3)
    states, policy = [], {}
    for key, player, state in information_states(spiel):
        bet = rng.uniform(0.05, 0.95)  # an arbitrary mixed policy: every branch matters
        policy[key] = [1 - bet, bet]
        log_pi = [math.log(1 - bet), math.log(bet)]
        states.append(ScoredState(key, player, state, state.legal_actions(player),
                                  ["pass", "bet"], None, _turn([1], 0, log_pi)))
    values, root = exact_values(spiel, states)
    expected = _kuhn_q(policy)
    for scored, q in zip(states, values, strict=True):
        # float64 sums of at most a dozen products: far below 1e-9
        assert q == pytest.approx(expected[scored.key], abs=1e-9), scored.key
    # the first seat's expected return: Σ over deals of the start state's value
    start = [sum(p * v for p, v in zip(policy[str(c)], expected[str(c)], strict=True))
             for c in range(3)]
    assert root == pytest.approx(sum(start) / 3, abs=1e-9)
    # at the equilibrium's sign: a King facing a bet gains by calling, a Jack by folding
    assert values[[s.key for s in states].index("2pb")][1] > 0
    assert values[[s.key for s in states].index("0pb")][0] > values[
        [s.key for s in states].index("0pb")][1]


def test_exact_values_against_an_opponent_are_the_hand_written_kuhn_values():
    """Against another policy (a fixed opponent, or fictitious play's average), each seat's
    states are valued with that seat playing the policy and the other the opponent: the
    hand-written recursion with the two tables apart (fails if a walk swaps the seats)."""
    import random as random_module

    from selfplay.loops.spiral.exact import exact_values
    from selfplay.loops.spiral.states import ScoredState
    from selfplay.stats.exploitability import StateCounts, information_states, load

    spiel = load("kuhn_poker")
    rng = random_module.Random(5)
    states, policy, opponent, rows = [], {}, {}, []
    for key, player, state in information_states(spiel):
        bet, their_bet = rng.uniform(0.05, 0.95), rng.uniform(0.05, 0.95)
        policy[key], opponent[key] = [1 - bet, bet], [1 - their_bet, their_bet]
        states.append(ScoredState(key, player, state, state.legal_actions(player),
                                  ["pass", "bet"], None,
                                  _turn([1], 0, [math.log(1 - bet), math.log(bet)])))
        rows.append(StateCounts(key, player, state.legal_actions(player), ["pass", "bet"],
                                opponent[key]))
    values, _ = exact_values(spiel, states, rows)
    expected = _kuhn_q(policy, opponent)
    assert expected != _kuhn_q(policy)  # the opponent matters to every check below
    for scored, q in zip(states, values, strict=True):
        assert q == pytest.approx(expected[scored.key], abs=1e-9), scored.key


@pytest.mark.parametrize(("setting", "message"), [
    ({"opponent": {"kind": "frozen"}}, "opponent kind 'frozen' has none"),
    ({"opponent": {"kind": "bot", "bot": "mcts:10"}}, "bot 'mcts:10' has none"),
    ({"imitate": "cfr"}, "both set every state's target: choose one"),
    ({"games": [{"id": "tictactoe"}]}, "exact walks the game tree: exploitability of"),
])
def test_exact_values_refuse_what_they_cannot_value(tmp_path, setting, message):
    base = {"action": "scored", "update": "mmd", "mmd": {"values": "exact"}}
    with pytest.raises(UserError, match=message.replace("{", r"\{").replace("}", r"\}")):
        SpiralLoop(_config(tmp_path, **base, **setting))


@pytest.mark.parametrize("target", ["exact", "imitate"])
def test_a_step_on_every_state_moves_the_policy_toward_its_targets(tmp_path, target):
    """A tiny run of MMD from exact values (and of the imitation ceiling, which shares the
    path): one episode per (state, move) of Kuhn's 12 states, each state's targets summing to
    1, and after the step the policy's cross-entropy to the first step's targets is lower (the
    learner fits them: a flipped advantage sign raises it)."""
    import json

    kuhn = {"id": "kuhn_poker", "kwargs": {"rounds": 1}}
    spiral = {"games": [kuhn], "eval_games": 0, "eval_opponents": ["random"],
              "action": "scored", "eval_exploitability": [kuhn]}
    spiral |= ({"update": "mmd", "mmd": {"eta": 2.0, "alpha": 0.1, "values": "exact"}}
               if target == "exact" else {"imitate": "cfr"})
    run_dir, rows = run_tiny_spiral(tmp_path, spiral, "player_kuhn", {"steps": 1, "lr": 3e-3})
    kind = "mmd" if target == "exact" else "imitation"
    episodes = [json.loads(line) for line in (run_dir / "episodes" / "step-000000.jsonl").open()]
    assert len(episodes) == 24  # 12 information states × 2 legal moves
    by_state: dict[str, float] = {}
    for episode in episodes:
        by_state[episode["info"][kind]["state"]] = by_state.get(
            episode["info"][kind]["state"], 0.0) + episode["info"][kind]["target"]
    assert len(by_state) == 12 and all(t == pytest.approx(1.0) for t in by_state.values())
    # the second step's pre-update KL to its targets: MMD's move with π_t, so compare the
    # cross-entropy to the first step's targets instead, from the measured strategies
    strategies = [json.loads(line) for line in (run_dir / "strategies.jsonl").open()]
    first, last = strategies[0]["states"], strategies[-1]["states"]
    targets = {}
    for episode in episodes:
        info = episode["info"][kind]
        targets.setdefault(info["state"], {})[info["move"]] = info["target"]

    def cross_entropy(states):
        return -sum(sum(targets[s["key"]][name] * math.log(max(p, 1e-12))
                        for name, p in zip(s["names"], s["counts"], strict=True))
                    for s in states) / len(states)

    # measured here: 0.726 → 0.695 (exact) and 0.677 → 0.673 (imitation: CFR's targets of 0
    # and 1 are far from the tiny model's near-uniform π, and its states' gradients nearly
    # coincide, so one Adam step at lr 3e-3 gains little); a flipped sign raises both
    margin = 0.01 if target == "exact" else 0.002
    assert cross_entropy(last) < cross_entropy(first) - margin
    assert rows[0][f"{kind}/" + ("target_kl" if kind == "mmd" else "kl")] >= 0


def _tabular_mmd(alpha: float, eta: float, iterations: int) -> float:
    """Exploitability after ``iterations`` full MMD steps on a table (π replaced by π* each
    step), with this module's own target and exact values: what the LoRA run approximates."""
    from selfplay.loops.spiral.exact import exact_values
    from selfplay.loops.spiral.states import ScoredState
    from selfplay.stats.exploitability import (
        StateCounts,
        exploitability,
        information_states,
        load,
    )

    spiel = load("kuhn_poker")
    table = {key: [0.5, 0.5] for key, _, _ in information_states(spiel)}
    for _ in range(iterations):
        states = [ScoredState(key, player, state, state.legal_actions(player), ["p", "b"], None,
                              _turn([1], 0, [math.log(p) for p in table[key]]))
                  for key, player, state in information_states(spiel)]
        values, _ = exact_values(spiel, states)
        for scored, q in zip(states, values, strict=True):
            table[scored.key] = mmd_target(scored.turn.choice.log_pi, q, eta, alpha)
    return exploitability(spiel, [StateCounts(k, 0, [0, 1], ["p", "b"], p)
                                  for k, p in table.items()])


def test_exact_mmd_on_a_table_reaches_its_regularised_equilibrium_and_too_large_a_step_cycles():
    # measured (2026-11-28): α 0.2, η 1 settles at 0.044 (the α-regularised equilibrium's
    # exploitability) by ~60 steps; α 0.1, η 2 (the sampled runs' setting) cycles between 0.11
    # and 0.24 for 300 steps (0.145 at step 60), where α 0.1 with η ≤ 0.5 reaches 0.019: why
    # spiral-kuhn-exact-cpu uses α 0.2, η 1
    assert _tabular_mmd(0.2, 1.0, 60) == pytest.approx(0.044, abs=0.005)
    assert _tabular_mmd(0.1, 2.0, 60) > 0.1


def test_fictitious_play_plays_the_average_of_the_past_iterates_and_keeps_it_on_resume():
    """Exact fictitious play's opponent at step t is the extensive-form average of the scored
    policies of steps before t (none at step 0: self-play); a checkpoint holds the settled
    steps only, and a restored run averages the same iterates."""
    from selfplay.loops.spiral.exact import PastIterates
    from selfplay.stats.average_policy import average_policy
    from selfplay.stats.exploitability import StateCounts, information_states, load

    spiel = load("kuhn_poker")
    layout = [(key, player, state.legal_actions(player))
              for key, player, state in information_states(spiel)]

    def flat(rows):
        return [p for row in rows for p in row.probabilities()]

    def policy(bet: float) -> list[StateCounts]:
        return [StateCounts(key, player, legal, ["p", "b"], [1 - bet, bet])
                for key, player, legal in layout]

    past = PastIterates()
    past.hold(0, "kuhn", str(spiel), policy(0.9))
    assert past.opponent("kuhn", before=0) is None
    past.settle(0)
    past.hold(1, "kuhn", str(spiel), policy(0.1))
    saved = past.state_dict()  # step 1's update not done: its iterate is not saved
    expected = average_policy(spiel, [policy(0.9), policy(0.1)])
    got = past.opponent("kuhn", before=2)
    assert flat(got) == pytest.approx(flat(expected))
    # reach-weighted, not the plain mean 0.5: the first seat reaches "0pb" by passing, which
    # the bet-0.1 iterate does 9 times as often, so it bets there (0.1·0.9 + 0.9·0.1) / 1.0
    assert got[[s.key for s in got].index("0pb")].probabilities()[1] == pytest.approx(0.18)
    restored = PastIterates()
    restored.load_state_dict(saved)
    assert flat(restored.opponent("kuhn", before=2)) == pytest.approx(flat(policy(0.9)))


@pytest.mark.heavy  # a 2-step run, ~30 s: CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_exact_fictitious_play_values_against_the_past_from_its_second_step(tmp_path):
    """A tiny run of exact fictitious play: step 0 has no past (self-play's value), step 1
    values the policy against step 0's iterate, and the checkpoint keeps that iterate."""
    import torch

    kuhn = {"id": "kuhn_poker", "kwargs": {"rounds": 1}}
    spiral = {"games": [kuhn], "eval_games": 0, "eval_opponents": ["random"],
              "action": "scored", "opponent": {"kind": "fictitious", "refresh_every": 1},
              "update": "mmd", "mmd": {"eta": 1.0, "alpha": 0.2, "values": "exact"}}
    run_dir, rows = run_tiny_spiral(tmp_path, spiral, "player_kuhn", {"steps": 2, "lr": 3e-3})
    steps = [r for r in rows if "mmd/states" in r]
    assert "mmd/self_play_value" in steps[0] and "mmd/value_against_opponent" not in steps[0]
    assert "mmd/value_against_opponent" in steps[1] and "mmd/self_play_value" not in steps[1]
    latest = run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip()
    state = torch.load(latest / "state.pt", weights_only=False)
    past = state["loop"]["past_iterates"]["kuhn_poker {\"rounds\": 1}"]
    assert len(past["reached"]) == 12  # Kuhn's information states, two steps folded in


def test_the_fixed_opponents_are_the_random_player_and_cfrs_equilibrium():
    """What exact values walk against: the random player is uniform play (exploitability
    11/24), the CFR bot is CFR+'s solution (under 0.001); a bot row that lost the solver's
    probabilities would be neither."""
    from types import SimpleNamespace

    from selfplay.loops.spiral.exact import fixed_opponent
    from selfplay.loops.spiral.states import ScoredState
    from selfplay.stats.exploitability import exploitability, information_states, load

    spiel = load("kuhn_poker")
    states = [ScoredState(key, player, state, state.legal_actions(player), ["p", "b"], None,
                          _turn([1], 0, [math.log(0.5)] * 2))
              for key, player, state in information_states(spiel)]
    uniform = fixed_opponent(SimpleNamespace(kind="random", bot=None), spiel, states)
    assert exploitability(spiel, uniform) == pytest.approx(11 / 24, abs=1e-12)
    cfr = fixed_opponent(SimpleNamespace(kind="bot", bot="cfr"), spiel, states)
    assert exploitability(spiel, cfr) < 1e-3
