"""``python -m selfplay.evaluation.rerun PUBLISHED... --rerun RERUN...``: is a rerun on other
seeds where the published comparisons said it would be? (docs/compare.md#a-rerun-with-other-seeds)

A published gain comes with two intervals (``stats.paired``): its 95% confidence interval (where
the loop's mean gain is) and the rerun interval (where a rerun's gain on other seeds should
fall). This prints, for every experiment of the PUBLISHED comparisons, the gain and both
intervals, the rerun interval's floor being the seed spread pooled over all of them; and, for
every experiment of the RERUN comparisons (the same settings, other seeds: ``--first-seed``),
its gain and whether each interval holds it, then how many held against how many a 95%
interval should hold. Other settings, a rerun that shares a seed with what it checks, a base
model whose records differ (the gains are paired with it), or an experiment that was not
published are refused in one line (exit 2); nothing is written unless ``--json`` names a file.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path

from scipy import stats

from selfplay.core.errors import UserError
from selfplay.evaluation.compare import CompareSpec
from selfplay.evaluation.compare_page import (
    add_rerun_intervals,
    gain_cell,
    read_compare,
    rerun_cell,
    seed_gains_of,
    summarize,
)
from selfplay.evaluation.pool import base_rows
from selfplay.stats.paired import LEVEL, rerun_interval, seed_spread

# what a rerun and what it checks must share: the spec but what leaves a run's final greedy
# gain alone (which experiments sit beside each other, the seeds, the curve's points and
# subset, the likelihood measure)
SETTINGS = tuple(f.name for f in fields(CompareSpec) if f.name not in (
    "experiments", "seeds", "first_seed", "points", "curve_size", "likelihood"))


def _settings(manifest: dict) -> dict:
    return {key: manifest.get(key) for key in SETTINGS}


def _differ(manifest: dict, settings: dict) -> list[str]:
    return [key for key in SETTINGS if _settings(manifest)[key] != settings[key]]


def _seeds(manifest: dict) -> set[int]:
    return set(range(manifest["first_seed"], manifest["first_seed"] + manifest["seeds"]))


def published_rows(folders: list[Path]) -> tuple[list[dict], dict]:
    """Every experiment of the published comparisons, with its rerun interval floored by the
    seed spread pooled over all of them; and the settings they share."""
    manifests = [read_compare(f) for f in folders]
    settings = _settings(manifests[0])
    for folder, manifest in zip(folders, manifests, strict=True):
        differ = _differ(manifest, settings)
        if differ:
            raise UserError(f"{folder} differs from {folders[0]} in {', '.join(differ)}: their "
                            "seeds' spreads cannot be pooled")
    rows = []
    for folder, manifest in zip(folders, manifests, strict=True):
        for row in summarize(folder):
            if row["experiment"] in {r["experiment"] for r in rows}:
                raise UserError(f"{row['experiment']} is published twice ({folder} and an "
                                "earlier folder): pool them first (python -m "
                                "selfplay.evaluation.pool)")
            rows.append(row | {"folder": str(folder), "_seeds": _seeds(manifest)})
    floor = add_rerun_intervals(rows)  # the floor pooled over every published experiment
    return rows, settings | {"floor": floor}


def check_rows(published: list[dict], settings: dict, folders: list[Path]) -> list[dict]:
    """Every experiment of the reruns: its gain, the published intervals for a rerun of its
    seed count, and whether each holds the gain."""
    by_name = {r["experiment"]: r for r in published}
    checked = []
    for folder in folders:
        manifest = read_compare(folder)
        differ = _differ(manifest, settings)
        if differ:
            raise UserError(f"{folder} is not a rerun of the published comparisons: its "
                            f"{', '.join(differ)} differ")
        for row in summarize(folder):
            name = row["experiment"]
            if name not in by_name:
                raise UserError(f"{folder}: {name} is not in the published comparisons")
            shared = _seeds(manifest) & by_name[name]["_seeds"]
            if shared:
                raise UserError(f"{folder}: {name} reruns seed(s) {sorted(shared)} that the "
                                "published figure already holds; a rerun takes other seeds "
                                "(--first-seed)")
            base_rows(Path(by_name[name]["folder"]), folder)  # the same base, or one line
            checked.append(_checked(by_name[name], row, settings["floor"], folder))
    return checked


def _checked(published: dict, rerun: dict, floor, folder: Path) -> dict:
    gain = rerun["gain_greedy"]["gain"] if rerun.get("gain_greedy") else None
    seeds = len(seed_gains_of(rerun))
    confidence = published["gain_greedy"]
    prediction = rerun_interval(confidence["gain"], len(seed_gains_of(published)),
                                seed_spread(seed_gains_of(published)), floor, new_seeds=seeds)
    return {
        "experiment": rerun["experiment"], "folder": str(folder), "seeds": seeds,
        "gain": gain, "published": confidence,
        "rerun_interval": prediction.as_dict() if prediction else None,
        "in_confidence_interval": gain is not None
        and confidence["low"] <= gain <= confidence["high"],
        "in_rerun_interval": gain is not None and prediction is not None
        and prediction.holds(gain),
    }


def held_range(n: int, level: float = LEVEL) -> tuple[int, int]:
    """How many of n intervals of coverage ``level`` hold their rerun, 95% of the time."""
    return (int(stats.binom.ppf(0.025, n, level)), int(stats.binom.ppf(0.975, n, level)))


def report(published: list[dict], checked: list[dict]) -> str:
    lines = ["| experiment | seeds | gain [95% CI] | a rerun's gain, 3 new seeds [95%] |",
             "|---|---|---|---|"]
    lines += [f"| {r['experiment']} | {r['seeds']} | {gain_cell(r['gain_greedy'])} | "
              f"{rerun_cell(r['rerun'])} |" for r in published]
    if not checked:
        return "\n".join(lines)
    lines += ["", "| rerun | seeds | its gain | in the published CI | in the rerun interval "
              "(for its seed count) |", "|---|---|---|---|---|"]
    for c in checked:
        interval = c["rerun_interval"]
        span = f"[{interval['low']:+.3f}, {interval['high']:+.3f}]" if interval else "none"
        lines.append(f"| {c['experiment']} ({c['folder']}) | {c['seeds']} | "
                     f"{c['gain']:+.3f} | {'yes' if c['in_confidence_interval'] else 'no'} | "
                     f"{'yes' if c['in_rerun_interval'] else 'no'} {span} |")
    n = len(checked)
    low, high = held_range(n)
    lines += ["", f"rerun intervals held {sum(c['in_rerun_interval'] for c in checked)} of {n} "
              f"reruns; confidence intervals {sum(c['in_confidence_interval'] for c in checked)}"
              f" of {n}. A 95% rerun interval holds {low}-{high} of {n}, 95% of the time."]
    return "\n".join(lines)


def check_png(published: list[dict], checked: list[dict], path: Path) -> None:
    """Each published gain with its confidence interval (blue) and rerun interval (orange),
    and the reruns' gains (red crosses) where they landed."""
    import matplotlib

    matplotlib.use("Agg")  # a file, no display
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(max(4.0, 1.1 * len(published) + 2), 3.8))
    crossed = False  # the reruns' legend entry, once
    for index, row in enumerate(published):
        gain, rerun = row["gain_greedy"], row["rerun"]
        axis.errorbar(index - 0.1, gain["gain"], fmt="o", color="#1f77b4", capsize=4,
                      yerr=[[gain["gain"] - gain["low"]], [gain["high"] - gain["gain"]]],
                      label="published gain, 95% CI" if index == 0 else None)
        if rerun:
            axis.errorbar(index + 0.1, gain["gain"], fmt="none", color="#ff7f0e", capsize=4,
                          yerr=[[gain["gain"] - rerun["low"]], [rerun["high"] - gain["gain"]]],
                          label="where a rerun of 3 new seeds should land" if index == 0
                          else None)
        landed = [c["gain"] for c in checked if c["experiment"] == row["experiment"]]
        axis.plot([index + 0.1] * len(landed), landed, "x", color="#d62728", markersize=9,
                  label="a rerun's gain" if landed and not crossed else None)
        crossed = crossed or bool(landed)
    axis.axhline(0.0, color="grey", linewidth=0.8)
    axis.set_xticks(range(len(published)), [r["experiment"] for r in published], rotation=20,
                    ha="right")
    axis.set_ylabel("held-out gain (final − base)")
    axis.legend(loc="best", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m selfplay.evaluation.rerun",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("published", type=Path, nargs="+",
                        help="finished comparisons (the same settings) whose figures are checked")
    parser.add_argument("--rerun", type=Path, nargs="*", default=[],
                        help="comparisons of the same settings on other seeds")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--png", type=Path, help="also draw the intervals and the reruns' gains")
    args = parser.parse_args(argv)
    try:
        published, settings = published_rows(args.published)
        checked = check_rows(published, settings, args.rerun)
    except UserError as exc:
        print(f"rerun: error: {exc}", file=sys.stderr)
        return 2
    print(report(published, checked))
    if args.png:
        check_png(published, checked, args.png)
    if args.json:
        clean = [{k: v for k, v in r.items() if k in ("experiment", "folder", "seeds",
                                                       "gain_greedy", "rerun")}
                 for r in published]
        args.json.write_text(json.dumps({"published": clean, "checked": checked}, indent=1)
                             + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
