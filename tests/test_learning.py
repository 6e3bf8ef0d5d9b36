"""A learning check for every loop: one or two steps on the tiny model, each role's own adapter,
and the engine's policy must move toward each trained role's better-rewarded samples by at least
``MARGIN`` nats (``tests/learning.py`` defines the measure, ``gain``).

Each experiment is made so that every trained role's rewards vary within the groups its loop
compares them in: role prompts start the reply (``prefill``) with a right or a wrong answer, a
valid or an invalid proposal, drawn per request by Jinja's ``random`` (the global random stream,
seeded per test), and the model's own tokens follow. The tiny random model cannot answer by
itself, but the loop's reward, its advantages, the learner, the adapters and the weight sync are
the loop's own, driven only through the config and ``selfplay run``'s runner. So each check fails
when a role's advantage has the wrong sign (gain < 0), when a role's samples train another
adapter (its own does not move), or when the new weights do not reach the engine (nothing moves):
docs/testing.md#learning-checks lists the bugs planted and what each check saw.

``MARGIN``: the gains measured here are 0.17 to 1.8 nats (lr 0.05 moves a 6-token reply by about a
nat); a flipped sign gives minus as much, and an adapter that is not trained moves by 0 (to
1e-6: the engine scores the same weights twice). 0.05 nats is far from both.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path

import pytest
import yaml

from tests import tiny_loops as tiny
from tests.learning import describe, run_and_measure
from tests.tiny_loops import CHAIN_SUM, roles

MARGIN = 0.05
TINY = tiny.TINY | {
    "checkpoint": {"every": 100, "keep": 1},
    # one thread: the tiny model gains nothing from two, and on a busy machine OpenMP's second
    # thread waits for a core (pytest does not set the command's OMP_WAIT_POLICY=PASSIVE)
    "threads": {"torch": 1},
}
LORA = {"r": 4, "alpha": 8}


def pick(*choices: str) -> str:
    """Jinja that renders one of the literal ``choices`` at random (raw: braces stay text)."""
    return "{% set c = range(" + str(len(choices)) + ")|random %}" + "".join(
        "{% if c == " + str(k) + " %}{% raw %}" + text + "{% endraw %}{% endif %}"
        for k, text in enumerate(choices))


PROMPTS = {
    # the proposers, SPELL's questioner and verifier and SSP's judge as in the golden runs (whose
    # rewards vary with the model's tokens)
    **{name: tiny.GOLDEN_PROMPTS[name] for name in (
        "proposer.yaml", "mae_propose.yaml", "mae_solve.yaml", "ssp_proposer.yaml",
        "ssp_judge.yaml", "sqlm_proposer.yaml", "spell_questioner.yaml", "spell_verifier.yaml")},
    # the others, each with two (or more) starts drawn at random (tests/learning_prompts.yaml)
    **{f"{name}.yaml": {"name": name, "user": spec["user"],
                        "prefill": spec["prefill"] if "prefill" in spec
                        else spec.get("lead", "") + pick(*spec["either"])}
       for name, spec in yaml.safe_load((Path(__file__).parent / "learning_prompts.yaml")
                                        .read_text(encoding="utf-8")).items()},
}


def experiments(folder: Path) -> dict[str, dict]:
    """One experiment per loop; ``own`` adapters are set for every role by the test."""
    p = {name: str(folder / name) for name in PROMPTS}
    corpus = {"corpus": "pydoc-few", "corpus_cache": str(folder / "cache" / "corpora")}
    return {
        "rlvr": {
            "train": {"steps": 1, "lr": 5e-2},
            "roles": roles(p, solver="solver"),
            "rlvr": {"tasks": [CHAIN_SUM], "dataset_size": 4, "prompts_per_step": 2,
                     "group_size": 4, "eval_size": 0},
        },
        "spiral": {
            "train": {"steps": 1, "lr": 5e-2},
            "roles": roles(p, player="player"),
            "spiral": {"games": [{"id": "kuhn_poker", "kwargs": {"rounds": 1}}],
                       "games_per_step": 6, "lenient": True, "eval_games": 0,
                       "eval_reasoning_size": 0},
        },
        "spice": {
            "train": {"steps": 1, "lr": 5e-2},
            "roles": roles(p, challenger="asker", reasoner="answerer"),
            "spice": {**corpus, "chunk_max_tokens": 24, "documents_per_step": 2,
                      "attempts_per_document": 2, "max_rounds": 1, "formats": "free",
                      "solver_samples": 4, "challenger_reward": "learning_rewards:spread",
                      "eval_reasoning_size": 0},
        },
        "agent0": {
            "train": {"steps": 2, "lr": 5e-2, "loss": "grpo"},
            "advantage": {"adpo": True},
            "roles": roles(p, curriculum="proposer", executor="executor"),
            "agent0": {
                "curriculum_steps": 1, "executor_steps": 1, "solver_samples": 4,
                "proposal_group_size": 4, "pool_size": 4, "band": "code", "band_lo": 0.0,
                "band_hi": 1.0, "executor_tasks_per_step": 2, "executor_group_size": 4,
                "probe_size": 0, "proposer_reward": "learning_rewards:spread",
                "repetition_weight": 0.0, "executor_tool": False,
            },
        },
        "azr": {
            "train": {"steps": 1, "lr": 5e-2, "loss": "grpo", "aggregation": "token-mean"},
            "roles": tiny.azr_roles(p),
            "azr": tiny.azr_settings(proposals_per_mode=4,
                                sandbox={"wall_s": 20.0, "pool_size": 1}),
        },
        "cure": {
            "train": {"steps": 1, "lr": 5e-2},
            "roles": roles(p, coder="cure_coder", tester="cure_tester"),
            "cure": {"order": "file", "max_problems": 2, "problems_per_step": 2, "codes": 4,
                     "tests": 4, "max_gt_tests": 2, "time_limit_s": 20.0, "pool_size": 1},
        },
        "mae": {
            "train": {"steps": 1, "lr": 5e-2, "loss": "grpo", "aggregation": "token-mean"},
            "roles": roles(p, proposer="mae_propose", solver="mae_solve", judge="mae_judge"),
            "mae": {"proposals_per_step": 4, "solves_per_step": 4, "judge_samples": 2,
                    "solver_samples": 1, "judges_per_step": 6, "lenient": True,
                    "admit_threshold": 0.5},
        },
        "ssp": {
            "train": {"steps": 1, "lr": 5e-2, "loss": "grpo"},
            "roles": roles(p, proposer="ssp_proposer",
                              solver="ssp_solver",
                              judge={"prompt": "ssp_judge", "train": False, "max_tokens": 4}),
            "ssp": {
                "targets": str(folder / "ssp_targets.jsonl"),
                "proposals_per_step": 4, "solver_samples": 4,
                "search": {**corpus, "top_k": 2, "max_searches": 1,
                           "max_observation_tokens": 16, "chunk_max_chars": 80},
                "min_searches": 1, "noisy_documents": 1, "format_penalty": -1.0,
            },
        },
        "sqlm": {
            "train": {"steps": 1, "lr": 5e-2, "loss": "grpo"},
            "roles": roles(p, proposer="sqlm_proposer", solver="sqlm_solver"),
            "sqlm": {"proposal_groups": 2, "proposal_group_size": 3, "solver_samples": 4,
                     "proposer_update_every": 1, "proposer_reward": "informative",
                     "eval_reasoning_size": 0},
        },
        "spell": {
            "train": {"steps": 1, "lr": 5e-2, "loss": "grpo"},
            "roles": roles(p, questioner="spell_questioner",
                              responder="spell_responder",
                              verifier={"prompt": "spell_verifier", "max_tokens": 2}),
            "spell": {
                **corpus, "clusters_per_step": 3, "questions_per_cluster": 2,
                "new_documents": 3, "document_max_tokens": 16, "context_tokens": 24,
                "context_growth": 8, "responder_context_tokens": 40, "closed_book_samples": 1,
                "solver_samples": 3, "verifier_votes": 3, "verifier_fraction": None,
                "balance_bad": True, "eval_reasoning_size": 0,
            },
        },
        "verifiers": {
            "train": {"steps": 1, "lr": 5e-2},
            "roles": roles(p, proposer="vf_proposer", solver="vf_solver"),
            "verifiers": {"env": "selfplay.loops.verifiers.envs.propose_solve",
                          "args": {"num_tasks": 4, "bounds": [1, 12]}, "tasks_per_step": 2,
                          "group_size": 4, "eval_size": 0},
        },
    }


LOOPS = ["rlvr", "spiral", "spice", "agent0", "azr", "cure", "mae", "ssp", "sqlm", "spell",
         "verifiers"]
NEEDS_CORPUS = {"spice", "ssp", "spell"}
SEATS = {"spiral": {"player_0", "player_1"}}  # SPIRAL's role plays both seats
ONE_ADAPTER = {"azr"}  # Absolute Zero: one policy proposes and solves (the loop refuses more)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Role prompts, the reward plug-in, and (built once, by the CLI) a five-topic corpus."""
    folder = tmp_path_factory.mktemp("learning")
    tiny.write_inputs(folder, PROMPTS, "learning_rewards")
    return folder


def build_corpus(folder: Path) -> None:
    import os
    import subprocess
    import sys
    if (folder / "cache" / "corpora").exists():
        return
    env = {**os.environ, "WANDB_MODE": "disabled", "SELFPLAY_CACHE": str(folder / "cache")}
    done = subprocess.run([sys.executable, "-m", "selfplay", *tiny.corpus_build_args(folder)],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]


def experiment(folder: Path, loop: str) -> dict:
    data = copy.deepcopy(TINY) | {"name": f"learn-{loop}", "loop": loop,
                                  "run_dir": str(folder / "runs")}
    data |= copy.deepcopy(experiments(folder)[loop])
    data["train"]["lora"] = LORA
    for spec in data["roles"].values():  # a role's samples reaching another adapter must show
        spec["adapter"] = "shared" if loop in ONE_ADAPTER else "own"
    return data


SEEDS = (0, 1, 2)


def check(folder: Path, loop: str, monkeypatch) -> dict:
    """Run ``loop``'s experiment; every trained role's gain, asserted ≥ MARGIN.

    The prompts' answers are drawn at random, so a draw can leave a role whose rewards are all
    alike where its loop compares them (nothing to learn); the run is then made again with the
    next seed of ``SEEDS``. A loop that never trains a role (a bug that zeroes its advantages)
    fails after the last."""
    from selfplay.running import runner

    monkeypatch.setattr(runner, "write_report", lambda *args, **kwargs: None)
    monkeypatch.chdir(folder)  # the reward plug-in is found from the working directory
    monkeypatch.syspath_prepend(str(folder))
    if loop in NEEDS_CORPUS:
        build_corpus(folder)
    data = experiment(folder, loop)
    trained = {role for role, spec in data["roles"].items() if spec.get("train", True)}
    expected = SEATS.get(loop, trained)
    for seed in SEEDS:
        random.seed(seed)  # the prompts' random answers
        found, _ = run_and_measure(data, folder / "runs" / f"{loop}-{seed}")
        if set(found) == expected and all(len(set(g.rewards)) >= 2 for g in found.values()):
            break
    print(f"{loop} (seed {seed}): {describe(found)}")  # docs/testing.md's table, with -s
    assert set(found) == expected, f"{loop}: roles that trained: {describe(found)}"
    for role, gain in found.items():
        assert len(set(gain.rewards)) >= 2, f"{loop}/{role}: rewards never vary: {describe(found)}"
    if loop in ONE_ADAPTER:  # one adapter: each role's samples move with every role's update
        pooled = sum(g.gain * sum(abs(r - sum(g.rewards) / len(g.rewards)) for r in g.rewards)
                     for g in found.values())
        assert pooled > 0, f"{loop}: {describe(found)}"
        return found
    for role, gain in found.items():
        assert gain.gain >= MARGIN, f"{loop}/{role}: {describe(found)}"
    return found


@pytest.mark.parametrize("loop", LOOPS)
def test_every_role_of_the_loop_learns(folder, loop, monkeypatch):
    check(folder, loop, monkeypatch)
