"""The runner end to end on the tiny model: own adapters per role, episodes, metrics, report."""

import dataclasses
import json

import torch

from selfplay.loops import validate
from selfplay.loops.rlvr import RlvrLoop
from selfplay.running.runner import build, run
from tests.conftest import tiny_config, varied_grade


def test_own_adapters_per_role_and_run_outputs(tmp_path, tiny_model_path, monkeypatch):
    # a second role the loop declares but never asks: its adapter must stay apart and untrained
    roles = {**RlvrLoop.spec.roles, "critic": ("question",)}
    monkeypatch.setattr(RlvrLoop, "spec", dataclasses.replace(RlvrLoop.spec, roles=roles))
    data = tiny_config(tmp_path, train={"steps": 2, "lr": 5e-2})
    data["roles"] = {
        "solver": {"prompt": "solver_terse", "adapter": "own"},
        "critic": {"prompt": "solver", "adapter": "own"},
    }
    config = validate(data, "test")
    assert config.adapters() == ["critic", "solver"]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    world = build(config, run_dir, resume=False)
    world.loop.grade = varied_grade
    assert world.learner.adapters == ["critic", "solver"]
    before = world.learner.adapter_weights("solver")
    rows = run(world, 0)
    solver = world.learner.adapter_weights("solver")
    critic = world.learner.adapter_weights("critic")
    assert any(not torch.equal(before[k], solver[k]) for k in before)  # solver trained
    assert any(
        not torch.equal(solver[k], critic[k.replace(".solver.", ".critic.")]) for k in solver
    )  # the two roles' adapters differ
    # every episode's turn was served by the solver's own adapter
    episodes = [
        json.loads(line)
        for line in (run_dir / "episodes" / "step-000000.jsonl").read_text().splitlines()
    ]
    assert episodes and all(t["adapter"] == "solver" for e in episodes for t in e["turns"])
    assert [r["step"] for r in rows if not r.get("final")] == [0, 1]
    assert "eval/accuracy" in rows[0] and rows[-1].get("final")
    assert {
        "train/mismatch_kl",
        "train/mismatch_abs_max",
        "rollout/tokens_per_s",
        "sync/seconds",
    } <= rows[0].keys()
    assert (run_dir / "report" / "index.html").exists()
    assert (run_dir / "report" / "train-reward-solver.png").stat().st_size > 1000


def test_wandb_offline_by_default(tmp_path, tiny_model_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    data = tiny_config(tmp_path, train={"steps": 1})
    del data["logging"]  # the defaults: wandb offline, progress bars
    config = validate(data, "test")
    assert config.logging.wandb == "offline"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rows = run(build(config, run_dir, resume=False), 0)
    assert [r["step"] for r in rows] == [0, 1]
    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("*.wandb"))
    assert (run_dir / "wandb-id").read_text().strip() in offline[0].name


def test_a_role_that_does_not_train_plays_is_rewarded_and_keeps_its_weights(
        tmp_path, tiny_model_path):
    data = tiny_config(tmp_path, train={"steps": 2, "lr": 5e-2})
    data["roles"] = {"solver": {"prompt": "solver_terse", "adapter": "own", "train": False}}
    config = validate(data, "test")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    world = build(config, run_dir, resume=False)
    world.loop.grade = varied_grade  # varied rewards: non-zero advantages, were it trained
    before = world.learner.adapter_weights("solver")
    rows = run(world, 0)
    after = world.learner.adapter_weights("solver")
    assert all(torch.equal(before[k], after[k]) for k in before)  # nothing reached the learner
    steps = [r for r in rows if not r.get("final")]
    assert all(r["train/samples"] == 0 for r in steps)
    assert any("reward/solver" in r for r in steps)  # it still played and was rewarded
