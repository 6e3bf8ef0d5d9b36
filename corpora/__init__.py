"""Documents → chunks → embeddings → FAISS: the corpora SPICE's challenger reads from.

    from corpora import ensure_default_corpus
    corpus = ensure_default_corpus()            # Python's reference topics, built offline once
    corpus.search("how does assert work", k=3)  # [[(Chunk, cosine), ...]]

See docs/corpora.md; the CLI is ``selfplay corpus build|search|stats|list``.
"""

from corpora.build import build_corpus, corpus_settings
from corpora.contamination import ContaminationGuard
from corpora.corpus import (
    DEFAULT_CORPUS,
    Chunk,
    Corpus,
    corpora_dir,
    ensure_default_corpus,
    list_corpora,
    load_corpus,
)
from corpora.embedding import Embedder
from selfplay.config import CorpusSettings

__all__ = [
    "DEFAULT_CORPUS",
    "Chunk",
    "ContaminationGuard",
    "Corpus",
    "CorpusSettings",
    "Embedder",
    "build_corpus",
    "corpora_dir",
    "corpus_settings",
    "ensure_default_corpus",
    "list_corpora",
    "load_corpus",
]
