"""corpora with the real offline MiniLM and real FAISS: search finds the source of a copied
sentence, the embedding cache re-embeds only changed chunks, near-duplicates go, builds are
atomic, the contamination guard drops copies of evaluation items."""

from __future__ import annotations

import json
import pydoc_data.topics
from functools import cache

import pytest

import corpora.build
from corpora import (
    DEFAULT_CORPUS,
    ContaminationGuard,
    build_corpus,
    corpus_settings,
    ensure_default_corpus,
    load_corpus,
)
from corpora.corpus import shared_embedder
from corpora.embedding import MINILM
from selfplay.core.errors import UserError

TOPICS = ["while", "del", "return", "global", "nonlocal", "lambda", "pass", "assert"]
COPIED = {  # sentences copied word for word from the pydoc topics
    "lambda": "Lambda expressions (sometimes called lambda forms) are used to create anonymous "
    "functions.",
    "pass": '"pass" is a null operation — when it is executed, nothing happens.',
    "del": "Deletion of a target list recursively deletes each target, from left to right.",
    "global": 'It would be impossible to assign to a global variable without "global", although '
    "free variables may refer to globals without being declared global.",
    "nonlocal": "This is important because the default behavior for binding is to search the "
    "local namespace first.",
    "return": '"return" leaves the current function call with the expression list (or "None") '
    "as return value.",
    "assert": 'Assignments to "__debug__" are illegal.',
}
SMALL = {"chunk_tokens": 128, "overlap_tokens": 16, "batch_size": 4}


@cache
def load(spec: str):
    """The tokenizer loader a caller of corpora passes (model specs: ``embedded`` here)."""
    from selfplay.engines.models import load_tokenizer, resolve_model_path

    return load_tokenizer(resolve_model_path(spec))


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def embedder():
    return shared_embedder(MINILM)


@pytest.fixture(scope="module")
def topics_corpus(tmp_path_factory, embedder):
    cache = tmp_path_factory.mktemp("corpora")
    source = "pydoc-topics:" + ",".join(TOPICS)
    build_corpus("topics", [source], corpus_settings(**SMALL), cache, False, tokenizer_loader=load)
    return load_corpus("topics", cache)


def test_search_returns_the_document_a_sentence_was_copied_from(topics_corpus):
    assert all(topic_sentence_is_real(t, s) for t, s in COPIED.items())
    results = topics_corpus.search(list(COPIED.values()), k=3)
    for (topic, sentence), hits in zip(COPIED.items(), results, strict=True):
        best, score = hits[0]
        assert best.source == f"pydoc-topics/{topic}", (sentence, best.source)
        holders = [c.id for c in topics_corpus.chunks if flat(sentence) in flat(c.text)]
        if holders:  # the sentence lies inside a chunk (not across a boundary): that chunk
            assert any(chunk.id in holders for chunk, _ in hits)  # is among the top 3
        assert score > hits[1][1] and 0 < score <= 1.0001


def topic_sentence_is_real(topic: str, sentence: str) -> bool:
    return flat(sentence) in flat(pydoc_data.topics.topics[topic])


def test_search_shapes_and_manifest(topics_corpus):
    corpus = topics_corpus
    assert len(corpus.search("while loop", k=2)) == 1
    many = corpus.search(["while loop", "anonymous function"], k=1000)
    assert [len(hits) for hits in many] == [len(corpus.chunks)] * 2  # k clipped to the corpus
    scores = [s for _, s in many[0]]
    assert scores == sorted(scores, reverse=True)
    vectors = corpus.embed(["a", "b"])
    assert vectors.shape == (2, corpus.dim) == (2, 384) and vectors.dtype.name == "float32"
    manifest = corpus.manifest
    assert manifest["counts"]["documents"] == len(TOPICS)
    assert manifest["counts"]["chunks"] == len(corpus.chunks)
    assert manifest["index"] == {"kind": "flat"} and manifest["dim"] == 384
    assert all(c.n_tokens <= 128 for c in corpus.chunks)


def write_docs(folder, texts: dict[str, str]) -> None:
    folder.mkdir(exist_ok=True)
    for name, text in texts.items():
        (folder / name).write_text(text)


def test_rebuild_embeds_only_changed_chunks(tmp_path, embedder):
    docs = tmp_path / "docs"
    texts = {f"{t}.txt": pydoc_data.topics.topics[t] for t in ("lambda", "del", "global")}
    write_docs(docs, texts)
    settings = corpus_settings(chunk_tokens=64, overlap_tokens=8, batch_size=2)
    before = embedder.texts_embedded
    build = dict(progress=False, embedder=embedder, tokenizer_loader=load)
    build_corpus("cached", [str(docs)], settings, tmp_path, **build)
    first = load_corpus("cached", tmp_path)
    assert embedder.texts_embedded - before == len(first.chunks)

    before = embedder.texts_embedded  # same sources: nothing to embed
    build_corpus("cached", [str(docs)], settings, tmp_path, **build)
    assert embedder.texts_embedded == before
    assert load_corpus("cached", tmp_path).manifest["counts"]["embedded"] == 0

    (docs / "del.txt").write_text(texts["del.txt"] + "\nA new closing sentence about deletion.")
    build_corpus("cached", [str(docs)], settings, tmp_path, **build)
    second = load_corpus("cached", tmp_path)
    new_ids = {c.id for c in second.chunks} - {c.id for c in first.chunks}
    assert 0 < len(new_ids) < len(second.chunks) / 3  # only the changed end of one file
    assert embedder.texts_embedded - before == len(new_ids)
    assert second.manifest["counts"]["embedded"] == len(new_ids)
    # reused vectors are the vectors the first build computed for the same text
    old = dict(zip((c.id for c in first.chunks), first.vectors(), strict=True))
    for chunk, vector in zip(second.chunks, second.vectors(), strict=True):
        if chunk.id in old:
            assert (vector == old[chunk.id]).all()


def test_near_duplicate_chunks_are_dropped(tmp_path, embedder):
    text = pydoc_data.topics.topics["while"]
    near = text.replace("repeated execution", "repeating execution")
    assert near != text
    docs = {"a.txt": text, "b.txt": near, "c.txt": pydoc_data.topics.topics["assert"]}
    write_docs(tmp_path / "docs", docs)
    settings = {"chunk_tokens": 1024, "overlap_tokens": 0, "batch_size": 2}
    dedup = corpus_settings(**settings)
    build_corpus("dedup", [str(tmp_path / "docs")], dedup, tmp_path, False, tokenizer_loader=load)
    corpus = load_corpus("dedup", tmp_path)
    assert [c.source for c in corpus.chunks] == ["docs/a.txt", "docs/c.txt"]
    assert corpus.manifest["counts"]["near_duplicates"] == 1
    off = corpus_settings(**settings, dedup_threshold=1.0)
    build_corpus("kept", [str(tmp_path / "docs")], off, tmp_path, False, tokenizer_loader=load)
    assert len(load_corpus("kept", tmp_path).chunks) == 3


def test_failed_rebuild_leaves_the_previous_corpus(tmp_path, embedder, monkeypatch):
    source = ["pydoc-topics:pass,lambda"]
    settings = corpus_settings(chunk_tokens=64, overlap_tokens=0, batch_size=2)
    build_corpus("atomic", source, settings, tmp_path, progress=False, tokenizer_loader=load)
    good = load_corpus("atomic", tmp_path).manifest["built_at"]

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(corpora.build, "save_index", crash)
    with pytest.raises(OSError):
        build_corpus(
            "atomic", ["pydoc-topics:del"], settings, tmp_path, False, tokenizer_loader=load
        )
    with pytest.raises(OSError):
        build_corpus("fresh", source, settings, tmp_path, progress=False, tokenizer_loader=load)
    assert load_corpus("atomic", tmp_path).manifest["built_at"] == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["atomic"]  # no half-built folders


def test_corpus_smaller_than_a_batch_is_refused(tmp_path, embedder):
    settings = corpus_settings(batch_size=64)
    with pytest.raises(UserError, match="fewer than one embedding batch"):
        build_corpus(
            "tiny", ["pydoc-topics:pass"], settings, tmp_path, False, tokenizer_loader=load
        )
    assert not (tmp_path / "tiny").exists()
    with pytest.raises(UserError, match="is not built"):
        load_corpus("tiny", tmp_path)


def test_ensure_default_corpus_builds_pydoc_topics_once(tmp_path, monkeypatch, embedder):
    calls = []
    real_build = corpora.build.build_corpus

    def small_build(name, sources, settings=None, cache_dir=None, progress=True, **kw):
        calls.append((name, sources, kw))
        subset = ["pydoc-topics:pass,lambda,del"]
        return real_build(name, subset, corpus_settings(batch_size=2), cache_dir, False, **kw)

    monkeypatch.setattr(corpora.build, "build_corpus", small_build)
    corpus = ensure_default_corpus(tmp_path, tokenizer_loader=load)
    assert calls == [(DEFAULT_CORPUS, ["pydoc-topics"], {"tokenizer_loader": load})]
    assert corpus.name == "pydoc-topics"
    assert corpus.manifest["settings"]["tokenizer"] == "embedded"  # chunked by the loader's
    assert ensure_default_corpus(tmp_path).manifest == corpus.manifest  # built: no loader needed
    assert len(calls) == 1  # the second call loads what the first built


def test_model_tokenizer_without_a_loader_fails_in_one_line(tmp_path):
    """corpora loads no language model: a model spec needs the caller's tokenizer_loader."""
    for call in (
        lambda: build_corpus("nl", ["pydoc-topics:pass"], corpus_settings(), tmp_path, False),
        lambda: ensure_default_corpus(tmp_path),
    ):
        with pytest.raises(UserError) as error:
            call()
        message = str(error.value)
        assert "\n" not in message
        assert message.startswith("corpus setting tokenizer: 'embedded' is a model spec")
        assert "tokenizer_loader" in message
    assert list(tmp_path.iterdir()) == []  # failed before any work


def test_loaded_tokenizer_must_be_fast(tmp_path, embedder):
    slow = type("SlowTokenizer", (), {"is_fast": False})()
    settings = corpus_settings(tokenizer="some-model")
    with pytest.raises(UserError, match="tokenizer of some-model is not a fast tokenizer"):
        build_corpus("slow", ["pydoc-topics:pass"], settings, tmp_path, False,
                     tokenizer_loader=lambda spec: slow)  # fmt: skip


def test_corrupt_chunks_file_is_one_line(tmp_path):
    from corpora.corpus import read_chunks

    good = {"id": "a", "text": "line\u2028separator and \x85 next-line stay", "source": "s",
            "n_tokens": 3}  # fmt: skip
    rows = tmp_path / "chunks.jsonl"
    rows.write_text(json.dumps(good, ensure_ascii=False) + "\n")
    assert read_chunks(rows)[0].text == good["text"]  # U+2028 / U+0085 are not line ends here
    rows.write_text(json.dumps(good, ensure_ascii=False) + "\n{broken\n")
    with pytest.raises(UserError, match=r"chunks.jsonl:2: not a chunk row \(") as error:
        read_chunks(rows)
    assert "\n" not in str(error.value)


def test_contamination_guard_drops_copies_keeps_unrelated(embedder):
    evaluation = [
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
        "clips in May. How many clips did Natalia sell altogether in April and May?",
        "What is the largest prime factor of 13195?",
        "A train travels 60 km in 45 minutes. What is its average speed in km per hour?",
    ]
    guard = ContaminationGuard(evaluation, threshold=0.9, embedder=embedder)
    copied = "Question: " + evaluation[0].replace("Natalia", "natalia") + "  "
    same_words = "  what is the LARGEST prime factor of 13195? "
    unrelated = [
        "What does the Python pass statement do?",
        "How many clips did Natalia sell in June if she sold 12 each week?",
    ]
    flags = guard.check([copied, same_words, *unrelated])
    assert flags == [True, True, False, False]
    assert guard.similarity([copied])[0] >= 0.9  # caught by the embedding, not by exact text
    assert (guard.checked, guard.flagged) == (4, 2)
    assert ContaminationGuard([], embedder=embedder).check(["anything"]) == [False]
