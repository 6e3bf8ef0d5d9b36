"""Arms from several sweeps side by side: one metric's curve per arm with a 95% t-interval over
seeds at every step it was measured, and each arm's final value against a reference arm,
paired by seed (``selfplay.stats.seeds``: percentile bootstrap and the paired t-interval).

A sweep holds the arms of one grid; experiments that differ in more than a grid's keys (SPIRAL
against a fixed opponent and the imitation ceiling, say) are separate sweeps with the same
seeds, and this reads them together:

    python -m selfplay.analysis.arms runs/arms-mirror-random runs/arms-fictitious \\
        --metric eval/exploitability/kuhn_poker --reference spiral.opponent.kind=mirror

An arm is named ``<sweep folder>`` when its sweep has one arm (``base``), else by its grid
values. Only finished runs count (a run's final row written).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

from selfplay.analysis.plots import Plot, Series
from selfplay.analysis.sweepdata import SweepData, run_finished
from selfplay.core.errors import UserError
from selfplay.stats.seeds import bootstrap_difference, t_interval


@dataclass
class Arm:
    name: str
    curves: dict[int, dict[int, float]]  # seed → {step: value}

    def final(self) -> dict[int, float]:
        """seed → the value at the run's last measured step."""
        return {seed: curve[max(curve)] for seed, curve in self.curves.items() if curve}

    def steps(self) -> list[int]:
        return sorted({step for curve in self.curves.values() for step in curve})


def read_arms(sweeps: list[Path], metric: str) -> list[Arm]:
    """Every arm of ``sweeps`` with ``metric`` per finished seed and step (the last value a
    step logged, so the end-of-run evaluation replaces the last step's)."""
    arms = []
    for path in sweeps:
        sweep = SweepData.open(path)
        for arm in sweep.arms:
            curves = {}
            for seed, run in sweep.runs_of(arm).items():
                if not run_finished(run.path):
                    continue
                curves[seed] = {int(r["step"]): float(r[metric]) for r in run.metrics
                                if isinstance(r.get(metric), int | float)}
            name = sweep.name if len(sweep.arms) == 1 else arm
            arms.append(Arm(name, {s: c for s, c in curves.items() if c}))
    return arms


def curve_rows(arms: list[Arm]) -> list[list[str]]:
    """One row per arm: ``mean [low, high]`` at every step any arm measured."""
    steps = sorted({step for arm in arms for step in arm.steps()})
    rows = [["arm (seeds)", *map(str, steps)]]
    for arm in arms:
        cells = [f"{arm.name} ({len(arm.curves)})"]
        for step in steps:
            values = [c[step] for c in arm.curves.values() if step in c]
            cells.append(_interval(values))
        rows.append(cells)
    return rows


def difference_rows(arms: list[Arm], reference: str) -> list[list[str]]:
    """Each arm's final value minus the reference arm's, paired by seed."""
    by_name = {arm.name: arm for arm in arms}
    if reference not in by_name:
        raise UserError(f"--reference {reference!r} is no arm: {', '.join(by_name)}")
    base = by_name[reference].final()
    rows = [["arm", f"final − {reference}", "bootstrap 95%", "paired t 95%", "seeds"]]
    for arm in arms:
        if arm.name == reference:
            continue
        diff = bootstrap_difference(base, arm.final())
        rows.append([arm.name, f"{diff.difference:+.3f}", f"[{diff.low:+.3f}, {diff.high:+.3f}]",
                     f"[{diff.t_low:+.3f}, {diff.t_high:+.3f}]", str(diff.n_arm)])
    return rows


def curve_plot(arms: list[Arm], metric: str, name: str) -> Plot:
    """Each arm's mean curve with its 95% t-interval over seeds as a band (no band where one
    seed measured a step)."""
    plot = Plot(name, f"{metric}: mean over seeds, 95% t-interval", "step", metric)
    for arm in arms:
        steps, means, lows, highs = [], [], [], []
        for step in arm.steps():
            mean, low, high = t_interval([c[step] for c in arm.curves.values() if step in c])
            steps.append(step)
            means.append(mean)
            lows.append(low if math.isfinite(low) else mean)
            highs.append(high if math.isfinite(high) else mean)
        plot.series.append(Series(f"{arm.name} ({len(arm.curves)} seeds)", steps, means,
                                  band=(lows, highs)))
    return plot


def _interval(values: list[float]) -> str:
    if not values:
        return "—"
    mean, low, high = t_interval(values)
    if not math.isfinite(low):
        return f"{mean:.3f}"
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows[1:]])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m selfplay.analysis.arms",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("sweeps", nargs="+", type=Path)
    parser.add_argument("--metric", required=True)
    parser.add_argument("--reference", help="the arm the others' final values are paired with")
    parser.add_argument("--png", type=Path, help="also draw the curves with their bands here")
    args = parser.parse_args(argv)
    try:
        arms = read_arms(args.sweeps, args.metric)
        print(markdown(curve_rows(arms)))
        if args.reference:
            print()
            print(markdown(difference_rows(arms, args.reference)))
        if args.png:
            args.png.parent.mkdir(parents=True, exist_ok=True)
            print(curve_plot(arms, args.metric, args.png.stem).save_png(args.png.parent))
    except UserError as exc:
        print(f"error: {exc}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
