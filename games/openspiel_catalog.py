"""Which OpenSpiel games can be played here, what kind they are and how long a random game lasts:
``games/openspiel_games.json``, shipped with the package and read by ``selfplay list games``.

    python -m games.openspiel_catalog            # rewrite the file (about a minute)
    python -m games.openspiel_catalog --check    # print it, write nothing

Every game OpenSpiel registers that loads with its default parameters (``players=2`` where the
default is another number) is tried: a playable one gets its information kind (``perfect`` or
``imperfect``; a simultaneous-move game played turn-based is imperfect) and the mean number of
moves (player actions, chance events not counted) of ``GAMES`` uniformly random games, seeds
0..GAMES-1, chance drawn as the adapter draws it; a game cut at ``MOVE_CAP`` moves counts
``MOVE_CAP``. Anything else is listed under ``refused`` with the one-line reason.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
from importlib import metadata
from pathlib import Path
from typing import Any

from games.errors import UnknownGameError, UnplayableGameError
from games.openspiel_adapter import OPENSPIEL_PREFIX, _pyspiel, load, openspiel_names

CATALOG = Path(__file__).with_name("openspiel_games.json")
GAMES = 5  # random games per game
MOVE_CAP = 5_000  # a random game longer than this is cut here


def random_moves(game: Any, seed: int, cap: int = MOVE_CAP) -> int:
    """Player moves in one uniformly random game (chance drawn as `OpenSpielGame` draws it)."""
    rng = random.Random(seed)
    return play_randomly(game.new_initial_state(), rng, rng, cap)


def play_randomly(state: Any, chance: random.Random, player: random.Random, cap: int) -> int:
    """Play ``state`` to its end (or ``cap`` player moves): chance by its own probabilities,
    players uniformly among the legal actions; returns the player moves made."""
    moves = 0
    while not state.is_terminal() and moves < cap:
        if state.is_chance_node():
            outcomes = state.chance_outcomes()
            actions = [a for a, _ in outcomes]
            state.apply_action(chance.choices(actions, weights=[p for _, p in outcomes])[0])
            continue
        state.apply_action(player.choice(state.legal_actions()))
        moves += 1
    return moves


def build(games: int = GAMES) -> dict[str, Any]:
    """The catalog: playable games with their kind and random length, refused ones with why."""
    pyspiel = _pyspiel()
    playable: dict[str, dict[str, Any]] = {}
    refused: dict[str, str] = {}
    loadable = {g.short_name for g in pyspiel.registered_games() if g.default_loadable}
    for name in openspiel_names():
        if name not in loadable:
            refused[name] = "it needs parameters to load (a wrapper around another game)"
            continue
        if name.startswith("python_"):  # slow twins of C++ games (python_kuhn_poker, ...)
            refused[name] = "a Python re-implementation; OpenSpiel's own (C++) game is listed"
            continue
        try:
            game = load(name)
        except (UnknownGameError, UnplayableGameError) as exc:
            refused[name] = str(exc).split("cannot be played here: ", 1)[-1]
            continue
        kind = game.get_type()
        perfect = kind.information == pyspiel.GameType.Information.PERFECT_INFORMATION
        lengths = [random_moves(game, seed) for seed in range(games)]
        playable[name] = {
            "long_name": kind.long_name,
            "information": "perfect" if perfect else "imperfect",
            "random_moves": round(statistics.mean(lengths), 1),
            "turn_based": kind.short_name == "turn_based_simultaneous_game",
        }
    return {
        "open_spiel": metadata.version("open_spiel"),
        "random_games": games,
        "games": playable,
        "refused": refused,
    }


@functools.cache
def read() -> dict[str, Any]:
    """The shipped catalog (empty parts when the file is missing); read once per process."""
    if not CATALOG.exists():
        return {"games": {}, "refused": {}}
    return json.loads(CATALOG.read_text())


def listed_ids() -> list[str]:
    """``openspiel:<name>`` for every playable game in the catalog."""
    return [OPENSPIEL_PREFIX + name for name in sorted(read()["games"])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="print the catalog, write nothing")
    parser.add_argument("--games", type=int, default=GAMES, help="random games per game")
    args = parser.parse_args(argv)
    catalog = build(args.games)
    text = json.dumps(catalog, indent=1, sort_keys=True) + "\n"
    if args.check:
        print(text)
    else:
        CATALOG.write_text(text)
        print(f"{CATALOG}: {len(catalog['games'])} playable, {len(catalog['refused'])} refused")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
