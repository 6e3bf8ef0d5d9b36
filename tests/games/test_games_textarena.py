from __future__ import annotations

import pytest

from games import TextArenaGame, verified_textarena_ids
from games.base import Game, GameOverError, StepResult
from games.textarena_adapter import render_observation
from games.verify_offline import play_random


def play(game: Game, actions: list[str]) -> list[StepResult]:
    """Step `actions` in order; return the results."""
    return [game.step(action) for action in actions]


OFFLINE_IDS = verified_textarena_ids()


def new_game(env_id: str = "TicTacToe-v0", seed: int = 0, **kwargs: int) -> TextArenaGame:
    game = TextArenaGame(env_id, **kwargs)
    game.reset(seed)
    return game


def test_win_is_read_from_the_env() -> None:
    game = new_game()
    results = play(game, ["[0]", "[3]", "[1]", "[4]", "[2]"])
    assert all(r.valid for r in results) and game.done
    assert game.winner == 0 and game.outcome() == {0: 1.0, 1: -1.0}
    assert game.raw_rewards == {0: 1.0, 1: -1.0}
    assert game.invalid_move_by is None and not game.truncated


def test_first_invalid_move_ends_the_game() -> None:
    game = new_game()
    assert game.env.state.error_allowance == 0
    game.step("[4]")
    result = game.step("[4]")
    assert not result.valid and result.done and game.done
    assert game.invalid_move_by == 1 and game.winner == 0
    assert game.outcome() == {0: 1.0, 1: -1.0}
    with pytest.raises(GameOverError):
        game.step("[5]")


def test_invalid_reason_survives_multiplayer_states() -> None:
    # Liar's Dice eliminates the offender and overwrites the reason with the ranking.
    game = new_game("LiarsDice-v0")
    result = game.step("[Call]")
    assert not result.valid and "no prior bid" in result.reason
    assert game.invalid_move_by == 0 and game.outcome() == {0: -1.0, 1: 1.0}


def test_kuhn_poker_illegal_action_is_invalid() -> None:
    game = new_game("KuhnPoker-v0")
    starter = game.current_player
    assert game.legal_actions(starter) == ["[check]", "[bet]"]
    assert not game.step("[call]").valid
    assert game.invalid_move_by == starter and game.outcome()[starter] == -1.0


def test_turn_limit_is_a_truncated_draw() -> None:
    game = new_game(max_turns=2)
    play(game, ["[0]", "[4]"])
    assert game.done and game.truncated and game.winner is None
    assert game.outcome() == {0: 0.0, 1: 0.0}


def test_observations_and_legal_actions() -> None:
    game = new_game()
    first = game.observation(0)
    assert first == game.observation(0)  # reading twice drains nothing
    assert game.legal_actions(0) == [f"[{i}]" for i in range(9)]
    game.step("[4]")
    assert game.current_player == 1 and "[4]" not in game.legal_actions(1)
    assert game.legal_actions(0) == []  # only the player to move has moves
    assert game.observation(0) == first  # Player 0's last view until their next turn


def test_unlisted_moves_are_judged_by_the_game() -> None:
    game = new_game("Nim-v0", oracle_trials=0)
    assert game.legal_actions(0) is None
    assert game.step("[0 1]").valid


def test_raw_ids_render_message_lists() -> None:
    game = new_game("TicTacToe-v0-raw")
    assert "[GAME]" in game.observation(0)
    text = render_observation([(-1, "hello", None), (1, "[4]", None)])
    assert text == "[GAME] hello\n[Player 1] [4]"
    assert render_observation("plain") == "plain" and render_observation(None) == ""


def test_env_crash_counts_as_invalid_and_is_flagged(monkeypatch: pytest.MonkeyPatch) -> None:
    game = new_game()

    def explode(action: str) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(game.env, "step", explode)
    result = game.step("[4]")
    assert not result.valid and game.invalid_move_by == 0
    assert game.env_error and "boom" in game.env_error and result.info["env_error"]


def test_outcome_before_the_end_raises() -> None:
    with pytest.raises(GameOverError):
        new_game().outcome()


def test_offline_list_is_large_enough() -> None:
    assert len(OFFLINE_IDS) >= 100 and len(set(OFFLINE_IDS)) == len(OFFLINE_IDS)


@pytest.mark.parametrize("env_id", OFFLINE_IDS)
def test_random_game_completes_on_every_verified_id(env_id: str) -> None:
    # the oracle off: this checks the games run; test_games_oracle checks the legal moves
    game = play_random(env_id, seed=0, max_turns=20, oracle_trials=0)
    assert game.done and game.env_error is None
    assert sorted(game.outcome().values()) in ([-1.0, 1.0], [0.0, 0.0])
