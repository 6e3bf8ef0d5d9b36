"""Diversity of generated tasks (docs/algorithms.md#curriculum-analysis-metrics): self-BLEU,
distinct-n, BLEU-distance clusters, embedding dispersion and clusters, near-duplicates within
and across iterations.

Text metrics take lists of strings; embedding metrics take an (n, d) array of unit vectors, so
they are testable on hand-made vectors. ``embed_texts`` uses the corpora embedder (the offline
MiniLM), so analysis and retrieval share one model.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform


def _tokens(text: str) -> list[str]:
    return text.lower().split()


def distinct_n(texts: list[str], n: int) -> float | None:
    """Distinct-n: unique n-grams / all n-grams over the whole set (whitespace tokens, lower
    case). 1.0 = no n-gram repeats; None when no text has n tokens."""
    grams: list[tuple[str, ...]] = []
    for text in texts:
        tokens = _tokens(text)
        grams += [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) / len(grams) if grams else None


@lru_cache(maxsize=1)
def _bleu():
    from sacrebleu.metrics import BLEU

    return BLEU(effective_order=True)


def sentence_bleu(hypothesis: str, references: list[str]) -> float:
    """sacrebleu sentence BLEU in [0, 1] (effective order, so short texts are not all 0)."""
    return _bleu().sentence_score(hypothesis, references).score / 100.0


def self_bleu(texts: list[str], limit: int = 200, seed: int = 0) -> float | None:
    """Mean BLEU of each text against all the others as references (Zhu et al. 2018): 1 = all
    the same, near 0 = nothing shared. At most ``limit`` texts (a seeded sample) are scored."""
    texts = _sample(texts, limit, seed)
    if len(texts) < 2:
        return None
    return float(
        np.mean([sentence_bleu(t, texts[:i] + texts[i + 1 :]) for i, t in enumerate(texts)])
    )


def clusters_from_distances(dist: np.ndarray, threshold: float) -> list[int]:
    """Agglomerative clustering, average linkage, cut at ``threshold`` (labels from 1)."""
    n = len(dist)
    if n == 0:
        return []
    if n == 1:
        return [1]
    condensed = squareform(np.clip(dist, 0, None), checks=False)
    return [int(x) for x in fcluster(linkage(condensed, "average"), threshold, "distance")]


def bleu_clusters(texts: list[str], threshold: float = 0.5) -> list[int]:
    """Agent0's repetition clusters (distance 1 − BLEU, average linkage, threshold 0.5): the
    one implementation in ``curricula.rewards``, so analysis counts what the reward penalised."""
    from curricula.rewards import bleu_clusters as reward_clusters

    return reward_clusters(texts, threshold)


def embedding_dispersion(vectors: np.ndarray) -> float | None:
    """Mean pairwise cosine distance (1 − cos) of the rows; 0 = all the same direction."""
    unit = _unit(vectors)
    n = len(unit)
    if n < 2:
        return None
    sims = unit @ unit.T
    return float((n * n - sims.sum()) / (n * (n - 1)))


def embedding_clusters(vectors: np.ndarray, threshold: float = 0.5) -> list[int]:
    """Clusters of the rows by cosine distance, average linkage, cut at ``threshold``."""
    unit = _unit(vectors)
    return clusters_from_distances(1.0 - unit @ unit.T, threshold)


def near_duplicate_share(
    vectors: np.ndarray, earlier: np.ndarray | None = None, min_similarity: float = 0.95
) -> float | None:
    """Share of rows with a near duplicate (cosine ≥ ``min_similarity``): among the other rows
    of the same set (``earlier`` None), or among the ``earlier`` rows (across iterations)."""
    unit = _unit(vectors)
    if len(unit) == 0:
        return None
    if earlier is None:
        if len(unit) < 2:
            return None
        sims = unit @ unit.T
        np.fill_diagonal(sims, -1.0)
    else:
        other = _unit(earlier)
        if len(other) == 0:
            return None
        sims = unit @ other.T
    return float(np.mean(sims.max(axis=1) >= min_similarity))


def exact_duplicate_share(texts: list[str]) -> float | None:
    """Share of texts whose normalised form occurs more than once."""
    if not texts:
        return None
    keys = [" ".join(_tokens(t)) for t in texts]
    counts = Counter(keys)
    return sum(counts[k] > 1 for k in keys) / len(keys)


def exact_repeat_share(texts: list[str], earlier: list[str]) -> float | None:
    """Share of texts whose normalised form already occurred among ``earlier`` (a question asked
    again in a later iteration)."""
    if not texts or not earlier:
        return None
    seen = {" ".join(_tokens(t)) for t in earlier}
    return sum(" ".join(_tokens(t)) in seen for t in texts) / len(texts)


def _unit(vectors) -> np.ndarray:
    array = np.asarray(vectors, dtype=float)
    if array.ndim != 2:
        array = array.reshape(len(array), -1)
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    return array / np.where(norms > 0, norms, 1.0)


def _sample(texts: list[str], limit: int, seed: int) -> list[str]:
    if len(texts) <= limit:
        return list(texts)
    rng = np.random.default_rng(seed)
    return [texts[i] for i in sorted(rng.choice(len(texts), limit, replace=False))]


@lru_cache(maxsize=1)
def _embedder():
    from corpora.embedding import MINILM, Embedder

    return Embedder(MINILM)


def embed_texts(texts: list[str]) -> np.ndarray:
    """Unit-norm sentence embeddings from the corpora embedder (the offline all-MiniLM-L6-v2),
    the same vectors SPICE retrieval and the contamination guard use."""
    if not texts:
        return np.zeros((0, 384))
    return np.asarray(_embedder().embed(list(texts)), dtype=float)
