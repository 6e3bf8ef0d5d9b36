"""Proposer rewards for task-generating loops: the one p̂ → reward registry every loop uses.

Small pure functions; each docstring names where its formula comes from (docs/algorithms.md).
Each paper's form and its released code's form are kept by name, so each ablation of the
papers is one config key away (``resolve_reward``).

- p̂-shaped rewards (``PROPOSER_REWARDS``), p̂ the share of the solver's samples that
  succeeded: ``uncertainty`` (Agent0/R-Zero paper; SPELL's ``rzero``), ``uncertainty_code``
  (released Agent0 code), ``learnability`` (AZR paper; SPELL's ``reverse``),
  ``learnability_code`` (released AZR code), ``variance`` (SPICE), ``threshold`` (SPICE's
  threshold ablation), ``gaussian`` (SPELL), ``inverse_accuracy`` and
  ``intermediate_difficulty`` (SSP), ``informative`` (SQLM paper, and its coding topic) and
  ``agreement_band`` (released SQLM code; it needs the sample count N).
- Terms of Agent0's composite curriculum reward: ``tool_bonus``, ``repetition_penalties`` (BLEU
  clustering of the batch) and the two composites ``curriculum_reward_paper`` /
  ``curriculum_reward_code``.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable

import numpy as np
from scipy import sparse

from selfplay.core.errors import UserError

# ---------------------------------------------------------------------- p̂-shaped rewards


def uncertainty(p_hat: float) -> float:
    """Agent0 / R-Zero paper: R_unc = 1 − 2|p̂ − ½| (1 at p̂ = ½, 0 at p̂ ∈ {0, 1})."""
    return 1.0 - 2.0 * abs(p_hat - 0.5)


def uncertainty_code(p_hat: float) -> float:
    """Released Agent0 code: min(p̂, 1 − p̂), the paper's uncertainty at half scale (max ½)."""
    return min(p_hat, 1.0 - p_hat)


def learnability(mean_solve: float) -> float:
    """Absolute Zero (AZR) proposer reward: 1 − r̄_solve, and 0 when r̄ ∈ {0, 1} (a task every
    sample solves, or none does, teaches nothing). SPELL's ``reverse`` is the same."""
    if mean_solve <= 0.0 or mean_solve >= 1.0:
        return 0.0
    return 1.0 - mean_solve


def learnability_code(mean_solve: float) -> float:
    """Released AZR code: 1 − r̄ for 0 < r̄ < 1, and −0.5 when r̄ ∈ {0, 1} (it scores a task
    that teaches nothing like a wrong one)."""
    return 1.0 - mean_solve if 0.0 < mean_solve < 1.0 else -0.5


SPELL_SIGMA = 1.0 / 6.0  # the gaussian's width (released SPELL code's default)


def gaussian(p_hat: float, sigma: float = SPELL_SIGMA) -> float:
    """SPELL questioner reward: exp(−(p̂ − ½)²/(2σ²)) for 0 < p̂ < 1, σ = 1/6; 0 when every
    answer, or none, was right."""
    if p_hat <= 0.0 or p_hat >= 1.0:
        return 0.0
    return math.exp(-((p_hat - 0.5) ** 2) / (2.0 * sigma**2))


def inverse_accuracy(p_hat: float) -> float:
    """SSP's default proposer reward (``1-acc`` in its release script): 1 − p̂."""
    return 1.0 - p_hat


def intermediate_difficulty(p_hat: float) -> float:
    """SSP's other form: 4·p̂·(1 − p̂) for 0 < p̂ < 1, else 0."""
    return 4 * p_hat * (1 - p_hat) if 0 < p_hat < 1 else 0.0


def informative(p_hat: float) -> float:
    """SQLM paper (0 < m_maj < N) and its coding topic (0 < mean test score < 1): 1 when the
    solvers neither all succeed nor all fail, else 0."""
    return 1.0 if 0.0 < p_hat < 1.0 else 0.0


def agreement_band(p_hat: float, samples: int) -> float:
    """Released SQLM code: 1 when 1 < m_maj < N, m_maj = p̂·N the number of the N solver answers
    equal to a non-None majority (a majority of one is no agreement)."""
    agreeing = round(p_hat * samples)  # a count: p̂ = m_maj / N
    return 1.0 if 1 < agreeing < samples else 0.0


def spice_variance(p_hat: float, sigma2: float = 0.01) -> float:
    """SPICE challenger reward: exp(−(p̂(1−p̂) − 0.25)² / (2σ²)), σ² = 0.01.

    Peaks at p̂ = ½ (variance ¼); with K = 8: 0/8 → 0.044, 1/8 → 0.372, 2/8 → 0.823,
    3/8 → 0.988, 4/8 → 1.0 (docs/algorithms.md#spice)."""
    variance = p_hat * (1.0 - p_hat)
    return math.exp(-((variance - 0.25) ** 2) / (2.0 * sigma2))


THRESHOLD_BAND = (0.3, 0.7)


def threshold_reward(
    p_hat: float, lo: float = THRESHOLD_BAND[0], hi: float = THRESHOLD_BAND[1]
) -> float:
    """SPICE's "threshold" ablation: 1 when lo ≤ p̂ ≤ hi, else 0.

    SPICE gives no band for it; we use R-Zero's 0.3–0.7 band
    (docs/algorithms.md#r-zero-and-absolute-zero), edges included, the same convention as the
    band filters in ``curricula.consistency``."""
    return 1.0 if lo <= p_hat <= hi else 0.0


PROPOSER_REWARDS: dict[str, Callable[..., float]] = {
    "uncertainty": uncertainty,
    "uncertainty_code": uncertainty_code,
    "learnability": learnability,
    "learnability_code": learnability_code,
    "variance": spice_variance,
    "threshold": threshold_reward,
    "gaussian": gaussian,
    "inverse_accuracy": inverse_accuracy,
    "intermediate_difficulty": intermediate_difficulty,
    "informative": informative,
    "agreement_band": agreement_band,
}
NEEDS_SAMPLES = frozenset({"agreement_band"})  # built-ins that also read N


def resolve_reward(name: str, samples: int | None = None) -> Callable[[float], float]:
    """A p̂ → reward function: a built-in name (``PROPOSER_REWARDS``; ``samples`` is N for
    those that read it), an import path ``"module:function"``, or a ``selfplay.rewards`` entry
    point (``selfplay.core.plugins``). A plug-in takes p̂ alone and returns a float."""
    from selfplay.core import plugins

    if name in NEEDS_SAMPLES:
        if samples is None:
            raise UserError(f"proposer reward {name!r} needs the solver's sample count")
        return functools.partial(PROPOSER_REWARDS[name], samples=samples)
    if name in PROPOSER_REWARDS:
        return PROPOSER_REWARDS[name]
    if not plugins.resolvable(name, plugins.REWARDS):
        known = ", ".join(sorted(PROPOSER_REWARDS))
        raise UserError(
            f"unknown proposer reward {name!r} (known: {known}, module:function, or an entry "
            f"point in {plugins.REWARDS})"
        )
    function = plugins.load_object(name, plugins.REWARDS, what="proposer reward")
    if not callable(function):
        raise UserError(f"proposer reward {name!r} is not a function")
    return function


# ---------------------------------------------------------------------- tool bonus


def tool_bonus(n_tool: float, gamma: float = 0.05, cap: int = 4) -> float:
    """Agent0 R_tool = γ·min(N_tool, C), γ = 0.05, C = 4 (paper and released code).

    The paper counts N_tool on the executor's rollouts; the released code counts ```output
    blocks in the proposer's own text (``count_tool_blocks``)."""
    return gamma * min(n_tool, cap)


def count_tool_blocks(text: str) -> int:
    """Released Agent0 code's N_tool: occurrences of ```output in the proposer's own text."""
    return text.count("```output")


# ---------------------------------------------------------------------- repetition penalty


def bleu_matrix(texts: list[str], max_order: int = 4, epsilon: float = 0.1) -> np.ndarray:
    """S[i, j] = sentence BLEU of hypothesis texts[i] against reference texts[j], all pairs at
    once, exactly as NLTK's ``sentence_bleu([ref.split()], hyp.split(),
    smoothing_function=SmoothingFunction().method1)`` (what the released Agent0/R-Zero code
    calls once per pair).

    Tokens and n-gram counts come from sacrebleu's ``extract_all_word_ngrams`` (whitespace
    tokens, as ``str.split``). Clipped matches min(c_i, c_j) are summed over n-grams as
    Σ_t [c_i ≥ t]·[c_j ≥ t]: one sparse product per count level, no Python loop over pairs.
    Method-1 smoothing is sacrebleu's ``floor`` smoothing with value 0.1 (a zero match count
    becomes 0.1); a pair with no unigram match scores 0; brevity penalty exp(1 − r/c) when the
    hypothesis (length c) is shorter than the reference (length r).
    """
    from sacrebleu.metrics.helpers import extract_all_word_ngrams

    counts, lengths = zip(
        *(extract_all_word_ngrams(text, 1, max_order) for text in texts), strict=True
    )
    size = len(texts)
    length = np.asarray(lengths, dtype=np.float64)
    by_order = _ngram_entries(counts, max_order)
    log_precision_sum = np.zeros((size, size))
    unigram_matches = None
    for order in range(1, max_order + 1):
        matches = _clipped_matches(*by_order[order], size)
        if order == 1:
            unigram_matches = matches
        total = np.maximum(length - order + 1, 1.0)[:, None]  # hypothesis n-grams (rows)
        precision = np.where(matches > 0, matches, epsilon) / total
        log_precision_sum += np.log(precision)
    hyp, ref = length[:, None], length[None, :]
    with np.errstate(divide="ignore"):
        brevity = np.where(hyp > ref, 1.0, np.exp(1.0 - ref / np.maximum(hyp, 1e-300)))
    brevity = np.where(hyp == 0, 0.0, brevity)
    scores = brevity * np.exp(log_precision_sum / max_order)
    return np.where(unigram_matches > 0, scores, 0.0)


def _ngram_entries(counts, max_order: int) -> dict[int, tuple[np.ndarray, ...]]:
    """Per n-gram order: (row, n-gram column, count) arrays of every text's n-gram counts."""
    entries: dict[int, tuple[list, list, list]] = {n: ([], [], []) for n in range(1, max_order + 1)}
    vocabulary: dict[tuple[str, ...], int] = {}
    for row, counter in enumerate(counts):
        for gram, count in counter.items():
            rows, cols, values = entries[len(gram)]
            rows.append(row)
            cols.append(vocabulary.setdefault(gram, len(vocabulary)))
            values.append(count)
    return {
        n: (np.asarray(r, dtype=np.int64), np.asarray(c, dtype=np.int64), np.asarray(v))
        for n, (r, c, v) in entries.items()
    }


def _clipped_matches(
    rows: np.ndarray, cols: np.ndarray, values: np.ndarray, size: int
) -> np.ndarray:
    """M[i, j] = Σ_g min(count_i(g), count_j(g)) = Σ_t Σ_g [count_i(g) ≥ t]·[count_j(g) ≥ t]."""
    matches = np.zeros((size, size))
    if not len(values):
        return matches
    width = int(cols.max()) + 1
    for level in range(1, int(values.max()) + 1):
        present = values >= level
        indicator = sparse.csr_matrix(
            (np.ones(int(present.sum())), (rows[present], cols[present])), shape=(size, width)
        )
        matches += (indicator @ indicator.T).toarray()
    return matches


def bleu_distances(texts: list[str]) -> np.ndarray:
    """Distance 1 − BLEU as the released code builds it: BLEU(hyp = texts[i], ref = texts[j])
    for i < j mirrored to j > i, zero on the diagonal."""
    upper = np.triu(1.0 - bleu_matrix(texts), k=1)
    return upper + upper.T


def bleu_clusters(texts: list[str], threshold: float = 0.5) -> list[int]:
    """Cluster label of each text: scikit-learn agglomerative clustering, average linkage, on
    distance 1 − BLEU, merging while the linkage distance is below ``threshold`` (Agent0 paper
    and code: 0.5)."""
    if len(texts) < 2:
        return [0] * len(texts)
    from sklearn.cluster import AgglomerativeClustering

    clustering = AgglomerativeClustering(
        n_clusters=None, metric="precomputed", linkage="average", distance_threshold=threshold
    )
    return [int(label) for label in clustering.fit_predict(bleu_distances(texts))]


def cluster_shares(labels: list[int]) -> list[float]:
    """|C_k|/B for each item: the share of the batch in the item's cluster."""
    sizes = Counter(labels)
    return [sizes[label] / len(labels) for label in labels]


def repetition_penalties(
    texts: list[str], weight: float = 1.0, threshold: float = 0.5
) -> list[float]:
    """Agent0 R_rep(x_i) = λ_rep·|C_k|/B, C_k the BLEU cluster of x_i in a batch of B tasks
    (paper; the released code subtracts the bare share, i.e. λ_rep = 1)."""
    return [weight * share for share in cluster_shares(bleu_clusters(texts, threshold))]


# ---------------------------------------------------------------------- composites


def curriculum_reward_paper(
    valid: bool,
    p_hat: float,
    executor_tool_calls: float,
    repetition: float,
    *,
    reward: Callable[[float], float] = uncertainty,
    lambda_unc: float = 1.0,
    lambda_tool: float = 1.0,
    gamma: float = 0.05,
    cap: int = 4,
) -> float:
    """Agent0 paper: R_C = R_format · max(0, λ_unc·R_unc + λ_tool·R_tool − R_rep).

    ``executor_tool_calls``: N_tool, mean tool calls per executor rollout on this task;
    ``repetition``: R_rep already weighted (``repetition_penalties``); ``reward``: R_unc, or an
    ablation's p̂ → reward function."""
    if not valid:
        return 0.0
    total = (
        lambda_unc * reward(p_hat)
        + lambda_tool * tool_bonus(executor_tool_calls, gamma, cap)
        - repetition
    )
    return max(0.0, total)


def curriculum_reward_code(
    valid: bool,
    p_hat: float,
    proposer_text: str,
    repetition: float,
    *,
    agrees: bool | None = None,
    reward: Callable[[float], float] = uncertainty_code,
    gamma: float = 0.05,
    cap: int = 4,
    invalid: float = -1.0,
) -> float:
    """Released Agent0 code: −1 when unparseable, else
    min(p̂, 1−p̂) − cluster share + 0.05·min(#"```output" in the proposer's own text, 4).

    ``agrees``: the optional agreement gate — False (the executor majority disagrees with the
    proposer's own answer) forces p̂ to 0 before the reward (R-Zero later removed the gate);
    None leaves p̂ alone."""
    if not valid:
        return invalid
    gated = 0.0 if agrees is False else p_hat
    return reward(gated) - repetition + tool_bonus(count_tool_blocks(proposer_text), gamma, cap)
