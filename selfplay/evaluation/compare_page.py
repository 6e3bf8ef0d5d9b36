"""The table and page of ``selfplay compare`` (docs/compare.md).

Per experiment: the held-out gain (final − base, greedy accuracy) paired per problem and across
seeds with its 95% interval and the effect the design could detect (MDE), the same for the
reference answer's log-probability per token and, with samples, pass@k; the difference from the
first experiment, paired the same way; the learning curve (the suite at several points of the
budget) with a band across seeds and ScaleRL's sigmoid fitted where the points allow; the game's
exploitability where the loop measures one (SPIRAL on Kuhn or Leduc); what the runs spent and
what their curricula looked like. Nulls are written as they are: a loop without a figure has an
empty cell, never a made-up one."""

from __future__ import annotations

import csv
import html
import json
import math
from pathlib import Path

import numpy as np

from curricula.analysis.diversity import distinct_n
from curricula.analysis.tasks import validity_rate
from selfplay.analysis.rundata import read_jsonl
from selfplay.analysis.sweepdata import read_manifest, run_finished
from selfplay.core.errors import UserError
from selfplay.evaluation.heldout import common_ids, read_records, scores
from selfplay.stats.compute import ComputeFitError, fit_compute_curve
from selfplay.stats.paired import (
    RERUN_SEEDS,
    PairedGain,
    SeedSpread,
    paired_gain,
    pooled_spread,
    rerun_interval,
    seed_spread,
)
from selfplay.stats.seeds import t_interval

MANIFEST = "compare.json"
EVALUATIONS = "evaluations.jsonl"
TIMES = "runs.jsonl"
RECORDS = "records"
RESULTS = "results"  # results.md, results.csv, results.json
EXPLOITABILITY = "eval/exploitability/"


def read_compare(folder: Path) -> dict:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise UserError(f"{folder} is not a comparison folder (no {MANIFEST})")
    return json.loads(path.read_text())


COLUMNS = (  # (key, header) of the table, in order
    ("experiment", "experiment"), ("loop", "loop"), ("seeds", "seeds done"),
    ("steps", "steps"), ("tokens", "tokens"), ("budget_reached", "budget reached"),
    ("run_cpu_seconds", "run CPU s"), ("eval_cpu_seconds", "eval CPU s"),
    ("base_greedy", "base acc"), ("final_greedy", "final acc"),
    ("gain_greedy", "gain [95% CI]"), ("mde_greedy", "MDE"),
    ("rerun", f"a rerun's gain, {RERUN_SEEDS} new seeds [95%]"), ("flip_rate", "flips"),
    ("gain_logprob", "Δ log-prob/token [95% CI]"), ("gain_pass1", "gain pass@1 [95% CI]"),
    ("gain_passk", "gain pass@k [95% CI]"), ("vs_first", "− first [95% CI]"),
    ("exploitability", "exploitability before → after"), ("fit", "ScaleRL fit"),
    ("validity", "validity"), ("diversity", "distinct-2"), ("difficulty", "mean p̂"),
    ("trained_on_suite", "trained on suite families"),
)

TERMINAL = tuple(c for c in COLUMNS if c[0] in (  # what fits a terminal
    "experiment", "seeds", "tokens", "run_cpu_seconds", "eval_cpu_seconds", "gain_greedy",
    "mde_greedy", "rerun", "gain_logprob", "vs_first", "exploitability"))


# ------------------------------------------------------------------ curve points
def token_rows(run_dir: Path) -> list[dict]:
    """The run's training steps that logged ``rollout/tokens_total`` (a budget was set)."""
    return [r for r in read_jsonl(run_dir / "metrics.jsonl")
            if not r.get("final") and "rollout/tokens_total" in r]


def curve_points(run_dir: Path, budget: int, points: int) -> list[dict]:
    """The snapshots a run is evaluated at: after the first step whose generated tokens reach
    k/P of the budget, k = 1..P (the last: the run's final policy, whether the budget or
    ``train.steps`` ended it). A run of fewer steps than P has fewer points."""
    rows = token_rows(run_dir)
    if not rows:
        return []
    chosen: dict[int, float] = {}
    for k in range(1, points):
        target = budget * k / points
        row = next((r for r in rows if r["rollout/tokens_total"] >= target), None)
        if row is not None:
            chosen[row["step"] + 1] = row["rollout/tokens_total"]  # weights after that step
    last = rows[-1]
    chosen[last["step"] + 1] = last["rollout/tokens_total"]
    return [{"step": step, "tokens": tokens} for step, tokens in sorted(chosen.items())]


# ------------------------------------------------------------------ the numbers
def mean(values) -> float | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else None


def curriculum(run_dir: Path) -> dict:
    """Validity, diversity (distinct-2 of the valid tasks' questions) and difficulty (mean p̂ of
    the valid tasks that have one) of the run's generated tasks; nulls without tasks.jsonl."""
    tasks = read_jsonl(run_dir / "tasks.jsonl")
    valid = [t for t in tasks if t.get("valid")]
    p_hats = [t["p_hat"] for t in valid if isinstance(t.get("p_hat"), int | float)]
    return {"tasks": len(tasks), "validity": validity_rate(tasks),
            "diversity": distinct_n([str(t.get("question") or "") for t in valid], 2),
            "difficulty": mean(p_hats)}


def exploitability(run_dir: Path) -> dict[str, dict]:
    """``eval/exploitability/<game>`` (and ``.../average``, the average policy's) before the
    first step and at the end of the run, from its own evaluations (SPIRAL on Kuhn or Leduc)."""
    rows = read_jsonl(run_dir / "metrics.jsonl")
    found: dict[str, dict] = {}
    for row in sorted(rows, key=lambda r: (r["step"], bool(r.get("final")))):
        for key, value in row.items():
            rest = key[len(EXPLOITABILITY):]
            if not key.startswith(EXPLOITABILITY) or not isinstance(value, int | float):
                continue
            if "/" in rest and not rest.endswith("/average"):
                continue  # the interval's ends and the invalid mass
            entry = found.setdefault(rest, {"before": None, "after": None})
            if entry["before"] is None and row["step"] == 0 and not row.get("final"):
                entry["before"] = float(value)
            entry["after"] = float(value)
    return found


def interval(values) -> dict:
    """Mean and 95% t-interval across seeds (nulls where fewer than two seeds)."""
    m, low, high = t_interval(values)
    clean = lambda x: None if x is None or not math.isfinite(x) else x  # noqa: E731
    return {"mean": clean(m), "low": clean(low), "high": clean(high)}


class Evaluations:
    """evaluations.jsonl with each row's per-problem records read on demand."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.rows = read_jsonl(folder / EVALUATIONS)
        self.base = {r["key"]: r for r in self.rows if r["which"] == "base"}
        self.points: dict[tuple[str, str], list[dict]] = {}
        for row in self.rows:
            if row["which"] == "point":
                self.points.setdefault((row["experiment"], row["folder"]), []).append(row)
        for rows in self.points.values():
            rows.sort(key=lambda r: r["step"])
        self._records: dict[str, list[dict]] = {}

    def records(self, row: dict) -> list[dict]:
        if row["records"] not in self._records:
            self._records[row["records"]] = read_records(self.folder / row["records"])
        return self._records[row["records"]]


def per_seed(folder: Path, name: str, entry: dict, evaluations: Evaluations, times: dict,
             manifest: dict) -> dict:
    """What one run spent and scored (``None`` for what it has not got)."""
    run_dir = folder / name / entry["folder"]
    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if not r.get("final")]
    points = evaluations.points.get((name, entry["folder"]), [])
    expected = curve_points(run_dir, manifest["budget"], manifest["points"])
    final = points[-1] if points and expected and points[-1]["step"] == expected[-1]["step"] \
        else None
    base = evaluations.base.get(points[0]["key"]) if points else None
    spent = times.get((name, entry["folder"]))
    return {
        "seed": entry["seed"], "folder": entry["folder"], "finished": run_finished(run_dir),
        "steps": len(steps),
        "tokens": steps[-1].get("rollout/tokens_total") if steps else None,
        "train_seconds": sum(r.get("time/step_seconds", 0.0) for r in steps),
        "run_seconds": spent and spent["seconds"], "run_cpu_seconds": spent and spent["cpu"],
        "eval_seconds": sum(p["seconds"] for p in points) if points else None,
        "eval_cpu_seconds": sum(p["cpu_seconds"] for p in points) if points else None,
        "base_greedy": base and base["greedy"], "final_greedy": final and final["greedy"],
        "gain_greedy": final["greedy"] - base["greedy"] if final and base else None,
        "curve": _curve(evaluations, base, points),
        "exploitability": exploitability(run_dir),
        "_base": base, "_final": final,
        **curriculum(run_dir),
    }


def _curve(evaluations: Evaluations, base: dict | None, points: list[dict]) -> list[dict]:
    """The run's curve: the base model (step 0, no tokens) and each point, every one read on the
    problems all of them answered (a point before the last answers the first ``curve_size``)."""
    if base is None or not points:
        return []
    rows = [base, *points]
    records = [evaluations.records(r) for r in rows]
    ids = common_ids(*records)
    measures = ["greedy", *(m for m in ("logprob",) if m in base),
                *(k for k in base if k.startswith("pass@"))]
    curve = []
    for row, answered in zip(rows, records, strict=True):
        point = {"step": 0 if row is base else row["step"],
                 "tokens": 0.0 if row is base else row["tokens"], "problems": len(ids)}
        for measure in measures:
            k = int(measure[5:]) if measure.startswith("pass@") else 1
            values = scores(answered, measure, k, ids)
            point[measure] = sum(values) / len(values) if values else None
        curve.append(point)
    return curve


def paired(evaluations: Evaluations, seeds: list[dict], measure: str, k: int = 1,
           against: list[dict] | None = None) -> PairedGain | None:
    """The gain of the final policies over the base model (or, with ``against``, over another
    experiment's final policies on the same seeds), paired per problem and across seeds."""
    scored = paired_scores(evaluations, seeds, measure, k, against)
    return paired_gain(*scored) if scored else None


def paired_scores(evaluations: Evaluations, seeds: list[dict], measure: str, k: int = 1,
                  against: list[dict] | None = None) -> tuple[list, list] | None:
    """(before, after): per seed, the scores of the problems every record answered."""
    if against is None:
        pairs = [(s["_base"], s["_final"]) for s in seeds if s["_base"] and s["_final"]]
    else:
        other = {s["seed"]: s["_final"] for s in against if s["_final"]}
        pairs = [(other[s["seed"]], s["_final"]) for s in seeds
                 if s["_final"] and s["seed"] in other]
    if not pairs or any(measure not in row and not measure.startswith("pass@")
                        for pair in pairs for row in pair):
        return None
    try:
        records = [(evaluations.records(b), evaluations.records(a)) for b, a in pairs]
        ids = common_ids(*[r for pair in records for r in pair])
        before = [scores(b, measure, k, ids) for b, _ in records]
        after = [scores(a, measure, k, ids) for _, a in records]
        if len(ids) < 2:
            return None
        return before, after
    except (KeyError, ValueError):  # no such measure in the records
        return None


def curve(seeds: list[dict]) -> list[dict]:
    """Point k of the curve: mean tokens and, per measure, the mean over the seeds with its
    95% t-interval (the runs' k-th points: their steps differ, their budget shares do not)."""
    done = [s["curve"] for s in seeds if s["curve"]]
    if not done:
        return []
    out = []
    for index in range(max(len(c) for c in done)):
        at = [c[index] for c in done if len(c) > index]
        point = {"tokens": mean([p["tokens"] for p in at]), "seeds": len(at)}
        for key in at[0]:
            if key not in ("step", "tokens", "problems"):
                point[key] = interval([p.get(key) for p in at])
        out.append(point)
    return out


def fit(seeds: list[dict], measure: str = "greedy") -> dict:
    """ScaleRL's sigmoid through every seed's curve points (R0: the base model's mean score),
    with 95% intervals of A, B and C_mid (t on the fit's residual degrees of freedom), or why
    there is none."""
    from scipy import stats

    points = [(p["tokens"], p[measure]) for s in seeds for p in s["curve"][1:]
              if p.get(measure) is not None]
    bases = [s["curve"][0][measure] for s in seeds if s["curve"] and measure in s["curve"][0]]
    per_run = max((len(s["curve"]) - 1 for s in seeds), default=0)
    if per_run < 4:
        return {"why": f"no fit: {per_run} point(s) a run after the base; A, B and C_mid "
                       "need at least 4 (more --points, or a budget of more steps)"}
    try:
        result = fit_compute_curve([c for c, _ in points], [r for _, r in points],
                                   r0=float(np.mean(bases)))
    except ComputeFitError as exc:
        return {"why": f"no fit: {str(exc).removeprefix('compute curve: ')}"}
    t = float(stats.t.ppf(0.975, max(result.fitted_points - 3, 1)))
    if abs(result.a - result.r0) <= max(t * result.a_se, 1e-9):
        return {"why": f"no fit: the points do not move away from the base model's score "
                       f"(A − R0 = {result.a - result.r0:+.3f} ± {t * result.a_se:.3f}), so B "
                       "and C_mid say nothing"}
    low, high = min(c for c, _ in points), max(c for c, _ in points)
    if not low <= result.c_mid <= high:  # the rise lies outside the points: B and C_mid are
        # whatever the optimiser stopped at (2026-11-29: B 9.06 ± 0, C_mid 7 tokens)
        return {"why": f"no fit of B and C_mid: C_mid {result.c_mid:.3g} tokens lies outside "
                       f"the points' {low:.3g}–{high:.3g}, so the curve does not show its rise; "
                       f"A {result.a:.3f} ± {t * result.a_se:.3f} is the level the points sit at"}
    out = {"r0": result.r0, "points": result.fitted_points,
           "sentence": result.sentence("tokens")}
    for name, value, se in (("a", result.a, result.a_se), ("b", result.b, result.b_se),
                            ("c_mid", result.c_mid, result.c_mid_se)):
        out |= {name: value, f"{name}_low": value - t * se, f"{name}_high": value + t * se}
    return out


def _times(folder: Path) -> dict[tuple[str, str], dict]:
    times: dict[tuple[str, str], dict] = {}
    for row in read_jsonl(folder / TIMES):  # attempts of one run add up
        spent = times.setdefault((row["experiment"], row["folder"]), {"seconds": 0.0, "cpu": 0.0})
        spent["seconds"] += row["seconds"]
        spent["cpu"] += row.get("cpu_seconds", math.nan)
    return times


def summarize(folder: Path) -> list[dict]:
    """One row per experiment of the comparison folder, with its seeds' rows inside."""
    from selfplay.evaluation.evaluate import COMPARE_FAMILIES, training_families
    from selfplay.running.runner import load_run_config

    manifest = read_compare(folder)
    evaluations = Evaluations(folder)
    times = _times(folder)
    suite_families = _suite_families(manifest["suite"], COMPARE_FAMILIES)
    table, first = [], None
    for name in manifest["names"]:
        entries = read_manifest(folder / name)["runs"]
        seeds = [per_seed(folder, name, e, evaluations, times, manifest) for e in entries]
        config = load_run_config(folder / name / entries[0]["folder"], logging=False)
        scored = [s for s in seeds if s["gain_greedy"] is not None]
        greedy = paired_scores(evaluations, scored, "greedy")
        gains = {"greedy": paired_gain(*greedy) if greedy else None,
                 "logprob": paired(evaluations, scored, "logprob"),
                 "pass1": paired(evaluations, scored, "pass@1") if manifest["samples"] else None,
                 "passk": paired(evaluations, scored, f"pass@{manifest['samples']}",
                                 manifest["samples"]) if manifest["samples"] > 1 else None}
        versus = (paired(evaluations, scored, "greedy", against=first)
                  if first is not None else None)
        row = {
            "experiment": name, "loop": config.loop, "seeds": f"{len(scored)}/{len(seeds)}",
            "budget": manifest["budget"],
            "steps": mean([s["steps"] for s in scored]),
            "tokens": mean([s["tokens"] for s in scored]),
            "budget_reached": f"{sum((s['tokens'] or 0) >= manifest['budget'] for s in scored)}"
                              f"/{len(scored)}",
            "run_seconds": mean([s["run_seconds"] for s in scored]),
            "run_cpu_seconds": mean([s["run_cpu_seconds"] for s in scored]),
            "train_seconds": mean([s["train_seconds"] for s in scored]),
            "eval_seconds": mean([s["eval_seconds"] for s in scored]),
            "eval_cpu_seconds": mean([s["eval_cpu_seconds"] for s in scored]),
            "base_greedy": mean([s["base_greedy"] for s in scored]),
            "final_greedy": mean([s["final_greedy"] for s in scored]),
            **{f"gain_{k}": g.as_dict() if g else None for k, g in gains.items()},
            "mde_greedy": gains["greedy"].mde if gains["greedy"] else None,
            # each seed's paired gain: what the rerun interval's spread is taken from
            "seed_gains": [float(np.mean(np.subtract(a, b))) for b, a in zip(*greedy,
                                                                             strict=True)]
            if greedy else [],
            "flip_rate": gains["greedy"].flip_rate if gains["greedy"] else None,
            "vs_first": versus.as_dict() if versus else None,
            "exploitability": _exploitability_summary(scored),
            "curve": curve(scored), "fit": fit(scored) if scored else None,
            "validity": mean([s["validity"] for s in scored]),
            "diversity": mean([s["diversity"] for s in scored]),
            "difficulty": mean([s["difficulty"] for s in scored]),
            "trained_on_suite": sorted(training_families(config) & suite_families),
            "per_seed": [{k: v for k, v in s.items() if not k.startswith("_")} for s in seeds],
        }
        table.append(row)
        first = scored if first is None else first
    add_rerun_intervals(table)
    return table


def add_rerun_intervals(table: list[dict]) -> SeedSpread | None:
    """Each row's ``rerun``: where a rerun's greedy gain on ``RERUN_SEEDS`` other seeds should
    fall (``stats.paired.rerun_interval``), its floor the seed spread pooled over the table's
    experiments; returns that floor."""
    spreads = {id(r): seed_spread(seed_gains_of(r), "its own seeds") for r in table}
    floor = pooled_spread(list(spreads.values()),
                          f"pooled over {sum(s is not None for s in spreads.values())} "
                          "experiments")
    for row in table:
        gains = seed_gains_of(row)
        found = (rerun_interval(row["gain_greedy"]["gain"], len(gains), spreads[id(row)], floor)
                 if row.get("gain_greedy") and gains else None)
        row["rerun"] = found.as_dict() if found else None
    return floor


def seed_gains_of(row: dict) -> list[float]:
    return row.get("seed_gains") or []


def _exploitability_summary(seeds: list[dict]) -> dict[str, dict]:
    games = sorted({g for s in seeds for g in s["exploitability"]})
    out = {}
    for game in games:
        values = [s["exploitability"].get(game, {}) for s in seeds]
        out[game] = {"before": interval([v.get("before") for v in values]),
                     "after": interval([v.get("after") for v in values]),
                     "change": interval([v["after"] - v["before"] for v in values
                                         if v.get("after") is not None
                                         and v.get("before") is not None])}
    return out


def reuse(folder: Path) -> dict:
    """What reusing the base model's evaluation saved: each run would otherwise evaluate its
    own base model, at the mean CPU cost of a base evaluation."""
    rows = read_jsonl(folder / EVALUATIONS)
    bases = [r["cpu_seconds"] for r in rows if r["which"] == "base"]
    points = [r["cpu_seconds"] for r in rows if r["which"] == "point"]
    runs = len({(r["experiment"], r["folder"]) for r in rows if r["which"] == "point"})
    if not bases or not runs:
        return {}
    spent = sum(bases) + sum(points)
    without = sum(points) + runs * (sum(bases) / len(bases))
    return {"base_evaluations": len(bases), "runs": runs, "eval_cpu_seconds": spent,
            "eval_cpu_seconds_without_reuse": without, "saved_share": 1 - spent / without}


def _suite_families(suite: str, compare_families: dict) -> set[str]:
    if suite == "compare":
        return set(compare_families)
    return {f for f in suite[3:].split(",") if f} if suite.startswith("rg:") else set()


# ------------------------------------------------------------------ writing
def _signed(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:+.{digits}f}"


def gain_cell(value: dict | None, digits: int = 3) -> str:
    """``+0.031 [−0.020, +0.080]``; empty without a value."""
    if not value or value.get("gain") is None:
        return ""
    if value.get("low") is None:
        return _signed(value["gain"], digits)
    return (f"{_signed(value['gain'], digits)} [{_signed(value['low'], digits)}, "
            f"{_signed(value['high'], digits)}]")


def rerun_cell(value: dict | None) -> str:
    """``[−0.029, +0.078] (sd 0.029 on 5 df, its own seeds)``; empty without one."""
    if not value:
        return ""
    return (f"[{_signed(value['low'])}, {_signed(value['high'])}] (seed sd {value['sd']:.3f} "
            f"on {value['df']:.0f} df, {value['source']})")


def fit_cell(value: dict | None) -> str:
    if not value:
        return ""
    if "why" in value:
        return value["why"]
    return (f"A {value['a']:.3f} [{value['a_low']:.3f}, {value['a_high']:.3f}], "
            f"B {value['b']:.2f}, C_mid {value['c_mid']:.3g} tokens")


def exploitability_cell(value: dict) -> str:
    parts = []
    for game, entry in value.items():
        before, after, change = entry["before"]["mean"], entry["after"]["mean"], entry["change"]
        text = f"{game}: {'' if before is None else f'{before:.3f}'} → " \
               f"{'' if after is None else f'{after:.3f}'}"
        if change["low"] is not None:
            text += f" (Δ {_signed(change['low'])} to {_signed(change['high'])})"
        parts.append(text)
    return "; ".join(parts)


def cell(row: dict, key: str) -> str:
    """A table cell: intervals as ``+0.031 [−0.02, +0.08]``, nulls empty."""
    value = row.get(key)
    if key.startswith("gain_") or key == "vs_first":
        return gain_cell(value, 4 if key == "gain_logprob" else 3)
    if key == "fit":
        return fit_cell(value)
    if key == "rerun":
        return rerun_cell(value)
    if key == "exploitability":
        return exploitability_cell(value or {})
    if isinstance(value, list):
        return ", ".join(value)
    if isinstance(value, float):
        whole = key in ("tokens", "run_seconds", "eval_seconds", "run_cpu_seconds",
                        "eval_cpu_seconds")  # counts and seconds
        return f"{value:.0f}" if whole else f"{value:.1f}" if key == "steps" else f"{value:.3f}"
    return "" if value is None else str(value)


def columns(table: list[dict]) -> tuple[tuple[str, str], ...]:
    """The table's columns less those no experiment has (pass@k without samples)."""
    return tuple(c for c in COLUMNS if c[0] not in ("gain_pass1", "gain_passk", "vs_first",
                                                    "exploitability")
                 or any(r.get(c[0]) for r in table))


def markdown(table: list[dict]) -> str:
    shown = columns(table)
    lines = ["| " + " | ".join(h for _, h in shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join(cell(r, k) for k, _ in shown) + " |" for r in table]
    return "\n".join(lines) + "\n"


def write_results(folder: Path, table: list[dict], png: bool = True) -> Path:
    """results.md/.csv/.json, the page (report/index.html with gain.png and curves.png) and the
    rich table; the page's path."""
    (folder / f"{RESULTS}.json").write_text(json.dumps(table, indent=1) + "\n")
    (folder / f"{RESULTS}.md").write_text(markdown(table))
    shown = columns(table)
    with (folder / f"{RESULTS}.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([h for _, h in shown])
        writer.writerows([[cell(r, k) for k, _ in shown] for r in table])
    page = write_page(folder, table, png)
    print_table(folder, table)
    return page


def print_table(folder: Path, table: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    from selfplay.running.tracking import console

    rich_table = Table(title=f"compare: {folder} (every column: results.md)")
    shown = [c for c in TERMINAL if c in columns(table)]
    for _, header in shown:
        rich_table.add_column(header)
    for row in table:
        rich_table.add_row(*[cell(row, k) for k, _ in shown])
    # a file or pipe has no width (rich assumes 80): wide enough not to fold every cell
    wide = console if console.is_terminal else Console(stderr=True, width=240)
    wide.print(rich_table)
    saved = reuse(folder)
    if saved:
        wide.print(reuse_sentence(saved))


def reuse_sentence(saved: dict) -> str:
    return (f"base model evaluated {saved['base_evaluations']} time(s) for {saved['runs']} runs: "
            f"evaluation CPU {saved['eval_cpu_seconds']:.0f} s instead of "
            f"{saved['eval_cpu_seconds_without_reuse']:.0f} s ({saved['saved_share']:.0%} saved)")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def gain_png(table: list[dict], path: Path) -> None:
    """Each experiment's paired gain with its 95% interval, beside it where a rerun on new
    seeds should fall, and ± its MDE shaded."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(max(4.0, 0.9 * len(table) + 2), 3.5))
    for index, row in enumerate(table):
        value = row["gain_greedy"]
        if not value:
            continue
        if row["mde_greedy"] is not None and math.isfinite(row["mde_greedy"]):
            axis.bar(index, 2 * row["mde_greedy"], bottom=-row["mde_greedy"], width=0.5,
                     color="#dddddd", label="± MDE" if index == 0 else None)
        axis.errorbar(index, value["gain"], yerr=[[value["gain"] - value["low"]],
                                                 [value["high"] - value["gain"]]],
                      fmt="o", color="#1f77b4", capsize=4,
                      label="gain, 95% interval" if index == 0 else None)
        rerun = row.get("rerun")
        if rerun:
            axis.errorbar(index + 0.18, value["gain"], fmt="none", color="#ff7f0e", capsize=3,
                          yerr=[[value["gain"] - rerun["low"]], [rerun["high"] - value["gain"]]],
                          label=f"a rerun's gain, {rerun['new_seeds']} new seeds"
                          if index == 0 else None)
    axis.axhline(0.0, color="grey", linewidth=0.8)
    axis.set_xticks(range(len(table)), [r["experiment"] for r in table], rotation=20, ha="right")
    axis.set_ylabel("held-out gain (final − base)")
    axis.legend(loc="best", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def curves_png(table: list[dict], path: Path) -> None:
    """Accuracy (and the reference's log-prob) against generated tokens, one line per
    experiment with its 95% band across seeds, and the fitted sigmoid dashed."""
    plt = _pyplot()
    measures = [m for m in ("greedy", "logprob")
                if any(p.get(m) for r in table for p in r["curve"])]
    figure, axes = plt.subplots(1, len(measures), figsize=(5.5 * len(measures), 3.8),
                                squeeze=False)
    for axis, measure in zip(axes[0], measures, strict=True):
        for index, row in enumerate(table):
            points = [p for p in row["curve"] if p.get(measure, {}).get("mean") is not None]
            if not points:
                continue
            colour = f"C{index % 10}"
            x = [p["tokens"] for p in points]
            y = [p[measure]["mean"] for p in points]
            axis.plot(x, y, "o-", color=colour, label=row["experiment"], markersize=3)
            low = [p[measure]["low"] if p[measure]["low"] is not None else p[measure]["mean"]
                   for p in points]
            high = [p[measure]["high"] if p[measure]["high"] is not None else p[measure]["mean"]
                    for p in points]
            axis.fill_between(x, low, high, color=colour, alpha=0.15, linewidth=0)
            fitted = row.get("fit") or {}
            if measure == "greedy" and "a" in fitted:
                from selfplay.stats.compute import scalerl_curve

                grid = np.linspace(0, max(x), 100)
                axis.plot(grid, scalerl_curve(grid, fitted["r0"], fitted["a"], fitted["b"],
                                              fitted["c_mid"]), "--", color=colour, linewidth=1)
        axis.set_xlabel("generated tokens (training)")
        axis.set_ylabel("greedy accuracy" if measure == "greedy"
                        else "reference log-prob per token")
        axis.grid(alpha=0.3)
    axes[0][0].legend(loc="best", fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_page(folder: Path, table: list[dict], png: bool = True) -> Path:
    """One static page: the plots and the table (no script: it opens anywhere)."""

    manifest = read_compare(folder)
    report = folder / "report"
    report.mkdir(exist_ok=True)
    if png:
        gain_png(table, report / "gain.png")
        curves_png(table, report / "curves.png")
    shown = columns(table)
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h in shown)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell(r, k))}</td>" for k, _ in shown)
                   + "</tr>" for r in table)
    what = (f"{len(manifest['names'])} experiments × {manifest['seeds']} seeds (from "
            f"{manifest['first_seed']}), {manifest['budget']} generated tokens each; suite "
            f"{manifest['suite']}, {manifest['suite_size']} problems asked, greedy"
            + (f" + {manifest['samples']} samples" if manifest["samples"] else "")
            + (" + the reference's likelihood" if manifest.get("likelihood", True) else "")
            + f", at most {manifest['eval_tokens']} tokens an answer, {manifest['points']} "
            "points a run" + (f"; overrides {' '.join(manifest['overrides'])}"
                              if manifest["overrides"] else ""))
    saved = reuse(folder)
    images = ('<img src="gain.png" alt="gain per experiment with 95% intervals and MDE">'
              '<img src="curves.png" alt="learning curves with bands across seeds">') if png else ""
    (report / "index.html").write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>selfplay compare</title>"
        "<style>body{font-family:sans-serif;margin:2em}img{max-width:100%}table{border-collapse:"
        "collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}</style></head>"
        f"<body><h1>selfplay compare</h1><p>{html.escape(what)}</p>"
        + (f"<p>{html.escape(reuse_sentence(saved))}</p>" if saved else "")
        + f"{images}<table id='results'><thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
        "</table><p>Gain: final − base, paired per problem and across seeds (the same problems "
        "before and after, every seed): the mean of the seeds × problems differences with a 95% "
        "t-interval whose variance and degrees of freedom come from the seeds × problems "
        "analysis (few seeds that disagree widen it to their t). MDE: the gain this design "
        "detects with power 0.8 at α 0.05; a gain inside ±MDE with an interval covering 0 "
        "rules out effects larger than about the MDE, not every effect. Flips: the share of "
        "(seed, problem) answers that changed. − first: the final policies against the first "
        "experiment's, paired the same way. Curves: the mean over seeds at each point of the "
        "budget, the band a 95% t-interval across seeds; dashed, ScaleRL's sigmoid "
        "(docs/compare.md). Empty cells: no value.</p></body></html>\n")
    return report / "index.html"
