"""SQLM: the released code's rewards (curricula/sqlm_rewards.py) against hand-computed numbers,
the proposer's update schedule, masked proposals, and bad input."""

from __future__ import annotations

import re

import pytest

from curricula.rewards import resolve_reward
from curricula.sqlm_rewards import majority, read_proposal, solver_answer, solver_rewards
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
    p_hat = sum(got) / 4  # m_maj / N
    assert resolve_reward("agreement_band", 4)(p_hat) == code
    assert resolve_reward("informative")(p_hat) == paper


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
        ({"proposer_reward": "nope"}, "unknown proposer reward 'nope'"),
        # renamed by the vocabulary (docs/architecture.md#vocabulary): one line naming the new
        ({"solver_max_tokens": 8}, "'sqlm.solver_max_tokens' is now 'roles.solver.max_tokens'"),
        ({"proposer_reward": "code"}, "'code' is now 'agreement_band'"),
    ],
)
def test_bad_input_is_one_line(tmp_path, change, needle):
    from selfplay.core.errors import UserError

    with pytest.raises(UserError, match=re.escape(needle)):
        sqlm_loop(tmp_path, **change)


# ---------------------------------------------------------------------- the coding topic
def test_read_coding_takes_the_problem_and_the_bar_separated_tests():
    from curricula.sqlm_rewards import read_coding

    reply = "Print the sum.\nTest Cases:\n3 4 ||| 7\n1\\n2 ||| 3\nno bar here\n`5 5` ||| `10`"
    problem, tests = read_coding(reply)
    assert problem == "Print the sum."
    assert tests == [("3 4\n", "7\n"), ("1\n2\n", "3\n"), ("5 5\n", "10\n")]
    assert read_coding("Print the sum. 3 4 ||| 7") is None  # no "Test Cases:": masked
    assert read_coding("Print the sum.\nTest Cases:\nnone") is None  # no test: masked
    many = "P\nTest Cases:\n" + "\n".join(f"{i} ||| {i}" for i in range(8))
    assert len(read_coding(many)[1]) == 5


def test_coding_proposer_reward_is_the_open_interval():
    from curricula.rewards import informative

    assert [informative(x) for x in (0.0, 0.2, 0.95, 1.0)] == [0.0, 1.0, 1.0, 0.0]


class _Caller:
    """What the sandbox call asks of a policy (``elsewhere`` while it waits)."""

    import contextlib

    @contextlib.asynccontextmanager
    async def elsewhere(self):
        yield


def test_program_score_runs_the_tests_in_the_real_sandbox():
    import asyncio

    from selfplay.engines.tools import ToolSandbox, ToolSettings
    from selfplay.loops.sqlm.loop import program_score

    tests = [("3 4\n", "7\n"), ("1 1\n", "2\n"), ("2 2\n", "5\n")]  # the third is wrong
    right = "```python\nprint(sum(map(int, input().split())))\n```"
    product = "```python\na, b = map(int, input().split())\nprint(a * b)\n```"
    tool = ToolSandbox(ToolSettings(wall_s=5.0, pool_size=2))

    async def score_all():
        replies = (right, product, "no program")
        return await asyncio.gather(*(program_score(tool, _Caller(), r, tests) for r in replies))

    try:
        scores = asyncio.run(asyncio.wait_for(score_all(), 60))
    finally:
        tool.close()
    # the sum passes 2 of 3; the product passes none (12, 1, 4); no program scores 0
    assert scores == [("passed 2/3", pytest.approx(2 / 3, abs=1e-12)), ("passed 0/3", 0.0),
                      (None, 0.0)]


def test_loop_scores_coding_by_test_share_and_math_by_majority(tmp_path):
    from selfplay.loops.sqlm.loop import Question

    def question(index: int, text: str, tests=()) -> Question:
        return Question(task_id=f"p{index}", index=index, turn=None, question=text,
                        tests=list(tests))

    loop = sqlm_loop(tmp_path, topic="coding")
    coding = question(0, "P", [("1\n", "1\n")])
    loop.score(coding, [(None, "passed 1/1", 1.0), (None, "passed 0/1", 0.0),
                        (None, None, 0.0), (None, "passed 1/1", 1.0)])
    # solver rewards are the scores; p̂ = ½ lies in (0, 1): proposer reward 1
    assert (coding.scores, coding.p_hat, coding.reward) == ([1.0, 0.0, 0.0, 1.0], 0.5, 1.0)
    solved = question(1, "P", [("1\n", "1\n")])
    loop.score(solved, [(None, "passed 1/1", 1.0)] * 4)
    assert solved.reward == 0.0  # every program passes: p̂ = 1
    math = question(2, "What is 1 + 1?")
    loop.score(math, [(None, "2", None), (None, "2", None), (None, "3", None), (None, "2", None)])
    # m_maj = 3 of N = 4 agree with the majority: 1 < 3 < 4, the code's band
    assert (math.scores, math.p_hat, math.reward) == ([1.0, 1.0, 0.0, 1.0], 0.75, 1.0)


def test_a_roles_budget_and_stop_strings_reach_its_requests_and_no_other(tmp_path):
    """``roles.<role>.max_tokens`` and ``stop`` apply in one place (``Loop.sampling``) to
    every request the loop builds for that role, beside the stop strings the loop's format
    needs; a role without them gets ``sampling.max_new_tokens`` (6 here) and no stop."""
    from selfplay.loops.sqlm import SqlmLoop

    roles = {"proposer": {"prompt": "sqlm_arithmetic_cpu"},
             "solver": {"prompt": "sqlm_solver_cpu", "max_tokens": 7, "stop": ["\n", "."]}}
    data = tiny_config(tmp_path, loop="sqlm", roles=roles, sqlm={}, train={"loss": "grpo"})
    del data["rlvr"]
    loop = SqlmLoop(validate(data, "test"))
    solver = loop.request("solver", stop=("</answer>", "."), question="What is 1 + 1?").sampling
    assert (solver.max_new_tokens, solver.stop) == (7, ("</answer>", ".", "\n"))
    proposer = loop.request("proposer").sampling
    assert (proposer.max_new_tokens, proposer.stop) == (6, ())
