"""FAISS indexes over unit vectors (inner product = cosine): exact for small corpora, IVF or
HNSW past ``exact_max_chunks`` (docs/corpora.md has the measured trade-offs)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np

from selfplay.core.errors import UserError

IVF_MIN_POINTS_PER_LIST = 39  # FAISS's own floor for training k-means without a warning
IVF_TRAIN_POINTS_PER_LIST = 40  # k-means sample: just above that floor; training cost ∝ it
ADD_BLOCK = 50_000


def choose_kind(n_vectors: int, settings) -> str:
    if settings.index != "auto":
        return settings.index
    return "flat" if n_vectors <= settings.exact_max_chunks else settings.approximate


def index_params(kind: str, n_vectors: int, settings) -> dict:
    """The parameters a built index of this kind uses (stored in the manifest)."""
    if kind == "ivf":
        nlist = settings.ivf_nlist or int(4 * math.sqrt(n_vectors))
        nlist = max(1, min(nlist, n_vectors // IVF_MIN_POINTS_PER_LIST))
        return {"kind": "ivf", "nlist": nlist, "nprobe": min(settings.ivf_nprobe, nlist)}
    if kind == "hnsw":
        return {
            "kind": "hnsw",
            "m": settings.hnsw_m,
            "ef_construction": settings.hnsw_ef_construction,
            "ef_search": settings.hnsw_ef_search,
        }
    return {"kind": "flat"}


def build_index(
    vectors: np.ndarray,
    params: dict,
    seed: int = 0,
    on_added: Callable[[int], None] | None = None,
) -> faiss.Index:
    """A FAISS index of ``params['kind']`` holding ``vectors`` (ids are row numbers)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    n, dim = vectors.shape
    kind = params["kind"]
    if kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif kind == "ivf":
        if n < params["nlist"]:
            raise UserError(f"an IVF index with {params['nlist']} lists needs more than {n} chunks")
        index = faiss.IndexIVFFlat(
            faiss.IndexFlatIP(dim), dim, params["nlist"], faiss.METRIC_INNER_PRODUCT
        )
        index.train(_training_sample(vectors, params["nlist"], seed))
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, params["m"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = params["ef_construction"]
    else:
        raise UserError(f"unknown index kind {kind!r} (flat, ivf, hnsw)")
    for start in range(0, n, ADD_BLOCK):
        index.add(vectors[start : start + ADD_BLOCK])
        if on_added:
            on_added(min(ADD_BLOCK, n - start))
    configure_search(index, params)
    return index


def configure_search(index: faiss.Index, params: dict) -> None:
    """Search-time knobs are not saved by FAISS for every kind: set them after every load."""
    if params["kind"] == "ivf":
        faiss.extract_index_ivf(index).nprobe = params["nprobe"]
    elif params["kind"] == "hnsw":
        index.hnsw.efSearch = params["ef_search"]


def _training_sample(vectors: np.ndarray, nlist: int, seed: int) -> np.ndarray:
    n_train = min(len(vectors), nlist * IVF_TRAIN_POINTS_PER_LIST)
    if n_train == len(vectors):
        return vectors
    rows = np.random.default_rng(seed).choice(len(vectors), n_train, replace=False)
    return vectors[np.sort(rows)]


def save_index(index: faiss.Index, path: Path) -> None:
    faiss.write_index(index, str(path))


def load_index(path: Path, params: dict) -> faiss.Index:
    index = faiss.read_index(str(path))
    configure_search(index, params)
    return index
