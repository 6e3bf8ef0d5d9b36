"""Contamination guard: generated questions that nearly copy an evaluation item are dropped.

The evaluation items are embedded once into an in-memory exact FAISS index (inner product of
unit vectors = cosine); a question is a near-duplicate when its best cosine with any item is at
least ``threshold``, or when its text equals an item's after lower-casing and collapsing
whitespace (caught without a model call). The loop drops flagged questions and logs the count
(``flagged``) so a run can show how often its challenger reproduced the benchmark.
"""

from __future__ import annotations

import faiss
import numpy as np

from corpora.corpus import shared_embedder
from corpora.embedding import MINILM


def _key(text: str) -> str:
    return " ".join(text.lower().split())


class ContaminationGuard:
    """Near-duplicate check of questions against evaluation items (see the module docstring).

    ``embedder`` is anything with ``embed(texts) -> float32 unit rows`` (an ``Embedder`` or a
    ``Corpus``); by default the offline MiniLM."""

    def __init__(self, texts: list[str], threshold: float = 0.9, embedder=None):
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        self.embedder = embedder or shared_embedder(MINILM)
        self.items = list(texts)
        self._keys = {_key(t) for t in self.items}
        self.index = None
        if self.items:
            vectors = np.ascontiguousarray(self.embedder.embed(self.items), dtype=np.float32)
            self.index = faiss.IndexFlatIP(vectors.shape[1])
            self.index.add(vectors)
        self.checked = 0
        self.flagged = 0

    def similarity(self, questions: list[str]) -> np.ndarray:
        """The best cosine of each question with any evaluation item (0 when there are none)."""
        if self.index is None or not questions:
            return np.zeros(len(questions), dtype=np.float32)
        vectors = np.ascontiguousarray(self.embedder.embed(list(questions)), dtype=np.float32)
        scores, _ = self.index.search(vectors, 1)
        return scores[:, 0]

    def check(self, questions: list[str]) -> list[bool]:
        """True for each question that nearly copies an evaluation item (drop it)."""
        scores = self.similarity(questions)
        flags = [
            _key(q) in self._keys or float(s) >= self.threshold
            for q, s in zip(questions, scores, strict=True)
        ]
        self.checked += len(flags)
        self.flagged += sum(flags)
        return flags
