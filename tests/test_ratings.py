"""openskill ratings (selfplay/stats/ratings.py): one game's update against the Plackett–Luce
formulas by hand, and SPIRAL's ladder on a hand-made set of evaluation results."""

from __future__ import annotations

import math

import pytest

from selfplay.stats.ratings import GameResult, ladder, ladder_metrics, ladder_rows, rate

MU, SIGMA, BETA = 25.0, 25.0 / 3, 25.0 / 6  # openskill's prior and performance spread
TAU = 25.0 / 300  # openskill's drift: σ² grows by τ² before every game


def test_one_win_from_the_prior_is_the_plackett_luce_update_by_hand():
    """Two players at the prior, s² = σ² + τ²: c² = 2s² + 2β², each wins with p = ½, so the
    winner gains s²/c · ½ and the loser loses it; s² shrinks by 1 − (s²/c²)(s/c)·p(1−p)."""
    s2 = SIGMA**2 + TAU**2
    c = math.sqrt(2 * s2 + 2 * BETA**2)
    gain = s2 / c * 0.5
    sigma = math.sqrt(s2 * (1 - (s2 / c**2) * (math.sqrt(s2) / c) * 0.25))
    winner, loser = rate([GameResult(0, 1, 1.0)], ["a", "b"])
    assert winner["mu"] == pytest.approx(MU + gain) and loser["mu"] == pytest.approx(MU - gain)
    assert winner["mu"] == pytest.approx(27.6354, abs=1e-4)
    assert winner["sigma"] == loser["sigma"] == pytest.approx(sigma)
    assert winner["ordinal"] == pytest.approx(MU + gain - 3 * sigma)
    assert (winner["games"], loser["games"]) == (1, 1)
    drawn = rate([GameResult(0, 1, 0.0)], ["a", "b"])
    assert [r["mu"] for r in drawn] == [pytest.approx(MU)] * 2  # a draw moves neither


RESULTS = [  # the policy's evaluation games: it beats random, loses to the bot
    {"opponent": "random", "reward": 1.0},
    {"opponent": "random", "reward": 1.0},
    {"opponent": "random", "reward": 0.0},
    {"opponent": "mcts:100", "reward": -1.0},
    {"opponent": "mcts:100", "reward": -1.0},  # an invalid move of the policy's scores −1 too
    {"opponent": "random", "reward": -1.0, "meaningful": False},  # the random seat guessed
]


def test_the_ladder_ranks_the_bot_above_the_policy_above_random():
    rows = ladder(RESULTS)
    assert [r["name"] for r in rows] == ["mcts:100", "policy", "random"]
    by_name = {r["name"]: r for r in rows}
    assert by_name["policy"]["games"] == 5  # the guessed game is left out
    assert by_name["random"]["games"] == 3 and by_name["mcts:100"]["games"] == 2
    assert by_name["mcts:100"]["mu"] > MU > by_name["random"]["mu"]
    assert ladder(RESULTS) == rows  # seeded: the same results, the same ratings
    assert ladder([{"opponent": "random", "reward": 1.0, "meaningful": False}]) == []


def test_ladder_metrics_are_logged_and_read_back():
    metrics = ladder_metrics(RESULTS)
    assert set(metrics) == {f"eval/ladder/{name}/{stat}" for name in ("policy", "random",
                                                                       "mcts:100")
                            for stat in ("mu", "sigma", "ordinal")}
    rows = ladder_rows([{"step": 4, "eval/ladder/x/win": 1.0, **metrics}])
    assert [r["player"] for r in rows] == ["mcts:100", "policy", "random"]
    policy = next(r for r in rows if r["player"] == "policy")
    assert policy == {"step": 4, "player": "policy", "mu": metrics["eval/ladder/policy/mu"],
                      "sigma": metrics["eval/ladder/policy/sigma"],
                      "ordinal": metrics["eval/ladder/policy/ordinal"]}
