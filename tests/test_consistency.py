"""Majority vote under symbolic equivalence, band filters, and the math-verify timeout."""

from __future__ import annotations

import threading
import time

import pytest

from curricula.answers import VERIFIER, answers_equal
from curricula.consistency import (
    Consensus,
    answer_classes,
    consensus,
    in_band_code,
    in_band_paper,
    majority_vote,
)


def test_equivalent_spellings_vote_together():
    answers = ["1/2", "0.5", "\\frac{1}{2}", "1/3", None, "0.5"]
    assert answer_classes(answers) == [0, 0, 0, 1, None, 0]
    label, p_hat = majority_vote(answers)
    assert label == "0.5"  # the class's most common spelling
    assert p_hat == pytest.approx(4 / 6)  # unanswered samples count in the denominator


def test_consensus_says_whether_the_proposers_answer_joined_the_majority():
    answers = ["1/2", "0.5", "1/3", "0.5"]
    assert consensus(answers, reference="\\frac{1}{2}") == Consensus("0.5", 0.75, True)
    assert consensus(answers, reference="1/3") == Consensus("0.5", 0.75, False)
    assert consensus(answers, reference=None).agrees is False  # the proposer gave no answer
    assert consensus(answers).agrees is None  # no reference asked about
    assert consensus([None, None], reference="2") == Consensus(None, 0.0, None)
    # the reference is classified after the answers: it never changes their classes
    assert consensus(["2", "3"], reference="2").label == "2"


def test_majority_vote_ties_and_empty():
    assert majority_vote(["3", "4", "4", "3"]) == ("3", 0.5)  # first-seen class wins a tie
    assert majority_vote([None, None]) == (None, 0.0)
    assert majority_vote(["7"]) == ("7", 1.0)


def test_distinct_answers_stay_apart():
    label, p_hat = majority_vote(["2", "3", "5", "7", "7"])
    assert (label, p_hat) == ("7", 0.4)


@pytest.mark.parametrize(
    ("p_hat", "paper", "code"),
    [
        (0.25, True, False),
        (0.75, True, True),
        (0.5, True, True),
        (0.2, False, False),
        (0.3, True, True),
        (0.1 * 3, True, True),  # 0.30000000000000004: a share of k, still on the edge
        (0.8, False, True),
        (0.875, False, False),
        (0.0, False, False),
        (1.0, False, False),
    ],
)
def test_band_filter_edges(p_hat, paper, code):
    assert in_band_paper(p_hat) is paper
    assert in_band_code(p_hat) is code


def test_band_lo_above_hi_is_refused():
    with pytest.raises(ValueError):
        in_band_code(0.5, lo=0.8, hi=0.3)


@pytest.mark.timing  # a time limit: held under load (make test-under-load)
def test_math_verify_timeout_works_off_the_main_thread():
    """A tower of exponents makes sympy hang; math-verify's own signal-based timeout would fail
    on a worker thread, ours stops it at the deadline and the next call works."""
    assert answers_equal("0.5", "\\frac{1}{2}")  # worker up before timing
    before = VERIFIER.timeouts
    result: dict[str, object] = {}

    def check() -> None:
        start = time.perf_counter()
        result["equal"] = answers_equal("9^{9^{9^{9}}}", "1", timeout_s=1.0)
        result["seconds"] = time.perf_counter() - start

    thread = threading.Thread(target=check)
    thread.start()
    thread.join(30)
    assert result["equal"] is False
    assert result["seconds"] < 5.0
    assert VERIFIER.timeouts == before + 1
    assert answers_equal("2/4", "0.5")  # a fresh worker took over
