"""A corpus's chunks as the documents a loop reads (SPICE's challenger, SPELL's questioner), and
the manifest a run folder keeps a copy of.

The default corpus is built on first use; building it chunks by a model's tokens, so the caller
passes ``tokenizer_loader`` (this package loads no language model).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from selfplay.core.errors import UserError


def load_documents(
    corpus: str | None, cache: str | None, tokenizer_loader: Callable | None = None
) -> list:
    """The chunks of ``corpus`` (None: ``DEFAULT_CORPUS``, built on first use) from the cache
    folder ``cache`` (None: the package's); a corpus with no chunk is one line."""
    from corpora.build import ensure_default_corpus
    from corpora.corpus import DEFAULT_CORPUS, load_corpus

    folder = Path(cache) if cache else None
    name = corpus or DEFAULT_CORPUS
    if name == DEFAULT_CORPUS:
        loaded = ensure_default_corpus(folder, tokenizer_loader=tokenizer_loader)
    else:
        loaded = load_corpus(name, folder)
    if not loaded.chunks:
        raise UserError(f"corpus {name!r} holds no chunks")
    return list(loaded.chunks)


def manifest_path(corpus: str | None, cache: str | None) -> Path:
    """Where ``corpus``'s manifest is (which documents, chunked and embedded how)."""
    from corpora.corpus import DEFAULT_CORPUS, MANIFEST, corpora_dir

    return corpora_dir(Path(cache) if cache else None) / (corpus or DEFAULT_CORPUS) / MANIFEST
