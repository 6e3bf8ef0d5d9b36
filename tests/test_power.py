"""``selfplay.stats.power`` against the tables of docs/algorithms.md#statistical-power (computed
with scipy from Connor 1987's paired sample size, the two-proportion formula and the noncentral
t). Sample sizes are rounded up as a plan must; MDEs are compared in points to the table's one
decimal (a tolerance of 0.05 points: the table's rounding)."""

from __future__ import annotations

import math

import pytest

from selfplay.stats.power import (
    detectable_d,
    detectable_from_se,
    flip_rate,
    mcnemar_mde,
    mcnemar_power_exact,
    mcnemar_sample_size,
    seeds_needed,
    two_proportion_sample_size,
    unpaired_mde,
)


@pytest.mark.parametrize(("psi", "n"), [(0.05, 155), (0.10, 312), (0.15, 469), (0.20, 626),
                                        (0.40, 1254)])
def test_paired_sample_size_for_five_points(psi, n):
    assert math.ceil(mcnemar_sample_size(0.05, psi)) == n


@pytest.mark.parametrize(("rho", "n"), [(0, 1254), (0.3, 880), (0.5, 631), (0.6, 506), (0.7, 382),
                                        (0.8, 257)])
def test_paired_sample_size_from_the_phi_correlation_at_25_to_30(rho, n):
    assert math.ceil(mcnemar_sample_size(0.05, flip_rate(0.25, 0.30, rho))) == n


def test_independent_errors_are_a_flip_rate_of_040():
    # ρ = 0 at 25% → 30%: p01 = .25 × .7, p10 = .3 × .75
    assert flip_rate(0.25, 0.30, 0.0) == pytest.approx(0.175 + 0.225, abs=1e-12)
    with pytest.raises(ValueError, match="impossible"):
        flip_rate(0.1, 0.9, 1.0)  # perfectly correlated at different accuracies


@pytest.mark.parametrize(("n", "psi", "points"), [(500, 0.1, 4.0), (500, 0.2, 5.6), (500, 0.4, 7.9),
                                                  (1000, 0.1, 2.8), (1000, 0.2, 4.0),
                                                  (1000, 0.4, 5.6)])
def test_paired_mde(n, psi, points):
    assert 100 * mcnemar_mde(n, psi) == pytest.approx(points, abs=0.05)


def test_the_mde_inverts_the_sample_size():
    for psi in (0.05, 0.2, 0.4):
        assert mcnemar_mde(mcnemar_sample_size(0.05, psi), psi) == pytest.approx(0.05, abs=1e-9)


def test_a_flip_rate_of_zero_still_has_a_finite_mde():
    """A gain needs that many flips: at ψ = 0 the MDE is that of every flip going one way,
    (z_a + z_b)²/n to first order (7.85/n)."""
    assert mcnemar_mde(500, 0.0) == pytest.approx(7.85 / 500, rel=0.01)
    assert mcnemar_mde(500, 0.0) < mcnemar_mde(500, 0.05)
    assert mcnemar_mde(1, 0.2) == math.inf  # one problem cannot detect anything


def test_the_exact_mcnemar_test_needs_more_than_the_formula():
    """p10 .075, p01 .025: the formula's n = 312 has exact power 0.764; about 350 reach 0.8."""
    assert mcnemar_power_exact(312, 0.075, 0.025) == pytest.approx(0.764, abs=0.001)
    first = next(n for n in range(312, 400) if mcnemar_power_exact(n, 0.075, 0.025) >= 0.8)
    assert 330 <= first <= 355


def test_unpaired_sizes_and_mdes():
    assert math.ceil(two_proportion_sample_size(0.25, 0.30)) == 1251
    for n, points in ((500, 7.7), (1000, 5.4), (2000, 3.8), (5000, 2.4)):
        assert 100 * unpaired_mde(n, 0.25) == pytest.approx(points, abs=0.05)


@pytest.mark.parametrize(("seeds", "d"), [(2, 5.65), (3, 3.07), (4, 2.38), (5, 2.02), (8, 1.51),
                                          (10, 1.32), (20, 0.91)])
def test_detectable_effect_across_seeds(seeds, d):
    assert detectable_d(seeds) == pytest.approx(d, abs=0.005)


@pytest.mark.parametrize(("d", "seeds"), [(0.5, 64), (0.8, 26), (1.0, 17), (1.5, 9), (2.0, 6),
                                          (3.0, 4)])
def test_seeds_needed(d, seeds):
    assert seeds_needed(d) == seeds


@pytest.mark.parametrize(("pairs", "d"), [(3, 3.26), (5, 1.68), (10, 1.00)])
def test_paired_seeds(pairs, d):
    assert detectable_d(pairs, paired=True) == pytest.approx(d, abs=0.005)


def test_detectable_from_a_standard_error():
    assert detectable_from_se(0.01, math.inf) == pytest.approx(0.0280159, abs=1e-6)
    # 2 degrees of freedom: t .975 = 4.303, t .80 = 1.061
    assert detectable_from_se(0.01, 2) == pytest.approx(0.05364, abs=1e-4)
