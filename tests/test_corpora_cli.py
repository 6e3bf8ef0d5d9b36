"""`selfplay corpus ...` through the CLI: a corpus the issue does not name (this repo's docs)
built and searched, and every bad input is one line on stderr with exit code 2.

In-process ``main([...])`` (the model loads once per test process); one real subprocess checks
the exit code and stderr of `python -m selfplay`."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from selfplay.cli.main import main, parser
from selfplay.core.errors import UserError

REPO = Path(__file__).resolve().parent.parent
DOCS = ["run-folder.md", "design-notes.md", "async.md"]
SMALL = ["--tokenizer", "embedding", "--chunk-tokens", "128", "--overlap-tokens", "16"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SELFPLAY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "selfplay", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        timeout=300,
    )


def test_build_search_and_stats_a_folder_of_this_repos_docs(tmp_path, cache, capsys):
    folder = tmp_path / "projdocs"
    folder.mkdir()
    for name in DOCS:
        (folder / name).write_text((REPO / "docs" / name).read_text())
    build = ["corpus", "build", "projdocs", str(folder), *SMALL, "--batch-size", "8", "--quiet"]
    assert main(build) == 0
    assert "kind=flat" in capsys.readouterr().out
    assert (cache / "corpora" / "projdocs" / "index.faiss").exists()

    sentence = next(  # a line copied from the async doc finds the async doc first
        line for line in (folder / "async.md").read_text().splitlines() if len(line) > 80
    )
    assert main(["corpus", "search", "projdocs", sentence, "-k", "1"]) == 0
    out = capsys.readouterr().out
    assert "projdocs/async.md" in out and "run-folder" not in out and "design-notes" not in out
    assert main(["corpus", "stats", "projdocs"]) == 0
    assert "minilm" in capsys.readouterr().out
    # machine-readable: one JSON line per hit with the whole chunk; the manifest as JSON
    assert main(["corpus", "search", "projdocs", sentence, "-k", "2", "--json"]) == 0
    hits = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [h["rank"] for h in hits] == [1, 2] and hits[0]["source"].endswith("async.md")
    assert sentence.strip() in hits[0]["text"] and hits[0]["cosine"] >= hits[1]["cosine"]
    assert main(["corpus", "stats", "projdocs", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["name"] == "projdocs" and stats["counts"]["chunks"] > 0
    assert main(["corpus", "list"]) == 0
    assert "projdocs" in capsys.readouterr().out


def test_missing_index_exits_2_in_one_line(cache):
    done = cli("corpus", "search", "nothing-here", "query", env={"SELFPLAY_CACHE": str(cache)})
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "corpus 'nothing-here' is not built" in done.stderr


BAD_INPUTS: dict[str, tuple[list[str], str]] = {  # "{tmp}": the test's tmp_path
    "empty folder": (["build", "c", "{tmp}/empty"], "no readable files"),
    "unreadable": (["build", "c", "{tmp}/bad.parquet"], "unreadable as parquet"),
    "missing source": (["build", "c", "{tmp}/nope.txt"], "does not exist"),
    "unknown model": (
        ["build", "c", "{tmp}/one.txt", "--embedding-model", "org/unknown-model"],
        "unknown embedding model 'org/unknown-model'",
    ),
    "below one batch": (["build", "c", "{tmp}/one.txt", *SMALL], "fewer than one embedding batch"),
    "bad setting": (
        ["build", "c", "pydoc-topics", "--chunk-tokens", "64", "--overlap-tokens", "64"],
        "overlap_tokens",
    ),
    "bad index kind": (["build", "c", "pydoc-topics", "--index", "lsh"], "corpus setting index"),
    "bad name": (["build", "../x", "pydoc-topics"], "corpus name '../x'"),
    "missing index": (["stats", "absent"], "corpus 'absent' is not built"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2(tmp_path, cache, capsys, case):
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.parquet").write_bytes(b"this is not parquet")
    (tmp_path / "one.txt").write_text("A single short document.")
    args, message = BAD_INPUTS[case]
    assert main(["corpus", *(a.replace("{tmp}", str(tmp_path)) for a in args)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("selfplay: error: ") and err.count("\n") == 1, err
    assert message in err
    assert not (cache / "corpora" / "c").exists()


def build_subparser() -> argparse.ArgumentParser:
    """The `selfplay corpus build` parser, as `selfplay` makes it."""
    top = parser()
    corpus = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    actions = corpus.choices["corpus"]
    build = next(a for a in actions._actions if isinstance(a, argparse._SubParsersAction))
    return build.choices["build"]


def test_build_flags_are_the_corpus_settings_fields():
    """One flag per CorpusSettings field (and no other), typed by the annotation, helped by the
    field's description, defaulting to None (= the setting's default)."""
    from corpora import CorpusSettings

    flags = {
        action.dest: action
        for action in build_subparser()._actions
        if action.option_strings and action.dest not in ("help", "quiet")
    }
    fields = CorpusSettings.model_fields
    assert list(flags) == list(fields)
    for name, info in fields.items():
        action = flags[name]
        assert action.option_strings == ["--" + name.replace("_", "-")]
        assert action.help == info.description and info.description
        assert action.default is None
        if typing.get_origin(info.annotation) is typing.Literal:
            choices = typing.get_args(info.annotation)
            assert action.type is str and action.metavar == "{" + ",".join(choices) + "}"
        else:
            assert action.type is info.annotation and action.type in (int, float, str)
    assert flags["index"].metavar == "{auto,flat,ivf,hnsw}"
    assert flags["chunk_tokens"].help == "tokens per chunk (≤ 5992)"
    args = build_subparser().parse_args(["n", "src", "--chunk-tokens", "64", "--index", "ivf"])
    assert (args.chunk_tokens, args.index, args.overlap_tokens) == (64, "ivf", None)


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_build_passes_the_model_tokenizer_loader(cache, monkeypatch):
    """The CLI, not corpora, knows how to load a model's tokenizer: it injects tokenizer_for."""
    import corpora
    from selfplay.engines.models import tokenizer_for

    seen = {}

    def fake_build(name, sources, settings, **kw):
        seen.update(name=name, settings=settings, **kw)
        raise UserError("stop here")

    monkeypatch.setattr(corpora, "build_corpus", fake_build)
    assert main(["corpus", "build", "c", "pydoc-topics", "--chunk-tokens", "64"]) == 2
    assert seen["tokenizer_loader"] is tokenizer_for
    assert (seen["settings"].tokenizer, seen["settings"].chunk_tokens) == ("embedded", 64)
    assert tokenizer_for("embedded").is_fast  # a model spec → its fast tokenizer
    assert tokenizer_for("embedded") is tokenizer_for("embedded")  # loaded once
