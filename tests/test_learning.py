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

from tests.learning import describe, run_and_measure

MARGIN = 0.05
TINY = {
    "seed": 0,
    "model": {"path": "tiny-random"},
    "sampling": {"max_new_tokens": 6},
    "logging": {"wandb": "disabled", "progress": False},
    "checkpoint": {"every": 100, "keep": 1},
    # one thread: the tiny model gains nothing from two, and on a busy machine OpenMP's second
    # thread waits for a core (pytest does not set the command's OMP_WAIT_POLICY=PASSIVE)
    "threads": {"torch": 1},
}
LORA = {"r": 4, "alpha": 8}
CHAIN_SUM = {"name": "chain_sum", "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                             "max_digits": 1}}


def pick(*choices: str) -> str:
    """Jinja that renders one of the literal ``choices`` at random (raw: braces stay text)."""
    return "{% set c = range(" + str(len(choices)) + ")|random %}" + "".join(
        "{% if c == " + str(k) + " %}{% raw %}" + text + "{% endraw %}{% endif %}"
        for k, text in enumerate(choices))


# the chain_sum answer (``a + b =`` or ``a - b =``), computed from the question; boxed, or one
# more than it
SUM = ("{% set p = question.split(': ')[-1].split(' ') %}"
       "{% set s = (p[0]|int + p[2]|int) if p[1] == '+' else (p[0]|int - p[2]|int) %}"
       "{% raw %}\\boxed{{% endraw %}{{ [s, s + 1]|random }}{% raw %}}{% endraw %} ")

PROMPTS = {
    "solver.yaml": {"name": "solver", "user": "{{ question }}", "prefill": SUM},
    "player.yaml": {"name": "player", "user": "{{ observation }} {{ player }} {{ example }}",
                    "prefill": "\\boxed{[check]} "},  # every Kuhn game to a showdown
    "asker.yaml": {"name": "asker", "user": "Ask about: {{ document }} ({{ format }})",
                   "prefill": pick('{"question": "What is the name of this thing?", '
                                   '"answer": "pass"}\n',
                                   '{"question": "What is the name of this thing?", '
                                   '"answer": "while"}\n')},
    "answerer.yaml": {"name": "answerer", "user": "{{ question }} ({{ answer_hint }})",
                      "prefill": pick("\\boxed{pass} ", "\\boxed{while} ")},
    "proposer.yaml": {"name": "proposer", "user": "Write a question.",
                      "prefill": "Question: What is 2 + 3?\nAnswer:"},
    "executor.yaml": {"name": "executor", "user": "{{ question }}",
                      "prefill": pick("\\boxed{5}. ", "\\boxed{6}. ")},
    "azr_propose.yaml": {"name": "azr_propose", "user": "{{ references }}",
                         "prefill": pick("```python\ndef f(x):\n    return x * 2\n```\n"
                                         "Input: 3\n# ", "Nothing to propose. ")},
    "azr_inputs.yaml": {"name": "azr_inputs", "user": "{{ program }} ({{ count }})",
                        "prefill": pick("Input: 1\nInput: 3\nInput: 5\n# ", "No inputs. ")},
    "azr_solve_o.yaml": {"name": "azr_solve_o", "user": "{{ program }} {{ input }}",
                         "prefill": pick("<answer>6</answer>", "<answer>7</answer>")},
    "azr_solve_i.yaml": {"name": "azr_solve_i", "user": "{{ program }} {{ output }}",
                         "prefill": pick("<answer>3</answer>", "<answer>4</answer>")},
    "azr_solve_f.yaml": {"name": "azr_solve_f", "user": "{{ pairs }} {{ message }}",
                         "prefill": pick("```python\ndef f(x):\n    return x\n```",
                                         "```python\ndef f(x):\n    return x * 3\n```")},
    "cure_coder.yaml": {"name": "cure_coder", "user": "{{ problem }}",
                        "prefill": pick("```python\nn = int(input())\nprint(2 * n)  # ",
                                        "```python\nn = int(input())\nprint(3 * n)  # ")},
    "cure_tester.yaml": {"name": "cure_tester",
                         "user": "{{ problem }} {{ example_input }} {{ example_output }}",
                         "prefill": pick("Input:\n```\n3\n```\nOutput:\n```\n6\n```\n",
                                         "Input:\n```\n3\n```\nOutput:\n```\n7\n```\n")},
    # the proposers and the questioner of MAE and SPELL: tests/test_golden.py's prompts, whose
    # rewards vary with the model's tokens
    "mae_propose.yaml": {"name": "mae_propose", "user": "{{ reference }}",
                         "prefill": "<question>What is 2 +"},
    "mae_solve.yaml": {"name": "mae_solve", "user": "{{ question }}", "prefill": "<answer>"},
    "mae_judge.yaml": {"name": "mae_judge", "user": "{{ question }} {{ answer }}",
                       "prefill": pick("<score>2</score>", "<score>8</score>",
                                       "<score>2</score><score>1</score><score>1</score>",
                                       "<score>8</score><score>1</score><score>1</score>")},
    "ssp_proposer.yaml": {"name": "ssp_proposer", "user": "{{ target }}",
                          "prefill": "<question> What is the name of the thing that this "
                                     "question asks about here? </question>\n"
                                     "<search> {{ target }} </search>"},
    "ssp_solver.yaml": {"name": "ssp_solver", "user": "{{ question }}",
                        "prefill": "<search> {{ question }} </search> "
                                   + pick("<answer> Python </answer>",
                                          "<answer> Lambda </answer>")},
    "ssp_judge.yaml": {"name": "ssp_judge", "user": "{{ documents }} {{ question }}",
                       "prefill": "<answer> Python </answer>"},
    "sqlm_proposer.yaml": {"name": "sqlm_proposer", "user": "Write a problem.",
                           "prefill": "What is 2 +"},
    "sqlm_solver.yaml": {"name": "sqlm_solver", "user": "{{ question }}",
                         "prefill": pick("<answer>5</answer> ", "<answer>6</answer> ")},
    "spell_questioner.yaml": {"name": "spell_questioner", "user": "{{ context }} {{ examples }}",
                              "prefill": "Question: Which statement does nothing?\n"
                                         "Answer: pass\nNote:"},
    "spell_responder.yaml": {"name": "spell_responder", "user": "{{ context }} {{ question }}",
                             "prefill": pick("The answer is pass. ", "The answer is while. ")},
    "spell_verifier.yaml": {"name": "spell_verifier",
                            "user": "{{ question }} {{ reference }} {{ response }}",
                            "prefill": "no"},
    "vf_proposer.yaml": {"name": "vf_proposer", "user": "{{ message }}",
                         "prefill": pick("What is 2 + 3? ", "What is 2 + 9? ")},
    "vf_solver.yaml": {"name": "vf_solver", "user": "{{ message }}",
                       "prefill": pick("5 ", "7 ")},
}
REWARDS = '''
def spread(p_hat):
    """A proposer reward that varies with p̂ (the tiny model's p̂ is rarely ½)."""
    return 0.25 + p_hat - 0.5 * p_hat * p_hat
'''


def experiments(folder: Path) -> dict[str, dict]:
    """One experiment per loop; ``own`` adapters are set for every role by the test."""
    p = {name: str(folder / name) for name in PROMPTS}
    corpus = {"corpus": "pydoc-few", "corpus_cache": str(folder / "cache" / "corpora")}
    return {
        "rlvr": {
            "train": {"steps": 1, "lr": 5e-2},
            "roles": {"solver": {"prompt": p["solver.yaml"]}},
            "rlvr": {"tasks": [CHAIN_SUM], "dataset_size": 4, "prompts_per_step": 2,
                     "group_size": 4, "eval_size": 0},
        },
        "spiral": {
            "train": {"steps": 1, "lr": 5e-2},
            "roles": {"player": {"prompt": p["player.yaml"]}},
            "spiral": {"games": [{"id": "kuhn_poker", "kwargs": {"rounds": 1}}],
                       "games_per_step": 6, "lenient": True, "eval_games": 0,
                       "eval_reasoning_size": 0},
        },
        "spice": {
            "train": {"steps": 1, "lr": 5e-2},
            "roles": {"challenger": {"prompt": p["asker.yaml"]},
                      "reasoner": {"prompt": p["answerer.yaml"]}},
            "spice": {**corpus, "chunk_max_tokens": 24, "documents_per_step": 2,
                      "attempts_per_document": 2, "max_rounds": 1, "formats": "free",
                      "solver_samples": 4, "challenger_reward": "learning_rewards:spread",
                      "eval_reasoning_size": 0},
        },
        "agent0": {
            "train": {"steps": 2, "lr": 5e-2, "loss": "grpo"},
            "advantage": {"adpo": True},
            "roles": {"curriculum": {"prompt": p["proposer.yaml"]},
                      "executor": {"prompt": p["executor.yaml"]}},
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
            "roles": {"propose_deduction": {"prompt": p["azr_propose.yaml"]},
                      "propose_abduction": {"prompt": p["azr_propose.yaml"]},
                      "propose_induction": {"prompt": p["azr_inputs.yaml"]},
                      "solve_deduction": {"prompt": p["azr_solve_o.yaml"]},
                      "solve_abduction": {"prompt": p["azr_solve_i.yaml"]},
                      "solve_induction": {"prompt": p["azr_solve_f.yaml"]}},
            "azr": {
                "reward_form": "code", "proposals_per_mode": 4, "solves_per_mode": 6,
                "solver_samples": 2, "references": 1, "induction_inputs": 3,
                "induction_shown": 1, "seed_size": 2, "seed_batch": 1, "seed_rounds": 1,
                "lenient": True, "require_message": False,
                "sandbox": {"wall_s": 20.0, "pool_size": 1},
            },
        },
        "cure": {
            "train": {"steps": 1, "lr": 5e-2},
            "roles": {"coder": {"prompt": p["cure_coder.yaml"]},
                      "tester": {"prompt": p["cure_tester.yaml"]}},
            "cure": {"order": "file", "max_problems": 2, "problems_per_step": 2, "codes": 4,
                     "tests": 4, "max_gt_tests": 2, "time_limit_s": 20.0, "pool_size": 1},
        },
        "mae": {
            "train": {"steps": 1, "lr": 5e-2, "loss": "grpo", "aggregation": "token-mean"},
            "roles": {"proposer": {"prompt": p["mae_propose.yaml"]},
                      "solver": {"prompt": p["mae_solve.yaml"]},
                      "judge": {"prompt": p["mae_judge.yaml"]}},
            "mae": {"proposals_per_step": 4, "solves_per_step": 4, "judge_samples": 2,
                    "solver_samples": 1, "judges_per_step": 6, "lenient": True,
                    "admit_threshold": 0.5},
        },
        "ssp": {
            "train": {"steps": 1, "lr": 5e-2, "loss": "grpo"},
            "roles": {"proposer": {"prompt": p["ssp_proposer.yaml"]},
                      "solver": {"prompt": p["ssp_solver.yaml"]},
                      "judge": {"prompt": p["ssp_judge.yaml"], "train": False,
                                "max_tokens": 4}},
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
            "roles": {"proposer": {"prompt": p["sqlm_proposer.yaml"]},
                      "solver": {"prompt": p["sqlm_solver.yaml"]}},
            "sqlm": {"proposal_groups": 2, "proposal_group_size": 3, "solver_samples": 4,
                     "proposer_update_every": 1, "proposer_reward": "informative",
                     "eval_reasoning_size": 0},
        },
        "spell": {
            "train": {"steps": 1, "lr": 5e-2, "loss": "grpo"},
            "roles": {"questioner": {"prompt": p["spell_questioner.yaml"]},
                      "responder": {"prompt": p["spell_responder.yaml"]},
                      "verifier": {"prompt": p["spell_verifier.yaml"], "max_tokens": 2}},
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
            "roles": {"proposer": {"prompt": p["vf_proposer.yaml"]},
                      "solver": {"prompt": p["vf_solver.yaml"]}},
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
    for name, prompt in PROMPTS.items():
        (folder / name).write_text(yaml.safe_dump(prompt))
    (folder / "learning_rewards.py").write_text(REWARDS)
    (folder / "ssp_targets.jsonl").write_text('{"answer": "Python"}\n{"answer": "Lambda"}\n')
    return folder


def build_corpus(folder: Path) -> None:
    import os
    import subprocess
    import sys
    from pydoc_data.topics import topics

    if (folder / "cache" / "corpora").exists():
        return
    sources = folder / "docs"
    sources.mkdir()
    for name in ("while", "assert", "pass", "lambda", "for"):
        (sources / f"{name}.txt").write_text(topics[name])
    env = {**os.environ, "WANDB_MODE": "disabled", "SELFPLAY_CACHE": str(folder / "cache")}
    done = subprocess.run([sys.executable, "-m", "selfplay", "corpus", "build", "pydoc-few",
                           str(sources), "--chunk-tokens", "64", "--overlap-tokens", "8",
                           "--batch-size", "4", "--tokenizer", "embedding", "--quiet"],
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
