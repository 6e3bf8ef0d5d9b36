from __future__ import annotations

import pytest

from games import TicTacToe
from games.base import Game, StepResult


def play(game: Game, actions: list[str]) -> list[StepResult]:
    """Step `actions` in order; return the results."""
    return [game.step(action) for action in actions]


def new_game(max_turns: int = 50) -> TicTacToe:
    game = TicTacToe(max_turns=max_turns)
    game.reset(0)
    return game


@pytest.mark.parametrize(
    ("moves", "winner"),
    [
        (["[0]", "[3]", "[1]", "[4]", "[2]"], 0),  # top row
        (["[3]", "[0]", "[4]", "[1]", "[5]"], 0),  # middle row
        (["[0]", "[6]", "[1]", "[7]", "[4]", "[8]"], 1),  # bottom row for O
        (["[0]", "[1]", "[3]", "[2]", "[6]"], 0),  # left column
        (["[0]", "[1]", "[3]", "[4]", "[8]", "[7]"], 1),  # middle column for O
        (["[2]", "[0]", "[5]", "[1]", "[8]"], 0),  # right column
        (["[0]", "[1]", "[4]", "[2]", "[8]"], 0),  # main diagonal
        (["[0]", "[2]", "[1]", "[4]", "[8]", "[6]"], 1),  # anti-diagonal for O
    ],
)
def test_lines_win(moves: list[str], winner: int) -> None:
    game = new_game()
    results = play(game, moves)
    assert all(r.valid for r in results)
    assert results[-1].done and game.done and game.winner == winner
    assert game.outcome() == {winner: 1.0, 1 - winner: -1.0}
    assert game.invalid_move_by is None and not game.truncated


def test_full_board_is_a_draw() -> None:
    # X O X / X O O / O X X
    game = new_game()
    play(game, ["[0]", "[1]", "[2]", "[4]", "[3]", "[5]", "[7]", "[6]", "[8]"])
    assert game.done and game.winner is None and game.outcome() == {0: 0.0, 1: 0.0}
    assert "draw" in game.reason and not game.truncated


def test_occupied_cell_is_invalid_and_ends_the_game() -> None:
    game = new_game()
    game.step("[4]")
    result = game.step("[4]")
    assert not result.valid and result.done and "taken" in result.reason
    assert game.invalid_move_by == 1 and game.winner == 0
    assert game.outcome() == {0: 1.0, 1: -1.0}


@pytest.mark.parametrize("bad", ["[9]", "[-1]", "[middle]", "[4 5]", ""])
def test_non_cells_are_invalid(bad: str) -> None:
    game = new_game()
    result = game.step(bad)
    assert not result.valid and game.invalid_move_by == 0 and game.winner == 1


def test_brackets_and_spacing_do_not_matter() -> None:
    game = new_game()
    assert game.step("4").valid and game.step("[ 0 ]").valid
    assert game.board[4] == "X" and game.board[0] == "O"


def test_legal_actions_are_the_empty_cells() -> None:
    game = new_game()
    assert game.legal_actions(0) == [f"[{i}]" for i in range(9)]
    game.step("[4]")
    assert "[4]" not in game.legal_actions(1) and len(game.legal_actions(1)) == 8
    assert game.legal_actions(0) == []


def test_observation_shows_board_and_actions() -> None:
    game = new_game()
    game.step("[4]")
    text = game.observation(1)
    assert " 3 | X | 5" in text and "You are Player 1 (O)" in text
    assert "Your available actions: [0], [1], [2], [3], [5]" in text
    assert "Waiting for Player 1" in game.observation(0)


def test_turn_limit_is_a_truncated_draw() -> None:
    game = new_game(max_turns=4)
    results = play(game, ["[0]", "[1]", "[2]", "[4]"])
    assert results[-1].done and game.done and game.truncated
    assert game.winner is None and game.outcome() == {0: 0.0, 1: 0.0}
    assert game.info["truncated"] and game.info["turns"] == 4
