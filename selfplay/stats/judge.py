"""Bias-corrected LLM-as-judge (arXiv 2511.21140; docs/algorithms.md#bias-corrected-llm-as-judge).

A judge that says "correct" for a share p̂ of the test answers over-/under-counts when it errs.
On a labelled calibration set it has specificity q₀ = P(judge says wrong | wrong) and
sensitivity q₁ = P(judge says right | right). The corrected accuracy is

    θ̂ = (p̂ + q₀ − 1) / (q₀ + q₁ − 1)

(Rogan–Gladen), defined only when q₀ + q₁ > 1 (a judge no better than chance tells nothing).
Its variance by the delta method, with n test answers, m₀ wrong and m₁ right calibration items:

    Var θ̂ ≈ [p̂(1−p̂)/n + (1−θ̂)² q₀(1−q₀)/m₀ + θ̂² q₁(1−q₁)/m₁] / (q₀ + q₁ − 1)²

A bootstrap over the calibration and test counts is offered as well; both are clipped to [0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import norm


class JudgeCalibrationError(ValueError):
    """The calibration set cannot correct this judge (q₀ + q₁ ≤ 1, or an empty class)."""


@dataclass(frozen=True)
class JudgeCounts:
    """Counts from a calibration set (labels known) and a test set (labels unknown)."""

    test_positive: int  # test answers the judge called correct
    test_total: int
    calib_true_negative: int  # wrong answers the judge called wrong
    calib_negative: int  # wrong answers in the calibration set (m₀)
    calib_true_positive: int  # right answers the judge called right
    calib_positive: int  # right answers in the calibration set (m₁)


@dataclass(frozen=True)
class JudgeEstimate:
    p_hat: float  # raw share the judge called correct
    q0: float  # specificity
    q1: float  # sensitivity
    theta: float  # corrected accuracy (clipped to [0, 1])
    low: float
    high: float
    method: str

    def line(self) -> str:
        return (
            f"judge: raw {self.p_hat:.3f} → corrected {self.theta:.3f} "
            f"[{self.low:.3f}, {self.high:.3f}] ({self.method}; q0={self.q0:.3f}, q1={self.q1:.3f})"
        )


def corrected_accuracy(p_hat: float, q0: float, q1: float) -> float:
    """θ̂ = (p̂ + q₀ − 1)/(q₀ + q₁ − 1), unclipped; refuses when q₀ + q₁ ≤ 1."""
    if q0 + q1 <= 1:
        raise JudgeCalibrationError(
            f"judge specificity q0={q0:.3f} + sensitivity q1={q1:.3f} ≤ 1: "
            "the judge is no better than chance on the calibration set; no correction possible"
        )
    return (p_hat + q0 - 1) / (q0 + q1 - 1)


def _rates(counts: JudgeCounts) -> tuple[float, float, float]:
    if counts.test_total <= 0:
        raise JudgeCalibrationError("judge: the test set is empty")
    if counts.calib_negative <= 0 or counts.calib_positive <= 0:
        raise JudgeCalibrationError(
            "judge: the calibration set needs both right and wrong answers "
            f"(has {counts.calib_positive} right, {counts.calib_negative} wrong)"
        )
    return (
        counts.test_positive / counts.test_total,
        counts.calib_true_negative / counts.calib_negative,
        counts.calib_true_positive / counts.calib_positive,
    )


def judge_estimate(counts: JudgeCounts, confidence: float = 0.95) -> JudgeEstimate:
    """θ̂ with a delta-method interval."""
    p, q0, q1 = _rates(counts)
    theta = corrected_accuracy(p, q0, q1)
    variance = (
        p * (1 - p) / counts.test_total
        + (1 - theta) ** 2 * q0 * (1 - q0) / counts.calib_negative
        + theta**2 * q1 * (1 - q1) / counts.calib_positive
    ) / (q0 + q1 - 1) ** 2
    half = norm.ppf(0.5 + confidence / 2) * variance**0.5
    clip = lambda x: float(min(1.0, max(0.0, x)))  # noqa: E731
    return JudgeEstimate(p, q0, q1, clip(theta), clip(theta - half), clip(theta + half), "delta")


def judge_bootstrap(
    counts: JudgeCounts, confidence: float = 0.95, draws: int = 2000, seed: int = 0
) -> JudgeEstimate:
    """θ̂ with a percentile bootstrap: p̂, q₀, q₁ resampled as binomials; draws where the
    resampled judge is no better than chance are dropped."""
    p, q0, q1 = _rates(counts)
    theta = corrected_accuracy(p, q0, q1)
    rng = np.random.default_rng(seed)
    ps = rng.binomial(counts.test_total, p, draws) / counts.test_total
    q0s = rng.binomial(counts.calib_negative, q0, draws) / counts.calib_negative
    q1s = rng.binomial(counts.calib_positive, q1, draws) / counts.calib_positive
    ok = q0s + q1s > 1
    thetas = np.clip((ps[ok] + q0s[ok] - 1) / (q0s[ok] + q1s[ok] - 1), 0, 1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(thetas, [tail, 100 - tail])
    return JudgeEstimate(
        p, q0, q1, float(min(1, max(0, theta))), float(low), float(high), "bootstrap"
    )


def counts_from_labels(
    calibration: list[tuple[bool, bool]], test_verdicts: list[bool]
) -> JudgeCounts:
    """Counts from (true label, judge verdict) pairs and the judge's verdicts on the test set."""
    negatives = [verdict for label, verdict in calibration if not label]
    positives = [verdict for label, verdict in calibration if label]
    return JudgeCounts(
        test_positive=sum(test_verdicts),
        test_total=len(test_verdicts),
        calib_true_negative=sum(not v for v in negatives),
        calib_negative=len(negatives),
        calib_true_positive=sum(positives),
        calib_positive=len(positives),
    )
