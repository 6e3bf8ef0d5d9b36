"""``selfplay bench rewards``: the repetition penalty's BLEU clustering, ours vs the published.

The released Agent0 / R-Zero code builds the distance matrix with one NLTK ``sentence_bleu``
call per pair (hypothesis i, reference j, i < j; method-1 smoothing) and clusters it with
scikit-learn (average linkage, threshold 0.5). Ours (``curricula.rewards.bleu_clusters``) gets
the same matrix from sacrebleu's n-gram counts with sparse products and clusters it with the
same scikit-learn call. Both run here on the same questions, in one process; the printed ratio
is from this run. The questions are real generated tasks (reasoning-gym families, several
items per template, so near-duplicates abound, as in a proposer's batch).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
from rich.console import Console
from rich.table import Table

FAMILIES = ("basic_arithmetic", "gsm_symbolic", "chain_sum", "fraction_simplification", "lcm")


def generated_questions(count: int, seed: int = 0) -> list[str]:
    import reasoning_gym

    per_family = -(-count // len(FAMILIES))
    questions = []
    for index, family in enumerate(FAMILIES):
        dataset = reasoning_gym.create_dataset(family, size=per_family, seed=seed + index)
        questions += [entry["question"] for entry in dataset]
    rng = np.random.default_rng(seed)
    return [questions[i] for i in rng.permutation(len(questions))[:count]]


def published_clusters(texts: list[str], threshold: float = 0.5) -> list[int]:
    """What the released code does: pairwise NLTK sentence_bleu, then scikit-learn."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
    from sklearn.cluster import AgglomerativeClustering

    n = len(texts)
    dist = np.zeros((n, n))
    smoother = SmoothingFunction().method1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NLTK warns on every pair without higher-order matches
        for i in range(n):
            for j in range(i + 1, n):
                score = sentence_bleu(
                    [texts[j].split()], texts[i].split(), smoothing_function=smoother
                )
                dist[i, j] = dist[j, i] = 1 - score
    clustering = AgglomerativeClustering(
        n_clusters=None, metric="precomputed", linkage="average", distance_threshold=threshold
    )
    return [int(label) for label in clustering.fit_predict(dist)]


def same_partition(a: list[int], b: list[int]) -> bool:
    pairs = set(zip(a, b, strict=True))
    return len(pairs) == len(set(a)) == len(set(b))


def bench_rewards(count: int = 512, seed: int = 0) -> dict[str, float]:
    from curricula.rewards import bleu_clusters

    console = Console()
    texts = generated_questions(count, seed)
    bleu_clusters(texts[:8])  # import and warm up both libraries outside the timings
    start = time.perf_counter()
    ours = bleu_clusters(texts)
    ours_s = time.perf_counter() - start
    with console.status(f"published pairwise NLTK BLEU on {count} questions..."):
        start = time.perf_counter()
        published = published_clusters(texts)
        published_s = time.perf_counter() - start
    same = same_partition(ours, published)
    table = Table(title=f"repetition-penalty clustering of {count} generated questions")
    table.add_column("implementation")
    table.add_column("seconds", justify="right")
    table.add_column("clusters", justify="right")
    table.add_row(
        "published: NLTK sentence_bleu per pair + sklearn",
        f"{published_s:.2f}",
        str(len(set(published))),
    )
    table.add_row(
        "ours: sacrebleu n-grams, sparse products + sklearn", f"{ours_s:.3f}", str(len(set(ours)))
    )
    console.print(table)
    ratio = published_s / max(ours_s, 1e-9)
    console.print(f"same clusters: {same}; ours is {ratio:.1f}x faster")
    return {"ours_s": ours_s, "published_s": published_s, "ratio": ratio, "same": float(same)}
