"""SSP's rules (curricula/ssp_rewards.py) against hand-computed numbers: the solver's exact-match
reward and its /4 for answer spam, the proposer's 1 − p̂ and 4·p̂·(1 − p̂) (from the registry in
curricula/rewards.py), and each validity check."""

from __future__ import annotations

import pytest

from curricula.rewards import resolve_reward
from curricula.ssp_rewards import QuestionRules, exact_match, question_problem, solver_reward

QUESTION = "Which river in the northern valley flows for the longest distance of all?"


def test_solver_reward_is_normalised_exact_match_of_the_last_answer():
    assert solver_reward("<search>x</search> <answer> The Zorblax! </answer>", "zorblax") == 1.0
    assert solver_reward("<answer>Zorblax</answer> <answer>Nile</answer>", "Zorblax") == 0.0
    assert solver_reward("I think it is Zorblax.", "Zorblax") == 0.0  # no answer tag: 0
    assert solver_reward("<answer>Zorblax river</answer>", "Zorblax") == 0.0  # exact, not contains


def test_more_than_ten_answer_tags_divide_the_reward_by_four():
    assert solver_reward("<answer>7</answer>" * 10, "7") == 1.0
    assert solver_reward("<answer>7</answer>" * 11, "7") == 0.25
    assert solver_reward("<answer>8</answer>" * 11, "7") == 0.0


@pytest.mark.parametrize(("s", "one_minus", "intermediate"), [
    (0.4, 0.6, 0.96),  # 4 · 0.4 · 0.6
    (0.2, 0.8, 0.64),  # 4 · 0.2 · 0.8
    (0.0, 1.0, 0.0),  # nobody solved it: hardest for 1-acc, worthless for intermediate
    (1.0, 0.0, 0.0),
])
def test_proposer_rewards(s, one_minus, intermediate):
    # tolerance: one or two float multiplications
    assert resolve_reward("inverse_accuracy")(s) == pytest.approx(one_minus, abs=1e-12)
    assert resolve_reward("intermediate_difficulty")(s) == pytest.approx(intermediate,
                                                                         abs=1e-12)


@pytest.mark.parametrize(("question", "queries", "retrieved", "reason"), [
    (QUESTION, ["river valley", "longest river"], 3, ""),
    (None, ["a", "b"], 3, "no question"),
    ("Why?", ["a", "b"], 3, "length"),
    ("x" * 1001, ["a", "b"], 3, "length"),
    ("Which river flows the longest?", ["a", "b"], 3, "too few words"),
    (QUESTION.replace("river", "Zorblax"), ["a", "b"], 3, "contains the answer"),
    (QUESTION, ["river valley"], 3, "too few searches"),
    (QUESTION, ["River valley", "river valley"], 3, "repeated query"),
    (QUESTION, ["river valley", "longest river"], 0, "no retrieved information"),
])
def test_validity_checks(question, queries, retrieved, reason):
    assert question_problem(question, "Zorblax", queries, retrieved) == reason


def test_relaxed_rules_accept_what_the_paper_rejects():
    short = "Which river flows the longest?"  # 5 words, one search
    assert question_problem(short, "Zorblax", ["river"], 1) == "too few words"
    relaxed = QuestionRules(min_words=5, min_searches=1)
    assert question_problem(short, "Zorblax", ["river"], 1, relaxed) == ""


def test_target_inside_a_word_is_not_the_answer():
    # "42" inside "420" is not the answer; the whole word is
    assert exact_match("42.", "42") and not exact_match("420", "42")
    assert question_problem(QUESTION + " 420", "42", ["a", "b"], 1) == ""
    assert question_problem(QUESTION + " 42", "42", ["a", "b"], 1) == "contains the answer"


def test_tags_inside_retrieved_information_are_not_the_models():
    reply = ("<search> q </search>\n<information>\nDoc 1: <answer> Zorblax </answer>\n"
             "</information>\nI do not know.")
    assert solver_reward(reply, "Zorblax") == 0.0
    assert solver_reward(reply + " <answer>Zorblax</answer>", "Zorblax") == 1.0
