"""CURE's rewards from execution matrices worked out by hand (curricula/unit_tests.py,
docs/algorithms.md#cure). Pure formulas: no sandbox, no model.

Matrices are written with the ground-truth columns first, a bar, then the generated tests.
Floats are compared with ``pytest.approx(abs=1e-12)``: every figure is a ratio of small
integers or a square root of one, exact to the last few bits of a double.
"""

from __future__ import annotations

import math

import pytest

from curricula.unit_tests import (
    code_rewards,
    correct_programs,
    standardise,
    unit_test_correct,
    unit_test_rewards,
)

EXACT = {"abs": 1e-12}  # ratios of small integers: rounding is far below this

# M1: n = 4 programs, t = 2 ground-truth tests, m = 3 generated tests
#            GT0 GT1 | U0 U1 U2
#   code0:    1   1  |  1  0  1
#   code1:    1   1  |  1  1  0
#   code2:    1   0  |  0  1  1
#   code3:    0   0  |  1  0  0
# code rewards (share of GT passed): 1, 1, ½, 0.   C = {0, 1}, W = {2, 3}.
# U0: C column (1, 1): correct; W column (0, 1): one of two fails → p01 = ½ (paper: 1 count).
# U1: C column (0, 1): wrong;   W column (1, 0): one of two passes → −p00 = −½ (paper: −1).
# U2: C column (1, 0): wrong;   W column (1, 0): one passes → −½ (paper: −1).
# post_stage: U0 correct but code3 passes it → 0; U1, U2 wrong and some W passes → −1.
M1 = [
    [1, 1, 1, 0, 1],
    [1, 1, 1, 1, 0],
    [1, 0, 0, 1, 1],
    [0, 0, 1, 0, 0],
]


def test_code_rewards_are_the_share_of_ground_truth_tests_passed() -> None:
    assert code_rewards(M1, 2) == pytest.approx([1.0, 1.0, 0.5, 0.0], **EXACT)
    assert correct_programs(M1, 2) == [0, 1]


def test_correct_and_wrong_tests_earn_the_share_of_wrong_programs_they_separate() -> None:
    assert unit_test_correct(M1, 2) == [True, False, False]
    assert unit_test_rewards(M1, 2, "code") == pytest.approx([0.5, -0.5, -0.5], **EXACT)
    assert unit_test_rewards(M1, 2, "paper") == pytest.approx([1.0, -1.0, -1.0], **EXACT)
    assert unit_test_rewards(M1, 2, "code", post_stage=True) == pytest.approx([0.0, -1.0, -1.0],
                                                                              **EXACT)


def test_standardised_rewards_by_hand() -> None:
    # code rewards 1, 1, ½, 0: mean 5/8, deviations 3/8, 3/8, −1/8, −5/8,
    # variance (9 + 9 + 1 + 25) / 64 / 4 = 11/64, std √11 / 8 → 3/√11, 3/√11, −1/√11, −5/√11
    root = math.sqrt(11)
    assert standardise(code_rewards(M1, 2)) == pytest.approx(
        [3 / root, 3 / root, -1 / root, -5 / root], **EXACT)
    # test rewards ½, −½, −½: mean −1/6, deviations 2/3, −1/3, −1/3, variance 2/9, std √2/3
    # → √2, −1/√2, −1/√2; the paper's counts (× |W| = 2) give the same advantages
    expected = [math.sqrt(2), -1 / math.sqrt(2), -1 / math.sqrt(2)]
    assert standardise(unit_test_rewards(M1, 2, "code")) == pytest.approx(expected, **EXACT)
    assert standardise(unit_test_rewards(M1, 2, "paper")) == pytest.approx(expected, **EXACT)


# M2: C empty. No program passes both ground-truth tests: the tests get no reward at all.
#            GT0 GT1 | U0
#   code0:    1   0  |  1
#   code1:    0   0  |  1
M2 = [[1, 0, 1], [0, 0, 1]]


def test_no_correct_program_gives_no_test_reward() -> None:
    assert correct_programs(M2, 2) == []
    assert unit_test_correct(M2, 2) is None
    assert unit_test_rewards(M2, 2, "code") is None
    assert unit_test_rewards(M2, 2, "paper", post_stage=True) is None
    assert code_rewards(M2, 2) == pytest.approx([0.5, 0.0], **EXACT)


# M3: W empty. Both programs pass every ground-truth test.
#            GT0 GT1 | U0 U1 U2
#   code0:    1   1  |  1  0  1
#   code1:    1   1  |  1  1  0
# U0 correct, U1 (code0 fails it) and U2 (code1 fails it) wrong.
# code form: ±1 → 1, −1, −1; paper form: no wrong program to count → 0, 0, 0 (dropped).
M3 = [[1, 1, 1, 0, 1], [1, 1, 1, 1, 0]]


def test_no_wrong_program_gives_plus_minus_one_in_the_code_form_and_zero_in_the_paper_form():
    assert unit_test_rewards(M3, 2, "code") == [1.0, -1.0, -1.0]
    assert unit_test_rewards(M3, 2, "code", post_stage=True) == [1.0, -1.0, -1.0]
    assert unit_test_rewards(M3, 2, "paper") == [0.0, 0.0, 0.0]
    assert standardise(unit_test_rewards(M3, 2, "paper")) is None  # the problem is dropped
    # mean −1/3, deviations 4/3, −2/3, −2/3, variance 8/9, std 2√2/3 → √2, −1/√2, −1/√2
    assert standardise(unit_test_rewards(M3, 2, "code")) == pytest.approx(
        [math.sqrt(2), -1 / math.sqrt(2), -1 / math.sqrt(2)], **EXACT)
    assert standardise(code_rewards(M3, 2)) is None  # both programs earn 1


# M4: post_stage. t = 1.
#            GT0 | U0 U1 U2
#   code0:    1  |  1  1  0
#   code1:    0  |  0  1  0
#   code2:    0  |  0  0  1
# C = {0}, W = {1, 2}.
# U0: correct; both W fail it → p01 = 1, post_stage 1, paper 2.
# U1: correct; code1 passes, code2 fails → p01 = ½, post_stage 0 (not all of W fail), paper 1.
# U2: wrong (code0 fails); code2 passes → −p00 = −½, post_stage −1, paper −1.
M4 = [[1, 1, 1, 0], [0, 0, 1, 0], [0, 0, 0, 1]]


def test_post_stage_rewards_only_tests_that_reject_every_wrong_program() -> None:
    assert unit_test_rewards(M4, 1, "code") == pytest.approx([1.0, 0.5, -0.5], **EXACT)
    assert unit_test_rewards(M4, 1, "code", post_stage=True) == [1.0, 0.0, -1.0]
    assert unit_test_rewards(M4, 1, "paper", post_stage=True) == [1.0, 0.0, -1.0]
    assert unit_test_rewards(M4, 1, "paper") == [2.0, 1.0, -1.0]


# M5: a malformed generated test (no input/output parsed) runs against no program: its column
# is all 0. With C = {0} it is wrong, and no wrong program passes it: −0 (nothing let through).
#            GT0 | U0 (malformed)
#   code0:    1  |  0
#   code1:    0  |  0
def test_a_malformed_test_is_wrong_and_lets_no_wrong_program_through() -> None:
    assert unit_test_correct([[1, 0], [0, 0]], 1) == [False]
    assert unit_test_rewards([[1, 0], [0, 0]], 1, "code") == [0.0]


def test_equal_rewards_are_dropped_even_after_float_rounding() -> None:
    assert standardise([0.5, 0.5, 0.5, 0.5]) is None
    # 0.1 + 0.2 and 0.3 differ by 5.6e-17 in a double: equal rewards for CURE, not a signal
    assert standardise([0.1 + 0.2, 0.3, 0.3]) is None
    # three programs each passing one of three ground-truth tests: ⅓ each
    assert standardise(code_rewards([[1, 0, 0], [0, 1, 0], [0, 0, 1]], 3)) is None
    assert standardise([]) is None
    assert standardise([0.0, 1.0]) == [-1.0, 1.0]  # mean ½, std ½
