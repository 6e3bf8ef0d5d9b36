"""The table and page of ``selfplay compare`` (docs/compare.md): per experiment, the held-out gain
(final − base accuracy of each seed) with a 95% t-interval across seeds, what the runs spent
(tokens, steps, wall time, evaluation time) and what their curricula looked like (validity,
diversity, difficulty from ``tasks.jsonl``; null where a loop writes none). Nulls are written as
they are: a loop without a figure has an empty cell, never a made-up one."""

from __future__ import annotations

import csv
import html
import json
import math
from pathlib import Path

from curricula.analysis.diversity import distinct_n
from curricula.analysis.tasks import validity_rate
from selfplay.analysis.rundata import read_jsonl
from selfplay.analysis.sweepdata import read_manifest, run_finished
from selfplay.core.errors import UserError
from selfplay.stats.seeds import t_interval

MANIFEST = "compare.json"
EVALUATIONS = "evaluations.jsonl"
TIMES = "runs.jsonl"


def read_compare(folder: Path) -> dict:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise UserError(f"{folder} is not a comparison folder (no {MANIFEST})")
    return json.loads(path.read_text())

RESULTS = "results"  # results.md, results.csv, results.json
COLUMNS = (  # (key, header) of the table, in order
    ("experiment", "experiment"), ("loop", "loop"), ("seeds", "seeds done"),
    ("steps", "steps"), ("tokens", "tokens"), ("budget_reached", "budget reached"),
    ("run_seconds", "run s"), ("run_cpu_seconds", "run CPU s"), ("eval_seconds", "eval s"),
    ("eval_cpu_seconds", "eval CPU s"),
    ("base_greedy", "base acc"), ("final_greedy", "final acc"),
    ("gain_greedy", "gain greedy [95% CI]"), ("gain_sampled", "gain sampled [95% CI]"),
    ("validity", "validity"), ("diversity", "distinct-2"), ("difficulty", "mean p̂"),
    ("trained_on_suite", "trained on suite families"),
)

TERMINAL = tuple(c for c in COLUMNS if c[0] in (  # what fits a terminal
    "experiment", "seeds", "tokens", "run_seconds", "eval_seconds", "gain_greedy", "gain_sampled",
    "validity", "diversity", "difficulty"))


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


def per_seed(folder: Path, name: str, entry: dict, evaluations: dict, times: dict) -> dict:
    """What one run spent and scored (``None`` for what it has not got)."""
    run_dir = folder / name / entry["folder"]
    rows = read_jsonl(run_dir / "metrics.jsonl")
    steps = [r for r in rows if not r.get("final")]
    base = evaluations.get((name, entry["folder"], "base"))
    final = evaluations.get((name, entry["folder"], "final"))
    both = base is not None and final is not None
    spent = times.get((name, entry["folder"]))
    return {
        "seed": entry["seed"], "folder": entry["folder"], "finished": run_finished(run_dir),
        "steps": len(steps),
        "tokens": steps[-1].get("rollout/tokens_total") if steps else None,
        "train_seconds": sum(r.get("time/step_seconds", 0.0) for r in steps),
        "run_seconds": spent and spent["seconds"], "run_cpu_seconds": spent and spent["cpu"],
        "eval_seconds": mean([e["seconds"] for e in (base, final) if e is not None]),
        "eval_cpu_seconds": mean([e.get("cpu_seconds") for e in (base, final) if e is not None]),
        "base_greedy": base and base["greedy"], "final_greedy": final and final["greedy"],
        "base_sampled": base and base["sampled"], "final_sampled": final and final["sampled"],
        "gain_greedy": final["greedy"] - base["greedy"] if both else None,
        "gain_sampled": final["sampled"] - base["sampled"] if both else None,
        **curriculum(run_dir),
    }


def interval(values) -> dict:
    """Mean and 95% t-interval across seeds (nulls where fewer than two seeds)."""
    m, low, high = t_interval(values)
    clean = lambda x: None if x is None or not math.isfinite(x) else x  # noqa: E731
    return {"mean": clean(m), "low": clean(low), "high": clean(high)}


def summarize(folder: Path) -> list[dict]:
    """One row per experiment of the comparison folder, with its seeds' rows inside."""
    from selfplay.evaluation.evaluate import COMPARE_FAMILIES, training_families
    from selfplay.running.runner import load_run_config

    manifest = read_compare(folder)
    evaluations = {(r["experiment"], r["folder"], r["which"]): r
                   for r in read_jsonl(folder / EVALUATIONS)}
    times: dict[tuple[str, str], dict] = {}
    for row in read_jsonl(folder / TIMES):  # attempts of one run add up
        spent = times.setdefault((row["experiment"], row["folder"]), {"seconds": 0.0, "cpu": 0.0})
        spent["seconds"] += row["seconds"]
        spent["cpu"] += row.get("cpu_seconds", math.nan)
    suite_families = _suite_families(manifest["suite"], COMPARE_FAMILIES)
    table = []
    for name in manifest["names"]:
        entries = read_manifest(folder / name)["runs"]
        seeds = [per_seed(folder, name, e, evaluations, times) for e in entries]
        config = load_run_config(folder / name / entries[0]["folder"], logging=False)
        scored = [s for s in seeds if s["gain_greedy"] is not None]
        table.append({
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
            "gain_greedy": interval([s["gain_greedy"] for s in scored]),
            "gain_sampled": interval([s["gain_sampled"] for s in scored]),
            "validity": mean([s["validity"] for s in scored]),
            "diversity": mean([s["diversity"] for s in scored]),
            "difficulty": mean([s["difficulty"] for s in scored]),
            "trained_on_suite": sorted(training_families(config) & suite_families),
            "per_seed": seeds,
        })
    return table


def _suite_families(suite: str, compare_families: dict) -> set[str]:
    if suite == "compare":
        return set(compare_families)
    return {f for f in suite[3:].split(",") if f} if suite.startswith("rg:") else set()


# ------------------------------------------------------------------ writing
def cell(row: dict, key: str) -> str:
    """A table cell: intervals as ``+0.031 [−0.02, +0.08]``, nulls empty."""
    value = row.get(key)
    if isinstance(value, dict):
        if value["mean"] is None:
            return ""
        if value["low"] is None:
            return f"{value['mean']:+.3f}"
        return f"{value['mean']:+.3f} [{value['low']:+.3f}, {value['high']:+.3f}]"
    if isinstance(value, list):
        return ", ".join(value)
    if isinstance(value, float):
        whole = key in ("tokens", "run_seconds", "eval_seconds", "run_cpu_seconds",
                        "eval_cpu_seconds")  # counts and seconds
        return f"{value:.0f}" if whole else f"{value:.1f}" if key == "steps" else f"{value:.3f}"
    return "" if value is None else str(value)


def markdown(table: list[dict]) -> str:
    lines = ["| " + " | ".join(h for _, h in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r, k) for k, _ in COLUMNS) + " |" for r in table]
    return "\n".join(lines) + "\n"


def write_results(folder: Path, table: list[dict], png: bool = True) -> Path:
    """results.md/.csv/.json, the page (report/index.html with gain.png) and the rich table;
    the page's path."""
    (folder / f"{RESULTS}.json").write_text(json.dumps(table, indent=1) + "\n")
    (folder / f"{RESULTS}.md").write_text(markdown(table))
    with (folder / f"{RESULTS}.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([h for _, h in COLUMNS])
        writer.writerows([[cell(r, k) for k, _ in COLUMNS] for r in table])
    page = write_page(folder, table, png)
    print_table(folder, table)
    return page


def print_table(folder: Path, table: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    from selfplay.running.tracking import console

    rich_table = Table(title=f"compare: {folder} (every column: results.md)")
    for _, header in TERMINAL:
        rich_table.add_column(header)
    for row in table:
        rich_table.add_row(*[cell(row, k) for k, _ in TERMINAL])
    # a file or pipe has no width (rich assumes 80): wide enough not to fold every cell
    wide = console if console.is_terminal else Console(stderr=True, width=240)
    wide.print(rich_table)


def gain_png(table: list[dict], path: Path) -> None:
    """Each experiment's mean gain (greedy and sampled) with its 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(max(4.0, 1.2 * len(table) + 2), 3.5))
    for offset, key, colour in ((-0.12, "gain_greedy", "#1f77b4"), (0.12, "gain_sampled",
                                                                       "#ff7f0e")):
        for index, row in enumerate(table):
            value = row[key]
            if value["mean"] is None:
                continue
            low = value["low"] if value["low"] is not None else value["mean"]
            high = value["high"] if value["high"] is not None else value["mean"]
            axis.errorbar(index + offset, value["mean"],
                          yerr=[[value["mean"] - low], [high - value["mean"]]], fmt="o",
                          color=colour, capsize=4, label=key.replace("_", " ") if index == 0
                          else None)
    axis.axhline(0.0, color="grey", linewidth=0.8)
    axis.set_xticks(range(len(table)), [r["experiment"] for r in table], rotation=20, ha="right")
    axis.set_ylabel("held-out gain (final − base)")
    axis.legend(loc="best", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_page(folder: Path, table: list[dict], png: bool = True) -> Path:
    """One static page: the plot and the table (no script: it opens anywhere)."""

    manifest = read_compare(folder)
    report = folder / "report"
    report.mkdir(exist_ok=True)
    if png:
        gain_png(table, report / "gain.png")
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell(r, k))}</td>" for k, _ in COLUMNS)
                   + "</tr>" for r in table)
    what = (f"{len(manifest['names'])} experiments × {manifest['seeds']} seeds (from "
            f"{manifest['first_seed']}), {manifest['budget']} generated tokens each; suite "
            f"{manifest['suite']}, {manifest['suite_size']} problems, greedy + "
            f"{manifest['samples']} samples, at most {manifest['eval_tokens']} tokens an answer"
            + (f"; overrides {' '.join(manifest['overrides'])}" if manifest["overrides"] else ""))
    image = '<img src="gain.png" alt="gain per experiment with 95% intervals">' if png else ""
    (report / "index.html").write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>selfplay compare</title>"
        "<style>body{font-family:sans-serif;margin:2em}img{max-width:100%}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}</style></head><body>"
        f"<h1>selfplay compare</h1><p>{html.escape(what)}</p>{image}"
        f"<table id='results'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        "<p>Gain: final − base accuracy per seed; the interval is the 95% Student-t interval of "
        "its mean across seeds (docs/compare.md). Empty cells: no value (a loop without "
        "tasks.jsonl, fewer than two seeds).</p></body></html>\n")
    return report / "index.html"
