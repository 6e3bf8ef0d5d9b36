"""``selfplay corpus build|search|stats|list``: the command line over the ``corpora`` library."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

# CLI flag → CorpusSettings field (None: keep the default)
BUILD_FLAGS: dict[str, tuple[type, str]] = {
    "chunk_tokens": (int, "tokens per chunk (≤ 5992)"),
    "overlap_tokens": (int, "tokens shared by neighbouring chunks"),
    "tokenizer": (str, "model spec whose tokens size chunks, or 'embedding'"),
    "embedding_model": (str, "'minilm' (offline package) or a local model folder"),
    "batch_size": (int, "chunks per embedding batch"),
    "dedup_threshold": (float, "cosine at which chunks count as near-duplicates (1: off)"),
    "text_field": (str, "text column of jsonl / parquet / dataset sources"),
    "index": (str, "auto | flat | ivf | hnsw"),
    "exact_max_chunks": (int, "auto: exact search up to this many chunks"),
    "approximate": (str, "auto: ivf | hnsw past exact_max_chunks"),
    "ivf_nlist": (int, "IVF lists (0: 4·√n)"),
    "ivf_nprobe": (int, "IVF lists searched per query"),
    "hnsw_m": (int, "HNSW links per node"),
    "hnsw_ef_construction": (int, "HNSW build beam"),
    "hnsw_ef_search": (int, "HNSW search beam"),
}


def add_parser(sub) -> argparse.ArgumentParser:
    corpus = sub.add_parser("corpus", help="build, search and inspect document corpora")
    actions = corpus.add_subparsers(dest="action", required=True)

    build = actions.add_parser("build", help="documents → chunks → embeddings → FAISS index")
    build.add_argument("name")
    build.add_argument(
        "sources",
        nargs="+",
        help="folders (txt, md, html, jsonl, parquet), files, saved datasets, hub datasets "
        "(network only) or pydoc-topics",
    )
    for field, (kind, text) in BUILD_FLAGS.items():
        build.add_argument(f"--{field.replace('_', '-')}", dest=field, type=kind, help=text)
    build.add_argument("--quiet", action="store_true", help="no progress bar")

    search = actions.add_parser("search", help="the chunks most similar to a query")
    search.add_argument("name")
    search.add_argument("query")
    search.add_argument("-k", type=int, default=5)

    stats = actions.add_parser("stats", help="a corpus's manifest: sources, counts, model, index")
    stats.add_argument("name")

    actions.add_parser("list", help="the corpora built in the cache")
    return corpus


def run(args) -> int:
    return {"build": _build, "search": _search, "stats": _stats, "list": _list}[args.action](args)


def _build(args) -> int:
    from corpora import build_corpus, corpus_settings, load_corpus

    settings = corpus_settings(**{field: getattr(args, field) for field in BUILD_FLAGS})
    build_corpus(args.name, args.sources, settings, progress=not args.quiet)
    _print_stats(load_corpus(args.name))
    return 0


def _search(args) -> int:
    from corpora import load_corpus

    corpus = load_corpus(args.name)
    table = Table(title=f"{args.name}: {args.query}")
    for column in ("rank", "cosine", "source", "text"):
        table.add_column(column, overflow="fold")
    for rank, (chunk, score) in enumerate(corpus.search(args.query, k=args.k)[0], 1):
        snippet = " ".join(chunk.text.split())
        snippet = snippet if len(snippet) <= 240 else snippet[:240] + "…"
        table.add_row(str(rank), f"{score:.3f}", chunk.source, snippet)
    Console().print(table)
    return 0


def _stats(args) -> int:
    from corpora import load_corpus

    _print_stats(load_corpus(args.name))
    return 0


def _list(args) -> int:
    from corpora import corpora_dir, list_corpora

    names = list_corpora()
    print(f"corpora in {corpora_dir()}: {', '.join(names) if names else 'none'}")
    return 0


def _print_stats(corpus) -> None:
    manifest = corpus.manifest
    counts = manifest["counts"]
    settings = manifest["settings"]
    table = Table(title=f"corpus {corpus.name}", show_header=False)
    table.add_column("key")
    table.add_column("value", overflow="fold")
    rows = {
        "folder": str(corpus.path),
        "sources": ", ".join(manifest["sources"]),
        "built": f"{manifest['built_at']} in {manifest['build_seconds']} s",
        "documents": counts["documents"],
        "chunks": f"{counts['chunks']} ({counts['tokens']} tokens; "
        f"{settings['chunk_tokens']}-token chunks, {settings['overlap_tokens']} overlap, "
        f"{settings['tokenizer']} tokenizer)",
        "duplicates dropped": f"{counts['exact_duplicates']} identical, "
        f"{counts['near_duplicates']} near (cosine ≥ {settings['dedup_threshold']})",
        "embeddings": f"{manifest['embedding_model']}, {manifest['dim']} dims; "
        f"{counts['embedded']} embedded, {counts['reused_embeddings']} reused from cache",
        "index": ", ".join(f"{k}={v}" for k, v in manifest["index"].items()),
    }
    for key, value in rows.items():
        table.add_row(key, str(value))
    Console().print(table)
