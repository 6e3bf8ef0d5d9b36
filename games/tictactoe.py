"""Tic-tac-toe on a 3x3 board; cells are numbered 0-8 row by row, actions are "[0]".."[8]".

Player 0 plays X and moves first. Three in a row, column or diagonal wins; a full board
without a line is a draw. Playing an occupied cell (or anything else) is an invalid move.
"""

from __future__ import annotations

from typing import Any

from games.actions import match_legal, normalize_action
from games.base import DEFAULT_MAX_TURNS, NativeGame

MARKS = ("X", "O")
LINES = (
    (0, 1, 2),
    (3, 4, 5),
    (6, 7, 8),  # rows
    (0, 3, 6),
    (1, 4, 7),
    (2, 5, 8),  # columns
    (0, 4, 8),
    (2, 4, 6),  # diagonals
)
_RULES = """\
Rules:
- The board has 9 cells numbered 0-8, row by row; an empty cell shows its number.
- Player 0 is X and moves first; Player 1 is O.
- On your turn, mark one empty cell by answering with its number in brackets, e.g. [4].
- Three of your marks in a row, column or diagonal win. A full board without that is a draw.
- Choosing an occupied cell is an invalid move and loses the game."""


class TicTacToe(NativeGame):
    id = "tictactoe"

    def __init__(self, max_turns: int = DEFAULT_MAX_TURNS) -> None:
        super().__init__(max_turns=max_turns)

    def _setup(self) -> None:
        self.board: list[str | None] = [None] * 9
        self.moves: list[tuple[int, int]] = []  # (player, cell)
        self.current_player = 0

    def legal_actions(self, player: int) -> list[str] | None:
        if not self._to_move(player):
            return []
        return [f"[{cell}]" for cell, mark in enumerate(self.board) if mark is None]

    def _apply(self, action: str) -> str | None:
        player = self.current_player
        chosen = match_legal(action, self.legal_actions(player) or [])
        if chosen is None:
            return self._why_illegal(action)
        cell = int(chosen.strip("[]"))
        self.board[cell] = MARKS[player]
        self.moves.append((player, cell))
        self._check_end(player)
        return None

    def _why_illegal(self, action: str) -> str:
        key = normalize_action(action)
        if key in {str(cell) for cell in range(9)} and self.board[int(key)] is not None:
            return f"cell {key} is already taken"
        return f"{action!r} is not a cell; answer with an empty cell's number, e.g. [4]"

    def _check_end(self, player: int) -> None:
        mark = MARKS[player]
        for line in LINES:
            if all(self.board[cell] == mark for cell in line):
                self._finish(player, f"Player {player} ({mark}) completed the line {line}")
                return
        if all(cell is not None for cell in self.board):
            self._finish(None, "The board is full with no line: draw")
        else:
            self.current_player = 1 - player

    def render_board(self) -> str:
        cells = [mark or str(i) for i, mark in enumerate(self.board)]
        rows = [" | ".join(cells[r * 3 : r * 3 + 3]) for r in range(3)]
        return "\n---+---+---\n".join(f" {row}" for row in rows)

    def _render(self, player: int) -> str:
        parts = [
            f"You are Player {player} ({MARKS[player]}) in a game of Tic-Tac-Toe.",
            _RULES,
            "Board:\n" + self.render_board(),
        ]
        if self.moves:
            parts.append(
                "Moves so far: "
                + ", ".join(f"Player {p} ({MARKS[p]}) [{c}]" for p, c in self.moves)
                + "."
            )
        if self.done:
            parts.append(f"The game is over. {self.reason}.")
        else:
            parts.append(self._turn_text(player))
        return "\n\n".join(parts)

    def _extra_info(self) -> dict[str, Any]:
        board = getattr(self, "board", None)
        if board is None:
            return {}
        # the payoff is the result itself: +1 / -1, 0 for a draw (None until the end)
        returns = self.outcome() if self.done else None
        return {"board": "".join(m or "." for m in board), "returns": returns}


def to_openspiel(game: TicTacToe, spiel_game: Any) -> Any:
    """The state of OpenSpiel's ``tic_tac_toe`` (``spiel_game``) that ``game`` is at: the same
    moves (OpenSpiel's action ids are our cells, 0-8 row by row, and X moves first)."""
    state = spiel_game.new_initial_state()
    for _, cell in game.moves:
        state.apply_action(cell)
    return state
