"""Cost of the legal-move oracle, against one real move of the same game, measured in one run.

    python -m selfplay.bench.oracle [--games 3] [--ids Nim-v0 ConnectFour-v0 ...]
    selfplay bench oracle

Plays `--games` seeded random games per id. For every state it times the first legal-move query
(the oracle tries its candidates on copies, unless the observation lists the moves), a second
query (the per-state cache), and the real move that follows, which is the baseline.
"""

from __future__ import annotations

import argparse
import statistics
import time

from games.opponents import RandomOpponent
from games.textarena_adapter import TextArenaGame

DEFAULT_IDS = (
    "Nim-v0",
    "ConnectFour-v0",
    "Battleship-v0",
    "LiarsDice-v0",
    "Chopsticks-v0",
    "Poker-v0",
    "Breakthrough-v0",
    "TicTacToe-v0",
)


def bench_id(env_id: str, games: int, max_turns: int = 30) -> dict[str, float]:
    first, cached, steps, trials, sources = [], [], [], [], set()
    for seed in range(games):
        game = TextArenaGame(env_id, max_turns=max_turns)
        game.reset(seed)
        player = RandomOpponent(seed)
        while not game.done:
            seat = game.current_player
            start = time.perf_counter()
            legal = game.legal_set(seat)
            first.append(time.perf_counter() - start)
            start = time.perf_counter()
            game.legal_set(seat)
            cached.append(time.perf_counter() - start)
            trials.append(legal.trials)
            sources.add(legal.source)
            action = player.act(game, seat)
            start = time.perf_counter()
            game.step(action)
            steps.append(time.perf_counter() - start)
    step_us = 1e6 * statistics.mean(steps)
    oracle_us = 1e6 * statistics.mean(first)
    return {
        "states": len(first),
        "sources": "/".join(sorted(sources)),
        "step_us": step_us,
        "oracle_us": oracle_us,
        "oracle_p90_us": 1e6 * sorted(first)[int(0.9 * (len(first) - 1))],
        "cached_us": 1e6 * statistics.mean(cached),
        "trials": statistics.mean(trials),
        "ratio": oracle_us / step_us,
    }


def bench_oracle(ids: tuple[str, ...] = DEFAULT_IDS, games: int = 3) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"legal-move oracle: µs per call vs one real move ({games} games per id)")
    for column in ("game", "states", "source", "real move µs", "oracle µs", "p90 µs",
                   "cached µs", "trials", "oracle / move"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("game", "source") else "right")
    for env_id in ids:
        r = bench_id(env_id, games)
        table.add_row(
            env_id, str(r["states"]), r["sources"], f"{r['step_us']:.0f}",
            f"{r['oracle_us']:.0f}", f"{r['oracle_p90_us']:.0f}", f"{r['cached_us']:.1f}",
            f"{r['trials']:.0f}", f"{r['ratio']:.1f}x",
        )  # fmt: skip
    Console(width=150).print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=3)
    parser.add_argument("--ids", nargs="*", default=list(DEFAULT_IDS))
    args = parser.parse_args(argv)
    bench_oracle(tuple(args.ids), args.games)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
