"""The knobs of a corpus build: one pydantic model, the only list of them.

``selfplay corpus build`` makes one flag per field (``--chunk-tokens`` for ``chunk_tokens``, the
field's description as its help), and a built corpus's manifest stores ``model_dump()``.
A new setting is a new field here and nothing else (docs/corpora.md explains each one)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from selfplay.core.errors import UserError

MAX_CHUNK_TOKENS = 5992  # SPICE's chunk size (docs/algorithms.md#spice)


class CorpusSettings(BaseModel):
    """How `selfplay corpus build` turns documents into a searchable corpus (docs/corpora.md).

    Chunk sizes are in tokens of ``tokenizer`` (the policy's tokenizer by default, because the
    challenger reads the chunk); SPICE's chunks are up to 5,992 tokens
    (docs/algorithms.md#spice)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    chunk_tokens: int = Field(
        256, ge=16, le=MAX_CHUNK_TOKENS, description="tokens per chunk (≤ 5992)"
    )
    overlap_tokens: int = Field(32, ge=0, description="tokens shared by neighbouring chunks")
    # a model spec (embedded, tiny-random, a folder, a hub id): build_corpus loads it through
    # the tokenizer_loader its caller passes
    tokenizer: str = Field(
        "embedded", description="model spec whose tokens size chunks, or 'embedding'"
    )
    embedding_model: str = Field(
        "minilm", description="'minilm' (offline package) or a local model folder"
    )
    batch_size: int = Field(32, ge=1, description="chunks per embedding batch")
    dedup_threshold: float = Field(
        0.95, gt=0, le=1, description="cosine at which chunks count as near-duplicates (1: off)"
    )
    text_field: str = Field("text", description="text column of jsonl / parquet / dataset sources")
    index: Literal["auto", "flat", "ivf", "hnsw"] = Field(
        "auto", description="auto | flat | ivf | hnsw"
    )
    exact_max_chunks: int = Field(
        100_000, ge=1, description="auto: exact search up to this many chunks"
    )
    approximate: Literal["ivf", "hnsw"] = Field(
        "ivf", description="auto: ivf | hnsw past exact_max_chunks"
    )
    ivf_nlist: int = Field(0, ge=0, description="IVF lists (0: 4·√n)")
    ivf_nprobe: int = Field(64, ge=1, description="IVF lists searched per query")
    hnsw_m: int = Field(32, ge=4, description="HNSW links per node")
    hnsw_ef_construction: int = Field(80, ge=8, description="HNSW build beam")
    hnsw_ef_search: int = Field(128, ge=1, description="HNSW search beam")

    @model_validator(mode="after")
    def _overlap_below_chunk(self) -> CorpusSettings:
        if self.overlap_tokens >= self.chunk_tokens:
            raise ValueError(
                f"overlap_tokens ({self.overlap_tokens}) must be below chunk_tokens "
                f"({self.chunk_tokens})"
            )
        return self


def corpus_settings(**values) -> CorpusSettings:
    """CorpusSettings from keyword values (None = default), bad values as one-line UserErrors."""
    try:
        return CorpusSettings(**{k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "corpus settings"
        raise UserError(f"corpus setting {where}: {error['msg']}") from None
