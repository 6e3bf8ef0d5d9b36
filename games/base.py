"""The one interface every game implements, and the base classes that keep its bookkeeping.

A `Game` is a two-player, zero-sum, turn-based text game. It knows nothing about models,
tokens or training: it renders observations, accepts bracketed actions such as "[bet]",
and reports who won. The training loop decides what an outcome is worth (for example the
SPIRAL -1.5/+0.5 invalid-move shaping); `outcome()` always follows the evaluation
convention: winner +1, loser -1, draw 0, and an invalid move loses (-1, opponent +1).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

DEFAULT_MAX_TURNS = 50  # SPIRAL's turn limit; a game cut off there is a draw


class GameOverError(RuntimeError):
    """Raised when a finished game is stepped, or an unfinished one is scored."""


@dataclass(frozen=True)
class StepResult:
    """What happened when the current player acted.

    valid: False when the action broke the rules; the game then ends at once and the
    actor is recorded in `invalid_move_by`.
    done: whether the game is over after this action.
    reason: why the action was invalid, or why the game ended ("" otherwise).
    info: game-specific extras (never needed to drive the game).
    """

    valid: bool
    done: bool
    reason: str = ""
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Game(Protocol):
    """Zero-sum two-player text game. Actions are bracketed strings like "[4]"."""

    id: str
    num_players: int
    current_player: int
    done: bool
    winner: int | None
    reason: str
    invalid_move_by: int | None
    truncated: bool

    def reset(self, seed: int) -> None:
        """Start a new game; the same seed gives the same game."""
        ...

    def observation(self, player: int) -> str:
        """Everything `player` may see now: rules, history, state and the legal actions."""
        ...

    def legal_actions(self, player: int) -> list[str] | None:
        """Exact legal actions for `player` now ([] when it is not their turn), or None
        when the game cannot list them (free-form games: `step` judges validity).

        Free-form games may also offer `example_actions(player) -> list[str]`: a few
        valid actions for non-model opponents, never used to judge validity.
        """
        ...

    def step(self, action: str) -> StepResult:
        """Apply `action` for `current_player`."""
        ...

    def outcome(self) -> dict[int, float]:
        """Per-player result of a finished game: +1 win, -1 loss, 0 draw."""
        ...

    @property
    def info(self) -> dict[str, Any]:
        """Summary for logs: winner, reason, invalid_move_by, truncated, turns, extras."""
        ...


def zero_sum_outcome(winner: int | None) -> dict[int, float]:
    """+1/-1 for a winner, 0/0 for a draw (winner None)."""
    if winner is None:
        return {0: 0.0, 1: 0.0}
    return {winner: 1.0, 1 - winner: -1.0}


def winner_by_score(scores: Mapping[int, float]) -> int | None:
    """The player with the higher score; None (a draw) when equal. A missing score counts 0."""
    s0, s1 = scores.get(0, 0), scores.get(1, 0)
    if s0 == s1:
        return None
    return 0 if s0 > s1 else 1


class TwoPlayerGame(ABC):
    """The bookkeeping every game here shares, native or wrapped: turns, invalid moves,
    the turn limit, the ending, `outcome()` and the common `info` keys.

    `step` runs one action through the subclass's `_play` hook, which plays it and names
    who broke the rules (usually the actor; a wrapped game may blame someone else). Error
    allowance is 0, so that ends the game at once. Otherwise the turn limit is applied and,
    if the game goes on, `_next_turn` lets the subclass prepare the next player's view.
    A subclass ends the game by calling `_finish(winner, reason)`.
    """

    id: str = "game"
    num_players: int = 2

    def __init__(self, max_turns: int = DEFAULT_MAX_TURNS) -> None:
        self.max_turns = max_turns
        self._clear()

    def _clear(self) -> None:
        """Forget the last game; subclasses extend this with their own state."""
        self.current_player = 0
        self.turn = 0  # actions taken so far by both players together
        self.done = False
        self.winner: int | None = None
        self.reason = ""
        self.invalid_move_by: int | None = None
        self.truncated = False

    def step(self, action: str) -> StepResult:
        if self.done:
            raise GameOverError(f"{self.id}: step() called on a finished game")
        actor = self.current_player
        self.turn += 1  # counts every submitted action, valid or not
        foul = self._play(actor, action)
        if foul is not None:
            return self._invalid(*foul)
        if not self.done and self.turn >= self.max_turns:
            self.truncated = True
            self._finish(None, f"turn limit of {self.max_turns} turns reached: draw")
        if not self.done:
            self._next_turn()
        return StepResult(
            valid=True,
            done=self.done,
            reason=self.reason if self.done else "",
            info=self._step_info(),
        )

    def _invalid(self, offender: int, why: str) -> StepResult:
        # Error allowance is 0: the first invalid move ends the game and loses it.
        self.invalid_move_by = offender
        self._finish(1 - offender, f"Player {offender} made an invalid move: {why}")
        return StepResult(valid=False, done=True, reason=why, info=self._step_info())

    def _finish(self, winner: int | None, reason: str) -> None:
        self.done = True
        self.winner = winner
        self.reason = reason

    def _to_move(self, player: int) -> bool:
        """Whether `player` can act now: the game is on and it is their turn."""
        return not self.done and player == self.current_player

    def outcome(self) -> dict[int, float]:
        if not self.done:
            raise GameOverError(f"{self.id}: outcome() called before the game ended")
        return zero_sum_outcome(self.winner)

    @property
    def info(self) -> dict[str, Any]:
        return {
            "game": self.id,
            "winner": self.winner,
            "reason": self.reason,
            "invalid_move_by": self.invalid_move_by,
            "truncated": self.truncated,
            "turns": self.turn,
            **self._extra_info(),
        }

    # ---- hooks -----------------------------------------------------------------------------
    @abstractmethod
    def _play(self, actor: int, action: str) -> tuple[int, str] | None:
        """Play `action` for `actor`; return (offender, why) if a rule was broken, else None."""

    def _next_turn(self) -> None:
        """Called after a valid action when the game goes on, to prepare the next turn."""
        return None  # native games pass the turn inside `_apply`; nothing left to do here

    def _step_info(self) -> dict[str, Any]:
        """Extras for the `StepResult` of every action (none by default)."""
        return {}

    def _extra_info(self) -> dict[str, Any]:
        """Game-specific keys appended to `info`."""
        return {}


class NativeGame(TwoPlayerGame):
    """Base class for the games written here, on top of the shared `TwoPlayerGame` rules.

    Subclasses implement `_setup` (deal, build the board from `self.rng`), `_apply` (play one
    valid move or return why it is invalid), `_render` and `legal_actions`, and may add
    `_extra_info`. A subclass ends the game by calling `_finish(winner, reason)`.
    """

    id: str = "native"

    def __init__(self, max_turns: int = DEFAULT_MAX_TURNS) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        super().__init__(max_turns=max_turns)

    # ---- lifecycle -------------------------------------------------------------------
    def _clear(self) -> None:
        super()._clear()
        self.rng = random.Random(0)

    def reset(self, seed: int) -> None:
        self._clear()
        self.rng = random.Random(seed)
        self._setup()

    def _play(self, actor: int, action: str) -> tuple[int, str] | None:
        # A native game only ever blames the player who acted.
        error = self._apply(action)
        return None if error is None else (actor, error)

    def observation(self, player: int) -> str:
        self._check_player(player)
        return self._render(player)

    def _check_player(self, player: int) -> None:
        if player not in range(self.num_players):
            raise ValueError(f"{self.id}: no player {player}")

    def _to_move(self, player: int) -> bool:
        # A native game refuses a seat that does not exist instead of answering "not now".
        self._check_player(player)
        return super()._to_move(player)

    def _turn_text(self, player: int) -> str:
        """The legal actions and a prompt on `player`'s turn, else whom they wait for.

        Games with an exact action list share this wording, so every prompt reads alike.
        """
        if player != self.current_player:
            return f"Waiting for Player {self.current_player} to act."
        return (
            "Your available actions: "
            + ", ".join(self.legal_actions(player) or [])
            + "\nChoose your action."
        )

    # ---- per-game hooks ------------------------------------------------------------------
    @abstractmethod
    def _setup(self) -> None:
        """Build the initial state from `self.rng`."""

    @abstractmethod
    def _apply(self, action: str) -> str | None:
        """Play `action` for `current_player`; return why it is invalid, or None."""

    @abstractmethod
    def _render(self, player: int) -> str:
        """The observation text for `player`."""

    @abstractmethod
    def legal_actions(self, player: int) -> list[str] | None:
        """Exact legal actions, or None for free-form games."""
