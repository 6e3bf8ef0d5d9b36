"""SPIRAL's ``reward: payoff`` (issue 31): a game played to its end trains on its payoff
(``info["returns"]``: Kuhn Poker's chips, an OpenSpiel game's returns), not on +1/-1/0."""

import pytest

from games import legal_actions_from_text
from selfplay.core.errors import UserError
from selfplay.loops.spiral import SpiralLoop
from tests.test_spiral import ScriptedEngine, collect, spiral_config


def bet_or_call(prompt: str) -> str:
    """Bet when no bet is open, call when one is: every round is a called bet (2 chips)."""
    legal = [m.lower() for m in legal_actions_from_text(prompt) or []]
    move = next(m for m in ("[bet]", "[call]") if m in legal)
    return f"\\boxed{{{move}}}"


@pytest.mark.parametrize("game_id", ["kuhn_poker", "openspiel:kuhn_poker",
                                     "textarena:KuhnPoker-v0"])
def test_payoff_rewards_a_called_bet_two_chips(tmp_path, game_id):
    games = [{"id": game_id, "kwargs": {"rounds": 1}}] if game_id == "kuhn_poker" else [
        {"id": game_id}]
    loop = SpiralLoop(spiral_config(tmp_path, games=games, reward="payoff"))
    episodes, _ = collect(loop, ScriptedEngine(bet_or_call))
    rounds = 3 if game_id.startswith("textarena") else 1  # KuhnPoker-v0 plays 3 rounds
    for episode in episodes:
        rewards = episode.rewards
        assert episode.info["invalid_by"] is None
        assert rewards["player_0"] == -rewards["player_1"]
        assert abs(rewards["player_0"]) in {2.0 * k for k in range(rounds + 1)}
        if rounds == 1:
            assert abs(rewards["player_0"]) == 2.0  # the win/loss reward would be 1
        winner = episode.info["winner"]
        if winner is not None:
            assert rewards[f"player_{winner}"] > 0


def test_outcome_reward_stays_the_default(tmp_path):
    loop = SpiralLoop(spiral_config(tmp_path, games=[{"id": "openspiel:kuhn_poker"}]))
    assert loop.settings.reward == "outcome"
    episodes, _ = collect(loop, ScriptedEngine(bet_or_call))
    assert all(abs(e.rewards["player_0"]) == 1.0 for e in episodes)


def test_payoff_keeps_the_invalid_move_shaping(tmp_path):
    loop = SpiralLoop(spiral_config(tmp_path, games=[{"id": "openspiel:kuhn_poker"}],
                                    reward="payoff"))
    episodes, _ = collect(loop, ScriptedEngine(lambda p: "\\boxed{[raise]}"))
    assert all(e.rewards == {"player_0": -1.5, "player_1": 0.5} for e in episodes)


def test_payoff_needs_a_game_that_reports_one(tmp_path):
    config = spiral_config(tmp_path, games=[{"id": "simple_negotiation"}], reward="payoff")
    with pytest.raises(UserError, match="simple_negotiation") as raised:
        SpiralLoop(config)
    assert "\n" not in str(raised.value) and "reward: outcome" in str(raised.value)
