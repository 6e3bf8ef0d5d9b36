"""pass@k from n samples of which c are correct, unbiased (Chen et al. 2021;
docs/algorithms.md#unbiased-passk).

    pass@k = 1 − C(n−c, k) / C(n, k)

computed as the stable product 1 − ∏_{i=n−c+1}^{n} (1 − k/i), which never forms the (huge)
binomial coefficients.
"""

from __future__ import annotations

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n is correct."""
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need 0 ≤ c ≤ n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 1 ≤ k ≤ n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def mean_pass_at_k(counts: list[tuple[int, int]], k: int) -> float:
    """Mean pass@k over problems, each given as (n samples, c correct)."""
    if not counts:
        raise ValueError("mean_pass_at_k: no problems")
    return float(np.mean([pass_at_k(n, c, k) for n, c in counts]))
