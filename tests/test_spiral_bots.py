"""SPIRAL with opponents that play well (selfplay/loops/spiral/opponents.py, games/bots.py): a bot
as the training opponent, bots and the pool's snapshots as evaluation opponents under the usual
eval/<game>/<opponent>/... keys, the ladder (eval/ladder/<player>/...), and one-line refusals."""

from __future__ import annotations

import asyncio

import pytest

from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops.spiral import SpiralLoop
from tests.test_spiral import ScriptedEngine, collect, first_legal, spiral_config


def test_a_bot_as_training_opponent_trains_only_the_policy_seat(tmp_path):
    config = spiral_config(tmp_path, opponent={"kind": "bot", "bot": "mcts:200"}, games_per_step=8)
    loop = SpiralLoop(config)
    engine = ScriptedEngine(first_legal)
    episodes, metrics = collect(loop, engine)
    seats = set()
    for episode in episodes:
        model_seat = next(s for s, who in episode.info["seats"].items() if who == "model")
        seats.add(model_seat)
        assert set(episode.rewards) == {f"player_{model_seat}"}
        assert {t.role for t in episode.turns} == {f"player_{model_seat}"}
        assert episode.info["opponent"] == "mcts:200" and episode.info["invalid_by"] is None
        # first-legal play (cells in order) loses to the search whatever the seats
        assert episode.info["winner"] == 1 - model_seat
    assert seats == {0, 1}
    assert metrics["game/invalid_rate"] == 0.0
    # the engine saw only the policy's moves: one request per model turn
    assert len(engine.prompts) == sum(len(e.turns) for e in episodes)


def test_bots_are_evaluation_opponents_with_the_usual_keys_and_a_ladder(tmp_path):
    config = spiral_config(tmp_path, eval_games=4,
                           eval_opponents=["random", "alphabeta", "mcts:200"])
    loop = SpiralLoop(config)
    metrics = asyncio.run(loop.evaluate(BatchingPolicy(ScriptedEngine(first_legal)), 0))
    for bot in ("alphabeta", "mcts:200"):
        assert metrics[f"eval/tictactoe/{bot}/loss"] == 1.0  # first-legal play loses every game
        assert metrics[f"eval/tictactoe/{bot}/seat0/loss"] == 1.0
        assert metrics[f"eval/tictactoe/{bot}/opponent_invalid"] == 0.0
    # the ladder: the bots above the policy, which beats (or draws) the random player
    ordinal = {name: metrics[f"eval/ladder/{name}/ordinal"]
               for name in ("policy", "random", "alphabeta", "mcts:200")}
    assert min(ordinal["alphabeta"], ordinal["mcts:200"]) > ordinal["policy"]
    assert metrics["eval/tictactoe/random/loss"] < 1.0
    assert {k.split("/")[2] for k in metrics if k.startswith("eval/ladder/")} == set(ordinal)


def test_cfr_plays_the_native_kuhn_poker_in_evaluation(tmp_path):
    config = spiral_config(tmp_path, games=[{"id": "kuhn_poker", "kwargs": {"rounds": 1}}],
                           eval_games=8, eval_opponents=["cfr:100"])
    loop = SpiralLoop(config)
    metrics = asyncio.run(loop.evaluate(BatchingPolicy(ScriptedEngine(first_legal)), 0))
    rates = [metrics[f"eval/kuhn_poker/cfr:100/{k}"] for k in ("win", "draw", "loss")]
    assert sum(rates) == pytest.approx(1.0) and metrics["eval/kuhn_poker/cfr:100/invalid"] == 0
    assert "eval/ladder/cfr:100/mu" in metrics


def test_bot_names_are_canonical(tmp_path):
    loop = SpiralLoop(spiral_config(tmp_path, eval_opponents=["random", "mcts", " mcts : 100"],
                                    opponent={"kind": "bot", "bot": "alphabeta"}))
    assert loop.settings.eval_opponents == ["random", "mcts:1000", "mcts:100"]
    loop = SpiralLoop(spiral_config(tmp_path, games=[{"id": "openspiel:kuhn_poker"}],
                                    opponent={"kind": "bot", "bot": "cfr"}))
    assert loop.settings.opponent.bot == "cfr:500"


def test_the_pools_snapshots_are_an_evaluation_opponent(tmp_path):
    config = spiral_config(tmp_path, eval_games=4, eval_opponents=["pool"],
                           opponent={"kind": "pool", "pool_size": 2, "refresh_every": 1})
    loop = SpiralLoop(config)
    engine = ScriptedEngine(first_legal)
    assert asyncio.run(loop.evaluate(BatchingPolicy(engine), 0)) == {}  # no snapshot yet
    for step in (1, 2):
        loop.pool.maybe_add(step, f"pool-{step}")
    metrics = asyncio.run(loop.evaluate(BatchingPolicy(engine), 2))
    assert set(engine.adapters) == {"shared", "pool-1", "pool-2"}  # each snapshot played
    assert metrics["eval/tictactoe/pool/seat0/win"] == 1.0  # first-legal mirror: X wins
    assert "eval/ladder/pool/mu" in metrics


@pytest.mark.parametrize(("settings", "named"), [
    ({"eval_opponents": ["mcts"], "games": [{"id": "openspiel:kuhn_poker"}]},
     "imperfect-information"),
    ({"eval_opponents": ["alphabeta"], "games": [{"id": "openspiel:connect_four"}]},
     "more than 50,000 positions"),
    ({"opponent": {"kind": "bot", "bot": "cfr"}, "games": [{"id": "openspiel:liars_dice"}]},
     "more than 30,000 histories"),
    ({"eval_opponents": ["cfr"], "games": [{"id": "simple_negotiation"}]},
     "bots play OpenSpiel games"),
    ({"eval_opponents": ["pool"]}, "only opponent kinds pool and fictitious keep"),
])
def test_an_opponent_that_cannot_play_a_game_is_refused_in_one_line(tmp_path, settings, named):
    with pytest.raises(UserError) as info:
        SpiralLoop(spiral_config(tmp_path, **settings))
    assert "\n" not in str(info.value) and named in str(info.value)


@pytest.mark.parametrize(("settings", "named"), [
    ({"eval_opponents": ["mctz"]}, "'mctz' is no evaluation opponent"),
    ({"eval_opponents": ["mcts:0"]}, "must be at least 1"),
    ({"opponent": {"kind": "bot"}}, "opponent.bot names the bot"),
    ({"opponent": {"kind": "mirror", "bot": "mcts:10"}}, "opponent.bot names the bot"),
    ({"opponent": {"kind": "bot", "bot": "alphabeta:2"}}, "takes no number"),
])
def test_a_name_that_is_no_opponent_is_a_config_error(tmp_path, settings, named):
    with pytest.raises(UserError) as info:
        spiral_config(tmp_path, **settings)
    assert "\n" not in str(info.value) and named in str(info.value)
