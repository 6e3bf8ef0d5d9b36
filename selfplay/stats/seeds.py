"""Statistics across seeds, for sweeps (``selfplay analyze SWEEP``, docs/sweeps.md).

- ``t_interval``: the mean of one arm's runs at one step with a Student-t 95% interval,
  mean ± t(0.975, n−1)·s/√n (s: the sample standard deviation). It says where the arm's
  *expected* value lies, assuming the seeds' values are roughly normal; it is not the spread of
  single runs.
- ``bootstrap_difference``: the difference of two arms' means (arm − reference) with a
  percentile bootstrap interval over seeds (seeded, 10,000 resamples by default). Paired when
  the two arms share at least two seeds: the per-seed differences over the shared seeds are
  resampled (seed k of both arms saw the same data order and initialisation, so pairing removes
  what the seeds share). Otherwise each arm's seeds are resampled on their own.

Every function takes plain numbers: the tests plant differences in synthetic data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

LEVEL = 0.95
RESAMPLES = 10_000


def _finite(values) -> np.ndarray:
    array = np.asarray([v for v in values if v is not None], dtype=float)
    return array[np.isfinite(array)]


def t_interval(values, level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, low, high) of ``values``; low = high = nan for fewer than two values, and the
    mean itself when they are all equal."""
    array = _finite(values)
    if array.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(array.mean())
    if array.size < 2:
        return mean, math.nan, math.nan
    half = float(
        stats.t.ppf(0.5 + level / 2, array.size - 1) * array.std(ddof=1) / math.sqrt(array.size)
    )
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class Difference:
    """``mean(arm) − mean(reference)`` and its bootstrap interval."""

    difference: float
    low: float
    high: float
    paired: bool
    n_reference: int  # seeds used on each side (the shared seeds when paired)
    n_arm: int
    # paired only: the t-interval of the per-seed differences. With 3 seeds the percentile
    # bootstrap cannot reach past the observed differences (all positive: it excludes 0); the t
    # interval accounts for how few they are. nan when unpaired or fewer than two pairs.
    t_low: float = math.nan
    t_high: float = math.nan

    @property
    def defined(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    @property
    def covers_zero(self) -> bool:
        return _covers_zero(self.low, self.high)

    @property
    def t_covers_zero(self) -> bool:
        return _covers_zero(self.t_low, self.t_high)

    @property
    def excludes_zero(self) -> bool:
        """A difference the seeds support: the bootstrap interval excludes 0, and so does the
        paired t-interval where there is one."""
        return self.defined and not (self.covers_zero or self.t_covers_zero)


def _covers_zero(low: float, high: float) -> bool:
    return math.isfinite(low) and math.isfinite(high) and low <= 0.0 <= high


def _percentiles(draws: np.ndarray, level: float) -> tuple[float, float]:
    low, high = np.percentile(draws, [50 * (1 - level), 50 * (1 + level)])
    return float(low), float(high)


def bootstrap_difference(
    reference: dict[int, float],
    arm: dict[int, float],
    resamples: int = RESAMPLES,
    seed: int = 0,
    level: float = LEVEL,
) -> Difference:
    """``arm − reference`` over seeds (``{seed: value}``), with a percentile bootstrap interval.

    Paired on the seeds both hold when they share at least two; else unpaired (each side
    resampled with replacement on its own). With fewer than two values on a side the interval
    is undefined (nan) and only the difference is given."""
    reference = {s: float(v) for s, v in reference.items() if v is not None and math.isfinite(v)}
    arm = {s: float(v) for s, v in arm.items() if v is not None and math.isfinite(v)}
    rng = np.random.default_rng(seed)
    shared = sorted(set(reference) & set(arm))
    if len(shared) >= 2:
        deltas = np.array([arm[s] - reference[s] for s in shared])
        index = rng.integers(0, deltas.size, size=(resamples, deltas.size))
        low, high = _percentiles(deltas[index].mean(axis=1), level)
        _, t_low, t_high = t_interval(deltas, level)
        return Difference(
            float(deltas.mean()), low, high, True, len(shared), len(shared), t_low, t_high
        )
    a = np.array(list(reference.values()))
    b = np.array(list(arm.values()))
    if a.size == 0 or b.size == 0:
        return Difference(math.nan, math.nan, math.nan, False, a.size, b.size)
    difference = float(b.mean() - a.mean())
    if a.size < 2 or b.size < 2:
        return Difference(difference, math.nan, math.nan, False, a.size, b.size)
    draws_a = a[rng.integers(0, a.size, size=(resamples, a.size))].mean(axis=1)
    draws_b = b[rng.integers(0, b.size, size=(resamples, b.size))].mean(axis=1)
    low, high = _percentiles(draws_b - draws_a, level)
    return Difference(difference, low, high, False, a.size, b.size)
