"""``selfplay compare ... --plan``: what a comparison can detect and what it will cost, before any
run starts (docs/compare.md#plan).

- **Base accuracy**: given (``--base-accuracy``), or measured once, cheaply: the base model
  answers a pilot of the suite (``PILOT`` problems, its families in proportion) greedily, which
  also measures what an evaluation costs a problem.
- **Flip rate ψ** (the share of problems whose answer changes between base and trained policy;
  McNemar's ψ = p₁₀ + p₀₁): given (``--flip-rate``), or from a phi correlation of 0.5 between base
  and trained correctness at the base accuracy and base + the effect asked (the pessimistic end
  of the 0.5–0.8 typical of a base model and its fine-tune; REFERENCE values in
  docs/algorithms.md#statistical-power). Without a base accuracy, the worst case (0.5).
- **MDE** (α 0.05 two-sided, power 0.8): the paired McNemar MDE of the suite's n problems, which
  is the MDE of S seeds when the seeds flip the same problems; when they flip independent ones,
  S·n pairs; and the seed-to-seed spread of gains the seeds tolerate (a t-test on S per-seed
  gains detects d_z·σ).
- **CPU time**: runs (per experiment, overhead + rate × budget, from ``costs.RUNS`` or a
  finished comparison's ``--costs``) plus evaluations (base models and last points on the
  suite, the earlier points on ``curve_size`` problems; each loading + a fixed part + problems
  × a cost a problem: a line fitted to a finished comparison's evaluations of two sizes, or the
  shipped line scaled to what the pilot measured).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from selfplay.analysis.rundata import read_jsonl
from selfplay.core.errors import UserError
from selfplay.evaluation import costs
from selfplay.evaluation.compare import PowerAsk, assumed_flip_rate, check, check_power
from selfplay.stats.power import ALPHA, POWER, detectable_d, mcnemar_mde, mcnemar_sample_size

PILOT = 64  # problems the pilot evaluates


# ------------------------------------------------------------------ costs
@dataclass
class RunCost:
    overhead: float  # CPU s a run spends besides its steps
    per_1k: float  # CPU s per 1,000 generated tokens
    source: str
    step_tokens: float = 0.0  # generated tokens a step: a run overshoots its budget by ~half

    def tokens(self, budget: int, steps: int | None = None) -> float:
        """What a run spends: the budget and half a step, or less where its ``train.steps``
        (an upper bound under a budget) end it first."""
        spent = budget + self.step_tokens / 2
        if steps is not None and self.step_tokens:
            spent = min(spent, steps * self.step_tokens)
        return spent

    def cpu(self, budget: int, steps: int | None = None) -> float:
        return self.overhead + self.per_1k * self.tokens(budget, steps) / 1000


def costs_from_folder(folder: Path) -> tuple[dict[str, RunCost], dict | None]:
    """Per experiment, the run costs measured in a finished comparison (the share of each run's
    wall time spent in steps splits its CPU seconds), and its evaluations' cost: (loading CPU
    s, CPU s a problem)."""
    from selfplay.evaluation.compare_page import TIMES, read_compare

    manifest = read_compare(folder)  # not a comparison folder: one line
    spent: dict[tuple[str, str], float] = {}
    for row in read_jsonl(folder / TIMES):
        key = (row["experiment"], row["folder"])
        spent[key] = spent.get(key, 0.0) + row.get("cpu_seconds", 0.0)
    walls = {}
    for row in read_jsonl(folder / TIMES):
        key = (row["experiment"], row["folder"])
        walls[key] = walls.get(key, 0.0) + row["seconds"]
    found: dict[str, list[tuple[float, float]]] = {}
    for (name, run), cpu in spent.items():
        rows = [r for r in read_jsonl(folder / name / run / "metrics.jsonl") if not r.get("final")]
        tokens = rows[-1].get("rollout/tokens_total") if rows else None
        if not tokens or not walls[(name, run)]:
            continue
        share = min(sum(r.get("time/step_seconds", 0.0) for r in rows) / walls[(name, run)], 1.0)
        found.setdefault(name, []).append((cpu * (1 - share), cpu * share / tokens * 1000,
                                           tokens / len(rows)))
    loads = [r["load_average"] for r in read_jsonl(folder / TIMES) if "load_average" in r]
    at = f", load {sum(loads) / len(loads):.1f} on {os.cpu_count()} cores" if loads else ""
    runs = {name: RunCost(sum(o for o, _, _ in v) / len(v), sum(r for _, r, _ in v) / len(v),
                          f"measured in {folder}{at}", sum(t for _, _, t in v) / len(v))
            for name, v in found.items()}
    evaluations = [r for r in read_jsonl(folder / "evaluations.jsonl")
                   if "load_cpu_seconds" in r and r.get("problems")]
    evaluation = None
    if evaluations:
        load = sum(r["load_cpu_seconds"] for r in evaluations) / len(evaluations)
        fixed, per_problem = evaluation_fit(
            [(r["problems"], r["cpu_seconds"] - r["load_cpu_seconds"]) for r in evaluations])
        loads = [r["load_average"] for r in evaluations if "load_average" in r]
        at = f", load {sum(loads) / len(loads):.1f} on {os.cpu_count()} cores" if loads else ""
        evaluation = {"load": load, "fixed": fixed, "per_problem": per_problem, "eval_tokens":
                      manifest["eval_tokens"], "source": f"measured in {folder}{at}"}
    return runs, evaluation


def evaluation_fit(spent: list[tuple[int, float]]) -> tuple[float, float]:
    """(fixed CPU s, CPU s a problem) of evaluations, from their (problems, CPU s besides
    loading): a least-squares line where they cover two sizes or more (a comparison's points
    before the last are smaller than its suite), else the shipped fixed part's share."""
    if len({n for n, _ in spent}) >= 2:
        slope, fixed = np.polyfit([n for n, _ in spent], [s for _, s in spent], 1)
        if slope > 0 and fixed >= 0:
            return float(fixed), float(slope)
    return scaled_shape(sum(s for _, s in spent) / len(spent),
                        round(sum(n for n, _ in spent) / len(spent)))


def scaled_shape(cpu: float, problems: int) -> tuple[float, float]:
    """(fixed, a problem) of the shipped evaluation cost, scaled so that ``problems`` cost
    ``cpu`` CPU s besides loading: one size measured (the pilot) says how fast this machine
    is, the shipped line how that cost splits between the fixed part and the problems."""
    _, fixed, per_problem = costs.EVALUATION
    scale = cpu / (fixed + per_problem * problems)
    return fixed * scale, per_problem * scale


def run_cost(name: str, measured: dict[str, RunCost]) -> RunCost:
    """The experiment's cost: measured, else shipped, else the dearest shipped loop's."""
    if name in measured:
        return measured[name]
    if name in costs.RUNS:
        overhead, per_1k, step = costs.RUNS[name]
        return RunCost(overhead, per_1k,
                       f"shipped ({costs.SOURCES.get(name, costs.MEASURED)})", step)
    overhead = max(o for o, _, _ in costs.RUNS.values())
    per_1k = max(r for _, r, _ in costs.RUNS.values())
    step = max(t for _, _, t in costs.RUNS.values())
    return RunCost(overhead, per_1k, "not measured: the dearest shipped loop's", step)


# ------------------------------------------------------------------ the pilot
def pilot(spec, config, size: int = PILOT) -> dict:
    """The base model on ``size`` problems of the suite (its families in proportion): greedy
    accuracy and what an evaluation costs (loading, a problem)."""
    from selfplay.config_files import dump
    from selfplay.evaluation.heldout import evaluate_snapshot

    folder = Path(tempfile.mkdtemp(prefix="selfplay-plan-"))
    try:
        (folder / "config.yaml").write_text(dump(config))
        result = evaluate_snapshot(folder, 0, replace(spec.measures, size=min(size,
                                                                               spec.suite_size)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return result


@dataclass
class Plan:
    lines: list[str]
    total_cpu: float
    base_accuracy: float | None
    mde: float


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def plan(spec, ask: PowerAsk, costs_folder: Path | None = None, hours: float | None = None,
         pilot_size: int = PILOT) -> Plan:
    """Every check ``compare`` makes, the pilot, the MDE and the CPU time, as lines to print."""
    from selfplay.evaluation.heldout import base_key

    ask.check()
    if hours is not None and hours <= 0:
        raise UserError(f"--hours {hours}: must be positive")
    arms, problems = check(spec)
    measured, evaluation = costs_from_folder(costs_folder) if costs_folder else ({}, None)
    lines = [f"compare plan: {len(arms)} experiments × {spec.seeds} seeds "
             f"({spec.first_seed}..{spec.first_seed + spec.seeds - 1}), "
             f"{spec.budget:,} generated tokens a run, {spec.points} curve points a run",
             f"suite {spec.suite}: {problems} problems"
             + (f" (of {spec.suite_size} asked: no more distinct ones)"
                if problems < spec.suite_size else "")
             + f", greedy{f' + {spec.samples} samples' if spec.samples else ''}"
             + (" + the reference's likelihood" if spec.likelihood else "")
             + f", at most {spec.eval_tokens} tokens an answer; the points before the last on "
             f"{min(spec.curve_size, problems)}"]
    base_accuracy = ask.base_accuracy
    if base_accuracy is None:
        measured_pilot = pilot(spec, arms[0].configs[0], pilot_size)
        base_accuracy = measured_pilot["greedy"]
        lines.append(f"base accuracy {base_accuracy:.3f} (measured: {measured_pilot['problems']} "
                     f"problems greedy, {measured_pilot['cpu_seconds']:.0f} CPU s at load "
                     f"{measured_pilot['load_average']:.1f} on {os.cpu_count()} cores)")
        if evaluation is None:
            fixed, per_problem = scaled_shape(
                measured_pilot["cpu_seconds"] - measured_pilot["load_cpu_seconds"],
                max(measured_pilot["problems"], 1))
            evaluation = {"load": measured_pilot["load_cpu_seconds"], "fixed": fixed,
                          "per_problem": per_problem,
                          "source": "the pilot, split as the shipped cost is"}
        if measured_pilot["load_average"] > (os.cpu_count() or 1):
            lines.append("the machine was busy: CPU seconds measured now overstate a quiet "
                         "machine's (threads waiting on each other spin); plan again when it "
                         "is quiet, or take --costs from a comparison run then")
    else:
        lines.append(f"base accuracy {base_accuracy:.3f} (given)")
    psi, where = assumed_flip_rate(ask, base_accuracy)
    lines.append(where)
    mde_same = mcnemar_mde(problems, psi)
    mde_apart = mcnemar_mde(problems * spec.seeds, psi)
    lines.append(f"MDE (α {ALPHA}, power {POWER}, paired): {mde_same:.3f} if the seeds flip the "
                 f"same problems, {mde_apart:.3f} if they flip independent ones "
                 f"({spec.seeds} × {problems} pairs)")
    if spec.seeds >= 2:
        d_z = detectable_d(spec.seeds, paired=True)
        lines.append(f"seeds: a t-test on {spec.seeds} per-seed gains detects {d_z:.2f} × their "
                     f"spread, so a gain of {mde_same:.3f} also needs seeds whose gains differ "
                     f"by at most σ {mde_same / d_z:.3f} (the table's interval uses seeds and "
                     "problems together and says which dominates)")
    else:
        lines.append("seeds: one seed gives an interval over problems only (none over seeds)")
    check_power(spec, problems, ask, base_accuracy)
    if ask.mde is not None:
        lines.append(f"the effect asked, {ask.mde}, is within reach ({problems} problems "
                     f"≥ {math.ceil(mcnemar_sample_size(ask.mde, psi))} needed)")
    lines += _cpu_lines(spec, arms, problems, measured, evaluation, hours, base_key)
    total = float(lines.pop())
    return Plan(lines, total, base_accuracy, mde_same)


def _cpu_lines(spec, arms, problems: int, measured: dict, evaluation: dict | None,
               hours: float | None, base_key) -> list:
    if evaluation is None:  # no pilot and no folder: the pilot's figure measured when shipped
        load, fixed, per_problem = costs.EVALUATION
        evaluation = {"load": load, "fixed": fixed, "per_problem": per_problem,
                      "source": f"shipped ({costs.EVALUATION_MEASURED})"}
    run_costs = {arm.name: run_cost(arm.name, measured) for arm in arms}
    steps = {arm.name: arm.configs[0].train.steps for arm in arms}
    runs_cpu = sum(spec.seeds * c.cpu(spec.budget, steps[name]) for name, c in run_costs.items())
    keys = {base_key(config, spec.measures, config.seed) for arm in arms for config in arm.configs}
    runs = len(arms) * spec.seeds
    curve = min(spec.curve_size, problems)
    fixed = evaluation["load"] + evaluation["fixed"]
    one = fixed + problems * evaluation["per_problem"]
    small = fixed + curve * evaluation["per_problem"]
    evaluations = len(keys) + runs * spec.points
    eval_cpu = (len(keys) + runs) * one + runs * (spec.points - 1) * small
    total = runs_cpu + eval_cpu
    lines = ["CPU time, run by run (overhead + rate × tokens; wall ≈ CPU on a quiet machine):"]
    for name, cost in run_costs.items():
        tokens = cost.tokens(spec.budget, steps[name])
        short = tokens < spec.budget
        lines.append(f"  {name}: {spec.seeds} × {cost.cpu(spec.budget, steps[name]):.0f} s "
                     f"({cost.overhead:.0f} s + {cost.per_1k:.1f} s per 1k tokens × "
                     f"{tokens:,.0f} tokens, "
                     + (f"its {steps[name]} steps of {cost.step_tokens:.0f}" if short else
                        f"the budget and half a step of {cost.step_tokens:.0f}")
                     + f"; {cost.source})")
        if short:  # train.steps bounds a run under a budget: it would stop short of it
            needed = math.ceil(spec.budget / cost.step_tokens)
            lines.append(f"  warning: {name} stops at train.steps {steps[name]}, before the "
                         f"budget ({tokens:,.0f} of {spec.budget:,} tokens): --set "
                         f"{name}:train.steps={needed} lets it spend the budget")
    lines.append(f"evaluations: {len(keys)} of the base model (shared by every run with its "
                 f"model and seed) + {runs} runs × {spec.points} points = {evaluations}: the "
                 f"base models and last points on {problems} problems, {one:.0f} CPU s each, "
                 f"the {runs * (spec.points - 1)} earlier points on {curve}, {small:.0f} s each "
                 f"({evaluation['load']:.0f} s loading + {evaluation['fixed']:.0f} s fixed + "
                 f"{evaluation['per_problem']:.3f} s a problem; {evaluation['source']})")
    lines.append(f"total: {_hours(total)} CPU (runs {_hours(runs_cpu)}, evaluations "
                 f"{_hours(eval_cpu)})")
    if hours is not None:
        per_token = sum(spec.seeds * c.per_1k / 1000 for c in run_costs.values())
        fixed = sum(spec.seeds * (c.overhead + c.per_1k * c.step_tokens / 2000)
                    for c in run_costs.values()) + eval_cpu
        largest = (hours * 3600 - fixed) / per_token
        lines.append(f"the largest budget within {hours:g} h: "
                     + (f"{int(largest // 100 * 100):,} tokens a run" if largest >= 100 else
                        f"none (evaluations and overheads alone take {_hours(fixed)})"))
    return [*lines, str(total)]
