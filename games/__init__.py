"""Zero-sum two-player text games behind one `Game` protocol.

    import games
    game = games.make("kuhn_poker")          # or "tictactoe", "textarena:Nim-v0",
                                             #    "openspiel:leduc_poker", ...
    game.reset(seed=0)
    while not game.done:
        text = game.observation(game.current_player)
        game.step("[check]")                 # bracketed actions; see games.extract_action
    game.outcome()                           # {0: 1.0, 1: -1.0}

Importing this package does not import textarena (it pulls in nltk and takes a second) or
pyspiel; the adapters import them when a "textarena:" or "openspiel:" game is made.
"""

from games.actions import extract_action, legal_actions_from_text, match_legal
from games.base import DEFAULT_MAX_TURNS, Game, GameOverError, NativeGame, StepResult
from games.kuhn_poker import KuhnPoker
from games.openspiel_adapter import OpenSpielGame
from games.opponents import (
    WEIGHTINGS,
    CheckpointPool,
    FictitiousPool,
    Opponent,
    RandomOpponent,
    assign_seats,
    candidate_actions,
    example_action,
    legal_example_action,
)
from games.oracle import LegalSet, find_legal
from games.registry import (
    GameRaisedError,
    UnknownGameError,
    UnplayableGameError,
    guarded,
    list_games,
    make,
    raised_by,
    register,
    trial,
    verified_textarena_ids,
)
from games.simple_negotiation import Offer, OfferError, SimpleNegotiation, parse_offer
from games.textarena_adapter import TextArenaGame
from games.tictactoe import TicTacToe

__all__ = [
    "DEFAULT_MAX_TURNS",
    "WEIGHTINGS",
    "CheckpointPool",
    "FictitiousPool",
    "Game",
    "GameOverError",
    "GameRaisedError",
    "KuhnPoker",
    "LegalSet",
    "NativeGame",
    "Offer",
    "OfferError",
    "OpenSpielGame",
    "Opponent",
    "RandomOpponent",
    "SimpleNegotiation",
    "StepResult",
    "TextArenaGame",
    "TicTacToe",
    "UnknownGameError",
    "UnplayableGameError",
    "assign_seats",
    "candidate_actions",
    "example_action",
    "find_legal",
    "guarded",
    "extract_action",
    "legal_actions_from_text",
    "legal_example_action",
    "list_games",
    "make",
    "match_legal",
    "parse_offer",
    "raised_by",
    "register",
    "trial",
    "verified_textarena_ids",
]
