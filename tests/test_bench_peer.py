"""``selfplay bench peer``: one line and exit 2 without TRL or with an experiment TRL cannot
reproduce; TRL gets exactly the prompts, prompt tokens and rewards our rlvr loop uses; the TRL
settings make one TRL step one of ours; one TRL step on the tiny model trains its LoRA."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from selfplay.bench import peer, peer_setup, peer_trl
from selfplay.cli.main import main
from selfplay.engines.base import encode_request
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops import validate
from selfplay.loops.rlvr import RlvrLoop
from tests.conftest import tiny_config, varied_grade
from tests.scripted import ScriptedEngine


def _refuse_subprocess(*args, **kwargs):
    raise AssertionError("bench peer started a side before checking its input")


def test_without_trl_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "trl", None)  # `import trl` fails, find_spec says None
    monkeypatch.setattr(subprocess, "Popen", _refuse_subprocess)
    assert not peer_setup.trl_available()
    assert main(["bench", "peer", "--steps", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"selfplay: error: {peer_setup.MISSING_TRL}"


def test_an_experiment_trl_cannot_reproduce_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(peer_setup, "trl_available", lambda: True)
    monkeypatch.setattr(subprocess, "Popen", _refuse_subprocess)
    assert main(["bench", "peer", "--experiment", "spiral-kuhn-cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "an rlvr experiment" in err
    assert main(["bench", "peer", "train.loss=grpo", "train.micro_batch_size=7"]) == 2
    err = capsys.readouterr().err.strip()
    assert "train.loss drgrpo" in err and "micro_batch_size 7" in err
    assert main(["bench", "peer", "--steps", "1"]) == 2
    assert "--steps >= 2" in capsys.readouterr().err


class AnsweringEngine(ScriptedEngine):
    """Replies, in turn, the right answer boxed, the right answer bare, a wrong answer boxed and
    no answer; records the messages of every request it gets."""

    def __init__(self, tokenizer, answers: dict[str, str]) -> None:
        super().__init__(tokenizer)
        self.answers = answers  # the last user message → gold answer
        self.requests = []

    def reply(self, request, prompt: str) -> str:
        self.requests.append(request)
        gold = self.answers[request.messages[-1]["content"]]
        replies = [f"\\boxed{{{gold}}}", f"It is {gold}", f"\\boxed{{{int(gold) + 1}}}", "hmm"]
        return replies[len(self.requests) % len(replies)]


def test_trl_gets_our_loops_prompts_tokens_and_rewards(tmp_path, tiny_model_path):
    from selfplay.engines.models import load_tokenizer

    config = validate(tiny_config(tmp_path, rlvr={"format_reward": 0.1}), "test")
    loop = RlvrLoop(config)
    rows = peer_trl.peer_dataset(loop)
    assert [row["task"] for row in rows] == list(range(len(loop.pool_tasks)))

    # our loop plays one step against an engine that answers from the gold answers
    tokenizer = load_tokenizer(tiny_model_path)
    answers = {
        row["prompt"][-1]["content"]: str(t.entry["answer"])
        for row, t in zip(rows, loop.pool_tasks, strict=True)
    }
    engine = AnsweringEngine(tokenizer, answers)
    episodes = asyncio.run(loop.collect(BatchingPolicy(engine), 0)).episodes
    assert len(episodes) == 2 * 3  # prompts_per_step × group_size

    # the messages TRL is given for a task are the ones our loop sent for it
    sent = {json.dumps(r.messages) for r in engine.requests}
    given = {json.dumps(rows[e.info["task"]]["prompt"]) for e in episodes}
    assert sent == given
    for episode in episodes:
        assert rows[episode.info["task"]]["prompt"][-1]["content"] == episode.turns[0].prompt_text

    # ... and tokenise to the same prompt ids (TRL's own apply_chat_template call)
    ids = tokenizer.apply_chat_template(
        conversation=[row["prompt"] for row in rows],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
    )["input_ids"]
    for request in engine.requests:
        task = next(r["task"] for r in rows if r["prompt"] == request.messages)
        assert list(ids[task]) == encode_request(tokenizer, request)

    # TRL's reward function gives each completion the reward our loop gave it
    counter = {}
    reward = peer_trl.peer_reward(loop, counter)
    tasks = [e.info["task"] for e in episodes]
    got = reward(
        prompts=[rows[t]["prompt"] for t in tasks],
        completions=[[{"role": "assistant", "content": e.turns[0].text}] for e in episodes],
        task=tasks,
        completion_ids=[[1, 2, 3]] * len(episodes),
        trainer_state=None,
    )
    assert got == [e.rewards["solver"] for e in episodes]
    assert {round(r, 6) for r in got} >= {1.1, 1.0, 0.1}  # right/boxed, right, wrong/boxed
    assert counter["tokens"] == 3 * len(episodes)


def test_one_trl_step_is_one_of_our_steps(tmp_path):
    pytest.importorskip("trl")
    from trl import GRPOConfig

    config = peer_setup.load_peer_config("rlvr-sanity", 6)
    args = GRPOConfig(**peer_trl.trl_arguments(config, 6, str(tmp_path)))
    assert args.generation_batch_size == 64  # 8 prompts × 8 answers, generated at once
    assert (args.num_generations, args.max_completion_length) == (8, 24)
    assert args.per_device_train_batch_size == config.train.micro_batch_size == 16
    assert args.gradient_accumulation_steps == args.steps_per_generation == 4  # one optimizer step
    assert (args.loss_type, args.scale_rewards, args.beta) == ("dr_grpo", "none", 0.0)
    assert (args.temperature, args.top_p, args.learning_rate) == (1.0, 1.0, 5e-4)
    assert (args.epsilon, args.epsilon_high, args.num_iterations) == (0.2, 0.28, 1)
    assert not args.bf16 and not args.gradient_checkpointing and not args.use_vllm


def test_one_trl_step_on_the_tiny_model_trains_the_lora(tmp_path, monkeypatch):
    pytest.importorskip("trl")
    monkeypatch.setattr(RlvrLoop, "grade", lambda self, text, task: varied_grade(text))
    data = tiny_config(
        tmp_path,
        train={"steps": 2, "micro_batch_size": 3},
        checkpoint={"every": 2},
        rlvr={"eval_size": 0},
    )
    config = validate(data, "test")
    peer_setup.check_config(config)
    trainer = peer_trl.build_trl_trainer(config, 2, str(tmp_path / "trl"))
    lora_b = {n: p for n, p in trainer.model.named_parameters() if "lora_B" in n}
    assert lora_b and all(float(p.detach().abs().max()) == 0 for p in lora_b.values())
    trainer.train()
    steps = trainer.peer_timer.steps
    assert len(steps) == 2
    for step in steps:
        assert 0 < step["rollout_seconds"] < step["seconds"]
        assert 6 <= step["tokens"] <= 6 * 6  # 2 prompts × 3 answers, ≤ 6 new tokens each
    assert any(float(p.detach().abs().max()) > 0 for p in lora_b.values())  # the optimizer stepped
    assert 0 < trainer.peer_timer.ready_kib <= trainer.peer_timer.peak_kib


@pytest.mark.slow
def test_bench_peer_end_to_end_on_the_tiny_model(tmp_path, monkeypatch, capsys):
    """Both sides in their own processes, one table and the ratio line (~30 s: slow)."""
    pytest.importorskip("trl")
    import yaml

    data = tiny_config(tmp_path, train={"micro_batch_size": 3})
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    result = peer.bench_peer(str(path), steps=2, threads=1)
    out = capsys.readouterr().out
    assert "ours step 2/2" in out and "trl step 2/2" in out
    assert "ours vs TRL:" in out and "(goal >= 2x at <= 1x)" in out
    for side in peer.SIDES:
        figures = result["figures"][side]
        assert figures["threads"] == 1 and figures["peak_gib"] >= figures["ready_gib"] > 0
        assert len(result["results"][side]["steps"]) == 2
    assert result["speed"] > 0 and result["memory"] > 0
