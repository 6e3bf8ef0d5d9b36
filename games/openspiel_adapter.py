"""Any two-player zero-sum (or constant-sum) OpenSpiel game behind the `Game` protocol.

Ids are ``openspiel:<name>`` or ``openspiel:<name>(param=value,...)``, OpenSpiel's own game
strings (``openspiel:kuhn_poker``, ``openspiel:goofspiel(num_cards=4)``). OpenSpiel knows every
rule exactly, so nothing here is guessed:

- the legal actions are ``state.legal_actions()``, named in the game's own words by
  ``state.action_to_string(player, action)`` and bracketed (``[Pass]``, ``[Bet]``, ``[x(1,1)]``);
- chance events (deals, dice) are drawn from ``state.chance_outcomes()`` with the game's own
  probabilities, by a ``random.Random(seed)`` made in ``reset(seed)``;
- the outcome is the sign of ``state.returns()``: the player with the higher return wins
  (in a zero-sum game the positive one; in a constant-sum game the one above the mean), and
  ``info["returns"]`` keeps the payoff itself (chips, points).

What a player sees is a function of their information only: a header naming the game and the
seat, the game's information-state string (perfect-information games: the observation string,
the position itself; see `view_text`), and on their turn the legal actions by name. The
exploitability code renders any pyspiel state the same way: ``set_state(state)`` puts the
adapter there and ``observation(player)`` renders it exactly as in play.

Simultaneous-move games are played turn-based (``pyspiel.load_game_as_turn_based``): each player
chooses without seeing the other's choice of the same round. A game with more or fewer than two
players, general-sum or cooperative payoffs, or chance events that cannot be enumerated is
refused in one line (`games.errors.UnplayableGameError`), and so is an unknown name or a
parameter OpenSpiel refuses.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import random
import re
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

from games.actions import normalize_action
from games.base import DEFAULT_MAX_TURNS, TwoPlayerGame, winner_by_score
from games.errors import UnknownGameError, UnplayableGameError

OPENSPIEL_PREFIX = "openspiel:"
_NAME = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(\(.*)?$", re.S)  # name(params...: OpenSpiel parses
LISTED_IN_REASON = 12  # legal actions named in an invalid move's reason, at most


def _pyspiel() -> Any:
    """Import pyspiel on first use (it is quick, but games that never use it need not), with
    OpenSpiel's Python games registered: importing ``open_spiel.python.games`` (the
    exploitability code does) adds them to the registry, so they are always added first and
    the games listed never depend on what was imported before."""
    importlib.import_module("open_spiel.python.games")
    return importlib.import_module("pyspiel")


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """OpenSpiel's C++ prints every error it raises to file descriptor 2 ("OpenSpiel
    exception: ..."); a refused id must be one line, the error's own."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (some embedded runners): nothing to mute
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def openspiel_names() -> list[str]:
    """Short names of every game registered in OpenSpiel (not all are playable here)."""
    return sorted(game.short_name for game in _pyspiel().registered_games())


@functools.cache
def load(game_string: str) -> Any:
    """The pyspiel game for ``game_string``, two-player and turn-based, or a one-line error.

    Raises `UnknownGameError` for a name OpenSpiel does not have and `UnplayableGameError` for a
    parameter it refuses, or a game that is not a two-player zero- or constant-sum game with
    enumerable chance events. A game whose default is not two players but which can be played by
    two (a ``players`` parameter) is loaded with ``players=2`` unless the string gives one.
    """
    pyspiel = _pyspiel()
    game_id = OPENSPIEL_PREFIX + game_string
    match = _NAME.match(game_string)
    if match is None:
        raise UnknownGameError(game_id, " (an OpenSpiel id is openspiel:<name>(param=value,...))")
    name, params = match.group(1), match.group(2) or ""
    if name not in openspiel_names():
        raise UnknownGameError(game_id, " (not in OpenSpiel's registry)")
    try:
        with _quiet_stderr():
            game = pyspiel.load_game(game_string)
            players_given = re.search(r"[(,]\s*players\s*=", params) is not None
            kind = game.get_type()
            if (
                game.num_players() != 2
                and not players_given
                and "players" in game.get_parameters()
                and kind.min_num_players <= 2 <= kind.max_num_players
            ):
                inner = params.strip()[1:-1].strip() if params else ""  # OpenSpiel parsed it
                game = pyspiel.load_game(f"{name}({', '.join(filter(None, [inner, 'players=2']))})")
    except pyspiel.SpielError as exc:
        raise UnplayableGameError(game_id, f"OpenSpiel refused it: {_first_line(exc)}") from exc
    why = unplayable_reason(game)
    if why:
        raise UnplayableGameError(game_id, why)
    if game.get_type().dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS:
        with _quiet_stderr():
            game = pyspiel.convert_to_turn_based(game)
    return game


def unplayable_reason(game: Any) -> str | None:
    """Why a loaded pyspiel game cannot be played here by two players, or None if it can."""
    pyspiel = _pyspiel()
    kind = game.get_type()
    Utility, Dynamics = pyspiel.GameType.Utility, pyspiel.GameType.Dynamics
    if game.num_players() != 2:
        count = game.num_players()
        return f"it has {count} player{'s' if count != 1 else ''}; games here have 2"
    if kind.utility not in (Utility.ZERO_SUM, Utility.CONSTANT_SUM):
        what = {
            Utility.GENERAL_SUM: "general-sum",
            Utility.IDENTICAL: "cooperative (identical payoffs)",
        }.get(kind.utility, str(kind.utility))
        return f"it is {what}; games here are zero-sum or constant-sum"
    if kind.dynamics not in (Dynamics.SEQUENTIAL, Dynamics.SIMULTANEOUS):
        return f"its dynamics are {kind.dynamics.name.lower()}; games here take turns"
    if kind.chance_mode == pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC:
        return "its chance events are sampled inside OpenSpiel and cannot be drawn from a seed"
    return None


def display_name(raw: str) -> str:
    """An OpenSpiel action name as it goes between our brackets: the game's own words, with
    one whole-name pair of brackets dropped (blotto's ``[0,0,10]``) and any other bracket turned
    into a parenthesis (goofspiel's ``[P0]Bid: 1`` -> ``(P0)Bid: 1``): a bracket inside a
    bracketed move would end it. Line breaks become spaces."""
    text = " ".join(raw.split())
    if text.startswith("[") and text.endswith("]") and text.count("[") == text.count("]") == 1:
        text = text[1:-1].strip()
    return text.replace("[", "(").replace("]", ")") or "?"


class OpenSpielGame(TwoPlayerGame):
    """One OpenSpiel game string as a `Game`; see the module docstring.

    Beyond the protocol, for code that reasons about the game tree (exploitability):
    ``spiel_game`` (the pyspiel game, turn-based), ``state`` (the live pyspiel state),
    ``set_state(state)``, ``action_name(player, action_id)`` and ``action_id(player, name)``.
    """

    def __init__(self, game: str, max_turns: int = DEFAULT_MAX_TURNS) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.game_string = game
        self.id = OPENSPIEL_PREFIX + game
        self.spiel_game = load(game)
        kind = self.spiel_game.get_type()
        self.long_name = kind.long_name
        self.perfect_information = (
            kind.information == _pyspiel().GameType.Information.PERFECT_INFORMATION
        )
        self._provides_info_state = kind.provides_information_state_string
        self._provides_observation = kind.provides_observation_string
        self.state: Any = None
        super().__init__(max_turns=max_turns)

    def _clear(self) -> None:
        super()._clear()
        self.rng = random.Random(0)
        self._names: dict[int, dict[str, int]] = {}  # player -> display name -> action id
        self._keys: dict[int, dict[str, int]] = {}  # player -> match_legal's key -> action id

    # ---- lifecycle -------------------------------------------------------------------------
    def reset(self, seed: int) -> None:
        self._clear()
        self.rng = random.Random(seed)
        self.state = self.spiel_game.new_initial_state()
        self._after_action()

    def set_state(self, state: Any) -> None:
        """Put the game at ``state`` (a pyspiel state of ``spiel_game``; it is cloned), as if
        play had reached it: ``observation``, ``legal_actions``, ``action_name`` and ``step``
        all read it. A chance node is left as it is: nobody is to move there (``current_player``
        is -1)."""
        self._clear()
        self.state = state.clone()
        self.turn = sum(1 for item in self.state.full_history() if item.player >= 0)
        if self.state.is_terminal():
            self._finish_from_returns()
        else:  # a player's turn, or a chance node (-1: nobody is to move)
            self.current_player = int(self.state.current_player())

    def _after_action(self) -> None:
        """Draw chance events until a player is to move or the game is over."""
        self._names, self._keys = {}, {}
        while self.state.is_chance_node():
            outcomes = self.state.chance_outcomes()
            actions = [action for action, _ in outcomes]
            weights = [probability for _, probability in outcomes]
            self.state.apply_action(self.rng.choices(actions, weights=weights)[0])
        if self.state.is_terminal():
            self._finish_from_returns()
        else:
            self.current_player = int(self.state.current_player())

    def _finish_from_returns(self) -> None:
        r0, r1 = self.returns()
        winner = winner_by_score({0: r0, 1: r1})
        payoff = f"returns: Player 0 {r0:+g}, Player 1 {r1:+g}"
        if winner is None:
            self._finish(None, f"The game ended in a draw ({payoff})")
        else:
            self._finish(winner, f"Player {winner} won ({payoff})")

    def returns(self) -> tuple[float, float]:
        """Each player's return now: the payoff at the end (rewards so far before it)."""
        r0, r1 = self.state.returns()
        return float(r0), float(r1)

    # ---- actions -----------------------------------------------------------------------------
    def _name_map(self, player: int) -> dict[str, int]:
        """Display name -> action id of ``player``'s legal actions now, in OpenSpiel's order.

        Two names equal but for case or spacing (chess: ``bxc3`` and ``Bxc3``) would match the
        same text, so such names get their action id appended: ``[Bxc3 (action 1234)]``.
        """
        if player not in self._names:
            ids = list(self.state.legal_actions(player))
            names = [display_name(self.state.action_to_string(player, a)) for a in ids]
            keys = [normalize_action(name) for name in names]
            clash = {key for key, count in Counter(keys).items() if count > 1}
            shown, by_key = {}, {}  # by_key: what games.match_legal compares, one action each
            for name, key, a in zip(names, keys, ids, strict=True):
                if key in clash:
                    name = f"{name} (action {a})"
                    key = normalize_action(name)
                shown[f"[{name}]"] = by_key[key] = a
            self._names[player], self._keys[player] = shown, by_key
        return self._names[player]

    def legal_actions(self, player: int) -> list[str] | None:
        self._check_player(player)
        if not self._to_move(player):
            return []
        return list(self._name_map(player))

    def action_name(self, player: int, action_id: int) -> str:
        """``player``'s action ``action_id`` by the name shown now (bracketed)."""
        for name, legal_id in self._name_map(player).items():
            if legal_id == action_id:
                return name
        return f"[{display_name(self.state.action_to_string(player, action_id))}]"

    def action_id(self, player: int, name: str) -> int | None:
        """The legal action of ``player`` that ``name`` names (any case, brackets optional):
        the one `games.match_legal` picks, found by its key instead of a scan."""
        self._name_map(player)
        return self._keys[player].get(normalize_action(name))

    def _play(self, actor: int, action: str) -> tuple[int, str] | None:
        action_id = self.action_id(actor, action)
        if action_id is None:
            legal = list(self._name_map(actor))
            shown = ", ".join(legal[:LISTED_IN_REASON])
            more = len(legal) - LISTED_IN_REASON
            more = f" (and {more} more)" if more > 0 else ""
            return actor, f"{action!r} is not a legal action now; choose one of {shown}{more}"
        self.state.apply_action(action_id)
        self._after_action()
        return None

    # ---- what players see ----------------------------------------------------------------------
    def _check_player(self, player: int) -> None:
        if player not in (0, 1):
            raise ValueError(f"{self.id}: no player {player}")

    def view_text(self, player: int) -> str:
        """What ``player`` knows, in the game's own rendering: for a perfect-information game
        the observation string (the position; its information state is the move list as
        action ids), else the information-state string, else the observation string, else
        ours: the moves ``player`` made, by name."""
        if self.perfect_information and self._provides_observation:
            return "The game now:\n" + self.state.observation_string(player).rstrip()
        if self._provides_info_state:
            return "What you know (your information state):\n" + (
                self.state.information_state_string(player).rstrip()
            )
        if self._provides_observation:
            return "What you see:\n" + self.state.observation_string(player).rstrip()
        own = [
            self.state.action_to_string(player, item.action)
            for item in self.state.full_history()
            if item.player == player
        ]
        return "Your moves so far: " + (", ".join(own) or "none")

    def observation(self, player: int) -> str:
        self._check_player(player)
        parts = [
            f"You are Player {player} in {self.long_name} (OpenSpiel game "
            f"{self.game_string}; players are numbered 0 and 1).",
            self.view_text(player),
        ]
        if self.done:
            parts.append(f"The game is over. {self.reason}.")
        elif player != self.current_player:
            who = f"Player {self.current_player}" if self.current_player >= 0 else "chance"
            parts.append(f"Waiting for {who} to act.")
        else:
            parts.append(
                "Your available actions: "
                + ", ".join(self._name_map(player))
                + "\nChoose your action."
            )
        return "\n\n".join(parts)

    def _extra_info(self) -> dict[str, Any]:
        if self.state is None:
            return {}
        r0, r1 = self.returns()
        return {
            # the payoff (chips, points) per player: at the end, the game's; before it (a game
            # cut off or ended by an invalid move), the rewards so far (0 in most games)
            "returns": {0: r0, 1: r1},
            "history": [int(a) for a in self.state.history()],
        }
