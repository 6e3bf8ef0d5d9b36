"""The AZR loop's pieces beside the algorithm (selfplay/loops/azr): its config's one-line
errors, the buffers (newest first, capped), its page section, and the GPU experiment's fit
(the loop end to end is tests/test_golden.py's `azr` run)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from selfplay.analysis.metric_sections import claimed, loop_section
from selfplay.core.errors import UserError
from selfplay.loops import load_experiment, make_loop
from selfplay.loops.azr.tasks import ABDUCTION, DEDUCTION, Buffers, Task
from selfplay.running.plan import plan


def task(mode: str, name: str) -> Task:
    return Task(mode, "def f(a):\n    return a", [name], [name], task_id=name)


def test_buffers_draw_newest_first_cycle_and_drop_the_oldest() -> None:
    buffers = Buffers(cap=3)
    for name in "abcd":
        buffers.add(task(DEDUCTION, name))
    assert [t.task_id for t in buffers.tasks[DEDUCTION]] == ["b", "c", "d"]  # a left
    assert [t.task_id for t in buffers.newest(DEDUCTION, 5)] == ["d", "c", "b", "d", "c"]
    assert buffers.newest(ABDUCTION, 2) == []
    state = buffers.state_dict()
    again = Buffers(cap=3)
    again.load_state_dict(state)
    assert again.tasks == buffers.tasks
    assert len(buffers.sample(DEDUCTION, 4, random.Random(0))) == 4


def test_roles_must_share_one_policy() -> None:
    config = load_experiment("azr-cpu", ["model.path=tiny-random",
                                         "roles.solve_induction.adapter=own"])
    with pytest.raises(UserError, match="solve_induction.*adapter: shared"):
        make_loop(config)


def test_induction_must_hold_pairs_out() -> None:
    with pytest.raises(UserError, match="induction_shown"):
        load_experiment("azr-cpu", ["azr.induction_shown=4"])


def test_seed_buffers_hold_the_identity_on_hello_world() -> None:
    loop = make_loop(load_experiment("azr-cpu", ["model.path=tiny-random"]))
    try:
        for mode in (DEDUCTION, ABDUCTION):
            (seed,) = loop.buffers.tasks[mode]
            assert (seed.program, seed.inputs, seed.outputs) == (
                "def f(a):\n    return a", ["'Hello world'"], ["'Hello world'"])
        assert loop.buffers.tasks["induction"] == []
    finally:
        loop.close()


def test_azr_metrics_get_their_own_section() -> None:
    rows = [
        {"step": 0, "azr/deduction/valid_rate": 0.5, "azr/induction/learnability": 0.25,
         "azr/seed/deduction/valid_rate": 0.2, "reward/solve_deduction": -0.5},
        {"step": 1, "azr/deduction/valid_rate": 0.75, "azr/induction/learnability": 0.5},
    ]
    section = loop_section(SimpleNamespace(loop="azr", training_rows=rows))
    (table,) = section.tables
    keys = {row[0] for row in table.rows}
    assert keys == {"azr/deduction/valid_rate", "azr/induction/learnability",
                    "azr/seed/deduction/valid_rate"}  # the loop's keys, and only those
    first_last = {row[0]: (row[1], row[2]) for row in table.rows}
    assert first_last["azr/deduction/valid_rate"] == ("0.500", "0.750")
    assert claimed("azr/deduction/valid_rate", "azr")  # not again under "other metrics"
    assert not claimed("azr/deduction/valid_rate", "cure")


def test_gpu_experiment_fits_8_gpus() -> None:
    config = load_experiment("azr")
    assert config.train.parallel.ranks == 8 and config.train.lr == 1e-6
    assert config.settings.proposals_per_mode == config.settings.solves_per_mode == 64
    assert plan(config, gpus=8, gpu_memory_gib=80).fits
