"""The policy's strategy measured from the model (selfplay/loops/spiral/strategy.py): scripted
replies give known strategies, whose exploitability must be OpenSpiel's for the same policy,
through the OpenSpiel adapter and through our own one-round Kuhn Poker alike."""

from __future__ import annotations

import asyncio
import math

import pytest

from games import legal_actions_from_text
from selfplay.core.errors import UserError
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops import validate
from selfplay.loops.spiral import SpiralLoop, strategy
from selfplay.stats.exploitability import exploitability, information_states, load
from tests.conftest import run_tiny_spiral, tiny_config
from tests.scripted import ScriptedEngine

KUHN_ONE_ROUND = {"id": "kuhn_poker", "kwargs": {"rounds": 1}}


class Replies(ScriptedEngine):
    def __init__(self, choose) -> None:
        super().__init__()
        self.choose = choose

    def reply(self, request, prompt: str) -> str:
        return self.choose(legal_actions_from_text(prompt) or [])


def spiral(tmp_path, **settings) -> SpiralLoop:
    data = tiny_config(tmp_path, loop="spiral", spiral={
        "games": [KUHN_ONE_ROUND], "eval_games": 0, "eval_opponents": ["random"], **settings})
    del data["rlvr"]
    data["roles"] = {"player": {"prompt": "player"}}
    return SpiralLoop(validate(data, "test"))


def aggressive(legal: list[str]) -> str:
    """Bet or call whenever it may: OpenSpiel's action 1 at every information state."""
    move = next((m for m in legal if m.lower() in ("[bet]", "[call]")), legal[0])
    return f"I play \\boxed{{{move}}}"


@pytest.mark.parametrize("game", [KUHN_ONE_ROUND, {"id": "openspiel:kuhn_poker"}])
def test_a_scripted_strategy_measures_as_openspiels_exploitability(tmp_path, game):
    loop = spiral(tmp_path)
    policy = BatchingPolicy(Replies(aggressive))
    spiel, rows = asyncio.run(strategy.measure(loop, policy, game["id"], samples=3,
                                               kwargs=game.get("kwargs")))
    assert len(rows) == 12 and all(r.counts == [0.0, 3.0] and r.invalid == 0 for r in rows)
    kuhn = load("kuhn_poker")
    always_bet = [r.__class__(r.key, r.player, r.actions, r.names, [0.0, 1.0])
                  for r in rows]
    assert exploitability(spiel, rows) == pytest.approx(exploitability(kuhn, always_bet))
    # the prompts the policy saw are the game's at each state: 12 distinct ones, 3 times each
    assert len({p for _, p in policy._engine.prompts}) == 12


def test_replies_without_a_legal_move_are_invalid_mass(tmp_path):
    loop = spiral(tmp_path, eval_exploitability=[{"id": "openspiel:kuhn_poker"}],
                  exploitability_samples=2)
    never = Replies(lambda legal: "\\boxed{[raise]}")
    metrics = asyncio.run(loop.evaluate(BatchingPolicy(never), 0))
    key = "eval/exploitability/openspiel:kuhn_poker"
    assert metrics[f"{key}/invalid"] == 1.0
    assert metrics[key] == pytest.approx(11 / 24)  # nothing valid: uniform over the legal moves
    assert metrics[f"{key}/low"] == metrics[f"{key}/high"] == metrics[key]


def test_native_kuhn_states_render_the_same_deal_and_moves(tmp_path):
    view = strategy.view_of("kuhn_poker", {"rounds": 1})
    for key, player, state in information_states(view.spiel_game):
        game = view.at(state)
        assert game.current_player == player
        card = "JQK"[int(key[0])]
        assert f"Your card: {card}" in game.observation(player)
        facing = key.endswith("b")
        assert game.legal_actions(player) == (["[call]", "[fold]"] if facing
                                              else ["[check]", "[bet]"])


def test_scored_replies_are_the_engines_probabilities(tmp_path, tiny_model_path):
    from selfplay.engines.hf import HFEngine
    from selfplay.engines.lora import LoraSpec

    loop = spiral(tmp_path)
    engine = HFEngine(tiny_model_path, lora=LoraSpec(r=4, alpha=8), adapters=["shared"])
    policy = BatchingPolicy(engine)
    _, rows = asyncio.run(strategy.measure(loop, policy, "openspiel:kuhn_poker", samples=1,
                                           scored=True))
    for row in rows:
        assert all(0 < c < 1 for c in row.counts)
        assert row.invalid == pytest.approx(1 - sum(row.counts))
    # one of them by hand: the score of "\boxed{[Pass]}" after the first state's prompt
    first = rows[0]
    view = strategy.view_of("openspiel:kuhn_poker")
    _, _, state = information_states(view.spiel_game)[0]
    request = loop.move_request(first.player, strategy.Seat("policy", "shared"),
                                view.at(state), greedy=False)
    tokens = engine.tokenizer("\\boxed{[Pass]}", add_special_tokens=False).input_ids
    (logprobs,) = engine.score([request], [tokens])
    assert first.counts[0] == pytest.approx(math.exp(sum(logprobs)), rel=1e-6)


@pytest.mark.parametrize("game, why", [
    ({"id": "tictactoe"}, "only OpenSpiel games"),
    ({"id": "kuhn_poker"}, "only OpenSpiel games"),  # five rounds: not OpenSpiel's game
    ({"id": "openspiel:tic_tac_toe"}, "small enough"),
])
def test_a_game_without_an_exact_best_response_is_refused_in_one_line(tmp_path, game, why):
    with pytest.raises(UserError, match=why) as info:
        spiral(tmp_path, eval_exploitability=[game])
    assert "\n" not in str(info.value)


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_selfplay_strategy_reads_a_runs_policy(tmp_path, tiny_model_path, capsys):
    import json

    from selfplay.cli.main import main
    from tests.tiny_run import make_tiny_run

    run_dir, _ = make_tiny_run(tmp_path, loop="spiral", steps=1)
    assert main(["strategy", str(run_dir), "--samples", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["game"] == "kuhn_poker" and result["mode"] == "sampled"
    assert len(result["states"]) == 12 and 0 <= result["invalid"] <= 1
    assert result["low"] <= result["exploitability"] <= result["high"]
    for row in result["states"]:  # two replies each, counted as moves or as invalid
        assert sum(row["counts"].values()) + row["invalid"] == 2
    replies = [r["replies"] for r in result["states"]]
    assert all(len(texts) == 2 for texts in replies)
    for seed, same in [(result["seed"], True), (result["seed"] + 1, False)]:  # the sampler's
        assert main(["strategy", str(run_dir), "--samples", "2", "--json", "--seed",
                     str(seed)]) == 0
        again = json.loads(capsys.readouterr().out)["states"]
        assert ([r["replies"] for r in again] == replies) == same
    assert main(["strategy", str(run_dir), "--scored", "--state", "1b"]) == 0
    out = capsys.readouterr().out
    assert "1b (player 1): [fold]" in out and "[call]" in out and "exploitability" in out
    rlvr_dir, _ = make_tiny_run(tmp_path, steps=1)
    for args, why in [([str(rlvr_dir)], "a strategy is a game policy's"),
                      ([str(run_dir), "--game", "tictactoe"], "only OpenSpiel games"),
                      ([str(run_dir), "--state", "9z"], "not an information state")]:
        assert main(["strategy", *args, "--samples", "1"]) == 2
        err = capsys.readouterr().err.strip()
        assert why in err and "\n" not in err


def test_a_run_measures_exploitability_before_and_after_and_the_page_draws_it(
    tmp_path, tiny_model_path
):
    from selfplay.analysis.game_sections import exploitability_section
    from selfplay.analysis.rundata import RunData
    run_dir, rows = run_tiny_spiral(tmp_path, {
        "games": [KUHN_ONE_ROUND], "eval_games": 0, "eval_opponents": ["random"],
        "eval_exploitability": [KUHN_ONE_ROUND], "exploitability_samples": 2, "lenient": True},
        "player", {"steps": 1, "lr": 1e-3})
    measured = [r for r in rows if "eval/exploitability/kuhn_poker" in r]
    assert [r["step"] for r in measured] == [0, 1]  # before training and the final evaluation
    for row in measured:
        key = "eval/exploitability/kuhn_poker"
        assert row[f"{key}/low"] <= row[key] <= row[f"{key}/high"]
        assert 0 <= row[f"{key}/invalid"] <= 1
    section = exploitability_section(RunData.open(run_dir))
    assert [p.name for p in section.plots] == ["exploitability-hands",
                                                "exploitability-kuhn-poker",
                                                "exploitability-invalid-kuhn-poker"]
    assert [len(s.x) for s in section.plots[0].series] == [2, 2, 2]  # current, average, uniform
    assert "uniform random play: 0.458" in section.lines[0]
