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
from tests.conftest import tiny_config


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
