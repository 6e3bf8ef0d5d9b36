"""Fictitious self-play in SPIRAL (``spiral.opponent.kind: fictitious``) and the run's record of
measured strategies (``strategies.jsonl``, ``eval/exploitability/<game>/average``): self-play
until the first snapshot, then only the policy's seat trains against snapshots drawn uniformly or
by PFSP; each game's result recorded for its snapshot; the average policy over every
evaluation, exact across a resume; ``selfplay strategy --average``."""

from __future__ import annotations

import asyncio
import json

import pytest

from games import legal_actions_from_text
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops import validate
from selfplay.loops.spiral import SpiralLoop
from selfplay.loops.spiral.history import Measured
from selfplay.stats.average_policy import average_policy
from selfplay.stats.exploitability import exploitability, load
from tests.conftest import tiny_config
from tests.scripted import ScriptedEngine

KUHN_ONE_ROUND = {"id": "kuhn_poker", "kwargs": {"rounds": 1}}
GAME = "eval/exploitability/kuhn_poker"


class FirstLegal(ScriptedEngine):
    """Every seat plays the first legal move: in tictactoe seat 0 always wins (the 2-4-6
    diagonal), so the policy's score is 1 in seat 0 and 0 in seat 1."""

    def reply(self, request, prompt: str) -> str:
        return f"\\boxed{{{(legal_actions_from_text(prompt) or ['[0]'])[0]}}}"


class Snapshots:
    """The runner's snapshot service, as the loop sees it: names taken and dropped."""

    def __init__(self) -> None:
        self.taken: list[str] = []

    def take(self, name: str, adapter: str) -> None:
        self.taken.append(name)

    def drop(self, name: str) -> None:
        self.taken.remove(name)


def fictitious_loop(tmp_path, games_per_step: int = 8, **opponent) -> SpiralLoop:
    data = tiny_config(tmp_path, loop="spiral", spiral={
        "games": [{"id": "tictactoe"}], "games_per_step": games_per_step, "eval_games": 0,
        "eval_opponents": ["random"],
        "opponent": {"kind": "fictitious", "pool_size": 2, "refresh_every": 1, **opponent}})
    del data["rlvr"]
    data["roles"] = {"player": {"prompt": "player"}}
    return SpiralLoop(validate(data, "test"))


def collect(loop: SpiralLoop, engine, step: int):
    collected = asyncio.run(loop.collect(BatchingPolicy(engine), step))
    return collected.episodes, collected.metrics


def model_seat(episode) -> int:
    return next(s for s, who in episode.info["seats"].items() if who == "model")


def test_self_play_until_the_first_snapshot_then_only_the_policy_seat_trains(tmp_path):
    loop = fictitious_loop(tmp_path, decay=1.0)
    engine = FirstLegal()
    episodes, metrics = collect(loop, engine, 0)
    assert all(e.info["opponent_adapter"] is None and len(e.rewards) == 2 for e in episodes)
    assert metrics["opponents/mirror/share"] == 1.0
    assert not any(k.endswith("/win_rate") for k in metrics)  # no snapshot yet
    snapshots = Snapshots()
    loop.after_update(0, snapshots)
    assert loop.pool.ids == snapshots.taken == ["pool-1"]
    episodes, metrics = collect(loop, engine, 1)
    assert {e.info["opponent_adapter"] for e in episodes} == {"pool-1"}
    for episode in episodes:  # the snapshot's seat plays, untrained
        seat = model_seat(episode)
        assert set(episode.rewards) == {f"player_{seat}"}
        assert {t.role for t in episode.turns} == {f"player_{seat}"}
    assert "pool-1" in engine.adapters[-len(episodes):] or "pool-1" in engine.adapters
    # each game's result for its snapshot: the policy wins exactly the games it sat in seat 0
    wins = sum(model_seat(e) == 0 for e in episodes)
    assert 0 < wins < len(episodes)  # seats drawn at random
    assert loop.pool.win_rate("pool-1") == wins / len(episodes)
    assert metrics["opponents/pool-1/share"] == 1.0
    assert metrics["opponents/pool-1/win_rate"] == wins / len(episodes)
    assert "opponents/mirror/share" not in metrics


def test_pfsp_draws_the_snapshots_that_beat_the_policy(tmp_path):
    """squared: P ∝ (1 − win rate)². A snapshot the policy always beats is never drawn; the
    uniform weighting draws both."""
    for weighting, expected in [("squared", {"pool-2"}), ("uniform", {"pool-1", "pool-2"})]:
        loop = fictitious_loop(tmp_path, games_per_step=16, weighting=weighting, decay=1.0)
        snapshots = Snapshots()
        loop.after_update(0, snapshots)
        loop.after_update(1, snapshots)
        loop.pool.record("pool-1", 1.0)
        loop.pool.record("pool-2", 0.5)
        episodes, metrics = collect(loop, FirstLegal(), 2)
        assert {e.info["opponent_adapter"] for e in episodes} == expected
        assert sum(v for k, v in metrics.items() if k.endswith("/share")) == pytest.approx(1.0)


def test_the_pool_and_its_results_survive_a_state_round_trip(tmp_path):
    loop = fictitious_loop(tmp_path, weighting="linear", decay=0.9)
    snapshots = Snapshots()
    for step in range(3):
        loop.after_update(step, snapshots)
    loop.pool.record("pool-3", 0.0)
    loop.pool.record("pool-2", 1.0)
    state = loop.state_dict()
    fresh = fictitious_loop(tmp_path, weighting="squared", decay=0.9)  # resumed with another
    fresh.load_state_dict(state)
    assert fresh.pool.ids == ["pool-2", "pool-3"] and fresh.pool.results == loop.pool.results
    assert fresh.pool.weighting == "squared"  # the resumed config's
    assert fresh.pool.probabilities() == {"pool-2": 0.0, "pool-3": 1.0}


# ---------------------------------------------------------------- strategies and their average


def kuhn_run_config(tmp_path, steps: int, **opponent):
    data = tiny_config(tmp_path, loop="spiral", train={"steps": steps, "lr": 1e-3},
                       checkpoint={"every": 1, "keep": 1}, spiral={
        "games": [KUHN_ONE_ROUND], "games_per_step": 2, "eval_games": 0, "eval_every": 1,
        "eval_opponents": ["random"], "eval_exploitability": [KUHN_ONE_ROUND],
        "exploitability_samples": 2, "lenient": True,
        **({"opponent": {"kind": "fictitious", **opponent}} if opponent else {})})
    del data["rlvr"]
    data["roles"] = {"player": {"prompt": "player"}}
    return validate(data, "test")


def strategies(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "strategies.jsonl").read_text().splitlines()]


def check_averages(run_dir, rows: list[dict]) -> None:
    """Each evaluation's average figure is the average of the rows so far, recomputed here."""
    kuhn = load("kuhn_poker")
    measured = [Measured.from_row(r) for r in strategies(run_dir)]
    by_step = {r["step"]: r for r in rows if GAME in r}
    assert sorted(by_step) == [m.step for m in measured]
    for k, m in enumerate(measured):
        row = by_step[m.step]
        assert row[GAME] == pytest.approx(exploitability(kuhn, m.states), abs=1e-9)
        expected = exploitability(kuhn, average_policy(kuhn, [x.states for x in measured[:k + 1]]))
        assert row[f"{GAME}/average"] == pytest.approx(expected, abs=1e-9)
        assert row[f"{GAME}/hands"] == m.hands


@pytest.fixture
def varied_strategies(monkeypatch):
    """The tiny model never answers a legal move, so every strategy it is measured at is
    uniform play and any average of them too: its two replies per state are redrawn at random
    (moves or invalid) after the real measurement, so the averages differ from the strategies."""
    import random

    import selfplay.loops.spiral.strategy as spiral_strategy

    real, rng = spiral_strategy.measure, random.Random(0)

    async def measure(*args, **kwargs):
        spiel, rows = await real(*args, **kwargs)
        for row in rows:
            picks = rng.choices(range(len(row.counts) + 1), k=2)  # the last one: invalid
            row.counts = [float(picks.count(i)) for i in range(len(row.counts))]
            row.invalid = float(picks.count(len(row.counts)))
        return spiel, rows

    monkeypatch.setattr(spiral_strategy, "measure", measure)


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_a_fictitious_run_records_strategies_and_their_average_exactly_across_a_resume(
    tmp_path, tiny_model_path, capsys, varied_strategies
):
    from selfplay.cli.main import main
    from selfplay.config_files import dump
    from selfplay.running.runner import build, resume, run

    config = kuhn_run_config(tmp_path, steps=2, refresh_every=1)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(dump(config))
    rows = run(build(config, run_dir, resume=False), 0)
    written = strategies(run_dir)
    assert [(r["step"], r["hands"]) for r in written] == [(0, 0), (1, 2), (2, 4)]  # and final
    first = written[0]
    assert (first["game"], first["kwargs"], first["measure"]) == (
        "kuhn_poker", {"rounds": 1}, "sampled")
    assert len(first["states"]) == 12 and set(first["states"][0]) == {
        "key", "player", "actions", "names", "counts", "invalid"}
    assert all(sum(s["counts"]) + s["invalid"] == 2 for s in first["states"])  # two replies
    check_averages(run_dir, rows)
    assert rows[0][f"{GAME}/average"] == rows[0][GAME]  # one strategy: its own average
    assert rows[-1][f"{GAME}/average"] != rows[-1][GAME]
    # step 0 was self-play; from step 1 on the policy met pool-1, and its result was logged
    assert "opponents/mirror/share" in rows[0] and "opponents/pool-1/share" in rows[1]
    # resumed for one more step: the final evaluation's row (step 2) is redone, not doubled,
    # and the averages go on from the checkpoint's settled sums
    resume(run_dir, ["train.steps=3"])
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in strategies(run_dir)] == [0, 1, 2, 3]
    check_averages(run_dir, rows)

    assert main(["strategy", str(run_dir), "--average", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    kuhn = load("kuhn_poker")
    everything = average_policy(kuhn, [Measured.from_row(r).states for r in strategies(run_dir)])
    assert result["strategies"] == 4 and result["steps"] == [0, 1, 2, 3]
    assert result["exploitability"] == pytest.approx(exploitability(kuhn, everything), abs=1e-9)
    assert result["exploitability"] == pytest.approx(rows[-1][f"{GAME}/average"], abs=1e-9)
    assert result["last"]["exploitability"] == pytest.approx(rows[-1][GAME], abs=1e-9)
    assert main(["strategy", str(run_dir), "--average", "--step", "1", "--state", "1b"]) == 0
    out = capsys.readouterr().out
    assert "average of 2 measured strategies" in out and "1b (player 1): [fold]" in out
    for args, why in [(["--step", "0"], "it has 1"), (["--scored"], "--scored"),
                      (["--state", "9z"], "not an information state"),
                      (["--game", "openspiel:kuhn_poker"], "it has 0")]:
        assert main(["strategy", str(run_dir), "--average", *args]) == 2
        err = capsys.readouterr().err.strip()
        assert why in err and "\n" not in err


def test_a_checkpoint_keeps_only_the_strategies_of_steps_already_trained():
    """An asynchronous run measures step s on its producer while step s − 1 is checkpointed:
    only measurements settled by ``after_update`` are saved; a later one stays pending (a
    resume redoes it), yet counts in the averages reported meanwhile."""
    import random

    from selfplay.loops.spiral.history import StrategyHistory
    from selfplay.stats.average_policy import Average
    from tests.test_average_policy import random_policy

    kuhn = load("kuhn_poker")
    rng = random.Random(2)
    policies = [random_policy(kuhn, rng) for _ in range(3)]
    history = StrategyHistory()
    for step, states in enumerate(policies[:2]):
        history.add(Measured(step, 4 * step, "openspiel:kuhn_poker", {}, "sampled", states), kuhn)
    history.settle(0)
    figures = history.add(Measured(2, 8, "openspiel:kuhn_poker", {}, "sampled", policies[2]), kuhn)
    average = exploitability(kuhn, average_policy(kuhn, policies))
    assert figures == {"eval/exploitability/openspiel:kuhn_poker/average": pytest.approx(average),
                       "eval/exploitability/openspiel:kuhn_poker/hands": 8.0}
    saved = Average.from_state_dict(history.state_dict()["openspiel:kuhn_poker"])
    assert saved.policies == 1  # step 0 only: steps 1 and 2 are not trained yet
    assert [r["step"] for r in history.take_rows()] == [0, 1, 2] and history.take_rows() == []
    history.settle(1)
    resumed = StrategyHistory()
    resumed.load_state_dict(history.state_dict())
    assert resumed.settled["openspiel:kuhn_poker"].policies == 2 and resumed.pending == []


def test_a_games_score_from_the_policys_side():
    """1 win, ½ draw or unfinished, 0 loss; an invalid move loses for whoever made it."""
    from selfplay.loops.spiral.opponents import policy_score
    from selfplay.types import Episode

    def score(seat: int, outcome: dict | None, invalid_by: int | None = None) -> float:
        info = {"seats": {seat: "model", 1 - seat: "opponent"}, "invalid_by": invalid_by,
                "outcome": outcome}
        return policy_score(Episode(loop="spiral", env="g", turns=[], rewards={}, info=info))

    assert score(0, {"0": 1.0, "1": -1.0}) == 1.0 and score(1, {"0": 1.0, "1": -1.0}) == 0.0
    assert score(1, {"0": 0.0, "1": 0.0}) == 0.5 and score(0, None) == 0.5
    assert score(0, None, invalid_by=0) == 0.0 and score(0, None, invalid_by=1) == 1.0
