"""A run on 2 learner ranks, its driver killed with SIGKILL mid-run, resumed on 1 rank and on 2
ranks: both continue exactly as an uninterrupted run (on 1 rank) went on; so does a run on 2
ranks that torchrun started; the sharded checkpoint exports the one-rank run's adapter."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import torch
import yaml

from tests.processes import ENV, kill_after_rows, metric_rows, selfplay

pytest.importorskip("ray")

STEPS = 4
EXPERIMENT = {
    "name": "kr",
    "loop": "spiral",
    "model": {"path": "tiny-random"},
    "sampling": {"max_new_tokens": 8},
    "train": {"steps": STEPS, "lr": 0.05, "lora": {"r": 4, "alpha": 8},
              "parallel": {"ranks": 2}},
    "roles": {"player": {"prompt": "player"}},
    "spiral": {"games": [{"id": "kuhn_poker", "kwargs": {"rounds": 1}}], "games_per_step": 4,
               "eval_games": 0, "lenient": True},
    "logging": {"wandb": "disabled", "progress": False},
    "checkpoint": {"every": 1, "keep": 2},
}


def figures(run_dir) -> list[tuple]:
    return [(r["step"], r.get("train/loss"), r.get("train/grad_norm"), r.get("reward/player_0"))
            for r in metric_rows(run_dir) if not r.get("final")]


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_killed_on_two_ranks_resumes_on_one_and_on_two(tmp_path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(EXPERIMENT))
    done = subprocess.run(selfplay("run", str(path), f"run_dir={tmp_path / 'whole'}",
                                   "train.parallel.ranks=1"), env=ENV, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (whole,) = (tmp_path / "whole").iterdir()

    # the same run on 2 ranks torchrun started (rank 0 drives, rank 1 serves) goes the same way
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", "-m", "selfplay", "run", str(path),
                           f"run_dir={tmp_path / 'torchrun'}"], env=ENV, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (launched,) = (tmp_path / "torchrun").iterdir()
    for got, want in zip(figures(launched), figures(whole), strict=True):
        assert got == pytest.approx(want, rel=1e-4, abs=1e-6), ("torchrun", got, want)

    # the driver (and with it the rank actors it owns) dies with SIGKILL after step 1
    run_dir = kill_after_rows(["run", str(path), f"run_dir={tmp_path / 'killed'}"],
                              tmp_path / "killed", "kr-*")
    killed_at = len(metric_rows(run_dir))
    assert 2 <= killed_at < STEPS, "the run must be killed mid-way"
    twin = tmp_path / "twin"
    shutil.copytree(run_dir, twin)

    for folder, ranks in ((run_dir, "1"), (twin, "2")):
        done = subprocess.run(selfplay("resume", str(folder), f"train.parallel.ranks={ranks}"),
                              env=ENV, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        resumed, expected = figures(folder), figures(whole)
        assert [r[0] for r in resumed] == list(range(STEPS))
        for got, want in zip(resumed, expected, strict=True):
            assert got == pytest.approx(want, rel=1e-4, abs=1e-6), (ranks, got, want)
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["train"]["parallel"]["ranks"] == 1

    # the last checkpoint written by 2 ranks exports the adapter the one-rank run trained
    from safetensors.torch import load_file

    from selfplay.evaluation.export import export

    (sharded,) = export(twin, tmp_path / "export-2")
    (single,) = export(whole, tmp_path / "export-1")
    got = load_file(sharded / "adapter_model.safetensors")
    want = load_file(single / "adapter_model.safetensors")
    assert sorted(got) == sorted(want) and len(got) > 0
    for name, value in want.items():  # Adam at lr 0.05 magnifies the summation-order noise
        assert torch.allclose(got[name], value, atol=5e-4), name  # (a step moves them ~0.05)
