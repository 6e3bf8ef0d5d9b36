"""Game ids -> games: native games by name, any TextArena env as "textarena:<id>", any
two-player zero-sum OpenSpiel game as "openspiel:<name>(param=value,...)", and games
from a user's own module by import path ("my_games.nim:Nim") or entry point (group
``selfplay.games``)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from games.base import Game
from games.errors import UnknownGameError, UnplayableGameError
from games.kuhn_poker import KuhnPoker
from games.openspiel_adapter import OPENSPIEL_PREFIX, OpenSpielGame
from games.openspiel_adapter import load as load_openspiel
from games.openspiel_catalog import listed_ids as openspiel_ids
from games.openspiel_catalog import read as openspiel_catalog
from games.simple_negotiation import SimpleNegotiation
from games.textarena_adapter import (
    TEXTARENA_PREFIX,
    TextArenaGame,
    _textarena,
    isolated_side_effects,
    textarena_ids,
)
from games.tictactoe import TicTacToe
from selfplay.core import plugins
from selfplay.core.errors import UserError

OFFLINE_LIST = Path(__file__).with_name("textarena_offline.txt")
LEGAL_FILE = OFFLINE_LIST.with_suffix(".json")  # written by games.verify_offline
# Native games know their legal moves exactly, except negotiation's free-form offers.
_NATIVE_LEGAL = {"simple_negotiation": "free-form"}
_NATIVE_INFORMATION = {
    "kuhn_poker": "imperfect",
    "tictactoe": "perfect",
    "simple_negotiation": "imperfect",
}

_NATIVE: dict[str, Callable[..., Game]] = {
    "kuhn_poker": KuhnPoker,
    "tictactoe": TicTacToe,
    "simple_negotiation": SimpleNegotiation,
}


class GameRaisedError(UserError):
    """A game's own code raised: one line naming the game, the call and the exception (and
    where it was raised), instead of a traceback through the loop."""

    def __init__(self, game_id: str, call: str, exc: BaseException) -> None:
        self.game_id, self.call = game_id, call
        where = ""
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if tb is not None:
            where = f" ({Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno})"
        super().__init__(f"game {game_id!r} raised in {call}(): {_first_line(exc)}{where}")


def raised_by(game: object, game_id: str, exc: BaseException) -> GameRaisedError | None:
    """The one-line error for ``exc`` if a method of ``game`` raised it (the outermost such
    method is the call named), else None: the exception is not the game's."""
    if isinstance(exc, UserError):
        return None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_locals.get("self") is game:
            return GameRaisedError(game_id, tb.tb_frame.f_code.co_name, exc)
        tb = tb.tb_next
    return None


@contextlib.contextmanager
def guarded(game: object, game_id: str) -> Iterator[None]:
    """Inside it, an exception a method of ``game`` raises becomes a ``GameRaisedError``."""
    try:
        yield
    except Exception as exc:
        failure = raised_by(game, game_id, exc)
        if failure is None:
            raise
        raise failure from exc


def trial(game_id: str, seed: int = 0, **kwargs: Any) -> Game:
    """``make(game_id, **kwargs)``, reset once and asked for the first player's observation:
    a wrong argument or a game that fails to start is a one-line error before a run begins."""
    game = make(game_id, **kwargs)
    with guarded(game, game_id):
        game.reset(seed)
        game.observation(game.current_player)
    return game


def _construct(game_id: str, factory: Callable[..., Game], kwargs: dict[str, Any]) -> Game:
    """``factory(**kwargs)``; a refused argument or the constructor's own error in one line."""
    try:
        return factory(**kwargs)
    except TypeError as exc:
        raise UnplayableGameError(game_id, f"its constructor refused {kwargs} ({exc})") from exc
    except UserError:
        raise
    except Exception as exc:
        raise GameRaisedError(game_id, "__init__", exc) from exc


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip().strip("*")]
    return f"{type(exc).__name__}: {lines[0][:160]}" if lines else type(exc).__name__


@functools.cache
def unplayable_reason(env_id: str) -> str | None:
    """Why the TextArena id cannot be played by two players here, or None if it can.

    Imports the env's module (Chess and others raise SyntaxError before Python 3.12) and
    resets one env for two players (one-player and 3+-player envs refuse). Once per process;
    the reset seeds Python's global `random`, so its state is put back.
    """
    spec = _textarena().envs.registration.ENV_REGISTRY[env_id]
    if isinstance(spec.entry_point, str):
        module = spec.entry_point.partition(":")[0]
        try:
            importlib.import_module(module)
        except (Exception, SystemExit) as exc:
            version = ".".join(map(str, sys.version_info[:2]))
            return (
                f"its module {module} does not import under Python {version} ({_first_line(exc)})"
            )
    try:
        with isolated_side_effects():
            _textarena().make(env_id).reset(num_players=2, seed=0)
    except (Exception, SystemExit) as exc:
        return f"it does not start a two-player game ({_first_line(exc)})"
    return None


def register(game_id: str, factory: Callable[..., Game]) -> None:
    """Add a native game under `game_id` (a new game is one module plus this call)."""
    if game_id in _NATIVE or game_id.startswith((TEXTARENA_PREFIX, OPENSPIEL_PREFIX)):
        raise ValueError(f"game id {game_id!r} is taken or reserved")
    _NATIVE[game_id] = factory


def verified_textarena_ids() -> list[str]:
    """TextArena ids listed in textarena_offline.txt (see games.verify_offline)."""
    if not OFFLINE_LIST.exists():
        return []
    lines = (line.strip() for line in OFFLINE_LIST.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


@functools.cache
def legal_move_records() -> dict[str, dict]:
    """Per verified TextArena id: where its legal moves come from and how a random player
    fared (see games.verify_offline); {} before the file is generated."""
    return json.loads(LEGAL_FILE.read_text()) if LEGAL_FILE.exists() else {}


def legal_moves_summary(game_id: str) -> tuple[str, str]:
    """(where legal moves come from, the random player's invalid rate) for listings."""
    if game_id in _NATIVE:
        return _NATIVE_LEGAL.get(game_id, "exact"), "-"
    if game_id.startswith(OPENSPIEL_PREFIX):
        return "exact", "-"  # OpenSpiel's own legal actions: the random player never errs
    record = legal_move_records().get(game_id.removeprefix(TEXTARENA_PREFIX))
    if record is None:
        return "?", "-"
    return record["legal"], f"{record['random_invalid_rate']:.2f}"


def game_kind(game_id: str) -> tuple[str, float | None]:
    """(perfect / imperfect information, mean moves of a random game) for listings: known for
    native games (kind only) and for the OpenSpiel games in ``games/openspiel_games.json``;
    ("-", None) otherwise."""
    if game_id in _NATIVE:
        return _NATIVE_INFORMATION.get(game_id, "-"), None
    if game_id.startswith(OPENSPIEL_PREFIX):
        entry = openspiel_catalog()["games"].get(game_id.removeprefix(OPENSPIEL_PREFIX))
        if entry is not None:
            return entry["information"], entry["random_moves"]
    return "-", None


def list_games() -> list[str]:
    """Native ids, games from entry points, the playable OpenSpiel games (with default
    parameters), then the TextArena ids verified offline here."""
    plugged = plugins.entry_point_names(plugins.GAMES)
    return (
        sorted(_NATIVE)
        + [name for name in plugged if name not in _NATIVE]
        + openspiel_ids()
        + [TEXTARENA_PREFIX + env_id for env_id in verified_textarena_ids()]
    )


def make(game_id: str, **kwargs: Any) -> Game:
    """A new, not yet reset, game. Keyword arguments go to the game's constructor.

    Raises `UnknownGameError` for an id nothing resolves, and `UnplayableGameError` for one
    that cannot be played by two players here (checked once per id and process; for OpenSpiel
    also a parameter the game refuses, or a game that is not zero- or constant-sum).
    """
    if game_id in _NATIVE:
        return _construct(game_id, _NATIVE[game_id], kwargs)
    if game_id.startswith(TEXTARENA_PREFIX):
        env_id = game_id[len(TEXTARENA_PREFIX) :]
        if env_id not in textarena_ids():
            raise UnknownGameError(game_id, " (not in textarena's registry)")
        why = unplayable_reason(env_id)
        if why:
            raise UnplayableGameError(game_id, why)
        return _construct(game_id, functools.partial(TextArenaGame, env_id), kwargs)
    if game_id.startswith(OPENSPIEL_PREFIX):
        game_string = game_id[len(OPENSPIEL_PREFIX) :]
        load_openspiel(game_string)  # an unknown game, a refused parameter: one line, now
        return _construct(game_id, functools.partial(OpenSpielGame, game_string), kwargs)
    if plugins.resolvable(game_id, plugins.GAMES):
        return _plugin_game(game_id, kwargs)
    hint = ""
    if game_id in verified_textarena_ids():
        hint = f" (did you mean '{TEXTARENA_PREFIX}{game_id}'?)"
    raise UnknownGameError(game_id, hint)


def _plugin_game(game_id: str, kwargs: dict[str, Any]) -> Game:
    """A game from a user's module: ``factory(**kwargs)``, checked to be a two-player game."""
    factory = plugins.load_object(game_id, plugins.GAMES, what="game")
    if not callable(factory):
        raise UnplayableGameError(game_id, f"{factory!r} is not a class or factory")
    game = _construct(game_id, factory, kwargs)
    missing = [
        m
        for m in ("reset", "observation", "legal_actions", "step", "outcome")
        if not hasattr(game, m)
    ]
    if missing:
        raise UnplayableGameError(game_id, f"it lacks {', '.join(missing)} (see games.Game)")
    if getattr(game, "num_players", 2) != 2:
        raise UnplayableGameError(game_id, f"it has {game.num_players} players; games here have 2")
    return game
