"""SPIRAL's game mixture through the curriculum: per-game scores, TSCL's choice, state."""

import pytest
import torch

from selfplay.loops import validate
from selfplay.loops.spiral import SpiralLoop
from selfplay.loops.spiral.records import game_groups
from selfplay.types import Episode
from tests.test_spiral import ScriptedEngine, collect, first_legal, spiral_config

GAMES = [{"id": "tictactoe"}, {"id": "kuhn_poker"}]


def two_game_loop(tmp_path, **curriculum) -> SpiralLoop:
    config = spiral_config(tmp_path, games=GAMES, games_per_step=6)
    data = config.model_dump()
    data["curriculum"] = {**data["curriculum"], **curriculum}
    return SpiralLoop(validate(data, "test"))


def test_game_scores_rescale_training_rewards(tmp_path):
    loop = two_game_loop(tmp_path, sampler="tscl")
    episodes = [
        Episode(
            "spiral", "tictactoe", [], {"player_0": -1.5, "player_1": 0.5}, info={"game_index": 0}
        ),
        Episode(
            "spiral", "kuhn_poker", [], {"player_0": 1.0, "player_1": -1.0}, info={"game_index": 1}
        ),
        Episode("spiral", "kuhn_poker", [], {"player_1": 0.0}, info={"game_index": 1}),
    ]
    tictactoe, kuhn = game_groups(episodes, loop.settings.invalid_penalty)
    # (r + 1.5) / 2.5: −1.5 → 0, 0.5 → 0.8, 1 → 1, −1 → 0.2, 0 → 0.6
    assert (tictactoe.task, tictactoe.attempts) == (0, 2)
    assert tictactoe.successes == pytest.approx(0.8)
    assert (kuhn.task, kuhn.attempts) == (1, 3) and kuhn.successes == pytest.approx(1.8)
    assert tictactoe.effective and kuhn.effective


def test_tscl_sends_the_games_to_the_arm_with_most_progress(tmp_path):
    loop = two_game_loop(tmp_path, sampler="tscl", tscl_epsilon=0.0)
    sampler = loop.curriculum.sampler
    sampler.q = {"tictactoe@?": 0.01, "kuhn_poker@?": -0.2}  # |Q|: kuhn poker is moving most
    sampler.last_score = {"tictactoe@?": 0.5, "kuhn_poker@?": 0.5}
    episodes, metrics = collect(loop, ScriptedEngine(first_legal), step=3)
    assert {e.env for e in episodes} == {"kuhn_poker"} and len(episodes) == 6
    assert metrics["curriculum/drawn_groups"] == 1  # one group: the kuhn poker games
    assert metrics["curriculum/top_tasks"].startswith("kuhn_poker#1=1")
    assert loop.curriculum.buffer.attempts.tolist() == [0, 12]  # 6 games × 2 trained seats


def test_uniform_keeps_the_configured_weights_and_logs_the_mixture(tmp_path):
    loop = two_game_loop(tmp_path)
    episodes, metrics = collect(loop, ScriptedEngine(first_legal))
    played = {e.env for e in episodes}
    assert metrics["curriculum/drawn_groups"] == len(played)
    assert loop.curriculum.buffer.attempts.sum() == 12


def test_spiral_curriculum_state_round_trips(tmp_path):
    loop = two_game_loop(tmp_path, sampler="tscl")
    for step in range(3):
        collect(loop, ScriptedEngine(first_legal), step=step)
    path = tmp_path / "state.pt"
    torch.save(loop.state_dict(), path)
    other = two_game_loop(tmp_path, sampler="tscl")
    other.load_state_dict(torch.load(path, weights_only=False))
    assert other.curriculum.sampler.q == loop.curriculum.sampler.q
    assert other.curriculum.buffer.attempts.tolist() == loop.curriculum.buffer.attempts.tolist()
    assert [e.env for e in collect(other, ScriptedEngine(first_legal), 3)[0]] == [
        e.env for e in collect(loop, ScriptedEngine(first_legal), 3)[0]
    ]
