"""ScaleRL compute curves (arXiv 2510.13786; docs/algorithms.md#scalerl-compute-curves).

The held-out score R against compute C (tokens generated, or GPU-hours) follows a sigmoid in
log C:

    R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B)

A = the asymptote, B = the efficiency exponent, C_mid = the compute at half the gain, R0 = the
score before training (fixed to the first observation, as ScaleRL does). We fit A, B and
log C_mid by least squares (scipy ``curve_fit``) on the *first* part of the run and check the
prediction on the rest; standard errors come from the fit's covariance, and a bootstrap over
the fitted points is available.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit

MIN_POINTS = 4  # three free parameters and at least one degree of freedom


class ComputeFitError(ValueError):
    """Too few points, or a fit that did not converge."""


def scalerl_curve(c, r0: float, a: float, b: float, c_mid: float):
    """R(C); C = 0 gives R0 (no compute spent, no gain)."""
    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore", over="ignore"):
        ratio = np.where(c > 0, (c_mid / np.where(c > 0, c, 1.0)) ** b, np.inf)
    return r0 + (a - r0) / (1.0 + ratio)


@dataclass
class ComputeFit:
    r0: float
    a: float
    b: float
    c_mid: float
    a_se: float
    b_se: float
    c_mid_se: float  # standard error of C_mid (delta method from log C_mid)
    fitted_points: int
    fitted_range: tuple[float, float] = (0.0, 0.0)  # smallest and largest fitted C
    held_out: list[tuple[float, float, float]] = field(default_factory=list)  # (C, R, predicted)

    def predict(self, c) -> np.ndarray:
        return scalerl_curve(c, self.r0, self.a, self.b, self.c_mid)

    @property
    def held_out_mae(self) -> float | None:
        if not self.held_out:
            return None
        return float(np.mean([abs(r - p) for _, r, p in self.held_out]))

    def sentence(self, unit: str = "tokens") -> str:
        """What the fit predicts, in words."""
        text = (
            f"fit on {self.fitted_points} points: asymptote A = {self.a:.3f} ± {self.a_se:.3f}, "
            f"exponent B = {self.b:.2f} ± {self.b_se:.2f}, half of the gain "
            f"(R0 = {self.r0:.3f} → A) at C_mid = {self.c_mid:.3g} {unit}"
        )
        low, high = self.fitted_range
        if not low <= self.c_mid <= high:
            text += (
                f" — C_mid lies outside the fitted compute range ({low:.3g}–{high:.3g}): "
                "B and C_mid are extrapolated, not measured"
            )
        if self.held_out:
            last_c = self.held_out[-1][0]
            text += (
                f"; on the {len(self.held_out)} held-out later points the prediction is off by "
                f"{self.held_out_mae:.3f} on average (at {last_c:.3g} {unit}: predicted "
                f"{self.held_out[-1][2]:.3f}, measured {self.held_out[-1][1]:.3f})"
            )
        return text


def fit_compute_curve(
    compute,
    score,
    r0: float | None = None,
    fit_fraction: float = 1.0,
    bounds_a: tuple[float, float] = (-np.inf, np.inf),
) -> ComputeFit:
    """Fit R(C) on the first ``fit_fraction`` of the points (sorted by C), check on the rest.

    ``r0``: the score at C = 0; default the score of the smallest C (a C = 0 point is never
    fitted: it only sets R0).
    """
    c = np.asarray(compute, dtype=float)
    r = np.asarray(score, dtype=float)
    order = np.argsort(c)
    c, r = c[order], r[order]
    if r0 is None:
        if not len(r):
            raise ComputeFitError("compute curve: no points")
        r0 = float(r[0])
    positive = c > 0
    c, r = c[positive], r[positive]
    cut = max(MIN_POINTS, int(round(fit_fraction * len(c))))
    if cut > len(c):
        raise ComputeFitError(
            f"compute curve: {len(c)} evaluation(s) after some compute (fitting "
            f"{fit_fraction:.0%} of them); three parameters need at least {MIN_POINTS} fitted "
            "points"
        )
    fit_c, fit_r = c[:cut], r[:cut]

    def model(x, a, b, log_c_mid):
        return scalerl_curve(x, r0, a, b, np.exp(log_c_mid))

    top = float(fit_r.max())
    a0 = top + 0.1 * (top - r0) if top != r0 else top + 1e-3
    a0 = float(np.clip(a0, bounds_a[0] + 1e-9, bounds_a[1] - 1e-9))
    guess = [a0, 1.0, float(np.log(np.median(fit_c)))]
    lower = [bounds_a[0], 1e-3, float(np.log(fit_c.min())) - 10]
    upper = [bounds_a[1], 20.0, float(np.log(fit_c.max())) + 10]
    try:
        with warnings.catch_warnings():  # too few points for a covariance: errors become inf
            warnings.simplefilter("ignore", OptimizeWarning)
            params, cov = curve_fit(
                model, fit_c, fit_r, p0=guess, bounds=(lower, upper), maxfev=20000
            )
    except (RuntimeError, ValueError) as exc:
        raise ComputeFitError(f"compute curve: the fit did not converge ({exc})") from exc
    a, b, log_c_mid = params
    errors = np.sqrt(np.clip(np.diag(cov), 0, np.inf)) if np.all(np.isfinite(cov)) else [np.inf] * 3
    if not np.all(np.isfinite(errors)):
        raise ComputeFitError(
            f"compute curve: the {cut} fitted points do not determine A, B and C_mid "
            "(infinite standard errors); evaluate more often"
        )
    if errors[0] > abs(a - r0):
        raise ComputeFitError(
            f"compute curve: the {cut} fitted points do not determine the asymptote "
            f"(A = {a:.3f} ± {errors[0]:.3f} for a gain of {a - r0:+.3f}); evaluate more often"
        )
    c_mid = float(np.exp(log_c_mid))
    fit = ComputeFit(
        r0=float(r0),
        a=float(a),
        b=float(b),
        c_mid=c_mid,
        a_se=float(errors[0]),
        b_se=float(errors[1]),
        c_mid_se=float(c_mid * errors[2]),
        fitted_points=cut,
        fitted_range=(float(fit_c.min()), float(fit_c.max())),
    )
    rest_c, rest_r = c[cut:], r[cut:]
    fit.held_out = [
        (float(x), float(y), float(p))
        for x, y, p in zip(rest_c, rest_r, fit.predict(rest_c), strict=True)
    ]
    return fit


def bootstrap_asymptote(
    compute, score, r0: float | None = None, draws: int = 200, seed: int = 0
) -> tuple[float, float]:
    """A 90% percentile interval of the asymptote A, resampling the points with replacement."""
    c = np.asarray(compute, dtype=float)
    r = np.asarray(score, dtype=float)
    if r0 is None and len(c):
        r0 = float(r[np.argmin(c)])
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(draws):
        pick = rng.integers(0, len(c), len(c))
        if len(set(c[pick][c[pick] > 0])) < 3:
            continue
        try:
            values.append(fit_compute_curve(c[pick], r[pick], r0=r0).a)
        except ComputeFitError:
            continue
    if not values:
        raise ComputeFitError("compute curve: no bootstrap draw could be fitted")
    low, high = np.percentile(values, [5, 95])
    return float(low), float(high)
