"""What the golden runs (tests/test_golden.py) and the learning checks (tests/test_learning.py)
both give their tiny-model experiments: the arithmetic task, the proposer-reward plug-in, the
prompts they share (tests/golden/prompts.yaml), AZR's six roles and the five-topic pydoc corpus.
"""

from __future__ import annotations

from pathlib import Path

import yaml

# every tiny experiment's common part (a run checkpoints every step, as the golden runs check)
TINY = {
    "seed": 0,
    "model": {"path": "tiny-random"},
    "sampling": {"max_new_tokens": 6},
    "logging": {"wandb": "disabled", "progress": False},
    "checkpoint": {"every": 1, "keep": 1},
}
CHAIN_SUM = {"name": "chain_sum", "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                             "max_digits": 1}}

# a proposer reward that varies with p̂ (the tiny model's p̂ is rarely ½), written to
# ``<module>.py`` beside the experiments and named ``<module>:spread``
REWARDS = '''
def spread(p_hat):
    """A proposer reward that varies with p̂ (the tiny model's p̂ is rarely ½)."""
    return 0.25 + p_hat - 0.5 * p_hat * p_hat
'''

# the golden runs' role prompts, by the file each is written to (why each starts its reply as
# it does is said beside it)
GOLDEN_PROMPTS = yaml.safe_load(
    (Path(__file__).parent / "golden" / "prompts.yaml").read_text(encoding="utf-8"))

# the pydoc topics of the five-document corpus ``pydoc-few``
CORPUS_TOPICS = ("while", "assert", "pass", "lambda", "for")


def azr_roles(prompts: dict[str, str]) -> dict[str, dict]:
    """AZR's six roles (three proposers, three solvers) on the prompt files ``prompts`` holds."""
    return roles(prompts, propose_deduction="azr_propose", propose_abduction="azr_propose",
                 propose_induction="azr_inputs", solve_deduction="azr_solve_o",
                 solve_abduction="azr_solve_i", solve_induction="azr_solve_f")


def azr_settings(**changes) -> dict:
    """AZR's settings for two tiny steps: code-form rewards, two proposals and six solves a
    mode, lenient parsing, a one-worker sandbox; ``changes`` replaces any of them."""
    return {
        "reward_form": "code", "proposals_per_mode": 2, "solves_per_mode": 6,
        "solver_samples": 2, "references": 1, "induction_inputs": 3,
        "induction_shown": 1, "seed_size": 2, "seed_batch": 1, "seed_rounds": 1,
        "lenient": True, "require_message": False,
        "sandbox": {"wall_s": 5.0, "pool_size": 1},
    } | changes


def corpus_build_args(folder: Path) -> list[str]:
    """``selfplay`` arguments that build ``pydoc-few`` from the topics, written under
    ``folder/docs``: 64-token chunks, the offline embedding model's tokenizer."""
    from pydoc_data.topics import topics

    sources = folder / "docs"
    sources.mkdir()
    for name in CORPUS_TOPICS:
        (sources / f"{name}.txt").write_text(topics[name])
    return ["corpus", "build", "pydoc-few", str(sources), "--chunk-tokens", "64",
            "--overlap-tokens", "8", "--batch-size", "4", "--tokenizer", "embedding", "--quiet"]


def write_inputs(folder: Path, prompts: dict[str, dict], rewards_module: str) -> None:
    """The prompt files, the reward plug-in (``<rewards_module>.py``) and SSP's two targets."""
    for name, prompt in prompts.items():
        (folder / name).write_text(yaml.safe_dump(prompt))
    (folder / f"{rewards_module}.py").write_text(REWARDS)
    (folder / "ssp_targets.jsonl").write_text('{"answer": "Python"}\n{"answer": "Lambda"}\n')


def roles(prompts: dict[str, str], **specs: str | dict) -> dict[str, dict]:
    """``roles:`` of an experiment, each role's prompt named by its file's stem in ``prompts``:
    ``solver="sqlm_solver"``, or with more settings ``judge={"prompt": "ssp_judge",
    "train": False}``."""
    resolved = {}
    for role, spec in specs.items():
        spec = {"prompt": spec} if isinstance(spec, str) else dict(spec)
        resolved[role] = spec | {"prompt": prompts[f"{spec['prompt']}.yaml"]}
    return resolved
