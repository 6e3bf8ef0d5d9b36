"""Paired gains on a held-out suite, per problem and across seeds (docs/algorithms.md#paired-gains).

A comparison's data for one loop is a matrix: seeds × problems, each cell the trained policy's
score on the problem minus the base model's (greedy correctness 0/1, the share of sampled
answers right, the reference answer's mean log-probability per token). The gain is the mean of
that matrix, and its interval has to carry two sources of noise:

- **problems**: the suite is a sample of problems; a gain on these n is not the gain on the
  family. Pairing (the same problems before and after) removes what a problem's difficulty
  adds to both sides: only the changes (flips) are left.
- **seeds**: each seed's trained policy is one draw of what the loop does.

Every seed answers the same problems, so the two are *crossed*: a two-way random-effects model
(seed effect, problem effect, residual) of the differences. With the ANOVA mean squares MS_s
(seeds, S−1 df), MS_p (problems, n−1 df) and MS_e (residual, (S−1)(n−1) df), the variance of
the mean is

    Var(ḡ) = σ²_s/S + σ²_p/n + σ²_e/(S·n) = (MS_s + MS_p − MS_e) / (S·n)

(Cornfield & Tukey 1956; the generalizability-theory form). Its degrees of freedom come from
Satterthwaite (1946): where the seeds disagree MS_s dominates and df falls towards S − 1 (with
3 seeds the interval's t is 4.30, as a t-test on per-seed gains would use); where they agree the
problems dominate and df is near n − 1. So the few-seeds case is handled by the data rather
than by a choice of formula. One seed: the problems' paired t-interval alone (it says nothing
about other seeds, and says so). No answer changed at all: the interval is the exact 95% bound
on a flip rate of 0 in S·n pairs (Clopper–Pearson), not a point.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from selfplay.stats.power import ALPHA, POWER, detectable_from_se, mcnemar_mde

LEVEL = 0.95


@dataclass(frozen=True)
class PairedGain:
    """The mean of ``after − before`` over seeds × problems, with its interval and MDE."""

    gain: float
    low: float
    high: float
    se: float
    df: float  # Satterthwaite degrees of freedom of the interval (inf: normal)
    mde: float  # the effect this design detects (α 0.05 two-sided, power 0.8)
    seeds: int
    problems: int
    flip_rate: float | None  # binary scores: share of (seed, problem) pairs that changed
    method: str  # which interval: "seeds × problems", "problems (one seed)", "no flips"
    p_value: float | None = None  # exact McNemar (one seed, binary) or the t-test of the gain

    @property
    def excludes_zero(self) -> bool:
        return math.isfinite(self.low) and (self.low > 0 or self.high < 0)

    def as_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in asdict(self).items()}


def _binary(values: np.ndarray) -> bool:
    return bool(np.all((values == 0) | (values == 1)))


def crossed_variance(d: np.ndarray) -> tuple[float, float, dict[str, float]]:
    """(variance of the mean, Satterthwaite df, the mean squares) of the seeds × problems
    differences ``d`` (S ≥ 2 rows, n ≥ 2 columns)."""
    seeds, problems = d.shape
    grand = d.mean()
    seed_means, problem_means = d.mean(axis=1), d.mean(axis=0)
    ms_s = problems * float(((seed_means - grand) ** 2).sum()) / (seeds - 1)
    ms_p = seeds * float(((problem_means - grand) ** 2).sum()) / (problems - 1)
    residual = d - seed_means[:, None] - problem_means[None, :] + grand
    df_e = (seeds - 1) * (problems - 1)
    ms_e = float((residual**2).sum()) / df_e
    squares = {"seeds": ms_s, "problems": ms_p, "residual": ms_e}
    # (coefficient, mean square, its df): the estimate is a linear combination of mean squares;
    # a component estimated below 0 is taken as 0 (its mean square then drops out)
    terms = [(1.0, ms_e, df_e)]
    if ms_s > ms_e:
        terms.append((1.0, ms_s, seeds - 1))
        terms[0] = (terms[0][0] - 1.0, ms_e, df_e)
    if ms_p > ms_e:
        terms.append((1.0, ms_p, problems - 1))
        terms[0] = (terms[0][0] - 1.0, ms_e, df_e)
    total = sum(c * ms for c, ms, _ in terms)
    if total <= 0:
        return 0.0, math.inf, squares
    df = total**2 / sum((c * ms) ** 2 / f for c, ms, f in terms if c != 0)
    return total / (seeds * problems), df, squares


def paired_gain(before, after, level: float = LEVEL, alpha: float = ALPHA,
                power: float = POWER) -> PairedGain:
    """The gain ``after − before``: arrays of shape (seeds, problems), or (problems,) for one
    seed. ``before`` may be one row shared by every seed (the base model's greedy answers do
    not depend on the seed)."""
    after = np.atleast_2d(np.asarray(after, dtype=float))
    before = np.broadcast_to(np.atleast_2d(np.asarray(before, dtype=float)), after.shape)
    d = after - before
    seeds, problems = d.shape
    if problems < 2:
        raise ValueError("a paired gain needs at least 2 problems")
    binary = _binary(before) and _binary(after)
    flips = float(np.mean(d != 0)) if binary else None
    gain = float(d.mean())
    quantile = (1 + level) / 2
    if binary and not np.any(d):
        # nothing changed: the flip rate's exact upper bound bounds the gain either way
        bound = 1 - (1 - quantile) ** (1 / (seeds * problems))
        return PairedGain(0.0, -bound, bound, 0.0, math.inf,
                          mcnemar_mde(seeds * problems, 0.0, alpha, power), seeds, problems,
                          0.0, "no flips", 1.0)
    if seeds == 1:
        se = float(d[0].std(ddof=1)) / math.sqrt(problems)
        df, method = float(problems - 1), "problems (one seed)"
    else:
        variance, df, _ = crossed_variance(d)
        se, method = math.sqrt(variance), "seeds × problems"
    half = float(stats.t.ppf(quantile, df)) * se if se > 0 else 0.0
    mde = detectable_from_se(se, df, alpha, power)
    if binary:  # at least what S·n pairs show when every flip goes one way
        mde = max(mde, mcnemar_mde(seeds * problems, 0.0, alpha, power))
    return PairedGain(gain, gain - half, gain + half, se, df, mde, seeds, problems, flips,
                      method, _p_value(d, binary, se, df, gain))


def _p_value(d: np.ndarray, binary: bool, se: float, df: float, gain: float) -> float | None:
    if binary and d.shape[0] == 1:  # exact McNemar: the up-flips among all flips, at ½
        up, down = int((d > 0).sum()), int((d < 0).sum())
        return float(stats.binomtest(up, up + down, 0.5).pvalue) if up + down else 1.0
    if se <= 0:
        return None
    return float(2 * stats.t.sf(abs(gain) / se, df))


def mcnemar_counts(before, after) -> tuple[int, int]:
    """(b, c): pairs wrong before and right after, right before and wrong after."""
    before, after = np.asarray(before), np.asarray(after)
    return int(((before == 0) & (after == 1)).sum()), int(((before == 1) & (after == 0)).sum())


# ------------------------------------------------------------------ a rerun on other seeds
RERUN_SEEDS = 3  # the rerun a published gain is checked by: three other seeds (issue 41)


@dataclass(frozen=True)
class SeedSpread:
    """How much one seed's gain on the suite varies from seed to seed: the variance of a seed's
    mean gain (σ²_seed + σ²_residual/n in the crossed model above, which ``MS_s/n`` estimates),
    with its degrees of freedom and where it comes from."""

    variance: float
    df: float
    source: str

    @property
    def sd(self) -> float:
        return math.sqrt(self.variance)


def seed_spread(seed_gains, source: str = "its own seeds") -> SeedSpread | None:
    """The spread of per-seed gains (S − 1 df); None below two seeds."""
    values = np.asarray([g for g in seed_gains if g is not None and math.isfinite(g)], float)
    if len(values) < 2:
        return None
    return SeedSpread(float(values.var(ddof=1)), float(len(values) - 1), source)


def pooled_spread(spreads: list[SeedSpread | None], source: str) -> SeedSpread | None:
    """The df-weighted mean of several experiments' spreads: one seed variance for all of them
    (as a one-way ANOVA pools its groups' variances), with the sum of their df."""
    spreads = [s for s in spreads if s is not None]
    df = sum(s.df for s in spreads)
    if not spreads or df <= 0:
        return None
    return SeedSpread(sum(s.variance * s.df for s in spreads) / df, df, source)


@dataclass(frozen=True)
class RerunInterval:
    """Where the gain of a rerun on ``new_seeds`` other seeds (same suite, same settings) should
    fall with probability ``level``: a prediction interval, not the gain's confidence interval.

    The two differ because the rerun's gain is itself an estimate: ḡ_new − ḡ has variance
    v·(1/S + 1/m) for a seed's variance v, S published seeds and m new ones (the problems'
    own effect is the same in both, since the suite is). The gain's confidence interval is the
    loop's mean's: where seeds vary it holds a rerun's gain less often than 95% (87% in
    tests/test_paired.py's simulation at 3 + 3 seeds; 83% with the variance known, 74% with 6
    published seeds), and where they do not it holds more, since it also carries the suite's
    sampling, which a rerun on the same suite shares.
    """

    low: float
    high: float
    new_seeds: int
    spread: SeedSpread  # the spread used, own or pooled: its df are the interval's

    @property
    def df(self) -> float:
        return self.spread.df

    def holds(self, gain: float) -> bool:
        return self.low <= gain <= self.high

    def as_dict(self) -> dict:
        return {"low": self.low, "high": self.high, "new_seeds": self.new_seeds,
                "df": self.df, "sd": self.spread.sd, "source": self.spread.source}


def rerun_interval(gain: float, seeds: int, own: SeedSpread | None,
                   floor: SeedSpread | None = None, new_seeds: int = RERUN_SEEDS,
                   level: float = LEVEL) -> RerunInterval | None:
    """The prediction interval of a rerun's gain (``RerunInterval``), from the wider of two:
    the experiment's own seeds (its t on S − 1 df) and ``floor``, the seed spread pooled over
    the experiments beside it (many more df).

    Why the wider: three seeds estimate their own spread on 2 df, and they can agree by chance
    (SQLM's three gains, 2026-11-29, spread by 0.005 while flips alone spread a seed's gain by
    ~0.015); the pooled spread assumes the loops vary alike, which one loop can break. Each is
    a valid 95% interval under its own assumption, and the wider contains both, so it covers
    at least 95% if either assumption holds. Neither holds for a loop whose seeds split into
    modes that the published seeds did not all show (RLVR's ``chain_sum``, docs/results.md).
    """
    quantile = (1 + level) / 2
    best = None
    for spread in (own, floor):
        if spread is None or spread.df <= 0:
            continue
        half = float(stats.t.ppf(quantile, spread.df)) * math.sqrt(
            spread.variance * (1 / seeds + 1 / new_seeds))
        if best is None or half > best[0]:
            best = (half, spread)
    if best is None:
        return None
    half, spread = best
    return RerunInterval(gain - half, gain + half, new_seeds, spread)
