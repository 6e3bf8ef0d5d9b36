"""A built corpus on disk and in memory: chunks, their vectors, a FAISS index, a manifest.

``<cache>/corpora/<name>/`` holds ``manifest.json``, ``chunks.jsonl`` (one chunk a line, in index
order), ``vectors.npy`` (float32, unit rows, the embedding cache of the next rebuild) and
``index.faiss``. ``<cache>`` is ``SELFPLAY_CACHE`` or ``~/.cache/selfplay``, as for models.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from corpora.embedding import Embedder
from corpora.index import load_index
from selfplay.core.errors import UserError
from selfplay.core.paths import cache_root

DEFAULT_CORPUS = "pydoc-topics"
FORMAT_VERSION = 1
MANIFEST, CHUNKS, VECTORS, INDEX = "manifest.json", "chunks.jsonl", "vectors.npy", "index.faiss"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass(frozen=True)
class Chunk:
    """A passage of a document. ``id`` is a hash of the text: stable across rebuilds."""

    id: str
    text: str
    source: str
    n_tokens: int


def corpora_dir(cache_dir: Path | None = None) -> Path:
    """The folder holding every corpus (``cache_dir`` overrides ``<cache>/corpora``)."""
    return Path(cache_dir) if cache_dir is not None else cache_root() / "corpora"


def check_name(name: str) -> str:
    if not _NAME.match(name or ""):
        raise UserError(
            f"corpus name {name!r} must be letters, digits, '.', '_' or '-' (start with a "
            f"letter or digit)"
        )
    return name


def list_corpora(cache_dir: Path | None = None) -> list[str]:
    root = corpora_dir(cache_dir)
    if not root.is_dir():
        return []
    return sorted(
        p.name for p in root.iterdir() if not p.name.startswith(".") and (p / MANIFEST).exists()
    )


@cache
def shared_embedder(spec: str) -> Embedder:
    """One loaded model per spec for the whole process (loading takes seconds); callers pass
    their batch size to ``embed``."""
    return Embedder(spec)


class Corpus:
    """A loaded corpus: ``search`` embeds queries with the corpus's own model."""

    def __init__(self, name: str, path: Path, chunks: list[Chunk], manifest: dict, index):
        self.name = name
        self.path = path
        self.chunks = chunks
        self.manifest = manifest
        self.index = index
        self.dim = int(manifest["dim"])

    def __len__(self) -> int:
        return len(self.chunks)

    @property
    def embedder(self) -> Embedder:
        return shared_embedder(self.manifest["settings"]["embedding_model"])

    def embed(self, texts: list[str]) -> np.ndarray:
        """float32 [len(texts), dim], unit rows, from the model the corpus was built with."""
        return self.embedder.embed(list(texts), batch_size=self.manifest["settings"]["batch_size"])

    def vectors(self) -> np.ndarray:
        """The chunk vectors in chunk order (memory-mapped: cheap for big corpora)."""
        return np.load(self.path / VECTORS, mmap_mode="r")

    def search(self, queries: str | list[str], k: int = 10) -> list[list[tuple[Chunk, float]]]:
        """The ``k`` most similar chunks per query, best first, with cosine similarities."""
        if isinstance(queries, str):
            queries = [queries]
        if not queries:
            return []
        return self.search_vectors(self.embed(queries), k)

    def search_vectors(self, vectors: np.ndarray, k: int = 10) -> list[list[tuple[Chunk, float]]]:
        k = max(1, min(k, len(self.chunks)))
        scores, ids = self.index.search(np.ascontiguousarray(vectors, dtype=np.float32), k)
        return [
            [(self.chunks[i], float(s)) for s, i in zip(row_scores, row_ids, strict=True) if i >= 0]
            for row_scores, row_ids in zip(scores, ids, strict=True)
        ]


def load_corpus(name: str, cache_dir: Path | None = None) -> Corpus:
    """A built corpus, or a one-line UserError saying how to build it."""
    path = corpora_dir(cache_dir) / check_name(name)
    if not (path / MANIFEST).exists():
        known = ", ".join(list_corpora(cache_dir)) or "none"
        raise UserError(
            f"corpus {name!r} is not built (no {path / MANIFEST}); run `selfplay corpus build "
            f"{name} SOURCE...` (built: {known})"
        )
    missing = [f for f in (CHUNKS, VECTORS, INDEX) if not (path / f).exists()]
    if missing:
        raise UserError(f"corpus {name!r} at {path} is missing {', '.join(missing)}; rebuild it")
    manifest = json.loads((path / MANIFEST).read_text())
    if manifest.get("format_version") != FORMAT_VERSION:
        raise UserError(f"corpus {name!r} was built by another version of selfplay; rebuild it")
    chunks = read_chunks(path / CHUNKS)
    index = load_index(path / INDEX, manifest["index"])
    if index.ntotal != len(chunks):
        raise UserError(
            f"corpus {name!r}: index holds {index.ntotal} vectors for {len(chunks)} chunks; "
            "rebuild it"
        )
    return Corpus(name, path, chunks, manifest, index)


def read_chunks(path: Path) -> list[Chunk]:
    """The chunks of a ``chunks.jsonl``; a corrupt line is a one-line UserError naming it.

    Split on ``\\n`` bytes only (not ``selfplay.core.jsonl.read_rows``, which splits with
    ``str.splitlines``): chunk text may hold U+2028 or U+0085, which JSON leaves unescaped."""
    chunks = []
    with path.open("rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                chunks.append(Chunk(**json.loads(line)))  # bytes: decoded as UTF-8 by json
            except (ValueError, TypeError) as exc:  # not UTF-8 / JSON / an object, wrong keys
                raise UserError(
                    f"{path}:{number}: not a chunk row ({_first_line(exc)}); rebuild the corpus"
                ) from None
    return chunks


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__


def write_chunks(path: Path, chunks: list[Chunk]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for chunk in chunks:
            row = {
                "id": chunk.id,
                "text": chunk.text,
                "source": chunk.source,
                "n_tokens": chunk.n_tokens,
            }
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
