"""``selfplay strategy RUN --average``: the average of the strategies a SPIRAL run measured
(``strategies.jsonl``, one row per game and evaluation), per information state, and its
exploitability beside the last measured policy's. No model is loaded: the rows are the
measurements (docs/games.md#the-average-policy).
"""

from __future__ import annotations

import json
from pathlib import Path

from selfplay.core.errors import UserError
from selfplay.loops.spiral import strategy
from selfplay.loops.spiral.history import STRATEGIES, Measured
from selfplay.stats.average_policy import average_policy
from selfplay.stats.exploitability import exploitability, invalid_mass


def read_strategies(run_dir: Path) -> list[Measured]:
    """Every row of ``RUN/strategies.jsonl``; a folder without one is one line."""
    path = Path(run_dir) / STRATEGIES
    if not path.is_file():
        what = "is not a run folder" if not (Path(run_dir) / "config.yaml").is_file() else (
            f"has no {STRATEGIES} (a spiral run with spiral.eval_exploitability writes one)")
        raise UserError(f"{run_dir} {what}")
    try:
        return [Measured.from_row(json.loads(line))
                for line in path.read_text().splitlines() if line.strip()]
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: not a strategies file ({type(exc).__name__}: {exc})") from exc


def average_run(
    run_dir: Path, game_id: str | None = None, step: int | None = None, state: str | None = None
) -> dict:
    """The uniform average of the run's measured strategies of ``game_id`` (default: the first
    game measured) up to ``step`` (default: all), at every information state (or ``state``)."""
    rows = read_strategies(run_dir)
    game_id = game_id or (rows[0].game if rows else None)
    chosen = [r for r in rows if r.game == game_id and (step is None or r.step <= step)]
    if len(chosen) < 2:
        upto = "" if step is None else f" up to step {step}"
        raise UserError(f"--average needs two or more measured strategies of {game_id or 'a game'}"
                        f"{upto} in {Path(run_dir) / STRATEGIES}; it has {len(chosen)}")
    if len({r.game_key for r in chosen}) > 1:
        raise UserError(f"{Path(run_dir) / STRATEGIES} measures {game_id} with different "
                        "arguments; an average mixes one game's strategies only")
    spiel = strategy.view_of(game_id, chosen[0].kwargs).spiel_game
    average = average_policy(spiel, [r.states for r in chosen])
    if state is not None and state not in {s.key for s in average}:
        known = ", ".join(s.key for s in average[:12])
        raise UserError(f"--state {state!r}: not an information state of {game_id} (e.g. {known})")
    last = chosen[-1]
    return {
        "game": game_id, "kwargs": chosen[0].kwargs, "mode": "average",
        "strategies": len(chosen), "steps": [r.step for r in chosen],
        "hands": [r.hands for r in chosen], "measures": sorted({r.measure for r in chosen}),
        "exploitability": exploitability(spiel, average), "invalid": invalid_mass(average),
        "last": {"step": last.step, "exploitability": exploitability(spiel, last.states),
                 "invalid": invalid_mass(last.states)},
        "states": [{"key": s.key, "player": s.player,
                    "actions": dict(zip(s.names, s.probabilities(), strict=True)),
                    "invalid": s.invalid}
                   for s in average if state is None or s.key == state],
    }


def print_average(result: dict) -> None:
    """The table a person reads: the average's distribution at each state, then the figures."""
    steps, hands = result["steps"], result["hands"]
    print(f"{result['game']}: the average of {result['strategies']} measured strategies "
          f"({'/'.join(result['measures'])}; steps {steps[0]} to {steps[-1]}, after {hands[0]} to "
          f"{hands[-1]} training games), each weighted by its own reach at every state:")
    for row in result["states"]:
        moves = "  ".join(f"{name} {p:.3f}" for name, p in row["actions"].items())
        print(f"  {row['key']:>8} (player {row['player']}): {moves}  invalid "
              f"{row['invalid']:.3g}")
    last = result["last"]
    print(f"exploitability of the average {result['exploitability']:.4f} (invalid mass "
          f"{result['invalid']:.3f}); of the last, at step {last['step']}, "
          f"{last['exploitability']:.4f} (uniform random on Kuhn Poker: 0.4583, Leduc Poker: "
          "2.3736, Nash: 0)")
