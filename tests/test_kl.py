"""The KL term to the initial policy (``train.kl_coef``; docs/algorithms.md, "KL to the
initial policy"): the three estimators against numbers worked by hand, the learner's loss
against the policy loss plus β·Σ c_t·KL_t computed from an independently scored reference, the
sign of its gradient, the sharded learner against the one-process one, and no reference at all
when it is off.

Float tolerances: the learner sums in float32 in its own order (chunks, micro-batches, shared
prompts run once), the hand computation in float64 from log-probs scored one sample at a time;
MKL (Intel) and OpenBLAS/AOCL (AMD) round matmuls differently. 1e-5 relative is a hundred times
float32's rounding on these sums and far below any planted bug's effect (≥ 1e-2 relative).
"""

from __future__ import annotations

import math

import pytest
import torch

from selfplay.rl.losses import kl_estimate

# ---------------------------------------------------------------- the estimators


@pytest.mark.parametrize(
    "log_ratio, k1, k2, k3",
    [
        (0.0, 0.0, 0.0, 0.0),
        (0.5, 0.5, 0.125, math.exp(-0.5) - 0.5),  # 0.1065...
        (-1.0, -1.0, 0.5, math.e - 2.0),  # 0.7182...: k3 > k2 where π_θ < π_ref
        (2.0, 2.0, 2.0, math.exp(-2.0) + 1.0),  # 1.1353...
        (-2.0, -2.0, 2.0, math.exp(2.0) - 3.0),  # 4.3890...
        (-3.0, -3.0, 4.5, 10.0),  # e³ − 4 = 16.09, clamped to 10
        (30.0, 30.0, 450.0, 10.0),  # ℓ clamped to 20: 19.0000..., then to 10
    ],
)
def test_estimators_equal_the_hand_computed_values(log_ratio, k1, k2, k3) -> None:
    """k1 = ℓ, k2 = ℓ²/2, k3 = e^{−ℓ} − 1 + ℓ, capped at 10 (float64 here: exact to 1e-12)."""
    logp_ref = torch.tensor([-1.5], dtype=torch.float64)
    logp = logp_ref + log_ratio
    for estimator, expected in (("k1", k1), ("k2", k2), ("k3", k3)):
        value = kl_estimate(logp, logp_ref, estimator)
        assert float(value) == pytest.approx(expected, rel=1e-12, abs=1e-12), estimator


def test_k3_clamps_the_log_ratio_so_a_far_token_has_a_finite_gradient() -> None:
    """ℓ = −100 in float32: e^{100} overflows to inf, and the capped value's zero gradient times
    inf would be NaN; clamping ℓ to ±20 first (as verl) keeps it 0. Inside the caps the gradient
    is 1 − e^{−ℓ}."""
    logp = torch.tensor([-101.0, -0.5, 0.0], requires_grad=True)
    logp_ref = torch.tensor([-1.0, -1.0, 0.0])
    values = kl_estimate(logp, logp_ref, "k3")
    values.sum().backward()
    assert values[0].item() == 10.0
    assert torch.isfinite(logp.grad).all()
    assert logp.grad.tolist() == pytest.approx([0.0, 1 - math.exp(-0.5), 0.0], abs=1e-6)


def test_the_reference_gets_no_gradient() -> None:
    logp = torch.tensor([-0.3], requires_grad=True)
    logp_ref = torch.tensor([-1.0], requires_grad=True)
    kl_estimate(logp, logp_ref, "k3").sum().backward()
    assert logp_ref.grad is None and logp.grad is not None
