"""``selfplay play``: a scripted person against the tiny model, bare and from a trained run."""

import io

import pytest
import torch
from rich.console import Console

from selfplay.cli.play import load_policy, play
from selfplay.config_files import dump
from selfplay.core.errors import UserError
from selfplay.loops import validate
from selfplay.running.runner import build, run
from tests.conftest import tiny_config, varied_grade


def _play_tictactoe(*answers: str) -> tuple[dict, str]:
    """Player 0 is a person who types ``answers`` in order; returns (outcome, screen text)."""
    queue, out = list(answers), io.StringIO()
    outcome = play(
        "tictactoe",
        model="tiny-random",
        seat=0,
        seed=1,
        input_fn=lambda prompt: queue.pop(0),
        console=Console(file=out, width=100),
    )
    return outcome, out.getvalue()


def test_person_plays_tictactoe_against_the_bare_model(tiny_model_path):
    outcome, text = _play_tictactoe("4", "0", "8", "2", "6")
    assert "you are Player 0" in text and "game over" in text
    assert sorted(outcome.values()) in ([-1.0, 1.0], [0.0, 0.0])
    if "invalid move by Player 1" in text:  # the random model's move ends the game: it loses
        assert outcome == {0: 1.0, 1: -1.0}


def test_person_invalid_move_loses(tiny_model_path):
    outcome, text = _play_tictactoe("nine")
    assert outcome == {0: -1.0, 1: 1.0}
    assert "invalid move by Player 0" in text


def test_play_loads_the_runs_trained_adapter(tmp_path, tiny_model_path):
    config = validate(tiny_config(tmp_path, train={"steps": 1, "lr": 5e-2}), "test")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(dump(config))
    world = build(config, run_dir, resume=False)
    world.loop.grade = varied_grade
    run(world, 0)
    opponent = load_policy(str(run_dir), "embedded")
    engine = opponent.policy._engine
    assert opponent.adapter == "shared"
    trained = world.learner.adapter_weights("shared")
    served = dict(engine.model.named_parameters())
    lora_b = [k for k in trained if "lora_B" in k]
    assert lora_b and any(trained[k].abs().sum() > 0 for k in lora_b)  # training moved lora_B
    for key in lora_b:  # the engine serves exactly the trained LoRA weights
        name = next(n for n in served if n.endswith(key.replace(".weight", ".shared.weight")))
        assert torch.equal(served[name].detach(), trained[key])


def test_play_rejects_a_folder_that_is_not_a_run(tmp_path):
    with pytest.raises(UserError, match="not a run folder"):
        load_policy(str(tmp_path), "embedded")
