"""corpora without the embedding model: cleaning, sources, token chunking, exact dedup, FAISS
index kinds. (tests/test_corpora.py covers what needs MiniLM.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

from corpora.build import chunk_documents, chunk_id, drop_exact_duplicates
from corpora.chunking import chunk_text, token_offsets
from corpora.corpus import Chunk
from corpora.index import build_index, choose_kind, index_params
from corpora.settings import corpus_settings
from corpora.sources import Document, clean_text, html_to_text, read_sources
from selfplay.core.errors import UserError


@pytest.fixture(scope="module")
def tokenizer():
    from selfplay.engines.models import load_tokenizer, resolve_model_path

    return load_tokenizer(resolve_model_path("embedded"))


def topic(name: str) -> str:
    import pydoc_data.topics

    return clean_text(pydoc_data.topics.topics[name])


# ---------------------------------------------------------------------- chunking
@pytest.mark.parametrize("chunk_tokens,overlap", [(64, 0), (64, 16), (100, 30), (40, 39)])
def test_chunks_tile_the_document_with_exact_token_overlap(tokenizer, chunk_tokens, overlap):
    text = topic("assert") + "\n\n" + topic("while")
    n_tokens = len(token_offsets(text, tokenizer))
    spans = chunk_text(text, tokenizer, chunk_tokens, overlap)
    assert spans[0].token_start == 0
    assert spans[-1].token_end == n_tokens
    for span in spans:
        assert 0 < span.n_tokens <= chunk_tokens
        assert span.text and span.text in text  # a verbatim slice of the document
    for before, after in zip(spans, spans[1:], strict=False):
        assert after.token_start == before.token_end - overlap  # exactly `overlap` shared tokens
        assert after.token_start > before.token_start  # always advances


def test_chunk_text_re_tokenizes_to_its_token_count(tokenizer):
    spans = chunk_text(topic("for"), tokenizer, 80, 10)
    for span in spans:
        # a slice re-tokenized may merge or split at its two edges, nowhere else
        assert abs(len(token_offsets(span.text, tokenizer)) - span.n_tokens) <= 2


def test_windows_end_at_a_paragraph_or_sentence_when_one_is_near(tokenizer):
    sentence = "The quick brown fox jumps over the lazy dog again and again. "
    text = (sentence * 3).strip() + "\n\n" + (sentence * 3).strip()
    spans = chunk_text(text, tokenizer, 50, 5)
    first = spans[0]
    assert first.n_tokens < 50  # snapped back from the hard 50-token cut
    assert first.text.endswith((".", "again."))
    # a window with no boundary in its last quarter is cut hard at chunk_tokens
    words = " ".join(f"w{i}" for i in range(400))
    assert chunk_text(words, tokenizer, 50, 5)[0].n_tokens == 50


def test_short_document_is_one_chunk(tokenizer):
    spans = chunk_text("Hello world.", tokenizer, 64, 8)
    assert [(s.token_start, s.text) for s in spans] == [(0, "Hello world.")]


def test_overlap_must_be_below_chunk_size():
    with pytest.raises(UserError, match="overlap_tokens"):
        corpus_settings(chunk_tokens=64, overlap_tokens=64)
    with pytest.raises(UserError, match="chunk_tokens"):
        corpus_settings(chunk_tokens=6000)  # above the paper's 5,992


# ---------------------------------------------------------------------- cleaning and dedup
def test_clean_text_collapses_spaces_and_blank_lines_but_keeps_lines():
    raw = "Title  \r\n\r\n\r\n\r\nline one\t\twith  tabs \nline two\u00a0here\n\n\n"
    assert clean_text(raw) == "Title\n\nline one with tabs\nline two here"


def test_html_to_text_drops_markup_and_scripts():
    html = "<html><head><script>var x=1;</script><style>p{}</style></head><body>"
    html += "<nav>menu</nav><h1>Heading</h1><p>Some <b>bold</b> text.</p></body></html>"
    text = clean_text(html_to_text(html))
    assert "Heading" in text and "Some bold text." in " ".join(text.split())
    assert "var x" not in text and "menu" not in text and "<" not in text


def test_exact_duplicates_ignore_case_and_whitespace(tokenizer):
    settings = corpus_settings(chunk_tokens=4096, overlap_tokens=0)
    docs = [
        Document("pydoc/if", topic("if")),
        Document("pydoc/else", topic("else")),  # CPython ships the same text twice
        Document("shouty", topic("assert").upper().replace(" ", "  ")),
        Document("pydoc/assert", topic("assert")),
    ]
    chunks = chunk_documents(docs, tokenizer, settings)
    kept = drop_exact_duplicates(chunks)
    assert [c.source for c in kept] == ["pydoc/if", "shouty"]
    assert chunk_id("abc") == chunk_id("abc") != chunk_id("abd")


# ---------------------------------------------------------------------- sources
def test_folder_of_every_kind_is_read(tmp_path):
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("plain text file")
    (folder / "sub" / "b.md").write_text("# markdown\n\nbody")
    (folder / "c.html").write_text("<p>html <i>page</i></p>")
    (folder / "d.jsonl").write_text(
        json.dumps({"text": "row one"}) + "\n" + json.dumps({"text": "row two"}) + "\n"
    )
    (folder / "ignored.bin").write_bytes(b"\x00\x01")
    import pandas as pd

    pd.DataFrame({"text": ["parquet row"], "other": [1]}).to_parquet(folder / "e.parquet")
    docs = read_sources([str(folder)])
    assert {d.source: d.text for d in docs} == {
        "docs/a.txt": "plain text file",
        "docs/c.html": "html page",
        "docs/d.jsonl#0": "row one",
        "docs/d.jsonl#1": "row two",
        "docs/e.parquet#0": "parquet row",
        "docs/sub/b.md": "# markdown\n\nbody",
    }


def test_saved_dataset_and_text_field(tmp_path):
    import datasets

    datasets.Dataset.from_dict({"body": ["first doc", "second doc"]}).save_to_disk(tmp_path / "ds")
    docs = read_sources([str(tmp_path / "ds")], text_field="body")
    assert [d.text for d in docs] == ["first doc", "second doc"]
    with pytest.raises(UserError, match="no column 'text'.*body"):
        read_sources([str(tmp_path / "ds")])


def test_pydoc_topics_source():
    docs = read_sources(["pydoc-topics:assert,while"])
    assert [d.source for d in docs] == ["pydoc-topics/assert", "pydoc-topics/while"]
    assert "AssertionError" in docs[0].text
    assert len(read_sources(["pydoc-topics"])) > 50
    with pytest.raises(UserError, match="unknown pydoc topic 'nope'"):
        read_sources(["pydoc-topics:nope"])


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "no readable files"),
        (lambda p: (p / "blank.txt").write_text("  \n\n ") and p / "blank.txt", "holds no text"),
        (
            lambda p: (p / "bad.parquet").write_bytes(b"not parquet") and p / "bad.parquet",
            "unreadable",
        ),
        (lambda p: (p / "x.pdf").write_bytes(b"%PDF") and p / "x.pdf", "unknown type"),
    ],
)
def test_bad_sources_are_one_line_errors(tmp_path, make, message):
    with pytest.raises(UserError, match=message) as info:
        read_sources([str(make(tmp_path))])
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------------- indexes
def test_index_kind_follows_the_size_threshold():
    settings = corpus_settings(exact_max_chunks=1000, approximate="hnsw")
    assert choose_kind(1000, settings) == "flat"
    assert choose_kind(1001, settings) == "hnsw"
    assert choose_kind(10, corpus_settings(index="ivf")) == "ivf"
    params = index_params("ivf", 100_000, corpus_settings())
    assert params["nlist"] == 1264 and params["nprobe"] == 64  # 4·√n lists
    # but never fewer than 39 training points per list (FAISS's floor): 10,000 // 39
    assert index_params("ivf", 10_000, corpus_settings())["nlist"] == 256


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approximate_indexes_find_what_exact_search_finds(kind):
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(50, 32))
    vectors = centres[rng.integers(0, 50, 5000)] + 0.3 * rng.normal(size=(5000, 32))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    queries = vectors[:100] + 0.05 * rng.normal(size=(100, 32)).astype(np.float32)
    exact = build_index(vectors, {"kind": "flat"})
    approx = build_index(vectors, index_params(kind, len(vectors), corpus_settings(ivf_nprobe=16)))
    _, truth = exact.search(queries, 10)
    _, found = approx.search(queries, 10)
    recall = np.mean([len(set(t) & set(f)) / 10 for t, f in zip(truth, found, strict=True)])
    assert recall >= 0.9
    assert approx.ntotal == len(vectors)


def test_chunk_is_frozen():
    chunk = Chunk("id", "text", "src", 3)
    with pytest.raises(AttributeError):
        chunk.text = "other"


def test_bench_corpus_index_part_reaches_target_recall():
    from selfplay.bench.corpus import bench_corpus, recall_at_10

    assert recall_at_10(np.array([[1] * 10]), np.array([list(range(10))])) == 0.1
    rows = bench_corpus(vectors=3000, queries=20, texts=0, indexes="ivf")["index"]
    assert [r["kind"] for r in rows] == ["flat", "ivf"]
    assert rows[0]["recall"] == 1.0 and rows[1]["recall"] >= 0.95
    assert rows[1]["setting"].startswith("nprobe=")
