"""The average of measured policies (selfplay/stats/average_policy.py): OpenSpiel's
``PolicyAggregator`` on random Kuhn policies, a Kuhn case worked by hand, the plain per-state
mean shown to be another policy (another value, another exploitability), XFP's own average of its
best responses, the running sums' state round trip, and Leduc Poker."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from selfplay.stats.average_policy import Average, average_policy, own_parents, plain_mean
from selfplay.stats.exploitability import (
    StateCounts,
    exploitability,
    information_states,
    load,
    tabular,
)
from tests.conftest import measured


def random_policy(game, rng: random.Random, invalid: bool = False) -> list[StateCounts]:
    """Counts drawn at random at every state (all positive: every state reached)."""
    return measured(game, lambda key, legal: ([rng.uniform(0.05, 1.0) for _ in legal],
                                              rng.uniform(0, 0.5) if invalid else 0.0))


def distribution(rows: list[StateCounts]) -> dict[str, list[float]]:
    return {r.key: r.probabilities() for r in rows}


def test_the_average_is_openspiels_policy_aggregator_on_random_kuhn_policies():
    from open_spiel.python.algorithms import policy_aggregator

    kuhn = load("kuhn_poker")
    rng = random.Random(3)
    policies = [random_policy(kuhn, rng) for _ in range(3)]
    weights = [0.5, 2.0, 1.0]
    tables = [tabular(kuhn, rows) for rows in policies]
    theirs = policy_aggregator.PolicyAggregator(kuhn).aggregate(
        [0, 1], [tables, tables], [weights, weights])
    for uniform in (False, True):
        ours = distribution(average_policy(kuhn, policies, None if uniform else weights))
        if uniform:
            theirs = policy_aggregator.PolicyAggregator(kuhn).aggregate(
                [0, 1], [tables, tables], [[1.0] * 3, [1.0] * 3])
        assert len(ours) == 12
        for player in (0, 1):
            for key, probabilities in theirs.policy[player].items():
                # the same sums in another order; OpenSpiel adds 1e-40 to each
                assert ours[key] == pytest.approx([probabilities[a] for a in (0, 1)], abs=1e-12)


PASS, BET = 0, 1  # Kuhn: action 0 passes (checks, folds), 1 bets (calls)


def kuhn_policy(kuhn, **bet_probability: float) -> list[StateCounts]:
    """P(bet) at the states named (``s0``: key "0", ``s0pb``: "0pb"), uniform elsewhere."""
    return measured(kuhn, lambda key, legal: (
        [1 - bet_probability.get(f"s{key}", 0.5), bet_probability.get(f"s{key}", 0.5)], 0.0))


def test_a_kuhn_average_worked_by_hand():
    """Player 0 holding the Jack: A bets 0.2 and, after passing, calls a bet 0.9; B bets 0.6 and
    calls 0.1. Reach of "0pb" (passed, facing a bet): 0.8 under A, 0.4 under B, so the average
    calls (0.8·0.9 + 0.4·0.1) / 1.2 = 19/30 there, bets (0.2 + 0.6) / 2 = 0.4 first."""
    kuhn = load("kuhn_poker")
    a = kuhn_policy(kuhn, s0=0.2, s0pb=0.9)
    b = kuhn_policy(kuhn, s0=0.6, s0pb=0.1)
    average = distribution(average_policy(kuhn, [a, b]))
    assert average["0"] == pytest.approx([0.6, 0.4])
    assert average["0pb"] == pytest.approx([11 / 30, 19 / 30])
    assert all(average[k] == pytest.approx([0.5, 0.5]) for k in average if k not in ("0", "0pb"))
    # weights 3:1 toward A: calls (3·0.8·0.9 + 0.4·0.1) / (3·0.8 + 0.4) = 2.2 / 2.8
    weighted = distribution(average_policy(kuhn, [a, b], [3.0, 1.0]))
    assert weighted["0pb"][BET] == pytest.approx(2.2 / 2.8)
    assert weighted["0"][BET] == pytest.approx((3 * 0.2 + 0.6) / 4)
    # A never passes with the Jack: "0pb" is B's alone, whatever A would do there
    never_passes = kuhn_policy(kuhn, s0=1.0, s0pb=1.0)
    alone = distribution(average_policy(kuhn, [never_passes, b]))
    assert alone["0pb"] == pytest.approx([0.9, 0.1])
    # a state neither reaches: the plain mean (no payoff depends on it)
    both_bet = kuhn_policy(kuhn, s0=1.0, s0pb=0.3)
    unreached = distribution(average_policy(kuhn, [never_passes, both_bet]))
    assert unreached["0pb"] == pytest.approx([0.35, 0.65])


def test_the_plain_per_state_mean_is_another_policy():
    """The average plays like the mixture (its value against any opponent is the mean of the
    policies' values); the plain per-state mean does not, and is exploitable by another amount."""
    from open_spiel.python.algorithms.expected_game_score import policy_value

    kuhn = load("kuhn_poker")
    a = kuhn_policy(kuhn, s0=0.2, s0pb=0.9, s1=0.1, s1pb=0.8)
    b = kuhn_policy(kuhn, s0=0.6, s0pb=0.1, s1=0.7, s1pb=0.2)
    average, mean = average_policy(kuhn, [a, b]), plain_mean([a, b])
    assert distribution(mean)["0pb"] == pytest.approx([0.5, 0.5])

    def value_as_player_0(rows, opponent) -> float:
        return policy_value(kuhn.new_initial_state(),
                            [tabular(kuhn, rows), tabular(kuhn, opponent)])[0]

    rng = random.Random(5)
    for opponent in [kuhn_policy(kuhn), *(random_policy(kuhn, rng) for _ in range(3))]:
        mixture = (value_as_player_0(a, opponent) + value_as_player_0(b, opponent)) / 2
        assert value_as_player_0(average, opponent) == pytest.approx(mixture, abs=1e-12)
        assert abs(value_as_player_0(mean, opponent) - mixture) > 1e-3
    # A bets the Jack and passes then folds the King; B the other way round. Their plain mean is
    # uniform play (11/24); their average never calls after passing the Jack or the King (only
    # the policy that folds there reaches it), which a best response exploits further
    a = kuhn_policy(kuhn, s0=1.0, s0pb=1.0, s2=0.0, s2pb=0.0)
    b = kuhn_policy(kuhn, s0=0.0, s0pb=0.0, s2=1.0, s2pb=1.0)
    average = average_policy(kuhn, [a, b])
    assert distribution(average)["0pb"] == distribution(average)["2pb"] == [1.0, 0.0]
    assert exploitability(kuhn, plain_mean([a, b])) == pytest.approx(11 / 24, abs=1e-12)
    assert exploitability(kuhn, average) > 11 / 24 + 0.05


def test_xfp_average_policy_is_the_average_of_its_best_responses():
    """Extensive-form fictitious play (OpenSpiel's ``XFPSolver``) keeps the average of the
    uniform policy and its best responses, uniformly weighted: our average of the same
    policies is its policy at every state."""
    from open_spiel.python.algorithms.fictitious_play import XFPSolver

    kuhn = load("kuhn_poker")
    solver = XFPSolver(kuhn, save_oracles=True)
    for _ in range(6):
        solver.iteration()
    states = information_states(kuhn)

    def as_counts(callables) -> list[StateCounts]:  # one callable per player
        rows = []
        for key, player, state in states:
            probabilities = dict(callables[player](state))
            legal = state.legal_actions(player)
            rows.append(StateCounts(key, player, legal, [str(a) for a in legal],
                                    [probabilities[a] for a in legal]))
        return rows

    iterates = [as_counts([solver._oracles[0][j], solver._oracles[1][j]])
                for j in range(len(solver._oracles[0]))]
    assert len(iterates) == 7  # the uniform policy and six best responses
    ours = distribution(average_policy(kuhn, iterates))
    theirs = solver.average_policy()
    for key, player, state in states:
        expected = theirs.action_probabilities(state, player)
        assert ours[key] == pytest.approx([expected[a] for a in (0, 1)], abs=1e-12)


def test_running_sums_fold_one_at_a_time_and_survive_a_state_round_trip():
    kuhn = load("kuhn_poker")
    rng = random.Random(7)
    policies = [random_policy(kuhn, rng, invalid=True) for _ in range(4)]
    running = Average(str(kuhn))
    running.add(policies[0])
    running.add(policies[1])
    saved = json.loads(json.dumps(running.state_dict()))  # plain data: JSON as well as torch
    restored = Average.from_state_dict(saved)
    for rows in policies[2:]:
        restored.add(rows)
    assert restored.policies == 4
    batch = average_policy(kuhn, policies)
    for ours, whole in zip(restored.states(), batch, strict=True):
        assert ours.key == whole.key and ours.probabilities() == pytest.approx(
            whole.probabilities(), abs=1e-12)
        assert ours.invalid == pytest.approx(whole.invalid, abs=1e-12)


def test_the_invalid_share_is_averaged_with_the_same_weights():
    """A: 1 invalid reply in 4 at every state, B: none. At "0pb" A's reach 0.8, B's 0.4: the
    average's invalid share there is 0.8·0.25 / 1.2 = 1/6; its first state's (reach 1 each) 1/8."""
    kuhn = load("kuhn_poker")
    a = measured(kuhn, lambda key, legal: ([2.4, 0.6] if key == "0" else [1.5, 1.5], 1.0))
    b = measured(kuhn, lambda key, legal: ([0.4, 0.6] if key == "0" else [0.5, 0.5], 0.0))
    by_key = {r.key: r for r in average_policy(kuhn, [a, b])}
    assert by_key["0pb"].invalid == pytest.approx(1 / 6)
    assert by_key["0"].invalid == pytest.approx(1 / 8)
    assert by_key["0"].probabilities() == pytest.approx([0.6, 0.4])  # A 0.8/0.2, B 0.4/0.6
    assert by_key["0"].total == pytest.approx(1.0)


def test_bad_averages_are_refused():
    kuhn = load("kuhn_poker")
    rows = kuhn_policy(kuhn)
    with pytest.raises(ValueError, match="no policy"):
        average_policy(kuhn, [])
    with pytest.raises(ValueError, match="2 weights for 1"):
        average_policy(kuhn, [rows], [1.0, 2.0])
    with pytest.raises(ValueError, match="no measurement"):
        average_policy(kuhn, [rows[:-1]])


def test_leduc_averages_and_identical_policies_average_to_themselves():
    leduc = load("leduc_poker")
    parents = own_parents(str(leduc))
    assert len(parents) == 936
    assert sum(p is None for p in parents.values()) > 0  # first decisions of each player
    rng = random.Random(11)
    one = random_policy(leduc, rng)
    same = average_policy(leduc, [one, one, one])
    assert np.allclose([p for r in same for p in r.probabilities()],
                       [p for r in one for p in r.probabilities()], atol=1e-12)
    mixed = average_policy(leduc, [one, *(random_policy(leduc, rng) for _ in range(4))])
    assert 0 < exploitability(leduc, mixed) < 2.373611 + 1  # a policy OpenSpiel can measure
