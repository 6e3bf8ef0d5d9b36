"""The task buffer: statistics per task, its table, and a state that survives torch.save."""

import csv
import math

import numpy as np
import pytest
import torch

from curricula.buffer import TaskBuffer
from curricula.curriculum import Curriculum, Group
from curricula.settings import SAMPLERS, CurriculumSettings
from tests.curriculum_steps import fill


def test_record_keeps_counts_ema_progress_and_history():
    buffer = TaskBuffer(ema=0.5)
    buffer.add("a", family="chain_sum", difficulty=2)
    buffer.record("a", 2, 4, step=3, mean_abs_adv=0.5)  # 0.5
    buffer.record("a", 4, 4, step=5, mean_abs_adv=0.0)  # 1.0 → EMA 0.75
    assert buffer.attempts[0] == 8 and buffer.successes[0] == 6
    assert buffer.p_hat[0] == pytest.approx(0.75) and buffer.p_prev[0] == pytest.approx(0.5)
    assert buffer.progress[0] == pytest.approx(0.25)
    assert buffer.pass_rate[0] == pytest.approx(0.75)
    assert buffer.last_seen[0] == 5 and buffer.score[0] == 0.0
    assert buffer.history["step"].tolist() == [3, 5]
    assert buffer.history["successes"].tolist() == [2, 4]


def test_unseen_tasks_have_no_estimates_and_adding_twice_is_a_no_op():
    buffer = TaskBuffer()
    assert buffer.add("a", "f", 1) == 0 and buffer.add("b", "g") == 1 and buffer.add("a") == 0
    assert len(buffer) == 2 and buffer.families == ["f", "g"]
    assert np.isnan(buffer.p_hat).all() and buffer.last_seen.tolist() == [-1, -1]
    assert math.isnan(buffer.difficulty[1])
    with pytest.raises(KeyError, match="'zzz' is not in the buffer"):
        buffer.record("zzz", 1, 1, 0)


def test_history_is_capped_dropping_the_oldest():
    buffer = TaskBuffer(history_limit=100)
    buffer.add("a")
    for step in range(250):
        buffer.record(0, 1, 2, step)
    steps = buffer.history["step"]
    assert len(steps) <= 100 and steps[-1] == 249 and (np.diff(steps) == 1).all()


def test_table_and_csv(tmp_path):
    buffer = TaskBuffer(ema=1.0)
    buffer.add_many(["x", "y"], ["f", "g"], [0, 1])
    buffer.record("y", 3, 4, step=2, mean_abs_adv=0.375)
    buffer.retire(0.7)
    path = buffer.write_csv(tmp_path / "curriculum" / "tasks.csv")
    rows = list(csv.DictReader(path.open()))
    assert [r["task_id"] for r in rows] == ["x", "y"]
    assert rows[1]["pass_rate"] == "0.75" and rows[1]["retired"] == "True"
    assert rows[1]["family"] == "g" and rows[1]["score"] == "0.375"
    assert rows[0]["p_hat"] == "" and rows[0]["last_seen"] == "-1"


@pytest.mark.parametrize("name", SAMPLERS)
def test_state_survives_torch_save_and_continues_identically(tmp_path, name):
    """Kill after step 3, restore from the saved state, and steps 4..7 draw the same tasks."""
    settings = CurriculumSettings(sampler=name, retire_at=0.9)

    def build():
        curriculum = Curriculum(settings, seed=5)
        for i in range(40):
            curriculum.add(f"t{i}", family=f"f{i % 2}", difficulty=i % 3)
        return curriculum

    def play_step(curriculum, step):
        def play(indices):  # outcomes depend only on (task, step): replayable
            return [
                Group(
                    int(i), (int(i) * 7 + step) % 5, 4, [float((int(i) + k) % 2) for k in range(4)]
                )
                for i in indices
            ]

        return [g.task for g in fill(curriculum, 4, step, play)]

    original = build()
    for step in range(4):
        play_step(original, step)
    torch.save(original.state_dict(), tmp_path / "state.pt")
    expected = [play_step(original, step) for step in range(4, 8)]

    restored = build()
    restored.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=False))
    assert [play_step(restored, step) for step in range(4, 8)] == expected
    for column in ("attempts", "successes", "p_hat", "last_seen", "score", "retired"):
        np.testing.assert_array_equal(
            restored.buffer.column(column), original.buffer.column(column)
        )
    assert restored.buffer.history.tolist() == original.buffer.history.tolist()


def test_loading_another_samplers_state_is_refused():
    plr = Curriculum(CurriculumSettings(sampler="plr"))
    band = Curriculum(CurriculumSettings(sampler="band"))
    with pytest.raises(ValueError, match="checkpoint has sampler 'plr'"):
        band.load_state_dict(plr.state_dict())


@pytest.mark.timing  # a time limit: held under load (make test-under-load)
def test_hundred_thousand_tasks_add_fast():
    import time

    buffer = TaskBuffer()
    # this process's CPU time: the work the adds cost, not how long other processes held the
    # cores (the same bound holds beside two CPU-bound processes: make test-under-load)
    start = time.process_time()
    buffer.add_many([f"t{i}" for i in range(100_000)], ["f"] * 100_000, [0.0] * 100_000)
    assert len(buffer) == 100_000 and time.process_time() - start < 2.0
