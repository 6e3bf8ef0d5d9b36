"""Shared fixtures: the tiny random model, small configs, quiet libraries."""

from __future__ import annotations

import os
import warnings

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", message=".*should not be contained in the prefix.*")
torch.set_num_threads(2)


@pytest.fixture(scope="session")
def tiny_model_path():
    import transformers

    transformers.logging.set_verbosity_error()
    from selfplay.engines.models import resolve_model_path

    return resolve_model_path("tiny-random")


def tiny_config(tmp_path, **sections) -> dict:
    """A complete rlvr experiment on the tiny model, small enough for a test."""
    config = {
        "name": "tiny",
        "loop": "rlvr",
        "run_dir": str(tmp_path / "runs"),
        "model": {"path": "tiny-random"},
        "sampling": {"max_new_tokens": 6},
        "train": {"steps": 3, "lr": 1e-3, "lora": {"r": 4, "alpha": 8}},
        "roles": {"solver": {"prompt": "solver_terse"}},
        "rlvr": {
            "tasks": [
                {
                    "name": "chain_sum",
                    "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
                }
            ],
            "dataset_size": 4,
            "prompts_per_step": 2,
            "group_size": 3,
            "eval_size": 2,
        },
        "logging": {"wandb": "disabled", "progress": False},
    }
    for key, value in sections.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    return config


def run_tiny_spiral(tmp_path, spiral: dict, prompt: str, train: dict) -> tuple:
    """(the run folder, its metric rows): a whole SPIRAL run on the tiny model, in-process, with
    these ``spiral:`` settings, the ``player`` role's ``prompt`` and ``train:`` settings."""
    from selfplay.config_files import dump
    from selfplay.loops import validate
    from selfplay.running.runner import build, run

    data = tiny_config(tmp_path, loop="spiral", train=train, spiral=spiral)
    del data["rlvr"]
    data["roles"] = {"player": {"prompt": prompt}}
    config = validate(data, "test")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(dump(config))
    return run_dir, run(build(config, run_dir, resume=False), 0)


def measured(game, choose) -> list:
    """StateCounts at every information state of an OpenSpiel ``game``:
    ``choose(key, legal) -> (counts, invalid)``."""
    from selfplay.stats.exploitability import StateCounts, information_states

    rows = []
    for key, player, state in information_states(game):
        legal = state.legal_actions(player)
        counts, invalid = choose(key, legal)
        names = [state.action_to_string(player, a) for a in legal]
        rows.append(StateCounts(key, player, legal, names, list(counts), invalid))
    return rows


def varied_grade(text, *args) -> dict:
    """A grader for the tiny random model, which never answers right: reward by text length, so
    a group's rewards vary and there is something to train on."""
    return {
        "answer": None,
        "boxed": False,
        "score": 0.0,
        "correct": False,
        "reward": float(len(text) % 2),
    }
