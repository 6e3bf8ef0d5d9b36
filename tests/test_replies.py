"""A reply is made once: ``completion.reply`` / ``turn.reply`` (the prompt's prefill, then what
the model wrote) is what every loop grades, what the run folder records, what the page's
transcripts parse and what ``selfplay play`` parses. SPIRAL's case is
``tests/test_spiral.py::test_a_prompt_that_starts_the_reply_is_parsed_with_it``; SPICE's and
Agent0's prefilled prompts are the golden runs' (``tests/test_golden.py``)."""

from __future__ import annotations

import asyncio
import json

from selfplay.analysis.debugging import episode_html
from selfplay.config_files import dump
from selfplay.engines.policy import BatchingPolicy
from selfplay.loops import validate
from selfplay.loops.rlvr import RlvrLoop
from selfplay.running.tracking import episode_record
from tests.conftest import tiny_config
from tests.scripted import ScriptedEngine

BOXED_SOLVER = "user: '{{ question }}'\nprefill: 'The answer is \\boxed{'\n"


class GoldAnswers(ScriptedEngine):
    """Writes only the gold answer and the closing brace: right only with the prefill."""

    def __init__(self, loop: RlvrLoop) -> None:
        super().__init__()
        self.gold = {t.entry["question"]: str(t.entry["answer"]) for t in loop.pool_tasks}

    def reply(self, request, prompt: str) -> str:
        question = request.messages[-1]["content"]
        return self.gold[question] + "}"


def rlvr_with_boxed_prefill(tmp_path) -> RlvrLoop:
    (tmp_path / "boxed.yaml").write_text(BOXED_SOLVER)
    data = tiny_config(tmp_path, roles={"solver": {"prompt": str(tmp_path / "boxed.yaml")}})
    data["rlvr"]["lenient"] = False  # only a \boxed{} answer counts: the prefill must be read
    return RlvrLoop(validate(data, "test"))


def test_rlvr_grades_the_prefill_and_the_completion_together(tmp_path):
    loop = rlvr_with_boxed_prefill(tmp_path)
    collected = asyncio.run(loop.collect(BatchingPolicy(GoldAnswers(loop)), 0))
    episodes = collected.episodes
    assert episodes and all(e.correct and e.info["boxed"] for e in episodes)
    assert all(e.rewards["solver"] == 1.0 for e in episodes)
    turn = episodes[0].turns[0]
    assert turn.prefill == "The answer is \\boxed{" and turn.reply.endswith("}")
    assert turn.reply == turn.prefill + turn.text
    # the run folder keeps the prefill beside the text
    record = json.loads(json.dumps(episode_record(episodes[0], 0)))
    assert record["turns"][0]["prefill"] == "The answer is \\boxed{"


def test_the_pages_transcripts_parse_the_whole_reply():
    turn = {"role": "player_0", "prefill": "\\boxed{", "text": "[check]}", "completion_ids": [1]}
    episode = {"info": {"winner": 0, "invalid_by": None}, "turns": [turn], "rewards": {}}
    page = episode_html(episode, budget=8, lenient=False)
    assert "<code>[check]</code>" in page and "\\boxed{[check]}" in page
    older = {**turn, "text": "\\boxed{[bet]}"}  # a run from before turns kept their prefill
    del older["prefill"]
    assert "<code>[bet]</code>" in episode_html({**episode, "turns": [older]}, 8, False)


def test_play_uses_the_runs_own_prompt_and_parses_its_reply(tmp_path, tiny_model_path):
    import yaml

    from roles import PROMPTS_DIR
    from selfplay.cli.play import load_policy
    from selfplay.running.runner import build, run

    prompt = yaml.safe_load((PROMPTS_DIR / "player.yaml").read_text())
    (tmp_path / "boxed.yaml").write_text(yaml.safe_dump(prompt | {"prefill": "\\boxed{"}))
    data = tiny_config(tmp_path, loop="spiral", train={"steps": 1, "lr": 1e-3},
                       spiral={"games": [{"id": "kuhn_poker"}], "games_per_step": 2,
                               "eval_games": 0})
    del data["rlvr"]
    data["roles"] = {"player": {"prompt": str(tmp_path / "boxed.yaml")}}
    config = validate(data, "test")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(dump(config))
    run(build(config, run_dir, resume=False), 0)
    opponent = load_policy(str(run_dir), "embedded")
    assert opponent.prompt.prefill == "\\boxed{"  # the run's own, not the built-in `player`
    assert opponent.max_new_tokens == config.sampling.max_new_tokens
    completion = opponent.move("a board", player=0, example="[check]")
    assert completion.reply == "\\boxed{" + completion.text
