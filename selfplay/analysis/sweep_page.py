"""The page of a sweep (``selfplay analyze SWEEP``): each arm's mean across seeds with a 95%
interval over steps, and the final metrics per arm with each arm's difference from the first
arm and its bootstrap interval (docs/sweeps.md).

The statistics are ``selfplay.stats.seeds``: the band around a curve is a Student-t interval of
the mean over the seeds that logged that step; a difference is ``arm − first arm`` with a
percentile bootstrap over seeds, paired by seed when the two arms share seeds.
"""

from __future__ import annotations

import html
import math
import re
from collections import defaultdict
from pathlib import Path

from selfplay.analysis.page import page_html, write_page, write_pngs
from selfplay.analysis.plots import Plot, Series
from selfplay.analysis.rundata import RunData
from selfplay.analysis.sections import Section, Table, fmt, is_rate
from selfplay.analysis.sweepdata import SweepData, run_finished
from selfplay.stats.seeds import LEVEL, RESAMPLES, Difference, bootstrap_difference, t_interval

# metrics a sweep compares: outcomes of the policy, not of the machine (no seconds, no
# throughput: identical arms differ there, and it is not what a sweep asks) and not the run's
# bookkeeping; every other number is, a loop's own metrics too (SPICE's
# spice/challenger/valid_rate, Agent0's agent0/pool/..., a plug-in loop's)
MACHINE_WORDS = ("seconds", "per_s", "per_minute", "time", "tokens_per", "memory")  # time/...
MACHINE_PREFIXES = ("sync/", "staleness/", "cluster/")
BOOKKEEPING = {"step", "final"}
BOOKKEEPING_ENDS = ("/phase", "/iteration")

BAND_NOTE = (
    "Each line is one arm's mean over its seeds at each step; the shaded band is the 95% "
    "Student-t interval of that mean (mean ± t(0.975, n−1)·s/√n over the n seeds that logged "
    "the step; no band where n < 2). It says where the arm's expected value lies, not where a "
    "single run will land."
)


def compared_keys(rows: list[dict]) -> list[str]:
    keys = set()
    for row in rows:
        for key, value in row.items():
            if (
                key not in BOOKKEEPING
                and not key.startswith(MACHINE_PREFIXES)
                and not key.endswith(BOOKKEEPING_ENDS)
                and not any(w in key for w in MACHINE_WORDS)
                and isinstance(value, int | float)
                and not isinstance(value, bool)
                and not (key.startswith("eval/") and key.count("/") > 3)
            ):
                keys.add(key)
    return sorted(keys)


def final_value(run: RunData, key: str) -> float | None:
    """The value in the last row that holds ``key``: the end-of-run evaluation for ``eval/``
    keys, the last training step for training metrics."""
    value = None
    for row in sorted(run.metrics, key=lambda r: (r["step"], bool(r.get("final")))):
        v = row.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            value = float(v)
    return value


def finished_runs(sweep: SweepData, arm: str) -> dict[int, RunData]:
    return {seed: run for seed, run in sweep.runs_of(arm).items() if run.finished}


def final_values(sweep: SweepData) -> dict[str, dict[str, dict[int, float]]]:
    """metric → arm → seed → final value, over finished runs."""
    finished = {arm: finished_runs(sweep, arm) for arm in sweep.arms}
    keys = compared_keys(
        [row for runs in finished.values() for run in runs.values() for row in run.metrics]
    )
    out: dict[str, dict[str, dict[int, float]]] = {}
    for key in keys:
        out[key] = {
            arm: {seed: v for seed, run in runs.items() if (v := final_value(run, key)) is not None}
            for arm, runs in finished.items()
        }
    return out


def differences(
    values: dict[str, dict[str, dict[int, float]]],
    arms: list[str],
    resamples: int = RESAMPLES,
) -> dict[str, dict[str, Difference]]:
    """metric → arm → ``arm − arms[0]`` with its bootstrap interval (seeded)."""
    reference = arms[0]
    return {
        key: {
            arm: bootstrap_difference(
                by_arm.get(reference, {}), by_arm.get(arm, {}), resamples=resamples
            )
            for arm in arms[1:]
        }
        for key, by_arm in values.items()
    }


def _interval(low: float, high: float) -> str:
    return "–" if not (math.isfinite(low) and math.isfinite(high)) else f"[{low:.4g}, {high:.4g}]"


def final_tables(sweep: SweepData) -> tuple[Table, Table | None]:
    values = final_values(sweep)
    rows = []
    for key, by_arm in values.items():
        for arm in sweep.arms:
            seeds = by_arm.get(arm, {})
            mean, low, high = t_interval(list(seeds.values()))
            rows.append(
                [
                    key,
                    arm,
                    len(seeds),
                    fmt(mean, 4),
                    _interval(low, high),
                    " ".join(f"{v:.4g}" for _, v in sorted(seeds.items())),
                ]
            )
    per_arm = Table(
        "final value per arm: mean over finished seeds, 95% t-interval",
        ["metric", "arm", "seeds", "mean", "95% interval", "per seed"],
        rows,
    )
    if len(sweep.arms) < 2:
        return per_arm, None
    diff_rows = []
    for key, by_arm in differences(values, sweep.arms).items():
        for arm, d in by_arm.items():
            verdict = "–" if not d.defined else "yes" if d.excludes_zero else "no"
            diff_rows.append(
                [
                    key,
                    arm,
                    fmt(d.difference, 4),
                    _interval(d.low, d.high),
                    _interval(d.t_low, d.t_high),
                    "paired by seed" if d.paired else "unpaired",
                    d.n_arm if d.paired else f"{d.n_reference} vs {d.n_arm}",
                    verdict,
                ]
            )
    diff = Table(
        f"difference from the first arm ({sweep.arms[0]}): arm − first arm, 95% percentile "
        f"bootstrap interval ({RESAMPLES:,} resamples of the seeds, seeded)",
        [
            "metric",
            "arm",
            "difference",
            "95% interval",
            "paired t-interval",
            "resampling",
            "seeds",
            "excludes 0",
        ],
        diff_rows,
    )
    return per_arm, diff


def curve_section(sweep: SweepData) -> Section:
    section = Section("Curves: mean over seeds, 95% interval", "curves")
    section.lines.append(BAND_NOTE)
    runs = {arm: sweep.runs_of(arm) for arm in sweep.arms}
    keys = compared_keys(
        [row for by_seed in runs.values() for run in by_seed.values() for row in run.metrics]
    )
    for key in keys:
        series, values = [], []
        for arm, by_seed in runs.items():
            per_step: dict[int, list[float]] = defaultdict(list)
            for run in by_seed.values():
                for row in run.metrics:
                    v = row.get(key)
                    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                        per_step[row["step"]].append(float(v))
            steps = sorted(per_step)
            bands = [t_interval(per_step[s]) for s in steps]
            values += [v for vs in per_step.values() for v in vs]
            series.append(
                Series(
                    f"{arm} (n={len(by_seed)})",
                    steps,
                    [b[0] for b in bands],
                    band=([b[1] for b in bands], [b[2] for b in bands]),
                )
            )
        safe = re.sub(r"[^a-zA-Z0-9]+", "-", key).strip("-")
        section.add(
            Plot(
                f"sweep-{safe}",
                key,
                "step",
                key.rsplit("/", 1)[-1],
                series,
                rate=bool(values) and is_rate(key, values),
            )
        )
    if not section.plots:
        section.lines.append("no run of the sweep has logged a metric yet.")
    return section


def runs_table(sweep: SweepData) -> Table:
    rows = []
    for entry in sweep.entries:
        folder = sweep.path / entry["folder"]
        run = sweep.runs.get(entry["folder"])
        done = max((r["step"] for r in run.training_rows), default=-1) + 1 if run else 0
        status = "finished" if run_finished(folder) else entry.get("status", "pending")
        note = "" if status == "finished" else str(entry.get("error") or "")
        rows.append([entry["folder"], entry["arm"], entry["seed"], status, done, note])
    return Table(
        "one row per run (status: finished when its metrics.jsonl has the final row)",
        ["run folder", "arm", "seed", "status", "steps logged", "error"],
        rows,
    )


def _gain_text(value: dict | None, digits: int = 3) -> str:
    if not value or value.get("gain") is None:
        return "–"
    return f"{value['gain']:+.{digits}f} {_interval(value['low'], value['high'])}"


def heldout_section(sweep: SweepData) -> Section | None:
    """The held-out suite's paired gains (``selfplay sweep --suite``: SWEEP/heldout/heldout.json,
    written by ``selfplay.evaluation.sweep_heldout``), if the sweep has them."""
    import json

    path = sweep.path / "heldout" / "heldout.json"
    if not path.is_file():
        return None
    section = Section("Held-out suite, paired per problem and across seeds", "heldout")
    section.lines.append(
        "Each run's final policy and its base model answer the same problems; the gain is the "
        "mean of the seeds × problems differences, its 95% interval from the seeds × problems "
        "analysis (Satterthwaite degrees of freedom: few seeds that disagree widen it to their "
        "t). − first arm: the final policies against the first arm's on the same seeds and "
        "problems. MDE: the effect the comparison detects with power 0.8 (α 0.05); an "
        "interval covering 0 rules out effects larger than about the MDE (docs/sweeps.md)."
    )
    rows = []
    for row in json.loads(path.read_text()):
        gain, versus = row.get("gain") or {}, row.get("vs_first") or {}
        digits = 4 if row["measure"] == "logprob" else 3
        rows.append([row["measure"], row["arm"], row["seeds"], row.get("problems") or "–",
                     fmt(row.get("base"), 4), fmt(row.get("final"), 4),
                     _gain_text(gain, digits), fmt(gain.get("mde"), 3),
                     fmt(gain.get("flip_rate"), 3), _gain_text(versus, digits),
                     fmt(versus.get("mde"), 3)])
    section.tables.append(Table(
        "held-out measures per arm: greedy accuracy, the reference answer's log-prob per token, "
        "pass@k",
        ["measure", "arm", "seeds", "problems", "base", "final", "gain [95%]", "MDE", "flips",
         "− first arm [95%]", "MDE (− first)"], rows))
    return section


def sweep_sections(sweep: SweepData) -> list[Section]:
    summary = Section("Final metrics per arm", "final")
    per_arm, diff = final_tables(sweep)
    summary.lines.append(
        "Final value of a run: the last row holding the metric (the end-of-run evaluation for "
        "eval/ metrics, the last training step otherwise); only finished runs count."
    )
    if diff is not None:
        summary.lines.append(
            "'excludes 0: yes' marks a difference whose intervals both exclude 0. The 95% "
            "interval is a percentile bootstrap over seeds: paired (per-seed differences "
            "resampled) when both arms have at least two seeds in common, unpaired otherwise. "
            "With few seeds it is narrow-biased (with 3 seeds it never reaches past the observed "
            "differences), so paired differences also get a t-interval, which widens with few "
            "seeds: treat 3 seeds as a first look, not a result."
        )
        summary.tables.append(diff)
    summary.tables.append(per_arm)
    runs = Section("Runs", "runs")
    runs.tables.append(runs_table(sweep))
    heldout = heldout_section(sweep)
    return [summary, *([heldout] if heldout else []), curve_section(sweep), runs]


def header_html(sweep: SweepData) -> str:
    m = sweep.manifest
    grid = "; ".join(f"{k} ∈ {{{', '.join(map(str, v))}}}" for k, v in m["grid"].items())
    finished = sum(run_finished(sweep.path / e["folder"]) for e in sweep.entries)
    lines = [
        f"experiment {m['experiment']}; seeds 0..{m['seeds'] - 1}; grid: {grid or 'none'}",
        f"overrides for every run: {' '.join(m['overrides']) or 'none'}",
        f"{len(sweep.arms)} arm(s) × {m['seeds']} seed(s) = {len(sweep.entries)} runs; "
        f"{finished} finished",
        f"intervals at {LEVEL:.0%}; curves: Student-t over seeds; differences: percentile "
        f"bootstrap, {RESAMPLES:,} resamples, seed 0",
    ]
    pages = [
        (e["folder"], sweep.path / e["folder"] / "report" / "index.html") for e in sweep.entries
    ]
    links = "".join(
        f"<li><a href='{html.escape(page.resolve().as_uri())}'>{html.escape(folder)}</a></li>"
        for folder, page in pages
        if page.exists()
    )
    return "".join(f"<p class='note'>{html.escape(line)}</p>" for line in lines) + (
        f"<details><summary>run pages</summary><ul>{links}</ul></details>" if links else ""
    )


def write_sweep_page(sweep: SweepData, out: Path | None = None, pngs: bool = True) -> Path:
    out = out or sweep.path / "report"
    out.mkdir(parents=True, exist_ok=True)
    sections = sweep_sections(sweep)
    names = write_pngs([p for s in sections for p in s.plots], out) if pngs else []
    return write_page(out, page_html(f"sweep: {sweep.name}", header_html(sweep), sections, None,
                                     names))


def analyze_sweep(path: Path, out: Path | None = None, pngs: bool = True) -> Path:
    """``selfplay analyze SWEEP``: the sweep's page (``SWEEP/report/index.html``)."""
    return write_sweep_page(SweepData.open(path), out, pngs)


def print_differences(path: Path) -> None:
    """The final-metric differences in the terminal (what the page's first table shows)."""
    from rich.console import Console
    from rich.table import Table as RichTable

    sweep = SweepData.open(path)
    per_arm, diff = final_tables(sweep)
    table = diff or per_arm
    shown = RichTable(title=table.caption)
    for header in table.headers:
        shown.add_column(header)
    for row in table.rows:
        shown.add_row(*[str(v) for v in row])
    Console().print(shown)


def analyze_command(paths: list[str], out: str | None, pngs: bool = True) -> int:
    """``selfplay analyze`` given a sweep folder: one sweep alone (not mixed with runs)."""
    from selfplay.core.errors import UserError

    if len(paths) != 1:
        raise UserError("analyze one sweep folder at a time, without run folders beside it")
    page = analyze_sweep(Path(paths[0]), Path(out) if out else None, pngs)
    print_differences(Path(paths[0]))
    print(f"report: {page}")
    return 0
