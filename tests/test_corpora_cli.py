"""`selfplay corpus ...` through the CLI: a corpus the issue does not name (this repo's docs)
built and searched, and every bad input is one line on stderr with exit code 2.

In-process ``main([...])`` (the model loads once per test process); one real subprocess checks
the exit code and stderr of `python -m selfplay`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from selfplay.cli.main import main

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
