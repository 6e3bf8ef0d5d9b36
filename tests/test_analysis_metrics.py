"""Curriculum metrics (curricula/analysis) on hand-made data with hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from curricula.analysis import difficulty, diversity, tasks
from selfplay.stats import compute, games, judge, passk


# ---------------------------------------------------------------- difficulty
def _episode(step, group, reward, correct=None, role="solver"):
    info = {} if correct is None else {"correct": correct}
    return {"step": step, "group_id": group, "rewards": {role: reward}, "info": info}


def test_groups_phat_and_zero_variance_from_known_outcomes():
    episodes = (
        [_episode(0, "a", 1.1, True)] * 3 + [_episode(0, "a", 0.0, False)]  # p̂ = 3/4
        + [_episode(0, "b", 1.0, True)] * 4  # all right: zero variance
        + [_episode(1, "c", 0.0, False)] * 4  # all wrong: zero variance
        + [_episode(1, "d", 0.1, False), _episode(1, "d", 1.1, True)]  # p̂ = 1/2
        + [_episode(1, "lonely", 1.0, True)]  # one sample: no p̂
    )
    groups = difficulty.groups_from_episodes(episodes)
    assert [(g.step, g.group_id, g.p_hat) for g in groups] == [
        (0, "a", 0.75), (0, "b", 1.0), (1, "c", 0.0), (1, "d", 0.5)
    ]
    assert difficulty.zero_variance_share(groups) == 0.5
    hist = difficulty.histograms_by([(g.step, g.p_hat) for g in groups], bins=4)
    # bins [0,.25) [.25,.5) [.5,.75) [.75,1]: step 0 has 0.75 and 1.0; step 1 has 0.0 and 0.5
    assert hist[0].tolist() == [0, 0, 0, 2]
    assert hist[1].tolist() == [1, 0, 1, 0]


def test_solved_falls_back_to_positive_reward():
    assert difficulty.solved({"rewards": {"x": 0.5}, "info": {}})
    assert not difficulty.solved({"rewards": {"x": 0.0}, "info": {}})
    assert not difficulty.solved({"rewards": {"x": 2.0}, "info": {"correct": False}})


def test_band_share_and_target_band_lookup():
    assert difficulty.band_share([0.1, 0.3, 0.5, 0.8, 0.9], 0.3, 0.8) == 0.6
    assert difficulty.target_band({"loop": "agent0", "agent0": {"filter": {"band": [0.2, 0.7]}}})[
        :2
    ] == (0.2, 0.7)
    assert difficulty.target_band({"loop": "agent0", "agent0": {}})[:2] == (0.3, 0.8)
    paper = {"band": "paper", "band_delta": 0.25, "band_lo": 0.3, "band_hi": 0.8}
    assert difficulty.target_band({"loop": "agent0", "agent0": paper})[:2] == (0.25, 0.75)
    code = {**paper, "band": "code"}
    assert difficulty.target_band({"loop": "agent0", "agent0": code})[:2] == (0.3, 0.8)
    assert difficulty.target_band({"loop": "spice", "spice": {"p_low": 0.4, "p_high": 0.6}})[
        :2
    ] == (0.4, 0.6)
    assert difficulty.target_band({"loop": "rlvr", "rlvr": {"tasks": []}}) is None


# ---------------------------------------------------------------- diversity
def test_distinct_n_hand_computed():
    texts = ["a b a b", "A b c"]
    # unigrams a b a b a b c: 3 unique of 7; bigrams ab ba ab ab bc: 3 unique of 5
    assert diversity.distinct_n(texts, 1) == pytest.approx(3 / 7)
    assert diversity.distinct_n(texts, 2) == pytest.approx(3 / 5)
    assert diversity.distinct_n(["one"], 2) is None


def test_duplicates_have_self_bleu_one_and_one_cluster():
    batch = ["What is the sum of 12 and 30 ?"] * 5
    assert diversity.self_bleu(batch) == pytest.approx(1.0)
    assert len(set(diversity.bleu_clusters(batch))) == 1
    assert diversity.exact_duplicate_share(batch) == 1.0
    assert diversity.exact_repeat_share(["a  B", "c"], ["x", "A b"]) == 0.5
    assert diversity.exact_repeat_share(["a"], []) is None


def test_unrelated_texts_have_low_self_bleu_and_own_clusters():
    batch = [
        "What is the sum of 12 and 30 ?",
        "Name the capital city of France please",
        "How many legs does a spider have",
        "Sort these words alphabetically : pear apple fig",
    ]
    assert diversity.self_bleu(batch) < 0.2
    assert len(set(diversity.bleu_clusters(batch))) == 4
    # two near copies and one stranger: two clusters at threshold 0.5
    near = ["the cat sat on the mat today", "the cat sat on the mat today !", "prime numbers"]
    labels = diversity.bleu_clusters(near)
    assert labels[0] == labels[1] != labels[2]


def test_embedding_dispersion_clusters_and_near_duplicates():
    same = np.tile([1.0, 0.0, 0.0], (4, 1))
    assert diversity.embedding_dispersion(same) == pytest.approx(0.0)
    assert diversity.embedding_clusters(same) == [1, 1, 1, 1]
    basis = np.eye(3)
    assert diversity.embedding_dispersion(basis) == pytest.approx(1.0)
    assert len(set(diversity.embedding_clusters(basis))) == 3
    # rows 0 and 1 nearly equal (cos ≈ 0.995), row 2 orthogonal: 2 of 3 have a near duplicate
    rows = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]])
    assert diversity.near_duplicate_share(rows) == pytest.approx(2 / 3)
    # across iterations: only the new row close to an earlier one counts
    assert diversity.near_duplicate_share(rows[:2], earlier=rows[2:]) == 0.0
    assert diversity.near_duplicate_share(rows[1:], earlier=rows[:1]) == 0.5


# ---------------------------------------------------------------- tasks
TASKS = [
    {"iteration": 0, "valid": True, "answer": "4", "answer_type": "integer", "question": "2+2?",
     "tool_calls": 1.0, "pseudo_label": "4"},
    {"iteration": 0, "valid": True, "answer": " ", "answer_type": "string", "question": "q",
     "tool_calls": 0.0, "pseudo_label": "x"},
    {"iteration": 1, "valid": False, "answer": None, "answer_type": None, "question": "??",
     "tool_calls": None, "pseudo_label": None},
    {"iteration": 1, "valid": True, "answer": "4", "answer_type": "integer", "question": "3+1?",
     "tool_calls": 2.0, "pseudo_label": "5"},
]


def test_task_rates_hand_computed():
    assert tasks.validity_rate(TASKS) == 0.75
    assert tasks.answer_type_mix(TASKS) == {"integer": pytest.approx(2 / 3),
                                            "string": pytest.approx(1 / 3)}
    assert tasks.degenerate_rate(TASKS) == pytest.approx(1 / 3)
    assert tasks.top_answers(TASKS)[0] == ("4", pytest.approx(2 / 3))
    assert tasks.tool_calls_per_task(TASKS) == 1.0
    assert tasks.tool_use_rate(TASKS) == pytest.approx(2 / 3)
    assert tasks.pseudo_label_accuracy(TASKS) == pytest.approx(1 / 3)
    assert list(tasks.group_tasks(TASKS)) == [0, 1]
    assert tasks.is_degenerate_answer("+-") == "no letter or digit"
    assert tasks.is_degenerate_answer("q", "q") == "repeats the question"


# ---------------------------------------------------------------- games
def test_game_rates_per_seat_and_response_lengths():
    def game(step, winner, invalid_by=None, text="ab"):
        return {"step": step, "env": "kuhn_poker",
                "info": {"winner": winner, "invalid_by": invalid_by, "opponent": "mirror"},
                "turns": [{"completion_ids": [1, 2, 3], "text": text}]}

    episodes = [game(0, 0), game(0, 1), game(0, None), game(1, 0, invalid_by=1, text="abcd")]
    seat0, seat1 = games.game_rates(episodes)
    assert seat0 == {"game": "kuhn_poker", "opponent": "mirror", "seat": 0, "games": 4,
                     "win": 0.5, "draw": 0.25, "loss": 0.25, "invalid": 0.0}
    assert seat1["win"] == 0.25 and seat1["invalid"] == 0.25
    per_step = games.rates_per_step(episodes)
    assert per_step[0] == {"invalid": 0.0, "draw": pytest.approx(1 / 3),
                           "seat0_win": pytest.approx(1 / 3)}
    assert games.response_lengths(episodes) == {0: (3.0, 2.0), 1: (3.0, 4.0)}
    rows = games.eval_game_rows([{"step": 0, "eval/kuhn_poker/random/win": 0.5,
                                  "eval/kuhn_poker/random/seat1/invalid": 0.25,
                                  "eval/accuracy": 1.0}])
    assert {(r["seat"], r["outcome"], r["value"]) for r in rows} == {
        (None, "win", 0.5), (1, "invalid", 0.25)}


# ---------------------------------------------------------------- compute curve
def test_scalerl_fit_recovers_synthetic_parameters_within_5_percent():
    r0, a, b, c_mid = 0.1, 0.8, 1.5, 2e6
    c = np.logspace(4, 8.5, 40)
    noise = np.random.default_rng(0).normal(0, 0.003, len(c))
    r = compute.scalerl_curve(c, r0, a, b, c_mid) + noise
    fit = compute.fit_compute_curve(np.r_[0, c], np.r_[r0, r])
    assert fit.r0 == r0
    assert fit.a == pytest.approx(a, rel=0.05)
    assert fit.b == pytest.approx(b, rel=0.05)
    assert fit.c_mid == pytest.approx(c_mid, rel=0.05)
    assert 0 < fit.a_se < 0.05


def test_scalerl_fit_on_first_part_predicts_the_rest():
    c = np.logspace(4, 8, 30)
    r = compute.scalerl_curve(c, 0.2, 0.7, 1.0, 1e6)
    fit = compute.fit_compute_curve(np.r_[0, c], np.r_[0.2, r], fit_fraction=0.7)
    assert fit.fitted_points == 21 and len(fit.held_out) == 9
    assert fit.held_out_mae < 0.01
    assert "asymptote A = 0.700" in fit.sentence() and "outside" not in fit.sentence()
    late = compute.fit_compute_curve(np.r_[0, c[15:]], np.r_[0.2, r[15:]])  # after the rise
    assert "outside the fitted compute range" in late.sentence()
    low, high = compute.bootstrap_asymptote(np.r_[0, c], np.r_[0.2, r], draws=20)
    assert low <= 0.7 + 1e-3 and high >= 0.7 - 1e-3
    with pytest.raises(compute.ComputeFitError):
        compute.fit_compute_curve([0, 1, 2], [0.1, 0.2, 0.3])


# ---------------------------------------------------------------- pass@k
@pytest.mark.parametrize("n,c,k", [(10, 3, 1), (10, 3, 5), (20, 0, 4), (20, 20, 4), (16, 2, 15),
                                   (200, 7, 50)])
def test_pass_at_k_matches_closed_form(n, c, k):
    closed = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert passk.pass_at_k(n, c, k) == pytest.approx(closed, abs=1e-12)


def test_pass_at_1_is_the_mean_and_bad_counts_fail():
    assert passk.pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    assert passk.mean_pass_at_k([(4, 0), (4, 4)], 2) == 0.5
    with pytest.raises(ValueError):
        passk.pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        passk.pass_at_k(4, 1, 5)


# ---------------------------------------------------------------- judge
def test_judge_correction_recovers_theta_of_a_simulated_judge():
    q0, q1, theta = 0.8, 0.9, 0.3
    rng = np.random.default_rng(1)
    truth = rng.random(20000) < theta
    said = np.where(truth, rng.random(truth.size) < q1, rng.random(truth.size) >= q0)
    calib_truth = rng.random(4000) < 0.5
    calib_said = np.where(calib_truth, rng.random(4000) < q1, rng.random(4000) >= q0)
    counts = judge.counts_from_labels(
        list(zip(calib_truth.tolist(), calib_said.tolist(), strict=True)), said.tolist()
    )
    raw = counts.test_positive / counts.test_total  # θq1 + (1−θ)(1−q0) = 0.41
    assert raw == pytest.approx(0.41, abs=0.01)
    estimate = judge.judge_estimate(counts)
    assert estimate.theta == pytest.approx(theta, abs=0.015)
    assert estimate.low < theta < estimate.high
    assert estimate.high - estimate.low < 0.05
    boot = judge.judge_bootstrap(counts, draws=500)
    assert boot.low < theta < boot.high
    assert abs((boot.high - boot.low) - (estimate.high - estimate.low)) < 0.02


def test_judge_formula_and_refusal():
    assert judge.corrected_accuracy(0.41, 0.8, 0.9) == pytest.approx(0.3)
    with pytest.raises(judge.JudgeCalibrationError, match="no better than chance"):
        judge.corrected_accuracy(0.5, 0.5, 0.5)
    with pytest.raises(judge.JudgeCalibrationError, match="both right and wrong"):
        judge.judge_estimate(judge.counts_from_labels([(True, True)], [True]))
