"""Statistics across seeds (selfplay.stats.seeds) on synthetic per-seed data: a planted shift is
found (its interval excludes 0), identical arms' intervals cover 0 at about the nominal rate,
pairing by seed removes what the seeds share, and the Student-t band has its textbook value."""

from __future__ import annotations

import numpy as np
import pytest

from selfplay.stats.seeds import bootstrap_difference, t_interval


def test_t_interval_is_the_student_t_interval_of_the_mean():
    mean, low, high = t_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 * 1.0 / np.sqrt(3)  # t(0.975, 2) · s / √n, s = 1
    assert mean == 2.0 and low == pytest.approx(2 - half) and high == pytest.approx(2 + half)
    assert np.isnan(t_interval([5.0])[1])  # one seed: no interval
    assert t_interval([0.5, 0.5, 0.5]) == (0.5, 0.5, 0.5)


def test_a_planted_difference_is_found_and_identical_arms_cover_zero():
    rng = np.random.default_rng(7)
    seeds = range(8)
    base = {s: float(v) for s, v in zip(seeds, rng.normal(0.3, 0.05, 8), strict=True)}
    shifted = {s: v + 0.2 + float(rng.normal(0, 0.02)) for s, v in base.items()}
    found = bootstrap_difference(base, shifted)
    assert found.paired and found.n_arm == 8
    assert 0.15 < found.difference < 0.25 and found.low > 0 and not found.covers_zero
    # the other way round: negative, the interval below 0
    assert bootstrap_difference(shifted, base).high < 0
    # identical arms (the same value for every seed, as a grid value that changes nothing)
    same = bootstrap_difference(base, dict(base))
    assert same.covers_zero and same.difference == 0.0


def test_identical_arms_cover_zero_at_about_the_nominal_rate_and_shifts_are_found():
    """400 synthetic sweeps of 8 seeds. Arms from one distribution: the 95% interval covers 0
    in about 87-91% of them (a percentile bootstrap of 8 values is a little narrow); an arm
    shifted by 1 within-seed sd is found (interval excludes 0) in nearly all."""
    rng = np.random.default_rng(7)
    unpaired = paired = found = 0
    trials = 400
    for trial in range(trials):
        a = dict(enumerate(rng.normal(0.3, 0.05, 8)))
        b = {s + 100: v for s, v in enumerate(rng.normal(0.3, 0.05, 8))}  # no shared seed
        unpaired += bootstrap_difference(a, b, resamples=2000, seed=trial).covers_zero
        same = {s: v + rng.normal(0, 0.02) for s, v in a.items()}
        paired += bootstrap_difference(a, same, resamples=2000, seed=trial).covers_zero
        shift = {s: v + 0.05 + rng.normal(0, 0.02) for s, v in a.items()}
        found += not bootstrap_difference(a, shift, resamples=2000, seed=trial).covers_zero
    assert unpaired / trials > 0.85 and paired / trials > 0.83
    assert found / trials > 0.95


def test_pairing_by_seed_removes_what_seeds_share():
    """Seeds differ a lot (±0.3) but the arm adds 0.05 to each: paired, the shift is clear;
    resampled without pairing it drowns in the seeds' spread."""
    seed_effect = np.linspace(-0.3, 0.3, 6)
    reference = {s: 0.5 + float(e) for s, e in enumerate(seed_effect)}
    arm = {s: v + 0.05 + 0.005 * (-1) ** s for s, v in reference.items()}
    paired = bootstrap_difference(reference, arm)
    assert paired.paired and paired.low > 0.04 and paired.high < 0.06
    unpaired = bootstrap_difference(reference, {s + 10: v for s, v in arm.items()})
    assert not unpaired.paired and unpaired.covers_zero


def test_the_bootstrap_is_seeded_and_says_when_it_cannot_answer():
    a, b = {0: 1.0, 1: 2.0, 2: 4.0}, {0: 1.5, 1: 2.0, 2: 5.0}
    assert bootstrap_difference(a, b) == bootstrap_difference(a, b)
    single = bootstrap_difference({0: 1.0}, {0: 2.0})
    assert single.difference == 1.0 and not single.defined and not single.covers_zero


def test_three_seeds_all_positive_are_not_called_a_difference():
    """dapo − uniform on rlvr-curriculum-cpu (docs/results.md): held-out +1, +5, +1 items of 24
    over 3 seeds. The percentile bootstrap of 3 paired differences cannot reach past them, so it
    excludes 0; the paired t-interval (t with 2 degrees of freedom) covers it."""
    uniform = {0: 8 / 24, 1: 4 / 24, 2: 9 / 24}
    dapo = {0: 9 / 24, 1: 9 / 24, 2: 10 / 24}
    d = bootstrap_difference(uniform, dapo)
    assert d.paired and not d.covers_zero and d.low > 0  # the bootstrap alone would say "yes"
    assert d.t_covers_zero and d.t_low < 0 < d.t_high and not d.excludes_zero
    assert abs(d.t_high + d.t_low - 2 * d.difference) < 1e-9  # centred on the mean difference
