"""Statistical power of a comparison on a held-out suite (docs/algorithms.md#statistical-power).

What difference can a comparison detect (α = 0.05 two-sided, power 0.8), before it is run and
after? Every function takes plain numbers; ``tests/test_power.py`` checks them against the tables
computed with scipy (Connor 1987's paired sample size, the two-proportion formula, the noncentral
t).

- **Paired binary** (base and trained policy answer the *same* problems; McNemar): with
  p₁₀ = P(base ✗, trained ✓), p₀₁ = P(base ✓, trained ✗), the gain Δ = p₁₀ − p₀₁ and the flip
  rate ψ = p₁₀ + p₀₁, the problems needed are (Connor 1987)

      n = [z_{1−α/2}·√ψ + z_{power}·√(ψ − Δ²)]² / Δ²

  ``mcnemar_mde`` inverts it for Δ at a given n (with ψ ≥ Δ: a gain needs at least that many
  flips), ``mcnemar_power_exact`` is the exact conditional test's power (the formula undersizes
  when flips are few).
- **Unpaired proportions**: n per arm = [z_a·√(2p̄q̄) + z_b·√(p₁q₁ + p₂q₂)]² / Δ².
- **Across seeds**: the standardized effect d = Δ/σ a t-test on a few seeds detects with power 0.8,
  from the exact noncentral t (the normal approximation is far too optimistic for 3 seeds).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
from scipy import optimize, stats

ALPHA = 0.05
POWER = 0.8


def z(q: float) -> float:
    return NormalDist().inv_cdf(q)


def _z_sum(alpha: float, power: float) -> tuple[float, float]:
    return z(1 - alpha / 2), z(power)


# ------------------------------------------------------------------ paired binary (McNemar)
def mcnemar_sample_size(delta: float, psi: float, alpha: float = ALPHA,
                        power: float = POWER) -> float:
    """Problems a paired comparison needs to detect a gain ``delta`` at flip rate ``psi``
    (Connor 1987; not rounded up)."""
    if not 0 < abs(delta) <= psi <= 1:
        raise ValueError(f"need 0 < |Δ| ≤ ψ ≤ 1, got Δ = {delta}, ψ = {psi}")
    za, zb = _z_sum(alpha, power)
    return (za * math.sqrt(psi) + zb * math.sqrt(psi - delta**2)) ** 2 / delta**2


def mcnemar_mde(n: float, psi: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest gain ``n`` paired problems detect at flip rate ``psi``. A gain Δ needs
    ψ ≥ Δ; where the asked ψ is smaller than the gain it could show, ψ = Δ is used (every flip
    one way: the fewest flips that make the gain), so a flip rate of 0 still gives a finite
    MDE (≈ 7.85/n)."""
    if n < 1:
        raise ValueError(f"need n ≥ 1 problems, got {n}")
    za, zb = _z_sum(alpha, power)

    def excess(delta: float) -> float:
        flips = max(psi, delta)
        return (za * math.sqrt(flips) + zb * math.sqrt(flips - delta**2)) ** 2 / delta**2 - n

    if excess(1.0) > 0:  # not even a gain of 1 (every problem flipped) is detectable
        return math.inf
    return float(optimize.brentq(excess, 1e-9, 1.0, xtol=1e-12))


def flip_rate(p_base: float, p_trained: float, rho: float) -> float:
    """ψ = p₁₀ + p₀₁ for accuracies ``p_base`` → ``p_trained`` whose per-problem correctness
    has phi correlation ``rho``: p₀₁ = p_b(1−p_t) − ρs, p₁₀ = p_t(1−p_b) − ρs,
    s = √(p_b q_b p_t q_t)."""
    s = math.sqrt(p_base * (1 - p_base) * p_trained * (1 - p_trained))
    p01 = p_base * (1 - p_trained) - rho * s
    p10 = p_trained * (1 - p_base) - rho * s
    if p01 < -1e-12 or p10 < -1e-12:
        raise ValueError(f"correlation {rho} is impossible for accuracies {p_base}, {p_trained}")
    return max(p01, 0.0) + max(p10, 0.0)


def mcnemar_power_exact(n: int, p10: float, p01: float, alpha: float = ALPHA) -> float:
    """Power of the exact (conditional binomial) McNemar test: the flips m ~ Binomial(n, ψ);
    given m, the trained-right flips b ~ Binomial(m, p₁₀/ψ), rejected where the two-sided
    binomial test of b | m at ½ has p ≤ α."""
    psi = p10 + p01
    if psi <= 0:
        return 0.0
    flips = np.arange(n + 1)
    p_flips = stats.binom.pmf(flips, n, psi)
    total = 0.0
    for m, weight in zip(flips, p_flips, strict=True):
        if m == 0 or weight < 1e-15:
            continue
        b = np.arange(m + 1)
        p_two_sided = np.minimum(1.0, 2 * np.minimum(stats.binom.cdf(b, m, 0.5),
                                                     stats.binom.sf(b - 1, m, 0.5)))
        reject = p_two_sided <= alpha
        total += weight * float(stats.binom.pmf(b[reject], m, p10 / psi).sum())
    return total


# ------------------------------------------------------------------ unpaired proportions
def two_proportion_sample_size(p1: float, p2: float, alpha: float = ALPHA,
                               power: float = POWER) -> float:
    """Problems per arm for independent samples at accuracies ``p1`` and ``p2``."""
    za, zb = _z_sum(alpha, power)
    mean = (p1 + p2) / 2
    return (za * math.sqrt(2 * mean * (1 - mean))
            + zb * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))) ** 2 / (p2 - p1) ** 2


def unpaired_mde(n: float, p: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """(z_a + z_b)·√(2p(1−p)/n): the unpaired MDE near accuracy ``p``, ``n`` problems an arm."""
    za, zb = _z_sum(alpha, power)
    return (za + zb) * math.sqrt(2 * p * (1 - p) / n)


# ------------------------------------------------------------------ across seeds
def _t_power(d: float, n: int, paired: bool, alpha: float) -> float:
    """Two-sided t-test power at standardized effect ``d``: one-sample/paired on ``n`` pairs, or
    two independent arms of ``n`` seeds each (noncentral t)."""
    df = n - 1 if paired else 2 * n - 2
    ncp = d * math.sqrt(n if paired else n / 2)
    crit = stats.t.ppf(1 - alpha / 2, df)
    wrong_side = float(stats.nct.cdf(-crit, df, ncp))  # nan far out in the tail: it is 0
    return float(stats.nct.sf(crit, df, ncp)) + (wrong_side if math.isfinite(wrong_side) else 0.0)


def detectable_d(seeds: int, paired: bool = False, alpha: float = ALPHA,
                 power: float = POWER) -> float:
    """The effect d = Δ/σ_seed that ``seeds`` seeds (per arm, or pairs) detect with ``power``."""
    if seeds < 2:
        return math.inf
    return float(optimize.brentq(lambda d: _t_power(d, seeds, paired, alpha) - power, 1e-6, 60.0))


def seeds_needed(d: float, paired: bool = False, alpha: float = ALPHA,
                 power: float = POWER) -> int:
    """The fewest seeds per arm (or pairs) that detect effect ``d`` with ``power``."""
    seeds = 2
    while _t_power(d, seeds, paired, alpha) < power:
        seeds += 1
    return seeds


# ------------------------------------------------------------------ after the fact
def detectable_from_se(se: float, df: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The effect an estimate with standard error ``se`` on ``df`` degrees of freedom detects:
    (t_{1−α/2} + t_{power})·se (the normal approximation of the noncentral t, with t quantiles
    so that few degrees of freedom widen it)."""
    if not math.isfinite(se):
        return math.inf
    if math.isinf(df):
        za, zb = _z_sum(alpha, power)
        return (za + zb) * se
    return float((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * se)
