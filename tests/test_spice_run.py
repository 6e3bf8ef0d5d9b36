"""SPICE end to end on the tiny model and a small real corpus (a few of Python's pydoc topics):
the challenger reads real chunks, the runner writes tasks.jsonl, and a resumed run redoes the
interrupted step without duplicating its tasks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from selfplay.loops import validate
from selfplay.running.runner import build, resume, run
from tests.conftest import tiny_config

TOPICS = ("while", "assert", "pass", "lambda", "for")


@pytest.fixture(scope="module")
def corpus_cache(tmp_path_factory):
    """A corpus built from five pydoc topics into a temporary cache (real chunks, MiniLM, FAISS)."""
    from pydoc_data.topics import topics

    from corpora import CorpusSettings, build_corpus
    from selfplay.engines.models import tokenizer_for

    root = tmp_path_factory.mktemp("corpus")
    sources = root / "docs"
    sources.mkdir()
    for name in TOPICS:
        (sources / f"{name}.txt").write_text(topics[name])
    settings = CorpusSettings(chunk_tokens=64, overlap_tokens=8, batch_size=4, tokenizer="embedded")
    build_corpus("pydoc-few", [str(sources)], settings, cache_dir=root / "cache", progress=False,
                 tokenizer_loader=tokenizer_for)
    return root / "cache"


def spice_run_config(tmp_path, corpus_cache, steps=2, **spice) -> dict:
    config = tiny_config(
        tmp_path,
        loop="spice",
        train={"steps": steps},
        spice={
            "corpus": "pydoc-few",
            "corpus_cache": str(corpus_cache),
            "chunk_max_tokens": 32,
            "documents_per_step": 2,
            "attempts_per_document": 2,
            "solver_samples": 2,
            "sampler": "near_half",
            "contamination": {"enabled": False},
            **spice,
        },
    )
    del config["rlvr"]
    config["roles"] = {"challenger": {"prompt": "challenger"}, "reasoner": {"prompt": "reasoner"}}
    return config


def task_rows(run_dir):
    return [json.loads(line) for line in (run_dir / "tasks.jsonl").read_text().splitlines()]


@pytest.mark.heavy  # CI's `make test-heavy` (docs/testing.md#what-runs-where)
def test_tiny_model_run_writes_tasks_and_resumes(tmp_path, tiny_model_path, corpus_cache):
    config = validate(spice_run_config(tmp_path, corpus_cache), "test")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json")))
    world = build(config, run_dir, resume=False)
    chunk_texts = {chunk.id: chunk.text for chunk in world.loop.documents}
    rows = run(world, 0)
    assert [r["step"] for r in rows if not r.get("final")] == [0, 1]
    assert all("spice/challenger/valid_rate" in r for r in rows if not r.get("final"))

    tasks = task_rows(run_dir)
    assert [t["step"] for t in tasks] == [0, 0, 0, 0, 1, 1, 1, 1]  # every attempt, both steps
    assert all(t["loop"] == "spice" and t["phase"] == "challenger" for t in tasks)
    assert all(t["document"] in chunk_texts for t in tasks)
    episode = json.loads((run_dir / "episodes" / "step-000000.jsonl").read_text().splitlines()[0])
    chunk_prompt = episode["turns"][0]["prompt_text"]
    document_id = tasks[0]["document"]  # the first attempt's row: the first challenger episode
    assert chunk_texts[document_id].split()[0] in chunk_prompt  # the real chunk is in the prompt

    # interrupt after step 0: drop the last checkpoint and resume from step 1
    shutil.rmtree(run_dir / "checkpoints" / "step-000002")
    before_resume = task_rows(run_dir)
    _, resumed = resume(run_dir)
    tasks = task_rows(run_dir)
    assert [t["step"] for t in tasks] == [0, 0, 0, 0, 1, 1, 1, 1]  # step 1 redone, not doubled
    assert tasks[:4] == before_resume[:4]
    assert [r["step"] for r in resumed if not r.get("final")] == [0, 1]
    # a run made before inputs/ existed gets them at its resume: the corpus manifest too
    manifest = json.loads((run_dir / "inputs" / "corpus" / "manifest.json").read_text())
    assert manifest == json.loads((corpus_cache / "pydoc-few" / "manifest.json").read_text())


@pytest.mark.slow  # a subprocess: the in-process UserError tests cover the same paths
def test_cli_bad_reward_name_is_one_line_exit_2(tmp_path):
    config = spice_run_config(tmp_path, tmp_path, challenger_reward="no_such_reward")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [sys.executable, "-m", "selfplay", "run", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    assert "unknown proposer reward 'no_such_reward'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()  # no run folder left behind
