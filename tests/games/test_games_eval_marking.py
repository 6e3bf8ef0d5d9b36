"""Evaluation against the random player on a game whose legal set is not known is marked as
not meaningful instead of being reported as wins (issue 12)."""

from __future__ import annotations

from selfplay.stats.games import eval_metrics as game_rates


def row(reward: float, meaningful: bool, seat: int = 0, invalid: bool = False) -> dict:
    return {
        "game": "textarena:Breakthrough-v0",
        "opponent": "random",
        "seat": seat,
        "reward": reward,
        "invalid": invalid,
        "meaningful": meaningful,
    }


def test_guessing_random_player_makes_wins_not_meaningful() -> None:
    metrics = game_rates([row(1.0, False), row(1.0, True, seat=1), row(-1.0, True, invalid=True)])
    prefix = "eval/Breakthrough-v0/random"
    assert f"{prefix}/win" not in metrics and f"{prefix}/loss" not in metrics
    assert metrics[f"{prefix}/not_meaningful"] == 1 / 3
    assert metrics[f"{prefix}/invalid"] == 1 / 3  # the model's own invalid moves still count
    assert metrics[f"{prefix}/seat1/win"] == 1.0  # a seat where every game was judged


def test_known_legal_sets_report_rates() -> None:
    metrics = game_rates([row(1.0, True), row(0.0, True, seat=1)])
    assert metrics["eval/Breakthrough-v0/random/win"] == 0.5
    assert "eval/Breakthrough-v0/random/not_meaningful" not in metrics


def test_spiral_play_records_when_the_random_seat_guessed(tmp_path) -> None:
    import asyncio
    import random

    from selfplay.loops import validate
    from selfplay.loops.spiral import GameSpec, Seat, SpiralLoop

    config = validate(
        {
            "name": "t",
            "loop": "spiral",
            "run_dir": str(tmp_path),
            "model": {"path": "tiny-random"},
            "roles": {"player": {"prompt": "player"}},
            "spiral": {"games": [{"id": "textarena:Nim-v0"}]},
        },
        "test",
    )
    loop = SpiralLoop(config)

    def random_game(kwargs: dict) -> bool:
        seats = {s: Seat("random", rng=random.Random(s)) for s in (0, 1)}
        spec = GameSpec(id="textarena:Nim-v0", max_turns=20, kwargs=kwargs)
        game, record = asyncio.run(loop.play(None, spec, 0, seats))
        assert game.done
        return record.random_guessed

    assert random_game({}) is False  # the oracle knows Nim's moves
    assert random_game({"oracle_trials": 0}) is True  # without it, the random seat guesses
