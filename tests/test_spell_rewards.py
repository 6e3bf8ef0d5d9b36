"""SPELL's formulas against numbers worked out by hand (curricula/spell_rewards.py,
docs/algorithms.md#spell): parsing the three roles' replies, the rule score, the verifier's
majority and filter, the three rewards and the GRPO advantages the loop's groups give.
Pure formulas: no model, no corpus.

Floats: ``EXACT`` (1e-12) for ratios of small integers and exp() of them, whose rounding is
far below it.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from curricula.rewards import learnability, uncertainty
from curricula.spell_rewards import (
    UNPARSABLE,
    accepted,
    final_answer,
    is_bad_ground,
    majority,
    parse_question,
    parse_vote,
    questioner_reward,
    responder_reward,
    sub_em_strict,
    verifier_rewards,
    verifier_trains,
)
from selfplay.loops.spell.clusters import Plan
from selfplay.loops.spell.loop import SpellLoop
from selfplay.loops.spell.records import Answer, Question
from selfplay.rl.advantages import group_relative_samples
from selfplay.types import Turn

EXACT = {"abs": 1e-12}
GRPO_EPS = {"rel": 1e-5, "abs": 1e-12}  # see the advantages test


# ---------------------------------------------------------------------- parsing
def test_a_question_is_its_first_question_line_and_the_answer_line_after_it() -> None:
    reply = "Answer: early\nQuestion: Which keyword ends a loop early?\nAnswer: break\nAnswer: x"
    assert parse_question(reply) == ("Which keyword ends a loop early?", "break")
    assert parse_question("<question>What is 2+2?</question> <answer>4</answer>") == (
        "What is 2+2?", "4")


@pytest.mark.parametrize("reply", [
    "Question: What does pass do?",  # no answer
    "Question: What does pass do?\nAnswer:",  # an empty answer
    "Question: Is the answer nothing?\nAnswer: " + "word " * 31,  # a passage, not an answer
    "Question: What does the pass statement do?\nAnswer: the pass statement",  # in the question
    "",
])
def test_malformed_questions_are_bad_format(reply: str) -> None:
    assert parse_question(reply) is None


def test_the_final_answer_is_the_last_box_else_the_last_stated_answer() -> None:
    assert final_answer("first \\boxed{1} then \\boxed{2}. The answer is 3") == "2"
    assert final_answer("The answer is 3.\nso the answer is: Paris.") == "Paris"
    assert final_answer("Paris is the capital") is None  # strict: nothing stated


def test_sub_em_strict_finds_the_reference_as_whole_words() -> None:
    assert sub_em_strict("the city of Paris", "Paris") == 1.0
    assert sub_em_strict("An Apple, Inc.!", "apple inc") == 1.0  # case, punctuation, articles
    assert sub_em_strict("100", "10") == 0.0  # not part of a word
    assert sub_em_strict(None, "10") == 0.0
    assert sub_em_strict("Paris", "the city of Paris") == 0.0  # the reference must be inside


@pytest.mark.parametrize(("reply", "vote"), [
    ("\\boxed{YES}", 1), ("\\boxed{no}", 0), ("no, wait: yes", 1), ("No.", 0),
    ("maybe", UNPARSABLE), ("\\boxed{yes or no}", UNPARSABLE), ("\\boxed{}", UNPARSABLE),
    ("yes \\boxed{NO}", 0),  # the box decides
])
def test_votes_parse_to_yes_no_or_unparsable(reply: str, vote: int) -> None:
    assert parse_vote(reply) == vote


# ---------------------------------------------------------------------- the verifier
def test_the_majority_is_the_most_common_vote_first_cast_on_a_tie() -> None:
    assert majority([1, 1, 0]) == 1
    assert majority([0, 1, 0, 1]) == 0  # 2–2: the vote cast first
    assert majority([1, 0, 0, 1]) == 1
    assert majority([-1, -1, 1]) == UNPARSABLE
    assert majority([]) == UNPARSABLE


def test_a_vote_earns_one_for_the_majority_zero_against_and_minus_one_unparsable() -> None:
    assert verifier_rewards([1, 1, 0, -1]) == [1.0, 1.0, 0.0, -1.0]
    assert verifier_rewards([0, 1, 0]) == [1.0, 0.0, 1.0]


def test_verifier_groups_train_on_a_split_majority_that_agrees_with_the_rule() -> None:
    six_of_eight = [1] * 6 + [0] * 2  # share 0.75, majority YES
    assert verifier_trains(six_of_eight, 1.0)
    assert not verifier_trains(six_of_eight, 0.0)  # disagrees with the rule score
    assert not verifier_trains([1] * 8, 1.0)  # unanimous: share 1.0 > 0.99
    assert not verifier_trains([1] * 4 + [0] * 4, 1.0)  # tie: share 0.5 < 0.51
    assert verifier_trains([0, 0, 1], 0.0)  # 2/3 NO on a wrong answer
    assert not verifier_trains([-1, -1, 0], 0.0)  # an unparsable majority never trains


# ---------------------------------------------------------------------- the responder
def test_the_responder_earns_the_better_of_rule_and_verifier_when_the_verifier_is_valid() -> None:
    assert responder_reward(0.0, 1) == 1.0
    assert responder_reward(1.0, 0) == 1.0
    assert responder_reward(0.0, 0) == 0.0
    assert responder_reward(0.0, UNPARSABLE) == 0.0  # the rule score alone
    assert responder_reward(1.0, UNPARSABLE) == 1.0


def test_closed_book_scores_of_a_tenth_or_more_are_bad_ground() -> None:
    assert is_bad_ground([0.0] * 9 + [1.0])  # mean 0.1
    assert not is_bad_ground([0.0] * 10 + [1.0])  # mean 1/11
    assert not is_bad_ground([])


# ---------------------------------------------------------------------- the questioner
def test_questioner_rewards_by_hand() -> None:
    assert questioner_reward(None) == -1.0
    assert questioner_reward(0.5, bad_ground=True) == -0.5
    assert questioner_reward(0.0) == 0.0
    assert questioner_reward(-0.25) == -0.25  # r̄ ≤ 0 → r̄
    assert questioner_reward(1.0) == 0.0
    assert questioner_reward(0.5) == pytest.approx(1.0, **EXACT)
    # σ = 1/6: exp(−(¼)² / (2/36)) = exp(−36/32) = exp(−1.125) = 0.32465...
    assert questioner_reward(0.25) == pytest.approx(math.exp(-1.125), **EXACT)
    assert questioner_reward(0.75) == pytest.approx(0.3246524673583497, **EXACT)
    # the code's `reverse` and `rzero` are the registry's learnability and uncertainty
    assert questioner_reward(0.25, learnability) == 0.75
    assert questioner_reward(0.25, uncertainty) == 0.5
    assert questioner_reward(1.0, learnability) == 0.0  # r̄ = 1 → 0 in every form


def test_questions_answered_with_a_mean_in_a_hundredth_to_one_are_accepted() -> None:
    assert accepted(0.01, False) and accepted(1.0, False)
    assert not accepted(0.005, False)
    assert not accepted(0.5, True) and not accepted(None, False)


# ---------------------------------------------------------------------- advantages
def turn(role: str) -> Turn:
    return Turn(role=role, prompt_ids=[1], completion_ids=[2], engine_logprobs=[0.0],
                loss_mask=[1], text="")


def proposal(index: int, parsed, rewards: list[float]) -> Question:
    plan = Plan(cluster=0, evidence=[], new=[index], examples=[], short=False)
    answers = [Answer(turn("responder"), "x", 0.0, votes=[1, 1, 0],
                      vote_turns=[turn("verifier")] * 3, verdict=1, reward=r,
                      verifier_trains=index == 0) for r in rewards]
    question, reference = parsed or (None, None)
    p = Question(task_id=f"q{index}", turn=turn("questioner"), question=question,
                 answer=reference, index=index, plan=plan, cluster_name="topic",
                 context_tokens=10, responses=answers, scores=rewards)
    p.reward = questioner_reward(p.p_hat)
    return p


def test_the_questioner_batch_is_one_group_and_each_question_and_answer_its_own() -> None:
    # questions: bad format (−1), r̄ = ½ (1.0), r̄ = 1 (0.0): batch mean 0, population std
    # √(2/3) → advantages −√1.5, +√1.5, 0. GRPO divides by std + 1e-6: with every std here
    # ≥ 0.47 that moves an advantage by < 2.2e-6 of itself, hence GRPO_EPS (rel 1e-5)
    proposals = [proposal(0, ("q0", "a"), [1.0, 0.0]), proposal(1, None, []),
                 proposal(2, ("q2", "a"), [1.0, 1.0])]
    episodes = SpellLoop.episodes(SimpleNamespace(name="spell"), proposals, step=3)
    samples = group_relative_samples(episodes, "grpo")
    by_role: dict[str, list[float]] = {}
    for s in samples:
        by_role.setdefault(s.turn.role, []).append(s.advantage)
    assert by_role["questioner"] == pytest.approx([math.sqrt(1.5), -math.sqrt(1.5), 0.0],
                                                  **GRPO_EPS)
    # question 0's two answers 1, 0: ±1; question 2's answers 1, 1: 0 (equal rewards)
    assert by_role["responder"] == pytest.approx([1.0, -1.0, 0.0, 0.0], **GRPO_EPS)
    # only question 0's verifier groups train: votes 1, 1, 0 → rewards 1, 1, 0: mean ⅔,
    # std √2/3 → (⅓)/(√2/3) = 1/√2 twice, −(⅔)/(√2/3) = −√2
    root = 1 / math.sqrt(2)
    assert by_role["verifier"] == pytest.approx([root, root, -math.sqrt(2)] * 2, **GRPO_EPS)
    assert {e.group_id for e in episodes if e.env == "questioner"} == {"s3-questioner"}


def test_the_answer_word_bound_is_a_setting() -> None:
    reply = "Question: Which statements loop?\nAnswer: for and while"
    assert parse_question(reply, max_words=3) == ("Which statements loop?", "for and while")
    assert parse_question(reply, max_words=2) is None
