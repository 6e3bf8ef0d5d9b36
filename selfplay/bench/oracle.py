"""Cost of the legal-move oracle, against one real move of the same game, measured in one run.

    python -m selfplay.bench.oracle [--games 3] [--ids Nim-v0 ConnectFour-v0 ...]
    selfplay bench oracle
    python -m selfplay.bench.oracle --invalid [--games 3] [--ids ...] [--json PATH]

Plays `--games` seeded random games per id. For every state it times the first legal-move query
(the oracle tries its candidates on copies, unless the observation lists the moves), a second
query (the per-state cache), and the real move that follows, which is the baseline.

With `--invalid` it measures instead how often the random player's games end by an invalid
move, over every verified offline id (games/textarena_offline.txt) unless `--ids` names some:
seeds 0..games-1, 30 turns, each id in a forked child with the network cut and a time limit
(`games.verify_offline.check_id`, the verification's own games).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

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


def bench_invalid(
    ids: tuple[str, ...] = (), games: int = 3, max_turns: int = 30, timeout: float = 300.0
) -> dict[str, dict]:
    """Per id: games played, games ended by an invalid move, their rate, where moves came from.

    An id whose games raise or run past `timeout` is reported with its error instead.
    """
    from games.registry import verified_textarena_ids
    from games.textarena_adapter import textarena_ids
    from games.verify_offline import check_id

    textarena_ids()  # import textarena before forking, so the children start fast
    results: dict[str, dict] = {}
    for env_id in ids or tuple(verified_textarena_ids()):
        check = check_id(env_id, timeout, max_turns, games)
        if check.ok and check.legal is not None:
            legal = check.legal
            rate = legal["random_invalid_rate"]
            results[env_id] = {
                "games": legal["games"],
                "invalid": round(rate * legal["games"]),
                "rate": rate,
                "legal": legal["legal"],
                "state_share": legal["state_share"],
                "seconds": round(check.seconds, 1),
            }
            line = f"{rate:.2f}  {legal['legal']:8s} {legal['state_share']}"
        else:
            results[env_id] = {"games": games, "error": check.detail}
            line = f"error: {check.detail}"
        print(f"{check.seconds:6.1f}s {env_id:40s} {line}", flush=True)
    failed = [i for i, r in results.items() if "error" not in r and r["invalid"]]
    total = sum(r.get("invalid", 0) for r in results.values())
    played = sum(r["games"] for r in results.values() if "error" not in r)
    print(f"{total} of {played} games ended by an invalid move; {len(failed)} ids: {failed}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=3)
    parser.add_argument("--ids", nargs="*", default=None)
    parser.add_argument(
        "--invalid", action="store_true", help="random player's invalid-move endings per id"
    )
    parser.add_argument("--json", type=Path, help="with --invalid: write the results here")
    args = parser.parse_args(argv)
    if args.invalid:
        results = bench_invalid(tuple(args.ids or ()), args.games)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        return 0
    bench_oracle(tuple(args.ids or DEFAULT_IDS), args.games)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
