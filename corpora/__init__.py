"""Documents → chunks → embeddings → FAISS: the corpora SPICE's challenger reads from.

    from corpora import ensure_default_corpus
    corpus = ensure_default_corpus(tokenizer_loader=load)  # Python's reference topics, built
    corpus.search("how does assert work", k=3)             # offline once; [[(Chunk, cosine)]]

``load(spec) -> tokenizer`` is the caller's: this package loads no language model, so chunking
by a model's tokens (``CorpusSettings.tokenizer``, ``embedded`` by default) needs one.
See docs/corpora.md; the CLI is ``selfplay corpus build|search|stats|list``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# public name -> the module defining it; imported on first use, so that `corpora.settings` (what
# the CLI needs to make its flags) loads without numpy, FAISS or the embedding stack
_EXPORTS = {
    "DEFAULT_CORPUS": "corpora.corpus",
    "Chunk": "corpora.corpus",
    "ContaminationGuard": "corpora.contamination",
    "Corpus": "corpora.corpus",
    "CorpusSettings": "corpora.settings",
    "Embedder": "corpora.embedding",
    "build_corpus": "corpora.build",
    "corpora_dir": "corpora.corpus",
    "corpus_settings": "corpora.settings",
    "ensure_default_corpus": "corpora.build",
    "list_corpora": "corpora.corpus",
    "load_corpus": "corpora.corpus",
}

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


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'corpora' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:
    from corpora.build import build_corpus, ensure_default_corpus
    from corpora.contamination import ContaminationGuard
    from corpora.corpus import DEFAULT_CORPUS, Chunk, Corpus, corpora_dir, list_corpora, load_corpus
    from corpora.embedding import Embedder
    from corpora.settings import CorpusSettings, corpus_settings
