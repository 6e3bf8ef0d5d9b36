"""R-Zero as an Agent0 experiment: the released code's challenger and solver rewards
(curricula/rzero_rewards.py) against hand-computed numbers, and how Agent0's settings pick them
(selfplay/loops/agent0/rewards.py)."""

from __future__ import annotations

import pytest

from curricula.proposals import Proposal
from curricula.rewards import uncertainty, uncertainty_code
from curricula.rzero_rewards import (
    batch_cluster_shares,
    challenger_reward_code,
    solver_format,
    solver_reward,
)
from selfplay.loops.agent0.kinds import ScoredTask
from selfplay.loops.agent0.rewards import curriculum_rewards, executor_reward
from selfplay.loops.agent0.settings import Agent0Settings

# sums of a few floats: exact to well under 1e-12
EXACT = 1e-12
SAME = "Compute the sum of the first ten odd positive integers please"
OTHER = "A rectangle has width 3 and height 8 ; find its area in square units"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>7 * 6 = 42</think> The answer is \\boxed{42}.", 1.0),
        ("<think>\nmulti\nline\n</think>\n\\boxed{42}", 1.0),  # DOTALL: newlines anywhere
        ("<think>7 * 6 = 42 The answer is \\boxed{42}.", 0.0),  # never closed
        ("<think>7 * 6 = 42</think> The answer is 42.", 0.0),  # no box
        ("\\boxed{42} <think>because</think>", 0.0),  # the box before the thinking
        ("So <think>x</think> \\boxed{42}", 0.0),  # a full match: must start with <think>
    ],
)
def test_solver_format_is_think_then_boxed(text, expected):
    assert solver_format(text) == expected


def test_solver_reward_is_nine_tenths_accuracy_one_tenth_format():
    good, bad = "<think>a</think> \\boxed{3}", "\\boxed{3}"
    assert solver_reward(True, good) == pytest.approx(1.0, abs=EXACT)
    assert solver_reward(True, bad) == pytest.approx(0.9, abs=EXACT)
    assert solver_reward(False, good) == pytest.approx(0.1, abs=EXACT)
    assert solver_reward(False, bad) == 0.0
    assert solver_reward(True, bad, format_weight=0.25) == pytest.approx(0.75, abs=EXACT)


def test_challenger_reward_code_has_no_clamp_and_minus_one_for_unparsable():
    assert challenger_reward_code(True, 0.3, 0.25) == pytest.approx(0.05, abs=EXACT)
    assert challenger_reward_code(True, 0.8, 0.5) == pytest.approx(-0.3, abs=EXACT)  # no max(0,·)
    assert challenger_reward_code(True, 0.5, 0.125) == pytest.approx(0.375, abs=EXACT)
    assert challenger_reward_code(False, 0.5, 0.25) == pytest.approx(-1.25, abs=EXACT)


def test_unparsable_outputs_are_singletons_in_the_batch_clusters():
    # two copies of one question cluster (BLEU 1); OTHER shares no 4-gram with it; an empty
    # question has BLEU 0 with everything (distance 1 > 0.5): every share is over B = 5
    shares = batch_cluster_shares([SAME, SAME, OTHER, None, None])
    assert shares == pytest.approx([2 / 5, 2 / 5, 1 / 5, 1 / 5, 1 / 5], abs=EXACT)


def scored(question: str | None, p_hat: float) -> ScoredTask:
    if question is None:
        return ScoredTask(Proposal("gibberish", False, why_invalid="no question/answer"))
    return ScoredTask(Proposal(question, True, "qa", question, "4"), p_hat=p_hat)


def test_rzero_form_clusters_the_whole_batch_and_paper_form_the_valid_questions():
    tasks = [scored(SAME, 0.4), scored(SAME, 0.4), scored(OTHER, 0.6), scored(None, 0.0)]
    rzero = Agent0Settings(reward_form="rzero")
    rewards, penalties = curriculum_rewards(rzero, tasks, proposer_reward=uncertainty_code)
    assert penalties == pytest.approx([2 / 4, 2 / 4, 1 / 4, 1 / 4], abs=EXACT)
    # min(0.4, 0.6) − ½ = −0.1; min(0.6, 0.4) − ¼ = 0.15; −1 − ¼
    assert rewards == pytest.approx([-0.1, -0.1, 0.15, -1.25], abs=EXACT)
    # the paper form (R-Zero's paper = Agent0's paper with no tool term) clusters the 3 valid
    # questions: shares 2/3, 2/3, 1/3; max(0, 1 − 2|p̂ − ½| − share); 0 for the invalid one
    paper = Agent0Settings(reward_form="paper", lambda_tool=0.0)
    rewards, penalties = curriculum_rewards(paper, tasks, proposer_reward=uncertainty)
    assert penalties == pytest.approx([2 / 3, 2 / 3, 1 / 3, 0.0], abs=EXACT)
    assert rewards == pytest.approx([0.8 - 2 / 3, 0.8 - 2 / 3, 0.8 - 1 / 3, 0.0], abs=EXACT)


def test_executor_reward_forms():
    good = "<think>x</think> \\boxed{5}"
    fmt = Agent0Settings(executor_reward="format")
    assert executor_reward(fmt, True, good) == pytest.approx(1.0, abs=EXACT)
    assert executor_reward(fmt, False, good) == pytest.approx(0.1, abs=EXACT)
    assert executor_reward(fmt, True, "\\boxed{5}") == pytest.approx(0.9, abs=EXACT)
    binary, signed = Agent0Settings(), Agent0Settings(executor_reward="signed")
    assert (executor_reward(binary, False, good), executor_reward(signed, False, good)) == (0, -1)
    assert executor_reward(binary, True, "") == executor_reward(signed, True, "") == 1.0


def test_no_executor_tool_means_no_tool_for_the_held_out_evaluation():
    assert Agent0Settings(executor_tool=False).tool_settings() is None
    assert Agent0Settings().tool_settings() is not None
