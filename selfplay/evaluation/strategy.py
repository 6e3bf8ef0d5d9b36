"""``selfplay strategy RUN``: a run's policy asked at every information state of a small game,
as it plays: its action distribution at each state (sampled, or scored), the invalid mass, and
the exploitability of the whole (docs/games.md#exploitability).

Sampled replies come from the engine's own random stream, seeded by ``--seed`` (default: the
run's seed), so the same command gives the same counts and another seed other replies;
``--scored`` needs no sampling at all: the probability of answering each legal move in the
answer format. A run whose moves are scored (``spiral.action: scored``) is always measured
exactly: its policy is the distribution over the legal moves it plays from.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import torch

from selfplay.core.errors import UserError
from selfplay.evaluation.run_model import RunModel
from selfplay.loops import make_loop
from selfplay.loops.spiral import SpiralLoop, strategy
from selfplay.stats.exploitability import bootstrap, exploitability, invalid_mass


def measure_run(
    run_dir: Path,
    game_id: str | None = None,
    samples: int = 16,
    scored: bool = False,
    step: int | None = None,
    state: str | None = None,
    seed: int | None = None,
) -> dict:
    """The policy of ``run_dir`` (its latest checkpoint, or ``step``) on ``game_id`` (default:
    its first game that has an exact best response)."""
    model = RunModel(run_dir)
    try:
        loop = make_loop(model.config)
        if not isinstance(loop, SpiralLoop):
            raise UserError(f"{run_dir} is a {model.config.loop} run: a strategy is a game "
                            "policy's (a spiral run)")
        spec = _game(loop, game_id)
        snapshot = model.snapshot(step)
        model.install(snapshot)
        seed = model.config.seed if seed is None else seed
        model.engine.set_rng_state(torch.Generator().manual_seed(seed).get_state())
        start = time.perf_counter()
        spiel, rows = asyncio.run(strategy.measure(
            loop, model.policy, spec["id"], samples, scored=scored, kwargs=spec.get("kwargs")))
        seconds = time.perf_counter() - start
        if state is not None and state not in {r.key for r in rows}:
            known = ", ".join(r.key for r in rows[:12])
            raise UserError(f"--state {state!r}: not an information state of {spec['id']} "
                            f"(e.g. {known})")
        scored = scored or loop.settings.action == "scored"  # such a run's policy is exact
        low, high = (None, None) if scored else bootstrap(spiel, rows, seed=model.config.seed)
        loop.close()
    finally:
        model.close()
    chosen = [r for r in rows if state is None or r.key == state]
    return {
        "game": spec["id"], "step": snapshot.step, "mode": "scored" if scored else "sampled",
        "seed": seed,
        "samples": 1 if scored else samples, "seconds": seconds,
        "exploitability": exploitability(spiel, rows), "low": low, "high": high,
        "invalid": invalid_mass(rows),
        "states": [{"key": r.key, "player": r.player,
                    "actions": dict(zip(r.names, r.probabilities(), strict=True)),
                    "counts": dict(zip(r.names, r.counts, strict=True)), "invalid": r.invalid,
                    "outside": r.outside, "replies": r.replies}
                   for r in chosen],
    }


def _game(loop: SpiralLoop, game_id: str | None) -> dict:
    """The game asked for, else the run's first game (training or exploitability) that has
    an exact best response."""
    if game_id is not None:
        strategy.view_of(game_id)  # one line if it has none
        return {"id": game_id}
    settings = loop.settings
    for spec in [*settings.eval_exploitability, *settings.games]:
        try:
            strategy.view_of(spec.id, spec.kwargs)
        except UserError:
            continue
        return {"id": spec.id, "kwargs": spec.kwargs}
    raise UserError("none of the run's games has an exact best response here: give --game "
                    "openspiel:kuhn_poker or openspiel:leduc_poker")


def print_strategy(result: dict) -> None:
    """The table a person reads: each state's distribution, then the figure."""
    print(f"{result['game']} at step {result['step']}, {result['mode']} "
          f"({result['samples']} per state, {result['seconds']:.1f} s):")
    for row in result["states"]:
        moves = "  ".join(f"{name} {p:.3f}" for name, p in row["actions"].items())
        print(f"  {row['key']:>8} (player {row['player']}): {moves}  invalid "
              f"{row['invalid']:.3g}")
    interval = "" if result["low"] is None else (
        f" (90% bootstrap {result['low']:.3f} to {result['high']:.3f})")
    print(f"exploitability {result['exploitability']:.4f}{interval}; invalid mass "
          f"{result['invalid']:.3f} (uniform random on Kuhn Poker: 0.4583, Nash: 0)")
