"""Our games and SPICE as verifiers environments, run through verifiers' own evaluation path
(``vf-eval``'s runner: load_environment, the interception server, EvalClient) against a
scripted OpenAI-compatible stub model. docs/verifiers.md."""

from __future__ import annotations

import asyncio
import json

import pytest
import verifiers.v1 as vf
from pydantic import ValidationError
from verifiers.v1.cli.eval.main import main as vf_eval
from verifiers.v1.cli.eval.runner import run_eval
from verifiers.v1.configs.cli.eval import EvalConfig
from verifiers.v1.utils.loaders import resolve_env_config

from selfplay.verifiers_envs.games import GameEnv, GameHarness
from selfplay.verifiers_envs.spice import SpiceEnv, SpiceHarness
from selfplay.verifiers_envs.stub import cycle, serve, serve_in_thread

MC = (
    '{"question": "In which year was the Eiffel Tower completed?", '
    '"options": {"A": "1789", "B": "1889", "C": "1901", "D": "1920"}, "answer": "B"}'
)


def evaluate(tmp_path, script, env: dict, limit: int = 1) -> tuple[list, list[dict]]:
    """Episodes of ``env`` evaluated by verifiers' runner on the stub; the stub's requests."""

    async def go():
        async with serve(script) as stub:
            config = EvalConfig.model_validate({
                "env": env, "model": "stub", "num_rollouts": 1, "rich": None, "push": False,
                "client": {"base_url": stub.base_url, "api_key_var": "SELFPLAY_STUB_KEY"},
                "select": {"limit": limit}, "output_dir": str(tmp_path),
            })
            return await run_eval(config), stub.requests

    return asyncio.run(go())


def by_seat(episode) -> dict[str, list[float]]:
    rewards: dict[str, list[float]] = {}
    for trace in episode.traces:
        rewards.setdefault(trace.agent.name, []).append(trace.rewards["game_reward"].score)
    return rewards


@pytest.fixture(autouse=True)
def stub_key(monkeypatch):
    monkeypatch.setenv("SELFPLAY_STUB_KEY", "stub")


@pytest.mark.parametrize(
    ("taskset", "env_class", "harness_class"),
    [("selfplay_games", GameEnv, GameHarness), ("selfplay-games", GameEnv, GameHarness),
     ("selfplay_spice", SpiceEnv, SpiceHarness)],
)
def test_load_environment_by_id(taskset, env_class, harness_class):
    """The ids resolve by verifiers' name rules (``-`` → ``_``, top-level module) to our env,
    with our in-process harness as the taskset's default."""
    config = resolve_env_config({"taskset": {"id": taskset}})
    env = vf.load_environment(config)
    assert type(env) is env_class
    assert all(type(h) is harness_class for h in env._harnesses.values())


def test_kuhn_bet_fold_pays_the_bettor(tmp_path):
    """One round: player 0 bets, player 1 folds, so player 0 wins whatever the cards: +1/−1;
    each move was one single-turn request on SPIRAL's player prompt."""
    env = {"taskset": {"id": "selfplay_games", "kwargs": {"rounds": 1}}}
    (episode,), requests = evaluate(tmp_path, cycle([r"\boxed{[bet]}", r"I fold. \boxed{[fold]}"]),
                                    env)
    assert episode.ok
    assert by_seat(episode) == {"player_0": [1.0], "player_1": [-1.0]}
    assert [len(r["messages"]) for r in requests] == [2, 2]  # system + the observation
    assert "You are Player 0" in requests[0]["messages"][1]["content"]
    assert "You are Player 1" in requests[1]["messages"][1]["content"]
    assert "[your action]" in requests[0]["messages"][1]["content"]  # a placeholder example


def test_illegal_move_ends_the_game_with_spiral_shaping(tmp_path):
    """Check, then 'call' (not legal after a check): player 1 is the offender, −1.5, player 0
    +0.5 (SPIRAL's training shaping), and nothing more is asked of the model."""
    env = {"taskset": {"id": "selfplay_games"}}
    (episode,), requests = evaluate(tmp_path, cycle([r"\boxed{[check]}", r"\boxed{[call]}"]), env)
    assert by_seat(episode) == {"player_0": [0.5], "player_1": [-1.5]}
    assert len(requests) == 2
    offender = episode.traces[1]
    assert offender.metrics["invalid_move"] == 1.0
    assert "invalid_reason" in offender.info


def test_unparseable_reply_is_an_invalid_move(tmp_path):
    """A reply without \\boxed{} ends the game on the first move; with the shaping set to
    −1/+1 in the env config (the evaluation convention)."""
    env = {"taskset": {"id": "selfplay_games"}, "invalid_penalty": -1.0,
           "invalid_opponent_reward": 1.0}
    (episode,), requests = evaluate(tmp_path, cycle(["I would rather not."]), env)
    assert by_seat(episode) == {"player_0": [-1.0]}
    assert len(requests) == 1
    assert episode.traces[0].info["invalid_reason"] == "no \\boxed{} action"


def test_random_opponent_never_asks_the_model(tmp_path):
    """``opponent: random``: player 1 moves at random (call or fold after a bet, so the game
    ends +1 or −1 for player 0); the model is asked only player 0's one move."""
    env = {"taskset": {"id": "selfplay_games", "kwargs": {"rounds": 1}}, "opponent": "random"}
    (episode,), requests = evaluate(tmp_path, cycle([r"\boxed{[bet]}"]), env)
    rewards = by_seat(episode)
    assert set(rewards) == {"player_0"} and abs(rewards["player_0"][0]) == 1.0
    assert len(requests) == 1


def test_unknown_game_is_one_line(tmp_path):
    with pytest.raises(ValidationError, match="unknown game 'nope'"):
        resolve_env_config({"taskset": {"id": "selfplay_games", "game": "nope"}})


def spice_script(reasoner_replies: list[str], challenger_reply: str = MC):
    answers = cycle(reasoner_replies)
    return lambda messages: (
        challenger_reply if "Read this document" in messages[-1]["content"] else answers(messages)
    )


@pytest.fixture
def documents(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"id": "eiffel", "text": "The Eiffel Tower was completed in "
                                "1889 and is 330 metres tall."}) + "\n")
    return str(path)


def test_spice_rewards_reasoners_and_challenger(tmp_path, documents):
    """K = 4 answers B, B, C, C to a valid question whose answer is B: the reasoners get
    1, 1, 0, 0, p̂ = ½ and the challenger variance reward exp(−(¼ − ¼)²/0.02) = 1."""
    env = {"taskset": {"id": "selfplay_spice", "documents_file": documents, "formats": "mc"},
           "reasoner_samples": 4}
    script = spice_script([r"\boxed{B}", r"\boxed{B}", r"\boxed{C}", r"\boxed{C}"])
    (episode,), requests = evaluate(tmp_path, script, env)
    assert episode.ok
    challenger = next(t for t in episode.traces if t.agent.name == "challenger")
    reasoners = [t for t in episode.traces if t.agent.name == "reasoner"]
    assert challenger.metrics["p_hat"] == 0.5
    assert challenger.rewards["spice_reward"].score == pytest.approx(1.0, abs=1e-12)  # exp(0)
    assert sorted(t.rewards["spice_reward"].score for t in reasoners) == [0.0, 0.0, 1.0, 1.0]
    assert "1889" in requests[0]["messages"][-1]["content"]  # the challenger reads the chunk
    assert all("1889 and is" not in r["messages"][-1]["content"] for r in requests[1:])


def test_spice_invalid_question_gets_rho_and_no_reasoner(tmp_path, documents):
    """A reply that is no question: ρ = −0.1 for the challenger, the reasoner never asked."""
    env = {"taskset": {"id": "selfplay_spice", "documents_file": documents}}
    (episode,), requests = evaluate(tmp_path, spice_script([], "I cannot do that."), env)
    (challenger,) = episode.traces
    assert challenger.rewards["spice_reward"].score == -0.1
    assert challenger.metrics["valid_question"] == 0.0
    assert len(requests) == 1


def test_vf_eval_command_line(tmp_path):
    """The command a prime-rl user types: ``vf-eval selfplay-games -n 2`` writes its traces."""
    def bet_then_fold(messages: list[dict]) -> str:  # the two games run at once: by seat
        seat_0 = "You are Player 0" in messages[-1]["content"]
        return r"\boxed{[bet]}" if seat_0 else r"\boxed{[fold]}"

    with serve_in_thread(bet_then_fold) as stub:
        vf_eval(["selfplay-games", "--env.taskset.kwargs", '{"rounds": 1}', "-n", "2",
                 "--model", "stub", "--client.base-url", stub.base_url,
                 "--client.api-key-var", "SELFPLAY_STUB_KEY", "--no-push", "--output-dir",
                 str(tmp_path)])
    traces = list(tmp_path.rglob("traces.jsonl"))
    assert len(traces) == 1
    episodes = [json.loads(line) for line in traces[0].read_text().splitlines()]
    assert len(episodes) == 2 and len(stub.requests) == 4
    assert sorted(t["rewards"]["game_reward"]["score"] for e in episodes for t in e["traces"]) == [
        -1.0, -1.0, 1.0, 1.0]


def test_challenger_reply_without_the_prefill_is_parsed_with_it():
    """Our engine starts the challenger's reply with ``{"question": "``; a chat model that
    continues as if it had been prefilled gets the prefill put back, a full JSON reply is
    parsed as it is."""
    from selfplay.verifiers_envs.spice import parse_question

    stem_only = 'At what temperature in Celsius does water boil at sea level?", "answer": "100"}'
    question, reason = parse_question(stem_only, "free")
    assert reason == "" and question.answer == "100"
    full = '{"question": "At what temperature in Celsius does water boil?", "answer": "100"}'
    assert parse_question(full, "free")[0].question.startswith("At what temperature")
