"""Find the TextArena ids that work here, offline, and write games/textarena_offline.txt.

    python -m games.verify_offline [--timeout 60] [--max-turns 30] [--games 3] [--output PATH]

For every id in textarena's registry, a forked child process builds the env, resets it for
two players and plays `--games` seeded games of random moves through `TextArenaGame` (random
legal moves where the observation lists them or the legal-move oracle finds them, random
bracketed guesses otherwise). An id passes when its games end (win, loss, draw, invalid move
or the turn cap) without raising and without the env crashing on a move. One-player envs fail
the two-player reset and drop out, as do envs that need nltk downloads or API keys, or that
do not import on this Python.

Next to the list, games/textarena_offline.json records per passing id where legal moves came
from ("listing": the observation lists them; "oracle": found by trying candidates on copies;
"unknown": in some state neither knew the whole set), the share of states per source, the
random player's invalid rate (games it lost by an invalid move) and the oracle's mean cost.
`selfplay list games` shows it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from games.opponents import RandomOpponent, options
from games.oracle import DEFAULT_MAX_TRIALS, KNOWN_SOURCES, LISTING, ORACLE, UNKNOWN
from games.registry import LEGAL_FILE, OFFLINE_LIST
from games.textarena_adapter import TextArenaGame, textarena_ids


@dataclass
class Check:
    env_id: str
    ok: bool
    detail: str
    seconds: float
    legal: dict | None = None  # what LEGAL_FILE records for the id


def legal_summary(played: list[TextArenaGame], oracle_seconds: float, oracle_calls: int) -> dict:
    """Where the legal moves of the games' states came from, and how the random player fared."""
    sources: dict[str, int] = {}
    for game in played:
        for source, count in game.legal_sources.items():
            sources[source] = sources.get(source, 0) + count
    states = max(sum(sources.values()), 1)
    if set(sources) <= {LISTING}:
        legal = LISTING
    elif set(sources) <= set(KNOWN_SOURCES):
        legal = ORACLE
    else:
        legal = UNKNOWN
    return {
        "legal": legal,
        "state_share": {k: round(v / states, 3) for k, v in sorted(sources.items())},
        "random_invalid_rate": round(
            sum(g.invalid_move_by is not None for g in played) / len(played), 3
        ),
        "games": len(played),
        "oracle_us_per_call": round(1e6 * oracle_seconds / oracle_calls) if oracle_calls else 0,
    }


def play_games(env_id: str, games: int, max_turns: int) -> dict:
    """`games` seeded random games; their legal-move summary."""
    played, seconds, calls = [], 0.0, 0
    for seed in range(games):
        game = play_random(env_id, seed=seed, max_turns=max_turns)
        played.append(game)
        for legal in game._legal.values():
            if legal.trials:
                seconds, calls = seconds + legal.seconds, calls + 1
    return legal_summary(played, seconds, calls)


class VerificationError(RuntimeError):
    """The env ran, but not well enough to list it as working."""


def play_random(
    env_id: str, seed: int = 0, max_turns: int = 30, oracle_trials: int = DEFAULT_MAX_TRIALS
) -> TextArenaGame:
    """One game of random moves; raises if the env breaks.

    A move known to be legal (listed in the observation, or accepted on a copy by the oracle)
    must be accepted: if the game rejects it, the listing is wrong (e.g. stale) or the copy
    differs from the game, and a loop trusting it would punish legal play, so the id fails.
    """
    game = TextArenaGame(env_id, max_turns=max_turns, oracle_trials=oracle_trials)
    game.reset(seed)
    opponent = RandomOpponent(seed)
    while not game.done:
        _, verified = options(game, game.current_player)
        action = opponent.act(game, game.current_player)
        result = game.step(action)
        if game.env_error:
            raise VerificationError(f"env crashed on {action!r}: {game.env_error}")
        if verified and not result.valid:
            raise VerificationError(f"known legal move {action!r} was rejected: {result.reason}")
    game.outcome()
    return game


def _cut_network() -> None:
    """Make this (child) process fail any connection, so "offline" holds on any machine.

    Word games call nltk.download() at import; with a network they would pass here and
    then fail on an offline machine.
    """

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise OSError("network disabled by games.verify_offline")

    socket.socket.connect = refuse  # type: ignore[method-assign]
    socket.socket.connect_ex = refuse  # type: ignore[method-assign]
    socket.create_connection = refuse  # type: ignore[assignment]
    os.environ["HF_HUB_OFFLINE"] = "1"


def _child(env_id: str, max_turns: int, games: int, conn: Connection) -> None:
    try:
        _cut_network()
        legal = play_games(env_id, games, max_turns)
        detail = (
            f"legal moves: {legal['legal']}, random invalid rate "
            f"{legal['random_invalid_rate']:.2f}, oracle {legal['oracle_us_per_call']} us/call"
        )
        conn.send((True, detail, legal))
    except BaseException as error:  # report anything, including SystemExit from envs
        conn.send((False, f"{type(error).__name__}: {str(error)[:160]}", None))
    finally:
        conn.close()


def check_id(env_id: str, timeout: float, max_turns: int, games: int = 3) -> Check:
    """Run one id in a forked child so a hang, crash or global side effect stays there."""
    start = time.monotonic()
    parent, child = mp.get_context("fork").Pipe(duplex=False)
    process = mp.get_context("fork").Process(target=_child, args=(env_id, max_turns, games, child))
    process.start()
    child.close()
    ok, detail, legal = False, f"timed out after {timeout:.0f}s", None
    if parent.poll(timeout):
        try:
            ok, detail, legal = parent.recv()
        except EOFError:
            detail = "child died without a report"
    process.kill()
    process.join()
    return Check(env_id, ok, detail, time.monotonic() - start, legal)


def write_list(passing: list[str], path: Path, max_turns: int) -> None:
    import textarena

    header = [
        "# TextArena ids verified to work offline with games.TextArenaGame (two players),",
        "# including the -train and -raw variants of each id.",
        "# Generated by `python -m games.verify_offline`: per id, a forked process with network",
        "# connections refused resets the env for 2 players and plays seeded games of random",
        f"# moves (capped at {max_turns} turns); moves known to be legal (listed in the",
        "# observation, or accepted on a copy by the legal-move oracle) must be accepted.",
        "# textarena_offline.json records where legal moves come from per id.",
        f"# textarena {textarena.__version__}, Python {sys.version.split()[0]}: "
        f"{len(passing)} ids.",
        "# Regenerate after upgrading textarena; do not edit by hand.",
    ]
    path.write_text("\n".join(header + passing) + "\n")


def write_legal(checks: list[Check], path: Path) -> None:
    data = {c.env_id: c.legal for c in checks if c.ok and c.legal is not None}
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def read_legal(path: Path = LEGAL_FILE) -> dict[str, dict]:
    """Per verified id: {"legal": listing|oracle|unknown, "random_invalid_rate": ..., ...}."""
    return json.loads(path.read_text()) if path.exists() else {}


def merged_checks(fresh: list[Check], output: Path) -> list[Check]:
    """The files' current entries with `fresh` checks replacing theirs (for --update)."""
    records = read_legal(output.with_suffix(".json"))
    by_id = {env_id: Check(env_id, True, "", 0.0, legal) for env_id, legal in records.items()}
    by_id |= {check.env_id: check for check in fresh}
    return [by_id[env_id] for env_id in sorted(by_id)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per id")
    parser.add_argument("--games", type=int, default=3, help="random games per id")
    parser.add_argument("--max-turns", type=int, default=30, help="turn cap per game")
    parser.add_argument("--output", type=Path, default=OFFLINE_LIST)
    parser.add_argument("--ids", nargs="*", help="check only these ids (no file written)")
    parser.add_argument(
        "--update", action="store_true", help="with --ids: update their entries in the files"
    )
    args = parser.parse_args(argv)

    all_ids = textarena_ids()  # imports textarena once, before forking, so children start fast
    ids = args.ids or all_ids
    checks = []
    for env_id in ids:
        check = check_id(env_id, args.timeout, args.max_turns, args.games)
        checks.append(check)
        mark = "ok  " if check.ok else "FAIL"
        print(f"{mark} {check.seconds:5.1f}s {env_id:45s} {check.detail}", flush=True)
    passing = [c.env_id for c in checks if c.ok]
    print(f"{len(passing)} of {len(checks)} ids pass")
    if args.ids and args.update:
        checks = merged_checks(checks, args.output)
        passing = [c.env_id for c in checks if c.ok]
    if not args.ids or args.update:
        write_list(passing, args.output, args.max_turns)
        write_legal(checks, args.output.with_suffix(".json"))
        print(f"wrote {args.output} and {args.output.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
