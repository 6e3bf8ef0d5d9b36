"""Opponents that play well: OpenSpiel's search and solvers as players of our games.

A bot is named by a short string, ``kind[:number]``:

- ``mcts:<simulations>`` (``mcts`` alone: 1,000): OpenSpiel's Monte Carlo tree search
  (``open_spiel.python.algorithms.mcts.MCTSBot``: UCT with c = 2, one random rollout per leaf,
  solving proven wins and losses), a fresh search from the position at every move. It searches
  copies of the *true* state, so on an imperfect-information game it would see the hidden cards:
  it plays perfect-information games only (chance is fine: backgammon's dice).
- ``alphabeta``: exact play. The game is solved once, every position reachable from the start
  valued by depth-first minimax with a table of solved positions (what OpenSpiel's
  ``open_spiel.python.algorithms.minimax.alpha_beta_search`` returns for the best move, here for
  every move, so that ties among best moves are broken by the seed). Small deterministic
  perfect-information games only: a game with more than ``MAX_POSITIONS`` positions
  (connect_four) is refused.
- ``cfr[:<iterations>]`` (``cfr`` alone: 500): OpenSpiel's CFR+ (``pyspiel.CFRPlusSolver``, C++)
  solved once per game and process; the move is drawn, by the bot's seed, from the average
  strategy at the player's information state. For small games of any kind (poker: Kuhn, Leduc);
  a game tree over ``MAX_HISTORIES`` histories (liar's dice, tic-tac-toe) is refused.

Games: every ``openspiel:`` game the bot can play, through the OpenSpiel adapter
(``OpenSpielGame.state``, ``spiel_game``, ``action_name``), and two native games that are
OpenSpiel's under other names: ``tictactoe`` (OpenSpiel's ``tic_tac_toe``, cell for cell) and
``kuhn_poker`` (each round is OpenSpiel's one-round ``kuhn_poker`` with the round's first player
as its player 0; ``cfr`` plays every round by the one-round solution). A bot asked for a game it
cannot play, or cannot play fairly, is refused in one line (`BotError`) by `check`, which a loop
calls when its config is loaded.

``make(name, seed)`` gives an `games.Opponent`: ``act(game, player)`` returns the bracketed name
of a legal move, which the game's ``step`` accepts. The same seed plays the same moves.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from games.base import Game
from games.kuhn_poker import KuhnPoker, openspiel_move
from games.kuhn_poker import to_openspiel as kuhn_to_openspiel
from games.openspiel_adapter import OpenSpielGame, load
from games.tictactoe import TicTacToe
from games.tictactoe import to_openspiel as tictactoe_to_openspiel
from selfplay.core.errors import UserError

KINDS = {"mcts": 1_000, "alphabeta": None, "cfr": 500}  # kind -> default number (None: none)
UCT_C = 2.0  # OpenSpiel's examples' exploration constant
MAX_POSITIONS = 50_000  # alphabeta: positions solved before a game counts as too big
MAX_HISTORIES = 30_000  # cfr: game-tree nodes (goofspiel(num_cards=4) has 26,773)
_NAME = re.compile(r"^\s*([a-z]+)\s*(?::\s*(\d+))?\s*$")


class BotError(UserError):
    """A bot name that names no bot, or a bot asked for a game it cannot play: one line."""


class UnknownBotError(BotError):
    """A name whose kind is no bot's (``mctz``)."""


@dataclass(frozen=True)
class BotSpec:
    kind: str
    number: int | None  # MCTS simulations, CFR+ iterations; None for alphabeta

    @property
    def name(self) -> str:
        """The canonical name: ``mcts`` is ``mcts:1000``, ``cfr`` is ``cfr:500``."""
        return self.kind if self.number is None else f"{self.kind}:{self.number}"


def parse(name: str) -> BotSpec:
    """``mcts:100`` -> BotSpec("mcts", 100); a name that is no bot raises `BotError`."""
    match = _NAME.match(str(name))
    kind = match.group(1) if match else None
    if kind not in KINDS:
        raise UnknownBotError(f"unknown bot {name!r}; bots are mcts:<simulations>, alphabeta and "
                       "cfr:<iterations> (docs/games.md#bots)")
    default = KINDS[kind]
    number = match.group(2)
    if default is None and number is not None:
        raise BotError(f"bot {name!r}: alphabeta takes no number (it plays exactly)")
    value = default if number is None else int(number)
    if value is not None and value < 1:
        raise BotError(f"bot {name!r}: the number after ':' must be at least 1")
    return BotSpec(kind, value)


def is_bot(name: str) -> bool:
    """Whether ``name`` names a bot (``mcts:100``, ``alphabeta``, ``cfr``)."""
    try:
        parse(name)
    except BotError:
        return False
    return True


# ---- how a bot sees one of our games: an OpenSpiel game and its true state ---------------------
@dataclass(frozen=True)
class Target:
    spiel_game: Any
    state: Callable[[Game], Any]  # the pyspiel state the game is at now (the true state)
    name: Callable[[Game, int, int], str]  # our bracketed move for OpenSpiel's action id


def target(game: Game) -> Target:
    """The OpenSpiel game behind ``game``; `BotError` for a game that has none."""
    if isinstance(game, OpenSpielGame):
        return Target(game.spiel_game, lambda g: g.state, lambda g, p, a: g.action_name(p, a))
    if isinstance(game, TicTacToe):
        spiel = load("tic_tac_toe")
        return Target(spiel, lambda g: tictactoe_to_openspiel(g, spiel),
                      lambda g, p, a: f"[{a}]")
    if isinstance(game, KuhnPoker):
        spiel = load("kuhn_poker")
        return Target(spiel, lambda g: kuhn_to_openspiel(g, spiel), openspiel_move)
    raise BotError(f"bots play OpenSpiel games (openspiel:...), tictactoe and kuhn_poker; "
                   f"{game.id!r} is none of them")


def refusal(spec: BotSpec, spiel_game: Any) -> str | None:
    """Why bot ``spec`` cannot play ``spiel_game`` (fairly), or None if it can (once per bot,
    game and process: alphabeta solves the game to know)."""
    return _refusal(spec, str(spiel_game))


@functools.cache
def _refusal(spec: BotSpec, game_string: str) -> str | None:
    import pyspiel

    kind = _load(game_string).get_type()
    perfect = kind.information == pyspiel.GameType.Information.PERFECT_INFORMATION
    if spec.kind == "mcts":
        if not perfect:
            return ("MCTS searches the true state, so in an imperfect-information game it would "
                    "see what its opponent hides; use cfr for a small one")
        if kind.reward_model != pyspiel.GameType.RewardModel.TERMINAL:
            return "OpenSpiel's MCTS needs a game whose rewards come at the end"
        return None
    if spec.kind == "alphabeta":
        if not perfect or kind.chance_mode != pyspiel.GameType.ChanceMode.DETERMINISTIC:
            return ("alphabeta solves deterministic perfect-information games only; "
                    + ("use cfr for a small one" if not perfect else "use mcts"))
        if _solved(game_string) is None:
            return f"it has more than {MAX_POSITIONS:,} positions to solve exactly; use mcts"
        return None
    if not kind.provides_information_state_string:
        return "CFR needs the game's information states, and OpenSpiel gives none for it"
    if tree_size(_load(game_string), MAX_HISTORIES) > MAX_HISTORIES:
        return (f"its game tree has more than {MAX_HISTORIES:,} histories, too many to solve "
                "here" + ("; use mcts" if perfect else ""))
    return None


@functools.cache
def _load(game_string: str) -> Any:
    """The pyspiel game of a game string (``str(game)``, which OpenSpiel reads back, a
    turn-based simultaneous game included): the caches below are keyed by the string."""
    import pyspiel

    return pyspiel.load_game(game_string)


def check(name: str, game: Game) -> BotSpec:
    """The bot ``name`` if it can play ``game`` (solving the game now where the bot needs a
    solution: alphabeta, cfr), else `BotError` in one line."""
    spec = parse(name)
    try:
        spiel = target(game).spiel_game
    except BotError as exc:
        raise BotError(f"bot {spec.name!r} cannot play {game.id!r}: {exc}") from None
    why = refusal(spec, spiel)
    if why:
        raise BotError(f"bot {spec.name!r} cannot play {game.id!r}: {why}")
    if spec.kind == "cfr":
        cfr_policy(spiel, spec.number)
    return spec


def make(name: str, seed: int = 0) -> Bot:
    """The bot ``name`` (``mcts:100``, ``alphabeta``, ``cfr``) with its own seeded stream."""
    spec = parse(name)
    return Bot(spec, seed)


class Bot:
    """One bot with its own random stream; ``act(game, player)`` like `games.RandomOpponent`.
    ``verified`` is always True: a bot plays only legal moves."""

    verified = True

    def __init__(self, spec: BotSpec, seed: int = 0) -> None:
        self.spec = spec
        self.name = spec.name
        # seeded by a string: not the stream of random.Random(seed), which a game reset with
        # the same seed deals from (a CFR bot's draws would follow the cards)
        self.rng = random.Random(f"{spec.name}:{seed}")

    def act(self, game: Game, player: int) -> str:
        view = target(game)
        why = refusal(self.spec, view.spiel_game)
        if why:
            raise BotError(f"bot {self.name!r} cannot play {game.id!r}: {why}")
        state = view.state(game)
        if state.current_player() < 0 or state.is_terminal():
            raise ValueError(f"bot {self.name!r}: nobody is to move in {game.id!r} now")
        return view.name(game, player, self.choose(view.spiel_game, state))

    def choose(self, spiel_game: Any, state: Any) -> int:
        """OpenSpiel's action id for the player to move at ``state``."""
        if self.spec.kind == "mcts":
            return mcts_move(spiel_game, state, self.spec.number, self.rng.randrange(2**31))
        if self.spec.kind == "alphabeta":
            return best_move(spiel_game, state, self.rng)
        strategy = cfr_policy(spiel_game, self.spec.number).get_state_policy(state)
        actions = [int(a) for a, _ in strategy]
        return self.rng.choices(actions, weights=[p for _, p in strategy])[0]


# ---- MCTS -------------------------------------------------------------------------------------
def mcts_move(spiel_game: Any, state: Any, simulations: int, seed: int) -> int:
    """One search of ``simulations`` simulations from ``state``; the most visited move."""
    import numpy as np
    from open_spiel.python.algorithms import mcts

    evaluator = mcts.RandomRolloutEvaluator(1, np.random.RandomState(seed))
    bot = mcts.MCTSBot(spiel_game, UCT_C, simulations, evaluator, solve=True,
                       random_state=np.random.RandomState(seed + 1))
    return int(bot.step(state))


# ---- exact play -------------------------------------------------------------------------------
class _TooBig(Exception):
    pass


def _key(state: Any) -> tuple:
    """A position: the state's own text, whose move it is, and how many moves led there (two
    move orders reaching one board are one position)."""
    return str(state), state.current_player(), len(state.history())


@functools.cache
def _solved(game_string: str) -> dict[tuple, tuple[float, float]] | None:
    """Every position's returns under best play, or None past ``MAX_POSITIONS`` positions."""
    values: dict[tuple, tuple[float, float]] = {}

    def value(state: Any) -> tuple[float, float]:
        key = _key(state)
        if key not in values:
            if state.is_terminal():
                r0, r1 = state.returns()
                values[key] = (float(r0), float(r1))
            else:
                if len(values) >= MAX_POSITIONS:
                    raise _TooBig
                player = state.current_player()
                values[key] = max((value(state.child(a)) for a in state.legal_actions()),
                                  key=lambda v: v[player])
        return values[key]

    try:
        value(_load(game_string).new_initial_state())
    except (_TooBig, RecursionError):
        return None
    return values


def solved_values(spiel_game: Any) -> dict[tuple, tuple[float, float]] | None:
    """Every position's returns under best play (cached per game and process), or None when
    the game has more than ``MAX_POSITIONS`` positions."""
    return _solved(str(spiel_game))


def best_move(spiel_game: Any, state: Any, rng: random.Random) -> int:
    """A move of best value for the player to move (ties drawn by ``rng``)."""
    values = solved_values(spiel_game)
    player = state.current_player()
    scored = [(values[_key(state.child(a))][player], int(a)) for a in state.legal_actions()]
    best = max(v for v, _ in scored)
    return rng.choice([a for v, a in scored if v == best])


# ---- CFR+ -------------------------------------------------------------------------------------
def tree_size(spiel_game: Any, cap: int) -> int:
    """The number of histories of the game tree, chance included; counting stops past ``cap``."""
    count, stack = 0, [spiel_game.new_initial_state()]
    while stack and count <= cap:
        state = stack.pop()
        count += 1
        if state.is_terminal():
            continue
        if state.is_chance_node():
            stack += [state.child(a) for a, _ in state.chance_outcomes()]
        else:
            stack += [state.child(a) for a in state.legal_actions()]
    return count


@functools.cache
def _cfr(game_string: str, iterations: int) -> tuple[Any, Any]:
    import pyspiel

    solver = pyspiel.CFRPlusSolver(_load(game_string))
    for _ in range(iterations):
        solver.evaluate_and_update_policy()
    # (solver, policy): the C++ average policy reads the solver's tables, so the solver is kept
    return solver, solver.average_policy()


def cfr_policy(spiel_game: Any, iterations: int) -> Any:
    """CFR+'s average policy after ``iterations`` iterations (a ``pyspiel.Policy``; solved once
    per game, number of iterations and process)."""
    return _cfr(str(spiel_game), iterations)[1]
