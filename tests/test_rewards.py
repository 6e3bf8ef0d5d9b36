"""Proposer rewards (curricula/rewards.py) against hand-computed values, both forms."""

from __future__ import annotations

import math
import random
import warnings

import pytest

from curricula.rewards import (
    PROPOSER_REWARDS,
    bleu_clusters,
    bleu_distances,
    bleu_matrix,
    curriculum_reward_code,
    curriculum_reward_paper,
    learnability,
    repetition_penalties,
    resolve_reward,
    spice_variance,
    threshold_reward,
    tool_bonus,
    uncertainty,
    uncertainty_code,
)
from selfplay.core.errors import UserError


@pytest.mark.parametrize(
    ("p_hat", "paper", "code"),
    [(0.5, 1.0, 0.5), (0.25, 0.5, 0.25), (0.8, 0.4, 0.2), (0.0, 0.0, 0.0), (1.0, 0.0, 0.0)],
)
def test_uncertainty_paper_and_code_forms(p_hat, paper, code):
    assert uncertainty(p_hat) == pytest.approx(paper)
    assert uncertainty_code(p_hat) == pytest.approx(code)


def test_learnability_is_zero_at_the_ends():
    assert learnability(0.0) == 0.0
    assert learnability(1.0) == 0.0
    assert learnability(0.25) == pytest.approx(0.75)
    assert learnability(0.875) == pytest.approx(0.125)


def test_spice_variance_matches_the_k8_table():
    table = [0.044, 0.372, 0.823, 0.988, 1.0]
    for successes, expected in enumerate(table):
        assert spice_variance(successes / 8) == pytest.approx(expected, abs=5e-4)
        assert spice_variance(1 - successes / 8) == pytest.approx(expected, abs=5e-4)


def test_threshold_reward_band_edges_inclusive():
    assert threshold_reward(0.3) == 1.0
    assert threshold_reward(0.7) == 1.0
    assert threshold_reward(0.29) == 0.0
    assert threshold_reward(0.71) == 0.0
    assert threshold_reward(0.5, lo=0.6, hi=0.9) == 0.0


def test_tool_bonus_is_capped():
    assert tool_bonus(0) == 0.0
    assert tool_bonus(2) == pytest.approx(0.10)
    assert tool_bonus(2.5) == pytest.approx(0.125)
    assert tool_bonus(7) == pytest.approx(0.20)
    assert tool_bonus(3, gamma=0.1, cap=2) == pytest.approx(0.2)


def test_composite_paper_form():
    # 1·max(0, 1·R_unc(½)=1 + 1·0.05·2 − 0.25) = 0.85
    assert curriculum_reward_paper(True, 0.5, 2, 0.25) == pytest.approx(0.85)
    # the floor: 0 + 0 − 0.5 < 0 → 0
    assert curriculum_reward_paper(True, 0.0, 0, 0.5) == 0.0
    # the format gate
    assert curriculum_reward_paper(False, 0.5, 4, 0.0) == 0.0
    # weights: 2·0.5 + 0.5·0.05·4 − 0.1 = 1.0
    assert curriculum_reward_paper(
        True, 0.25, 4, 0.1, lambda_unc=2.0, lambda_tool=0.5
    ) == pytest.approx(1.0)
    # an ablation's reward function in place of R_unc: SPICE variance at 2/8
    assert curriculum_reward_paper(True, 0.25, 0, 0.0, reward=spice_variance) == pytest.approx(
        0.823, abs=1e-3
    )


def test_composite_code_form():
    text = "x ```output\n3\n``` and ```output\n4\n```"
    assert curriculum_reward_code(False, 0.5, text, 0.0) == -1.0
    # min(.75, .25) − 0.5 + 0.05·2 = −0.15
    assert curriculum_reward_code(True, 0.75, text, 0.5) == pytest.approx(-0.15)
    # the agreement gate forces p̂ to 0: 0 − 0.5 + 0.1
    assert curriculum_reward_code(True, 0.75, text, 0.5, agrees=False) == pytest.approx(-0.4)
    assert curriculum_reward_code(True, 0.75, text, 0.5, agrees=True) == pytest.approx(-0.15)
    # the cap: six blocks count as four
    assert curriculum_reward_code(True, 0.5, "```output" * 6, 0.0) == pytest.approx(0.7)


def test_resolve_reward_names_and_module_paths():
    assert resolve_reward("variance") is spice_variance
    assert set(PROPOSER_REWARDS) == {  # every loop's paper and code forms, by name
        "uncertainty",
        "uncertainty_code",
        "learnability",
        "learnability_code",
        "variance",
        "threshold",
        "gaussian",
        "inverse_accuracy",
        "intermediate_difficulty",
        "informative",
        "agreement_band",
    }
    assert resolve_reward("math:sqrt")(0.25) == 0.5
    # SQLM's code form reads N: 1 < m_maj < N, m_maj = p̂·N
    assert [resolve_reward("agreement_band", 4)(m / 4) for m in range(5)] == [0, 0, 1, 1, 0]
    with pytest.raises(UserError, match="needs the solver's sample count"):
        resolve_reward("agreement_band")
    for bad in ("nope", "no_such_module_xyz:f", "math:no_such_function"):
        with pytest.raises(UserError) as error:
            resolve_reward(bad)
        assert "\n" not in str(error.value)


def _nltk_bleu(hyp: str, ref: str) -> float:
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sentence_bleu(
            [ref.split()], hyp.split(), smoothing_function=SmoothingFunction().method1
        )


def test_bleu_matrix_equals_nltk_sentence_bleu_on_every_pair():
    rng = random.Random(0)
    words = ["the", "a", "of", "x", "y", "sum", "find", "what", "is", "2", "3", "+", "=", "?"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 12))) for _ in range(30)]
    texts += ["What is 2 + 3 ?", "What is 2 + 3 ?", "a a a a b", "a a b b b", ""]
    matrix = bleu_matrix(texts)
    for i, hyp in enumerate(texts):
        for j, ref in enumerate(texts):
            assert matrix[i, j] == pytest.approx(_nltk_bleu(hyp, ref), abs=1e-12), (hyp, ref)


BATCH = [
    "What is the sum of 12 and 35 ? Give the answer as an integer .",
    "A train travels 60 km in 1.5 hours . What is its average speed in km per hour ?",
    "What is the sum of 12 and 36 ? Give the answer as an integer .",
    "How many prime numbers are less than 30 ?",
    "A train travels 80 km in 2 hours . What is its average speed in km per hour ?",
    "What is the sum of 14 and 35 ? Give the answer as an integer .",
    "Find the derivative of x^3 + 2x with respect to x .",
]


def test_clustering_groups_known_near_duplicates():
    labels = bleu_clusters(BATCH)
    sums, trains = {labels[0], labels[2], labels[5]}, {labels[1], labels[4]}
    assert len(sums) == 1 and len(trains) == 1
    assert len({labels[0], labels[1], labels[3], labels[6]}) == 4
    penalties = repetition_penalties(BATCH, weight=0.5)
    assert penalties == pytest.approx([0.5 * s / 7 for s in (3, 2, 3, 1, 2, 3, 1)])


def test_clusters_equal_the_published_pairwise_nltk_sklearn_pipeline():
    import numpy as np
    from sklearn.cluster import AgglomerativeClustering

    n = len(BATCH)
    dist = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            dist[i, j] = dist[j, i] = 1 - _nltk_bleu(BATCH[i], BATCH[j])
    reference = AgglomerativeClustering(
        n_clusters=None, metric="precomputed", linkage="average", distance_threshold=0.5
    ).fit_predict(dist)
    ours = bleu_clusters(BATCH)
    # same partition (labels may be numbered differently)
    assert len({(a, b) for a, b in zip(ours, reference, strict=True)}) == len(set(ours))
    assert len(set(ours)) == len(set(reference.tolist()))


def test_tiny_batches():
    assert bleu_clusters([]) == []
    assert bleu_clusters(["only one"]) == [0]
    assert repetition_penalties(["only one"]) == [1.0]
    assert math.isclose(sum(repetition_penalties(["a b c d", "a b c d"])), 2.0)


# Texts whose 1 − BLEU distances put a near-pair just under the 0.5 threshold (0.397) and a
# third far from both (≈ 0.99): the rows of the distance matrix are > 0.5 apart in Euclidean
# distance, so clustering the rows instead of the precomputed distances splits the pair.
SUM = "What is the sum of 12 and 35 ? Give the answer as an integer ."
SUM_REWORDED = "What is the sum of 12 and 35 ? Answer with an integer ."
PRIMES = "How many prime numbers are less than 30 ?"


def test_clustering_merges_below_the_threshold_on_the_distances_themselves():
    labels = bleu_clusters([SUM, SUM_REWORDED, PRIMES])
    assert labels[0] == labels[1] != labels[2]
    # two texts are clustered, not lumped together as a batch too small to cluster
    first, second = bleu_clusters([SUM, PRIMES])
    assert first != second
    assert len(set(bleu_clusters([SUM, SUM_REWORDED]))) == 1
    # the threshold reaches the clustering: at 0.3 the reworded pair is two clusters
    assert repetition_penalties([SUM, SUM_REWORDED, PRIMES]) == pytest.approx([2 / 3, 2 / 3, 1 / 3])
    assert repetition_penalties([SUM, SUM_REWORDED, PRIMES], threshold=0.3) == pytest.approx(
        [1 / 3] * 3
    )


def test_bleu_distances_are_symmetric_with_a_zero_diagonal():
    texts = [SUM, SUM_REWORDED, PRIMES, "a b", "x", ""]
    dist = bleu_distances(texts)
    assert (dist == dist.T).all()
    assert (dist.diagonal() == 0).all()
    assert dist[0, 1] == pytest.approx(1 - _nltk_bleu(SUM, SUM_REWORDED), abs=1e-12)
    assert ((dist >= 0) & (dist <= 1)).all()


def test_composite_caps_and_gate_reach_the_reward():
    # paper: default cap 4 → six executor tool calls give 0.05·4; a passed cap is used
    assert curriculum_reward_paper(True, 0.0, 6, 0.0) == pytest.approx(0.20)
    assert curriculum_reward_paper(True, 0.0, 6, 0.0, cap=2) == pytest.approx(0.10)
    # code: a passed cap is used; the gate sets p̂ to 0 even for a reward not symmetric in p̂
    assert curriculum_reward_code(True, 0.5, "```output" * 6, 0.0, cap=2) == pytest.approx(0.6)
    assert curriculum_reward_code(True, 0.9, "", 0.0, agrees=False, reward=lambda p: p) == 0.0
    assert curriculum_reward_code(True, 0.9, "", 0.0, reward=lambda p: p) == pytest.approx(0.9)


def test_resolve_reward_errors_name_the_reward_and_the_choices():
    with pytest.raises(UserError,
                       match=r"unknown proposer reward 'nope' \(known: agreement_band, "):
        resolve_reward("nope")
    with pytest.raises(UserError, match=r"^proposer reward 'no_such_module_xyz:f': cannot import"):
        resolve_reward("no_such_module_xyz:f")
    with pytest.raises(UserError, match=r"^proposer reward 'math:pi' is not a function$"):
        resolve_reward("math:pi")


def test_resolve_reward_by_entry_point(tmp_path, monkeypatch):
    info = tmp_path / "my_rewards-0.1.dist-info"
    info.mkdir()
    info.joinpath("METADATA").write_text("Metadata-Version: 2.1\nName: my-rewards\nVersion: 0.1\n")
    info.joinpath("entry_points.txt").write_text("[selfplay.rewards]\nroot = math:sqrt\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert resolve_reward("root")(0.25) == 0.5
