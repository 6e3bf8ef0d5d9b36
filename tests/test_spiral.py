"""SPIRAL loop: penalties, per-seat advantages, RAE, batching waves, opponents, evaluation."""

import asyncio

import pytest

from games import legal_actions_from_text
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops import validate
from selfplay.loops.spiral import GameSpec, SpiralLoop
from selfplay.stats.games import eval_metrics
from tests.conftest import tiny_config
from tests.scripted import ScriptedEngine as Scripted


class ScriptedEngine(Scripted):
    """Answers every request with ``choose(prompt_text)``; records batch sizes and adapters."""

    def __init__(self, choose):
        super().__init__()
        self.choose = choose

    def reply(self, request, prompt):
        return self.choose(prompt)


def first_legal(prompt: str) -> str:
    legal = legal_actions_from_text(prompt) or ["[0]"]
    return f"I choose \\boxed{{{legal[0]}}}"


def spiral_config(tmp_path, **spiral):
    settings = {
        "games": [{"id": "tictactoe"}],
        "games_per_step": 4,
        "eval_games": 4,
        "eval_opponents": ["random"],
        **spiral,
    }
    config = tiny_config(
        tmp_path,
        loop="spiral",
        roles={"player": {"prompt": "player"}},
        spiral=settings,
        advantage={"estimator": "rae", "rae_alpha": 0.5},
    )
    del config["rlvr"]
    config["roles"] = {"player": {"prompt": "player"}}
    return validate(config, "test")


def collect(loop, engine, step=0):
    """(the step's episodes, the step's metrics) of ``loop.collect`` on ``engine``."""
    collected = asyncio.run(loop.collect(BatchingPolicy(engine), step))
    return collected.episodes, collected.metrics


def test_invalid_action_ends_game_with_training_penalties(tmp_path):
    loop = SpiralLoop(spiral_config(tmp_path))
    episodes, _ = collect(loop, ScriptedEngine(lambda p: "\\boxed{[42]}"))
    for episode in episodes:
        assert episode.info["invalid_by"] == 0  # player 0 moves first and plays cell 42
        assert episode.rewards == {"player_0": -1.5, "player_1": 0.5}
        assert len(episode.turns) == 1 and episode.info["moves"] == 1


def test_unparseable_action_is_invalid(tmp_path):
    loop = SpiralLoop(spiral_config(tmp_path))
    episodes, _ = collect(loop, ScriptedEngine(lambda p: "I would rather not say"))
    assert all(e.info["parse_failures"] == 1 and e.info["invalid_by"] == 0 for e in episodes)


def test_custom_penalties_and_lenient_parsing(tmp_path):
    config = spiral_config(
        tmp_path, invalid_penalty=-2.0, invalid_opponent_reward=0.0, lenient=True
    )
    loop = SpiralLoop(config)
    episodes, _ = collect(loop, ScriptedEngine(lambda p: "my move is [4] then"))
    # lenient parsing accepts "[4]"; player 1 then repeats the occupied cell and loses
    assert all(e.info["invalid_by"] == 1 and e.info["moves"] == 2 for e in episodes)
    assert episodes[0].rewards == {"player_0": 0.0, "player_1": -2.0}
    loop = SpiralLoop(spiral_config(tmp_path, invalid_penalty=-2.0, invalid_opponent_reward=0.0))
    episodes, _ = collect(loop, ScriptedEngine(lambda p: "\\boxed{[99]}"))
    assert episodes[0].rewards == {"player_0": -2.0, "player_1": 0.0}


def test_a_prompt_that_starts_the_reply_is_parsed_with_it(tmp_path):
    """A role prompt with `prefill: \\boxed{`: the model writes only the move and the closing
    brace, and the game reads the whole reply (prefill + completion), as every loop does."""
    import yaml

    from roles import PROMPTS_DIR

    prompt = yaml.safe_load((PROMPTS_DIR / "player.yaml").read_text()) | {"prefill": "\\boxed{"}
    (tmp_path / "boxed_player.yaml").write_text(yaml.safe_dump(prompt))
    config = spiral_config(tmp_path)
    config.roles["player"].prompt = str(tmp_path / "boxed_player.yaml")
    loop = SpiralLoop(config)
    engine = ScriptedEngine(lambda p: (legal_actions_from_text(p) or ["[0]"])[0] + "}")
    episodes, _ = collect(loop, engine)
    assert all(prompt.endswith("\\boxed{") for _, prompt in engine.prompts)
    # first-legal play to the end, as in the test below: nothing failed to parse
    assert all(e.info["parse_failures"] == 0 and e.info["moves"] == 7 for e in episodes)


def test_mirror_self_play_trains_both_seats_with_their_own_advantage(tmp_path):
    loop = SpiralLoop(spiral_config(tmp_path))
    episodes, _ = collect(loop, ScriptedEngine(first_legal))
    # first-legal play: X 0, O 1, X 2, O 3, X 4, O 5, X 6 completes the 2-4-6 diagonal
    for episode in episodes:
        assert episode.info["winner"] == 0 and episode.info["moves"] == 7
        assert episode.rewards == {"player_0": 1.0, "player_1": -1.0}
        assert [t.role for t in episode.turns] == ["player_0", "player_1"] * 3 + ["player_0"]
    samples = loop.samples(episodes[:1])
    by_role = {}
    for sample in samples:
        by_role.setdefault(sample.turn.role, set()).add(sample.advantage)
    # RAE, alpha 0.5, paper order: b = 0.5·0 + 0.5·R → A = R − R/2
    assert by_role == {"player_0": {0.5}, "player_1": {-0.5}}
    assert loop.baseline.values[("tictactoe", "player_0")] == pytest.approx(0.5)


def test_player_train_false_freezes_both_seats(tmp_path):
    """``roles.player.train: false`` reaches the seats' turns (labelled ``player_0`` and
    ``player_1`` for RAE): none of them is trained, though both still play and are rewarded;
    with the default, every turn is. (The runner's own filter knows only ``player``.)"""
    from selfplay.running.runner import trained_roles

    frozen = spiral_config(tmp_path)
    frozen.roles["player"].train = False
    loop = SpiralLoop(frozen)
    episodes, _ = collect(loop, ScriptedEngine(first_legal))
    assert all(e.rewards == {"player_0": 1.0, "player_1": -1.0} for e in episodes)
    assert trained_roles(loop.samples(episodes), frozen) == []
    trained = SpiralLoop(spiral_config(tmp_path))
    played, _ = collect(trained, ScriptedEngine(first_legal))
    samples = trained_roles(trained.samples(played), trained.config)
    assert len(samples) == sum(len(e.turns) for e in played) == 7 * len(played)


def test_rae_values_after_a_known_sequence(tmp_path):
    loop = SpiralLoop(spiral_config(tmp_path))
    episodes, _ = collect(loop, ScriptedEngine(first_legal))
    loop.samples(episodes)  # four games, all won by player 0
    expected = 0.0
    for _ in range(4):
        expected = 0.5 * expected + 0.5 * 1.0
    assert loop.baseline.values[("tictactoe", "player_0")] == pytest.approx(expected)
    assert loop.baseline.values[("tictactoe", "player_1")] == pytest.approx(-expected)


def test_one_engine_call_per_wave(tmp_path):
    loop = SpiralLoop(spiral_config(tmp_path, games_per_step=6))
    engine = ScriptedEngine(first_legal)
    collect(loop, engine)
    assert engine.batches == [6] * 7  # six games in lockstep, seven moves each


def test_random_opponent_trains_only_the_policy_seat_and_logs_seats(tmp_path):
    loop = SpiralLoop(spiral_config(tmp_path, opponent={"kind": "random"}, games_per_step=8))
    episodes, _ = collect(loop, ScriptedEngine(first_legal))
    seats_seen = set()
    for episode in episodes:
        model_seat = [s for s, who in episode.info["seats"].items() if who == "model"][0]
        seats_seen.add(model_seat)
        assert set(episode.rewards) == {f"player_{model_seat}"}
        assert {t.role for t in episode.turns} == {f"player_{model_seat}"}
    assert seats_seen == {0, 1}  # seats drawn at random per game


def test_frozen_opponent_uses_the_base_adapter(tmp_path):
    loop = SpiralLoop(spiral_config(tmp_path, opponent={"kind": "frozen"}, games_per_step=4))
    engine = ScriptedEngine(first_legal)
    episodes, _ = collect(loop, engine)
    assert set(engine.adapters) == {"shared", "base"}
    assert all(e.info["opponent_adapter"] == "base" for e in episodes)


def test_game_mixture_follows_weights(tmp_path):
    config = spiral_config(
        tmp_path,
        games=[
            {"id": "tictactoe", "weight": 3.0},
            {"id": "kuhn_poker", "weight": 1.0, "kwargs": {"rounds": 1}},
        ],
        games_per_step=200,
    )
    loop = SpiralLoop(config)
    episodes, _ = collect(loop, ScriptedEngine(first_legal))
    share = sum(e.env == "tictactoe" for e in episodes) / len(episodes)
    assert 0.65 < share < 0.85


def test_unknown_game_fails_at_start_in_one_line(tmp_path):
    from games import UnknownGameError

    with pytest.raises(UnknownGameError) as info:
        SpiralLoop(spiral_config(tmp_path, games=[{"id": "textarena:NoSuchGame-v0"}]))
    assert "\n" not in str(info.value)


def test_evaluation_rates_per_seat(tmp_path):
    loop = SpiralLoop(spiral_config(tmp_path, eval_games=4))
    policy = BatchingPolicy(ScriptedEngine(lambda p: "\\boxed{[77]}"))
    metrics = asyncio.run(loop.evaluate(policy, 0))
    assert metrics["eval/tictactoe/random/invalid"] == 1.0
    assert metrics["eval/tictactoe/random/loss"] == 1.0
    assert metrics["eval/tictactoe/random/seat0/loss"] == 1.0
    rates = eval_metrics(
        [
            {"game": "g", "opponent": "random", "seat": 0, "reward": 1.0, "invalid": False},
            {"game": "g", "opponent": "random", "seat": 1, "reward": 0.0, "invalid": False},
        ]
    )
    assert rates["eval/g/random/win"] == 0.5 and rates["eval/g/random/draw"] == 0.5
    assert rates["eval/g/random/seat1/draw"] == 1.0


def test_textarena_game_through_the_loop(tmp_path):
    loop = SpiralLoop(
        spiral_config(tmp_path, games=[{"id": "textarena:TicTacToe-v0"}], games_per_step=2)
    )
    episodes, _ = collect(loop, ScriptedEngine(first_legal))
    assert all(e.info["moves"] >= 1 and e.rewards for e in episodes)


def test_pool_opponent_snapshots_into_the_engine(tmp_path, tiny_model_path):
    """The loop asks the runner's snapshot service for pool members; the service serves them
    in the engine, evicts them, and serves them again in a fresh engine after a resume."""
    import torch

    from selfplay.engines.hf import HFEngine
    from selfplay.engines.lora import LoraSpec
    from selfplay.running.snapshots import PolicySnapshots
    from selfplay.training.learner import LearnerSettings, LocalLearner

    config = spiral_config(tmp_path, opponent={"kind": "pool", "pool_size": 2, "refresh_every": 1})
    loop = SpiralLoop(config)
    lora = LoraSpec(r=4, alpha=8)
    engine = HFEngine(tiny_model_path, lora=lora, adapters=["shared"])
    learner = LocalLearner(tiny_model_path, LearnerSettings(lora=lora), adapters=["shared"])
    snapshots = PolicySnapshots(learner, engine, BatchingPolicy(engine))
    for step in range(3):
        with torch.no_grad():  # a different policy at every step
            next(p for n, p in learner.model.named_parameters() if "lora_B" in n).add_(1.0)
        loop.after_update(step, snapshots)
    assert loop.pool.ids == ["pool-2", "pool-3"]  # FIFO: pool-1 evicted
    assert set(engine.adapters) == {"shared", "pool-2", "pool-3"}
    assert snapshots.names == ["pool-2", "pool-3"]
    first, second = (snapshots.state_dict()["weights"][n] for n in ("pool-2", "pool-3"))
    assert any(not torch.equal(first[k], second[k]) for k in first)  # frozen when taken
    state, saved = loop.state_dict(), snapshots.state_dict()
    fresh = SpiralLoop(config)
    fresh.load_state_dict(state)
    engine2 = HFEngine(tiny_model_path, lora=lora, adapters=["shared"])
    PolicySnapshots(learner, engine2, BatchingPolicy(engine2)).load_state_dict(saved)
    assert fresh.pool.ids == ["pool-2", "pool-3"]
    assert set(engine2.adapters) == {"shared", "pool-2", "pool-3"}


# ---------------------------------------------------------------- a non-model seat's invalid move


class InvalidRandomOpponent:
    """Stands in for the random opponent of a free-form game whose guess breaks the rules."""

    def __init__(self, seed: int = 0) -> None:
        self.verified = True  # counted as meaningful: the test is about who broke the rules

    def act(self, game, player: int) -> str:
        return "[42]"  # no such tictactoe cell


def test_random_opponents_invalid_move_gets_the_same_shaping_and_metrics(tmp_path, monkeypatch):
    import selfplay.loops.spiral.play as spiral

    monkeypatch.setattr(spiral, "RandomOpponent", InvalidRandomOpponent)
    loop = SpiralLoop(spiral_config(tmp_path, opponent={"kind": "random"}, games_per_step=8))
    episodes, metrics = collect(loop, ScriptedEngine(first_legal))
    seats_seen = set()
    for episode in episodes:
        model_seat = next(s for s, who in episode.info["seats"].items() if who == "model")
        seats_seen.add(model_seat)
        opponent_seat = 1 - model_seat
        assert episode.info["invalid_by"] == opponent_seat
        assert episode.info["invalid_by_kind"] == "random"
        assert episode.info["invalid_reason"]  # the game's own explanation
        assert episode.info["rewards_by_seat"] == {str(model_seat): 0.5, str(opponent_seat): -1.5}
        assert episode.rewards == {f"player_{model_seat}": 0.5}  # not the +1.0 of a win
        assert episode.info["moves"] == (1 if opponent_seat == 0 else 2)
    assert seats_seen == {0, 1}
    assert metrics["game/invalid_rate"] == 1.0
    assert metrics["game/opponent_invalid_rate"] == 1.0
    assert metrics["game/policy_invalid_rate"] == 0.0


def eval_one(loop, policy, model_seat=1) -> dict:
    """One evaluation game against the random opponent, the model in ``model_seat``."""
    job = loop.eval_game(policy, GameSpec(id="tictactoe"), 1, model_seat, "random")
    return asyncio.run(policy.gather([job]))[0]


def test_evaluation_scores_invalid_moves_minus_one_plus_one_and_names_the_seat(
    tmp_path, monkeypatch
):
    """Evaluation is zero-sum: −1/+1 exactly, never the training shaping (−1.5/+0.5)."""
    import selfplay.loops.spiral.play as spiral

    loop = SpiralLoop(spiral_config(tmp_path, eval_games=4))
    policy = BatchingPolicy(ScriptedEngine(lambda p: "\\boxed{[77]}"))
    result = eval_one(loop, policy)
    assert result["reward"] == -1.0 and result["invalid"] is True
    assert result["invalid_by"] == "model"
    metrics = asyncio.run(loop.evaluate(policy, 0))
    assert metrics["eval/tictactoe/random/reward"] == -1.0
    assert metrics["eval/tictactoe/random/seat1/reward"] == -1.0
    assert metrics["eval/tictactoe/random/opponent_invalid"] == 0.0

    monkeypatch.setattr(spiral, "RandomOpponent", InvalidRandomOpponent)
    policy = BatchingPolicy(ScriptedEngine(first_legal))
    result = eval_one(loop, policy)
    assert result["reward"] == 1.0 and result["invalid"] is False
    assert result["invalid_by"] == "opponent"
    metrics = asyncio.run(loop.evaluate(policy, 0))
    assert metrics["eval/tictactoe/random/reward"] == 1.0
    assert metrics["eval/tictactoe/random/win"] == 1.0
    assert metrics["eval/tictactoe/random/invalid"] == 0.0
    assert metrics["eval/tictactoe/random/opponent_invalid"] == 1.0
    assert metrics["eval/tictactoe/random/seat0/opponent_invalid"] == 1.0
