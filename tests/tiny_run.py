"""A tiny real run (tiny-random model, 2 steps) with every step archived, for the tests of
``selfplay evaluate`` and ``selfplay crossplay``."""

from __future__ import annotations

from pathlib import Path

from selfplay.config_files import dump
from selfplay.loops import validate
from selfplay.running.runner import build, run
from tests.conftest import tiny_config, varied_grade


def make_tiny_run(tmp_path: Path, loop: str = "rlvr", steps: int = 2, train: dict | None = None,
                  model: str = "tiny-random"):
    """(run_dir, world) after ``steps`` steps with ``checkpoint.archive_every: 1, keep: 1``
    (``train``: more settings of the ``train`` section)."""
    data = tiny_config(tmp_path, train={"steps": steps, "lr": 5e-2, **(train or {})},
                       model={"path": model},
                       checkpoint={"every": 1, "keep": 1, "archive_every": 1})
    if loop == "spiral":
        del data["rlvr"]
        data |= {"loop": "spiral", "roles": {"player": {"prompt": "player"}},
                 "advantage": {"estimator": "rae"},
                 "spiral": {"games": [{"id": "kuhn_poker", "kwargs": {"rounds": 1}}],
                            "games_per_step": 2, "eval_games": 0, "lenient": True}}
    config = validate(data, "test")
    run_dir = tmp_path / f"{loop}-run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(dump(config))
    world = build(config, run_dir, resume=False)
    if loop == "rlvr":
        world.loop.grade = varied_grade
    run(world, 0)
    return run_dir, world
