"""``selfplay bench curriculum``: every sampler on the Rasch simulated student (no model).

For each sampler and seed a student (``curricula.student``) trains until its mean success
probability on held-out tasks reaches the target; the table gives the steps to mastery
(mean ± standard deviation over seeds) and their ratio to plain uniform sampling measured in the
same run (goal: the best sampler ≤ ⅔), the groups generated until then (DAPO draws more than
one batch per step) and the effective-prompt ratio (groups with 0 < correct < G). A PNG plots
the mastery curves. A second table times each sampler's draw with 100,000 tasks in the buffer
(per sampled task, goal ≤ 1 ms) against uniform's, measured in the same run.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from curricula.curriculum import Curriculum, Group
from curricula.settings import CurriculumSettings
from curricula.student import StudentRun, StudentSettings, simulate

RETIRE = 0.9  # ScaleRL's rule, on for every sampler but the plain uniform baseline
VARIANTS: dict[str, dict] = {
    "uniform": {"sampler": "uniform"},
    "uniform+retire": {"sampler": "uniform", "retire_at": RETIRE},
    "band": {"sampler": "band", "retire_at": RETIRE},
    "dapo": {"sampler": "dapo", "retire_at": RETIRE},
    "learnability": {"sampler": "learnability", "retire_at": RETIRE},
    "plr": {"sampler": "plr", "retire_at": RETIRE},
    "tscl-epsilon": {"sampler": "tscl", "tscl_mode": "epsilon", "retire_at": RETIRE},
    "tscl-thompson": {"sampler": "tscl", "tscl_mode": "thompson", "retire_at": RETIRE},
}
TIMED_TASKS = 100_000
TIMED_BATCH = 32


def _mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def run_variants(
    settings: StudentSettings, seeds: int, console: Console
) -> dict[str, list[StudentRun]]:
    results: dict[str, list[StudentRun]] = {}
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("simulated students", total=len(VARIANTS) * seeds)
        for name, knobs in VARIANTS.items():
            results[name] = []
            for seed in range(seeds):
                results[name].append(simulate(CurriculumSettings(**knobs), settings, seed))
                progress.advance(task)
    return results


def steps_of(runs: list[StudentRun], settings: StudentSettings) -> list[float]:
    """Steps to mastery per seed (a seed that never got there counts as max_steps)."""
    return [
        float(r.steps_to_mastery if r.steps_to_mastery is not None else settings.max_steps)
        for r in runs
    ]


def mastery_table(results, settings: StudentSettings) -> tuple[Table, list[dict]]:
    baseline = statistics.mean(steps_of(results["uniform"], settings))
    table = Table(
        title=f"steps until held-out mastery ≥ {settings.target} "
        f"({len(results['uniform'])} seeds, mean ± sd)"
    )
    for column in ("sampler", "steps", "vs uniform", "reached", "groups drawn", "effective"):
        table.add_column(column, justify="left" if column == "sampler" else "right")
    rows = []
    for name, runs in results.items():
        steps, steps_sd = _mean_sd(steps_of(runs, settings))
        drawn, drawn_sd = _mean_sd([float(r.groups_drawn) for r in runs])
        effective, effective_sd = _mean_sd([r.effective_ratio for r in runs])
        reached = sum(r.steps_to_mastery is not None for r in runs)
        row = {
            "sampler": name,
            "steps": steps,
            "steps_sd": steps_sd,
            "ratio": steps / baseline,
            "reached": reached,
            "seeds": len(runs),
            "groups_drawn": drawn,
            "groups_drawn_sd": drawn_sd,
            "effective_ratio": effective,
            "effective_ratio_sd": effective_sd,
        }
        rows.append(row)
        table.add_row(
            name,
            f"{steps:.0f} ± {steps_sd:.0f}",
            f"{row['ratio']:.2f}×",
            f"{reached}/{len(runs)}",
            f"{drawn:.0f} ± {drawn_sd:.0f}",
            f"{effective:.2f} ± {effective_sd:.2f}",
        )
    return table, rows


def timing_buffer(knobs: dict, rng: np.random.Generator) -> Curriculum:
    """100,000 tasks over 8 families × 10 levels, half of them seen once."""
    curriculum = Curriculum(CurriculumSettings(**knobs), seed=0)
    ids = [f"t{i}" for i in range(TIMED_TASKS)]
    families = [f"f{i % 8}" for i in range(TIMED_TASKS)]
    curriculum.buffer.add_many(ids, families, [float(i % 10) for i in range(TIMED_TASKS)])
    seen = rng.choice(TIMED_TASKS, TIMED_TASKS // 2, replace=False)
    groups = [
        Group(int(i), int(k), 8, [1.0] * int(k) + [0.0] * (8 - int(k)))
        for i, k in zip(seen, rng.integers(0, 9, len(seen)), strict=True)
    ]
    curriculum.report(groups, step=0)
    return curriculum


def draw(curriculum: Curriculum, step: int) -> None:
    """One batch from the sampler itself (``Curriculum.draw`` would also keep what the step
    drew, which a timing loop never reports)."""
    curriculum.sampler.sample(curriculum.buffer, TIMED_BATCH, step)


def time_samplers(trials: int = 5, batches: int = 20) -> list[dict]:
    """Milliseconds per sampled task with 100,000 tasks, batches of 32: the median of
    ``trials`` rounds, the samplers interleaved within each round so that a shared machine's
    load falls on all of them alike (uniform, the baseline, included)."""
    rng = np.random.default_rng(0)
    curricula = {name: timing_buffer(knobs, rng) for name, knobs in VARIANTS.items()}
    seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    step = 1
    for _ in range(trials):
        for name, curriculum in curricula.items():
            draw(curriculum, step)  # warm-up (caches after new results)
            start = time.perf_counter()
            for _ in range(batches):
                step += 1
                draw(curriculum, step)
            seconds[name].append((time.perf_counter() - start) / (batches * TIMED_BATCH))
    base = statistics.median(seconds["uniform"])
    return [
        {
            "sampler": name,
            "ms_per_task": 1000 * statistics.median(values),
            "vs_uniform": statistics.median(values) / base,
        }
        for name, values in seconds.items()
    ]


def plot(results, settings: StudentSettings, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 5))
    for name, runs in results.items():
        length = max(len(r.mastery) for r in runs)
        curves = np.array([r.mastery + [r.mastery[-1]] * (length - len(r.mastery)) for r in runs])
        axis.plot(curves.mean(axis=0), label=name, linewidth=2 if name == "uniform" else 1.2)
    axis.axhline(settings.target, color="grey", linestyle="--", linewidth=1)
    axis.set_xlabel("training step")
    axis.set_ylabel("held-out mastery (mean p)")
    axis.set_title("Rasch simulated student: mastery by sampler (mean over seeds)")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def bench_curriculum(seeds: int = 5, out: str = "runs/bench-curriculum", **student) -> dict:
    console = Console()
    if not console.is_terminal:  # piped into a file: wide enough for the tables
        console = Console(width=110)
    settings = StudentSettings(**student)
    console.print(f"[bold]student[/] {asdict(settings)}")
    results = run_variants(settings, seeds, console)
    table, rows = mastery_table(results, settings)
    console.print(table)
    best = min((r for r in rows if r["sampler"] != "uniform"), key=lambda r: r["ratio"])
    verdict = "meets" if best["ratio"] <= 2 / 3 else "misses"
    console.print(
        f"best sampler: {best['sampler']} needs {best['ratio']:.2f}× uniform's steps "
        f"({verdict} the goal ≤ 0.67×)"
    )
    timing = time_samplers()
    timing_table = Table(
        title=f"sampler cost, {TIMED_TASKS:,} tasks, batches of {TIMED_BATCH} (median of 5)"
    )
    for column in ("sampler", "ms per sampled task", "vs uniform"):
        timing_table.add_column(column, justify="left" if column == "sampler" else "right")
    for row in timing:
        timing_table.add_row(
            row["sampler"], f"{row['ms_per_task']:.3f}", f"{row['vs_uniform']:.2f}×"
        )
    console.print(timing_table)
    worst = max(timing, key=lambda r: r["ms_per_task"])
    console.print(
        f"slowest sampler: {worst['sampler']} {worst['ms_per_task']:.3f} ms per sampled task "
        f"({'meets' if worst['ms_per_task'] <= 1 else 'misses'} the goal ≤ 1 ms)"
    )
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    png = plot(results, settings, folder / "curriculum.png")
    summary = {"student": asdict(settings), "seeds": seeds, "mastery": rows, "timing": timing}
    (folder / "curriculum.json").write_text(json.dumps(summary, indent=1))
    console.print(f"plot: {png}\nfigures: {folder / 'curriculum.json'}")
    return summary
