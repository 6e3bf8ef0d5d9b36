"""Random games per second through the OpenSpiel adapter, against OpenSpiel alone, in one run.

    selfplay bench openspiel [--games 300] [--ids kuhn_poker leduc_poker ...]
    python -m selfplay.bench.openspiel [--games 300] [--ids ...]

For each game the same number of seeded random games is played three ways, interleaved, three
times each (the median counts):

- ``pyspiel``: the baseline, OpenSpiel alone: chance drawn from ``chance_outcomes()`` and a
  uniformly random legal action id, applied to the state (the very games the adapter plays);
- ``adapter``: `games.OpenSpielGame` as a loop drives it: the random player
  (`games.RandomOpponent`) picks a name from ``legal_actions``, ``step`` matches it back to an id;
- ``adapter + text``: the same, plus the mover's ``observation`` every move (what a model sees).

The ratio is pyspiel's games per second over the adapter's: how many times slower a game is
through the adapter.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from games.openspiel_adapter import OpenSpielGame, load
from games.openspiel_catalog import play_randomly
from games.opponents import RandomOpponent

DEFAULT_IDS = (
    "kuhn_poker",
    "leduc_poker",
    "liars_dice",
    "tic_tac_toe",
    "connect_four",
    "goofspiel(num_cards=4)",
)
NO_LIMIT = 10**9  # play every game to its end: no turn limit


def spiel_game(game_string: str, seed: int) -> int:
    """One random game in OpenSpiel alone; its player moves. The same game the adapter plays
    with this seed: chance and moves from their own ``Random(seed)``, as there."""
    state = load(game_string).new_initial_state()
    return play_randomly(state, random.Random(seed), random.Random(seed), NO_LIMIT)


def adapter_game(game_string: str, seed: int, observe: bool = False) -> int:
    """One random game through the adapter (and each mover's observation, if ``observe``)."""
    game = OpenSpielGame(game_string, max_turns=NO_LIMIT)
    game.reset(seed)
    player = RandomOpponent(seed)
    while not game.done:
        seat = game.current_player
        if observe:
            game.observation(seat)
        game.step(player.act(game, seat))
    return game.turn


def _games_per_second(play: Callable[[int], int], games: int) -> tuple[float, int]:
    start = time.perf_counter()
    moves = sum(play(seed) for seed in range(games))
    return games / (time.perf_counter() - start), moves


def bench_game(game_string: str, games: int = 300, repeats: int = 3) -> dict[str, float]:
    """Games per second of each way (median of ``repeats``, interleaved) and the ratios."""
    load(game_string)  # loaded (and cached) outside the timing
    ways: dict[str, Callable[[int], int]] = {
        "pyspiel": lambda seed: spiel_game(game_string, seed),
        "adapter": lambda seed: adapter_game(game_string, seed),
        "adapter_text": lambda seed: adapter_game(game_string, seed, observe=True),
    }
    rates: dict[str, list[float]] = {name: [] for name in ways}
    moves: dict[str, int] = {}
    for _ in range(repeats):
        for name, play in ways.items():
            rate, moves[name] = _games_per_second(play, games)
            rates[name].append(rate)
    if len(set(moves.values())) != 1:  # the ways must play the same games to be compared
        raise RuntimeError(f"{game_string}: the ways played different games: {moves}")
    result = {f"{name}_games_per_s": statistics.median(r) for name, r in rates.items()}
    result["moves_per_game"] = moves["pyspiel"] / games
    result["ratio"] = result["pyspiel_games_per_s"] / result["adapter_games_per_s"]
    result["ratio_text"] = result["pyspiel_games_per_s"] / result["adapter_text_games_per_s"]
    return result


def bench_openspiel(ids: tuple[str, ...] = DEFAULT_IDS, games: int = 300) -> dict[str, dict]:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"random games/s: OpenSpiel alone vs through the adapter ({games} games "
                  "per way, median of 3)")
    for column in ("game", "moves/game", "pyspiel", "adapter", "adapter + text",
                   "pyspiel / adapter", "pyspiel / adapter + text"):
        table.add_column(column, justify="left" if column == "game" else "right")
    results = {}
    for game_string in ids:
        r = results[game_string] = bench_game(game_string, games)
        table.add_row(
            game_string, f"{r['moves_per_game']:.1f}", f"{r['pyspiel_games_per_s']:,.0f}",
            f"{r['adapter_games_per_s']:,.0f}", f"{r['adapter_text_games_per_s']:,.0f}",
            f"{r['ratio']:.1f}x", f"{r['ratio_text']:.1f}x",
        )
    Console(width=max(Console().width, 110)).print(table)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=300, help="random games per way and game")
    parser.add_argument("--ids", nargs="*", help="OpenSpiel game strings (default: six games)")
    args = parser.parse_args(argv)
    bench_openspiel(tuple(args.ids or DEFAULT_IDS), args.games)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
