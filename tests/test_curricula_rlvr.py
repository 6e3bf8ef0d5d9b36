"""The curriculum inside the rlvr loop on the tiny model: levels as a task space, metrics each
step, the per-task table, a checkpoint + resume with identical sampler state, DAPO's filter;
and the config's one-line errors (exit 2)."""

import json
import math
import re

import numpy as np
import pytest
import yaml

from selfplay.cli.main import main
from selfplay.loops import validate
from selfplay.running.runner import build, restore, run
from tests.conftest import tiny_config

LEVELS = [
    {"min_digits": 1, "max_digits": 1},
    {"min_digits": 2, "max_digits": 2},
    {"min_digits": 3, "max_digits": 3},
]


def levelled_config(tmp_path, sampler="plr", **curriculum):
    data = tiny_config(tmp_path, train={"steps": 2, "lr": 1e-3})
    data["rlvr"]["tasks"] = [
        {"name": "chain_sum", "config": {"min_terms": 2, "max_terms": 2}, "levels": LEVELS},
        {"name": "basic_arithmetic", "config": {"min_terms": 2, "max_terms": 2}},
    ]
    data["rlvr"].update(dataset_size=12, prompts_per_step=3, group_size=3, eval_size=2)
    data["rlvr"]["eval_split"] = "heldout"
    data["curriculum"] = {"sampler": sampler, **curriculum}
    data["checkpoint"] = {"every": 1, "keep": 5}
    return data


def parity_grade(text, *args) -> dict:
    """The tiny model never answers right: 'correct' by text-length parity, so groups vary."""
    correct = len(text) % 2 == 0
    return {
        "answer": None,
        "boxed": False,
        "score": float(correct),
        "correct": correct,
        "reward": float(correct),
    }


def test_levels_become_labelled_tasks_and_heldout_is_separate(tmp_path):
    from selfplay.loops.rlvr import RlvrLoop

    loop = RlvrLoop(validate(levelled_config(tmp_path), "test"))
    buffer = loop.curriculum.buffer
    levels = [t.level for t in loop.pool_tasks]
    assert [lv for lv in levels if not math.isnan(lv)] == [0, 0, 1, 1, 2, 2]  # 6/3 per level
    assert buffer.ids[:3] == ["chain_sum@0#0", "chain_sum@0#1", "chain_sum@1#0"]
    assert buffer.arms == ["chain_sum@0", "chain_sum@1", "chain_sum@2", "basic_arithmetic@?"]
    train = {t.entry["question"] for t in loop.pool_tasks}
    held = [t.entry["question"] for t in loop.eval_tasks]
    assert len(held) >= 2 and not set(held) & train
    digits = [len(re.findall(r"\d+", t.entry["question"])[0]) for t in loop.pool_tasks[:6]]
    assert digits == [1, 1, 2, 2, 3, 3]  # level k really has k + 1 digits


def test_curriculum_state_survives_checkpoint_and_resume(tmp_path, tiny_model_path):
    config = validate(levelled_config(tmp_path, "plr"), "test")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    world = build(config, run_dir, resume=False)
    world.loop.grade = parity_grade
    rows = run(world, 0)
    steps = [r for r in rows if not r.get("final")]
    for row in steps:
        assert row["curriculum/drawn_groups"] == 3
        assert 0 <= row["curriculum/effective_ratio"] <= 1
        shares = [v for k, v in row.items() if k.startswith("curriculum/difficulty/")]
        assert sum(shares) == pytest.approx(1.0)
        assert row["curriculum/top_tasks"].count("=") == 5
    assert any(k.startswith("eval/accuracy/chain_sum@") for k in rows[0])
    table = (run_dir / "curriculum" / "tasks.csv").read_text().splitlines()
    assert len(table) == 1 + len(world.loop.pool_tasks)
    episodes = [json.loads(x) for x in (run_dir / "episodes" / "step-000001.jsonl").open()]
    assert {e["info"]["task_id"] for e in episodes} <= set(world.loop.curriculum.buffer.ids)

    resumed = build(config, run_dir, resume=True)
    assert restore(resumed) == 2
    before, after = world.loop.curriculum, resumed.loop.curriculum
    for column in ("attempts", "successes", "p_hat", "score", "last_seen", "retired"):
        np.testing.assert_array_equal(after.buffer.column(column), before.buffer.column(column))
    assert after.buffer.attempts.sum() == 2 * 3 * 3  # 2 steps × 3 tasks × 3 answers
    assert after.draw(3, 2).tolist() == before.draw(3, 2).tolist()  # same rng state


@pytest.mark.slow  # a second tiny-model run; DAPO's filter and cap are unit-tested too
def test_dapo_trains_only_on_mixed_groups(tmp_path, tiny_model_path):
    config = validate(levelled_config(tmp_path, "dapo", dapo_max_rounds=1), "test")
    config.train.steps = 1
    config.rlvr.eval_size = 0
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    world = build(config, run_dir, resume=False)
    world.loop.grade = parity_grade
    rows = run(world, 0)
    episodes = [json.loads(x) for x in (run_dir / "episodes" / "step-000000.jsonl").open()]
    groups: dict[str, list[bool]] = {}
    for episode in episodes:
        groups.setdefault(episode["group_id"], []).append(episode["info"]["correct"])
    assert all(0 < sum(g) < len(g) for g in groups.values())
    row = rows[0]
    assert row["curriculum/kept_groups"] == len(groups)
    assert row["curriculum/refill_rounds"] <= 1
    drawn = 3 * (1 + row["curriculum/refill_rounds"])
    assert row["curriculum/drawn_groups"] <= drawn


@pytest.mark.parametrize(
    "override, needle",
    [
        ("curriculum.sampler=bogus", "curriculum.sampler"),
        ("curriculum.plr_beta=0", "curriculum.plr_beta"),
        ("curriculum.band_lo=0.9", "band_lo 0.9 > band_hi 0.7"),
        ("curriculum.retire_at=1.5", "curriculum.retire_at"),
    ],
)
def test_bad_curriculum_config_is_one_line_exit_2(tmp_path, capsys, override, needle):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(tiny_config(tmp_path)))
    assert main(["run", str(path), override]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err
    assert not (tmp_path / "runs").exists()  # no run folder left behind
