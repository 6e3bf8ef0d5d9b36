"""AZR's rewards (curricula/azr_rewards.py) and TRR++ (selfplay/rl/trr.py) on hand-made
batches, with hand-computed numbers (docs/algorithms.md#azr)."""

from __future__ import annotations

import math

import pytest

from curricula.azr_rewards import proposer_reward, solver_reward
from curricula.rewards import learnability, learnability_code
from selfplay.rl.trr import trr_code, trr_paper, trr_samples
from selfplay.types import Episode, Turn

# the paper form adds ε = 1e-6 to σ and the code form 1e-8 to the variance: with σ ~ 1 the
# advantages move by ~1e-6 relative, far inside this tolerance and far outside any planted bug
TOL = 1e-5


def test_solver_reward_three_outcomes() -> None:
    assert solver_reward("passed") == 1.0
    assert solver_reward("wrong") == -0.5
    assert solver_reward("format") == -1.0


@pytest.mark.parametrize("form, at_zero, at_one, invalid", [
    ("paper", 0.0, 0.0, -0.5),  # eq. 4-6: no signal → 0; well-formatted but not passable → −0.5
    ("code", -0.5, -0.5, -1.0),  # released code: −0.5 for r̄ ∈ {0, 1}; an invalid program is −1
])
def test_proposer_reward_both_forms(form, at_zero, at_one, invalid) -> None:
    # 3 of 8 fresh samples solve it: r̄ = 0.375, learnability 1 − 0.375 = 0.625 in both forms
    r_bar = 3 / 8
    assert r_bar == 0.375
    assert proposer_reward("passed", r_bar, form) == 0.625
    assert proposer_reward("passed", 0.0, form) == at_zero
    assert proposer_reward("passed", 1.0, form) == at_one
    assert proposer_reward("wrong", None, form) == invalid
    assert proposer_reward("format", None, form) == -1.0
    assert (learnability if form == "paper" else learnability_code)(0.5) == 0.5


def test_a_valid_proposal_needs_its_solve_rate() -> None:
    with pytest.raises(ValueError, match="r̄"):
        proposer_reward("passed", None, "paper")


def test_trr_paper_is_mean_and_population_std_of_the_batch() -> None:
    # mean 0, population variance (1 + .25 + 1 + .25)/4 = 0.625, σ = 0.790569
    got = trr_paper([1.0, -0.5, -1.0, 0.5])
    want = [1.264911, -0.632456, -1.264911, 0.632456]
    assert all(math.isclose(g, w, rel_tol=TOL) for g, w in zip(got, want, strict=True))
    assert trr_paper([-0.5, -0.5]) == [0.0, 0.0]  # equal rewards: no signal


def test_trr_code_whitens_over_tokens_with_unbiased_variance() -> None:
    # tokens 3 and 1: μ = (3·1 + 1·(−1))/4 = 0.5; var = (3·0.25 + 1·2.25)/(4 − 1) = 1.0
    got = trr_code([1.0, -1.0], [3, 1])
    assert math.isclose(got[0], 0.5, rel_tol=TOL) and math.isclose(got[1], -1.5, rel_tol=TOL)
    # the paper form of the same batch ignores the lengths: ±1
    assert [round(a, 5) for a in trr_paper([1.0, -1.0])] == [1.0, -1.0]
    assert trr_code([1.0], [1]) == [0.0]  # one token: no unbiased variance, no signal


def turn(role: str, tokens: int) -> Turn:
    return Turn(role, [1], [2] * tokens, [0.0] * tokens, [1] * tokens, "x")


def episode(mode: str, role: str, reward: float, tokens: int = 1, context=()) -> Episode:
    return Episode("azr", mode, [turn(role, tokens), *context], {role: reward}, f"{mode}-{role}")


# six (mode, role) batches; each alone gives the advantages listed; mixing any two would not
SIX = {
    ("deduction", "propose_deduction"): ([0.5, 0.0], [1, 3]),
    ("deduction", "solve_deduction"): ([1.0, -1.0], [3, 1]),
    ("abduction", "propose_abduction"): ([-1.0, -0.5, -0.5], [2, 2, 2]),
    ("abduction", "solve_abduction"): ([1.0, -0.5, -0.5], [1, 1, 4]),
    ("induction", "propose_induction"): ([0.75, -1.0], [2, 2]),
    ("induction", "solve_induction"): ([-0.5, -0.5], [5, 1]),
}
PAPER = {  # (r − μ)/σ per batch
    ("deduction", "propose_deduction"): [1.0, -1.0],
    ("deduction", "solve_deduction"): [1.0, -1.0],
    # μ = −2/3, σ = √(((1/3)² + 2·(1/6)²)/3) = 0.235702
    ("abduction", "propose_abduction"): [-1.414214, 0.707107, 0.707107],
    # μ = 0, σ = √((1 + .25 + .25)/3) = 0.707107
    ("abduction", "solve_abduction"): [1.414214, -0.707107, -0.707107],
    ("induction", "propose_induction"): [1.0, -1.0],
    ("induction", "solve_induction"): [0.0, 0.0],
}
CODE = {  # token-weighted μ, unbiased token variance
    # μ = 0.5/4 = 0.125; var = (0.140625 + 3·0.015625)/3 = 0.0625; σ = 0.25
    ("deduction", "propose_deduction"): [1.5, -0.5],
    ("deduction", "solve_deduction"): [0.5, -1.5],
    # μ = −2/3; var = 2·(1/9 + 2·1/36)/5 = 0.066667; σ = 0.258199
    ("abduction", "propose_abduction"): [-1.290994, 0.645497, 0.645497],
    # μ = (1 − .5 − 2)/6 = −0.25; var = (1.5625 + 0.0625 + 4·0.0625)/5 = 0.375; σ = 0.612372
    ("abduction", "solve_abduction"): [2.041241, -0.408248, -0.408248],
    # μ = −0.125; var = 2·(0.765625 + 0.765625)/3 = 1.020833; σ = 1.010363
    ("induction", "propose_induction"): [0.866025, -0.866025],
    ("induction", "solve_induction"): [0.0, 0.0],
}


@pytest.mark.parametrize("form, expected", [("paper", PAPER), ("code", CODE)])
def test_trr_samples_six_baselines(form, expected) -> None:
    episodes = [episode(mode, role, r, n)
                for (mode, role), (rewards, tokens) in SIX.items()
                for r, n in zip(rewards, tokens, strict=True)]
    samples = trr_samples(episodes, form)
    assert len(samples) == len(episodes)
    got: dict[tuple[str, str], list[float]] = {}
    for sample in samples:
        got.setdefault((sample.info["env"], sample.turn.role), []).append(sample.advantage)
    assert set(got) == set(expected)  # six baselines
    for key, want in expected.items():
        assert all(math.isclose(g, w, rel_tol=TOL, abs_tol=TOL)
                   for g, w in zip(got[key], want, strict=True)), (key, got[key], want)


def test_context_turns_of_a_proposer_episode_are_not_trained() -> None:
    # the fresh solver samples that measured r̄ ride along in the proposer's episode, unrewarded
    fresh = turn("solve_deduction", 4)
    episodes = [episode("deduction", "propose_deduction", 0.5, context=[fresh]),
                episode("deduction", "propose_deduction", 0.0)]
    samples = trr_samples(episodes, "paper")
    assert [s.turn.role for s in samples] == ["propose_deduction", "propose_deduction"]
