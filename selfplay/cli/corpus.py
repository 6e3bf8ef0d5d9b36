"""``selfplay corpus build|search|stats|list``: the command line over the ``corpora`` library."""

from __future__ import annotations

import argparse
import json
import typing

from rich.console import Console
from rich.table import Table


def build_flags() -> dict[str, dict]:
    """``add_argument`` keywords per ``CorpusSettings`` field (``--chunk-tokens`` for
    ``chunk_tokens``): the type from the annotation, the help from the field's description,
    default None (= the setting's default). Literal fields show their choices as the metavar;
    checking them is left to ``corpus_settings``, whose error is one line (argparse's
    ``choices=`` would print usage and exit from inside the parser)."""
    from corpora import CorpusSettings

    flags = {}
    for field, info in CorpusSettings.model_fields.items():
        kind, metavar = info.annotation, None
        if typing.get_origin(kind) is typing.Literal:
            values = typing.get_args(kind)
            kinds = {type(v) for v in values}
            if len(kinds) != 1:
                raise TypeError(f"CorpusSettings.{field}: a Literal of one type is needed")
            kind, metavar = kinds.pop(), "{" + ",".join(str(v) for v in values) + "}"
        if kind not in (int, float, str):
            raise TypeError(f"CorpusSettings.{field}: no command-line flag for {info.annotation}")
        flags[field] = {
            "flag": f"--{field.replace('_', '-')}",
            "type": kind,
            "metavar": metavar,
            "help": info.description,
        }
    return flags


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
    for field, flag in build_flags().items():
        build.add_argument(
            flag["flag"], dest=field, type=flag["type"], metavar=flag["metavar"], help=flag["help"]
        )
    build.add_argument("--quiet", action="store_true", help="no progress bar")

    search = actions.add_parser("search", help="the chunks most similar to a query")
    search.add_argument("name")
    search.add_argument("query")
    search.add_argument("-k", type=int, default=5)
    search.add_argument("--json", action="store_true", help="one JSON object per hit, full text")

    stats = actions.add_parser("stats", help="a corpus's manifest: sources, counts, model, index")
    stats.add_argument("name")
    stats.add_argument("--json", action="store_true", help="the manifest as JSON")

    actions.add_parser("list", help="the corpora built in the cache")
    return corpus


def run(args) -> int:
    return {"build": _build, "search": _search, "stats": _stats, "list": _list}[args.action](args)


def _build(args) -> int:
    from corpora import build_corpus, corpus_settings, load_corpus
    from selfplay.engines.models import tokenizer_for

    settings = corpus_settings(**{field: getattr(args, field) for field in build_flags()})
    build_corpus(
        args.name, args.sources, settings, progress=not args.quiet, tokenizer_loader=tokenizer_for
    )
    _print_stats(load_corpus(args.name))
    return 0


def _search(args) -> int:
    from corpora import load_corpus

    corpus = load_corpus(args.name)
    hits = corpus.search(args.query, k=args.k)[0]
    if args.json:  # JSON lines: rank, cosine, source, the chunk's whole text
        for rank, (chunk, score) in enumerate(hits, 1):
            hit = {"rank": rank, "cosine": round(float(score), 6), "source": chunk.source}
            print(json.dumps(hit | {"text": chunk.text}))
        return 0
    table = Table(title=f"{args.name}: {args.query}")
    for column in ("rank", "cosine", "source", "text"):
        table.add_column(column, overflow="fold")
    for rank, (chunk, score) in enumerate(hits, 1):
        snippet = " ".join(chunk.text.split())
        snippet = snippet if len(snippet) <= 240 else snippet[:240] + "…"
        table.add_row(str(rank), f"{score:.3f}", chunk.source, snippet)
    Console().print(table)
    return 0


def _stats(args) -> int:
    from corpora import load_corpus

    corpus = load_corpus(args.name)
    if args.json:
        print(json.dumps({"name": corpus.name, "folder": str(corpus.path)} | corpus.manifest))
        return 0
    _print_stats(corpus)
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
