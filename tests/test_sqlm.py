"""SQLM: the released code's rewards (curricula/sqlm_rewards.py) against hand-computed numbers,
the proposer's update schedule, masked proposals, and bad input."""

from __future__ import annotations

import pytest

from curricula.sqlm_rewards import (
    majority,
    proposer_reward,
    read_proposal,
    solver_answer,
    solver_rewards,
)
from selfplay.loops import validate
from tests.conftest import tiny_config


def test_majority_counts_strings_and_none_is_an_answer():
    assert majority(["7", None, "7", "8"]) == "7"
    assert majority([None, None, "7", "8"]) is None  # most common is None
    assert majority(["8", "7", "7", "8"]) == "8"  # a tie: the answer seen first
    assert majority(["0.5", "1/2", "1/2"]) == "1/2"  # strings, no equivalence (as the code)


@pytest.mark.parametrize(
    ("answers", "rewards", "code", "paper"),
    [
        (["7", "7", "7", "7"], [1, 1, 1, 1], 0.0, 0.0),  # unanimous: m_maj = N
        (["7", "7", "7", "8"], [1, 1, 1, 0], 1.0, 1.0),  # m_maj = 3
        (["7", "7", "8", "9"], [1, 1, 0, 0], 1.0, 1.0),  # m_maj = 2
        (["6", "7", "8", "9"], [1, 0, 0, 0], 0.0, 1.0),  # m_maj = 1: paper only
        ([None, None, None, "9"], [0, 0, 0, 0], 0.0, 0.0),  # majority None: m_maj = 0
        ([None, None, "9", "9"], [0, 0, 0, 0], 0.0, 0.0),  # a tie, None seen first: None
        (["9", "9", None, None], [1, 1, 0, 0], 1.0, 1.0),  # the same tie, "9" first
    ],
)
def test_solver_and_proposer_rewards(answers, rewards, code, paper):
    got = solver_rewards(answers)
    assert got == rewards
    m_maj = sum(got)
    assert proposer_reward(m_maj, 4, "code") == code
    assert proposer_reward(m_maj, 4, "paper") == paper


def test_read_proposal_by_topic():
    assert read_proposal("  What is 417 + 286?\n", "arithmetic") == "What is 417 + 286?"
    assert read_proposal("   ", "arithmetic") is None
    text = "1. Ann has x apples...\nSelected Question: Tom buys 3 pens at y each; 3y = 12. y?"
    assert read_proposal(text, "algebra") == "Tom buys 3 pens at y each; 3y = 12. y?"
    assert read_proposal("**Selected Question**:\nSolve 2x = 6.", "algebra") == "Solve 2x = 6."
    assert read_proposal("1. Ann has x apples. 2. ... 3. ...", "algebra") is None  # masked


def test_solver_answer_reads_tags_then_box_then_number():
    assert solver_answer("<think>4+3</think> <answer> 7 </answer>") == "7"
    assert solver_answer("<answer>6</answer> no, <answer>7</answer>") == "7"  # the last tag
    assert solver_answer("so \\boxed{12}") == "12"
    assert solver_answer("it is 12 or 13") is None
    assert solver_answer("it is 12 or 13", lenient=True) == "13"
    assert solver_answer("<answer>5", lenient=True) == "5"  # an unclosed tag: its number


def sqlm_loop(tmp_path, **sqlm):
    from selfplay.loops.sqlm import SqlmLoop

    roles = {"proposer": {"prompt": "sqlm_arithmetic_cpu"}, "solver": {"prompt": "sqlm_solver_cpu"}}
    data = tiny_config(tmp_path, loop="sqlm", roles=roles, sqlm=sqlm, train={"loss": "grpo"})
    del data["rlvr"]
    return SqlmLoop(validate(data, "test"))


def test_proposer_trains_on_the_codes_global_steps(tmp_path):
    loop = sqlm_loop(tmp_path, proposer_update_every=5)
    # verl counts global steps from 1 and updates the proposer when step % 5 == 0
    assert [s for s in range(12) if loop.proposer_trains(s)] == [4, 9]


def test_masked_proposals_shape_the_group_baseline_but_are_not_trained(tmp_path):
    from selfplay.types import Episode, Turn

    loop = sqlm_loop(tmp_path)
    turns = [Turn("proposer", [1], [2], [0.0], [1], str(i)) for i in range(4)]
    episodes = [
        Episode("sqlm", "proposer/arithmetic", [turn], {"proposer": reward}, "s0-g0",
                {"masked": masked})
        for turn, reward, masked in zip(turns, [1.0, 0.0, 1.0, 0.0],
                                        [False, False, False, True], strict=True)
    ]
    samples = loop.samples(episodes)
    assert [s.turn.text for s in samples] == ["0", "1", "2"]  # the masked "3" is dropped
    # GRPO over all four rewards (1, 0, 1, 0): mean ½, std ½ (population), so ±1; without the
    # masked one the mean would be ⅔ and the advantages differ
    assert [s.advantage for s in samples] == pytest.approx([1.0, -1.0, 1.0], abs=1e-5)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"topic": "geometry"}, "sqlm.topic"),
        ({"solver_samples": 1}, "sqlm.solver_samples"),
        ({"proposer_update_every": 0}, "sqlm.proposer_update_every"),
    ],
)
def test_bad_input_is_one_line(tmp_path, change, needle):
    from selfplay.core.errors import UserError

    with pytest.raises(UserError, match=needle.replace(".", r"\.")):
        sqlm_loop(tmp_path, **change)
