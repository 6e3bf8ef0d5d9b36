"""``selfplay bench step EXPERIMENT --compare trees``: hands per minute and the learner's
seconds, before and after prefix trees, in one run.

Arms, each the same number of synchronous steps from the same seed, one after the other in
this process (step 0 a warm-up, evaluation off):

- ``before`` (``--before OTHER``, e.g. ``spiral-kuhn-text-cpu``, the free-text experiment
  ``spiral-kuhn-cpu`` was before scored moves): that experiment as it ran then, its learner
  sharing only exactly repeated prompts (``train.tree_scope: prompt``);
- ``prompt``: EXPERIMENT with the same learner (only repeated prompts shared);
- ``trees``: EXPERIMENT as configured (common prefixes of any rows shared).

``prompt`` against ``trees`` is what common prefixes alone buy the learner (the same samples);
``before`` against ``trees`` is the whole change of the experiment, in hands per minute.
"""

from __future__ import annotations

import statistics

from rich.console import Console
from rich.table import Table

from selfplay.bench.step import QUIET, step_rows
from selfplay.config_files import find_experiment, read_yaml
from selfplay.core.errors import UserError
from selfplay.loops import load_experiment

NO_EVAL = ["spiral.eval_games=0", "spiral.eval_exploitability=[]", "spiral.eval_every=0",
           "spiral.eval_ood_games=[]"]


def run_arm(name: str, experiment: str, steps: int, scope: str, extra: list[str]) -> dict:
    loop = read_yaml(find_experiment(experiment)).get("loop")
    if loop != "spiral":
        raise UserError(f"bench step --compare trees counts hands: {experiment} is a {loop} "
                        "experiment, not a game")
    overrides = [f"train.steps={steps}", f"checkpoint.every={steps}", "rollout.mode=sync",
                 f"train.tree_scope={scope}", *QUIET, *NO_EVAL, *extra]
    config = load_experiment(experiment, overrides)
    rows = step_rows(config)[1:]  # step 0: warm-up
    step_s = statistics.mean(r["time/step_seconds"] for r in rows)
    train_s = statistics.mean(r.get("train/seconds", 0.0) for r in rows)
    games = statistics.mean(r["game/games"] for r in rows)
    turns = statistics.mean(r.get("rollout/turns", 0.0) for r in rows)
    samples = statistics.mean(r.get("train/samples", 0.0) for r in rows)
    return {"arm": name, "experiment": experiment, "scope": scope, "step_s": step_s,
            "rollout_s": statistics.mean(r["rollout/seconds"] for r in rows),
            "train_s": train_s, "hands_per_min": 60 * games / step_s, "games": games,
            "turns": turns, "samples": samples,
            "train_s_per_sample": train_s / max(samples, 1.0),
            "train_s_per_turn": train_s / max(turns, 1.0)}


def bench_trees(experiment: str = "spiral-kuhn-cpu", steps: int = 3,
                overrides: list[str] | None = None, before: str | None = None) -> dict:
    if steps < 2:
        raise UserError(f"bench step needs --steps >= 2 (step 0 is a warm-up), got {steps}")
    extra = list(overrides or [])
    arms = [("prompt", experiment, "prompt"), ("trees", experiment, "common")]
    if before is not None:
        arms.insert(0, ("before", before, "prompt"))
    results = {name: run_arm(name, exp, steps, scope, extra) for name, exp, scope in arms}
    table = Table(title=f"seconds per step, mean of steps 1..{steps - 1}",
                  caption="hands: games played; learner s/sample: train seconds per sample "
                          "trained on (a turn, or an MMD target's (state, move))")
    for column in ("arm", "experiment", "trees share", "s/step", "rollout", "train",
                   "hands/min", "samples", "learner s/sample"):
        table.add_column(column, justify="right")
    for r in results.values():
        table.add_row(r["arm"], r["experiment"], "prompts" if r["scope"] == "prompt" else
                      "common prefixes", f"{r['step_s']:.2f}", f"{r['rollout_s']:.2f}",
                      f"{r['train_s']:.2f}", f"{r['hands_per_min']:.0f}",
                      f"{r['samples']:.0f}", f"{r['train_s_per_sample']:.3f}")
    console = Console(width=max(120, Console().width))
    console.print(table)
    trees, prompt = results["trees"], results["prompt"]
    ratios = {"learner_per_sample": prompt["train_s_per_sample"] / trees["train_s_per_sample"],
              "hands_per_min_vs_prompt": trees["hands_per_min"] / prompt["hands_per_min"]}
    console.print(f"common prefixes alone: learner seconds per sample [bold]"
                  f"{ratios['learner_per_sample']:.2f}x[/] lower (goal >= 3x)")
    if before is not None:
        ratios["hands_per_min_vs_before"] = trees["hands_per_min"] / results["before"][
            "hands_per_min"]
        console.print(f"{experiment} against {before}: hands per minute [bold]"
                      f"{ratios['hands_per_min_vs_before']:.2f}x[/] (goal >= 5x)")
    return {"arms": results, "ratios": ratios}
