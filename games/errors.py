"""The one-line errors for a game id that cannot be made: shared by the registry and the
adapters (which the registry imports, so they cannot import it)."""

from __future__ import annotations


class UnknownGameError(LookupError):
    """A game id that names no native game and no TextArena or OpenSpiel game."""

    def __init__(self, game_id: str, hint: str = "") -> None:
        self.game_id = game_id
        super().__init__(
            f"unknown game {game_id!r}{hint}; run `selfplay list games` to see the available games"
        )


class UnplayableGameError(ValueError):
    """A game id that exists but cannot be played here (one-player, broken import, ...)."""

    def __init__(self, game_id: str, why: str) -> None:
        self.game_id = game_id
        super().__init__(f"game {game_id!r} cannot be played here: {why}")
