"""Game ids -> games: native games by name, any TextArena env as "textarena:<id>"."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from games.base import Game
from games.kuhn_poker import KuhnPoker
from games.simple_negotiation import SimpleNegotiation
from games.textarena_adapter import TEXTARENA_PREFIX, TextArenaGame, textarena_ids
from games.tictactoe import TicTacToe

OFFLINE_LIST = Path(__file__).with_name("textarena_offline.txt")

_NATIVE: dict[str, Callable[..., Game]] = {
    "kuhn_poker": KuhnPoker,
    "tictactoe": TicTacToe,
    "simple_negotiation": SimpleNegotiation,
}


class UnknownGameError(LookupError):
    """A game id that names no native game and no TextArena env."""

    def __init__(self, game_id: str, hint: str = "") -> None:
        self.game_id = game_id
        super().__init__(
            f"unknown game {game_id!r}{hint}; run `selfplay list games` to see the available games"
        )


def register(game_id: str, factory: Callable[..., Game]) -> None:
    """Add a native game under `game_id` (a new game is one module plus this call)."""
    if game_id in _NATIVE or game_id.startswith(TEXTARENA_PREFIX):
        raise ValueError(f"game id {game_id!r} is taken or reserved")
    _NATIVE[game_id] = factory


def verified_textarena_ids() -> list[str]:
    """TextArena ids listed in textarena_offline.txt (see games.verify_offline)."""
    if not OFFLINE_LIST.exists():
        return []
    lines = (line.strip() for line in OFFLINE_LIST.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def list_games() -> list[str]:
    """Native ids, then the TextArena ids verified to work offline here."""
    return sorted(_NATIVE) + [TEXTARENA_PREFIX + env_id for env_id in verified_textarena_ids()]


def make(game_id: str, **kwargs: Any) -> Game:
    """A new, not yet reset, game. Keyword arguments go to the game's constructor."""
    if game_id in _NATIVE:
        return _NATIVE[game_id](**kwargs)
    if game_id.startswith(TEXTARENA_PREFIX):
        env_id = game_id[len(TEXTARENA_PREFIX) :]
        # Only the registry is consulted here; the env's own module loads at reset().
        if env_id not in textarena_ids():
            raise UnknownGameError(game_id, " (not in textarena's registry)")
        return TextArenaGame(env_id, **kwargs)
    hint = ""
    if game_id in verified_textarena_ids():
        hint = f" (did you mean '{TEXTARENA_PREFIX}{game_id}'?)"
    raise UnknownGameError(game_id, hint)
