"""The sections of a run's page drawn from metrics.jsonl and evaluations.jsonl: the training
curves (one panel per group of keys), every other metric the loop logged, the compute curve
(held-out score against tokens generated, with its ScaleRL fit), and held-out evaluations.
"""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from selfplay.analysis import titles
from selfplay.analysis.plots import Plot, Series
from selfplay.analysis.rundata import RunData
from selfplay.analysis.sections import Section, Table, fmt, is_rate, line_plot, numeric_series
from selfplay.stats import compute

PANELS = [
    ("reward", ("reward/",), "Training reward"),
    ("rollout", ("rollout/accuracy", "rollout/boxed_rate", "rollout/answered_rate",
                 "rollout/tool_"), "Rollouts"),
    ("game", ("game/",), "Games during training"),
    ("eval", ("eval/",), "Evaluation"),
    ("learner", ("train/loss", "train/grad_norm", "train/entropy", "train/clip_frac",
                 "train/samples_dropped_zero_adv"), "Learner"),
    ("speed", ("rollout/tokens_per_s", "train/tokens_per_s", "time/step_seconds"), "Speed"),
]


def training_section(run: RunData) -> Section:
    section = Section("Training curves", "training")
    rows = run.metrics
    if not rows:
        section.lines.append("metrics.jsonl has no rows yet.")
        return section
    for name, prefixes, title in PANELS:
        _metric_plots(section, numeric_series(rows, prefixes), f"train-{name}", title, "train")
    return section


def _metric_plots(section: Section, series: dict[str, list[tuple]], panel: str, title: str,
                  stem: str) -> None:
    """A panel's rates in one 0–1 plot, every other key in its own plot, with human titles."""
    rates = {k: v for k, v in series.items() if is_rate(k, [y for _, y in v])}
    if rates:
        labels = [titles.describe(k)[0] for k in rates]
        if len(set(labels)) < len(labels):  # two keys with one title: keep the keys
            labels = list(rates)
        plot = line_plot(f"{panel}-rates", f"{title}: rates", "share (0–1)", rates, rate=True)
        for line, label in zip(plot.series, labels, strict=True):
            line.label = label
        section.add(plot)
    for key, points in series.items():
        if key in rates:
            continue
        safe = re.sub(r"[^a-zA-Z0-9]+", "-", key).strip("-")
        section.add(line_plot(f"{stem}-{safe}", titles.title(key),
                              titles.describe(key)[1] or key, {titles.describe(key)[0]: points}))


def claimed(key: str, loop: str = "") -> bool:
    """A metric key a known section draws (the training panels, pseudo-label accuracy, the
    loop's own section)."""
    return key.startswith(tuple(p for _, prefixes, _ in PANELS for p in prefixes)) or (
        "pseudo_label_accuracy" in key) or bool(loop and key.startswith(f"{loop}/"))


def loop_section(run: RunData) -> Section:
    """The keys the run's loop logs under its own name (``cure/code_accuracy`` for
    ``loop: cure``): their rates in one plot, every other key in its own, and a table of each
    key's first and last value."""
    name = run.loop
    section = Section(f"{name} metrics ({name}/...)", "loop-metrics")
    series = numeric_series(run.training_rows, (f"{name}/",))
    if not series:
        section.lines.append(f"no {name}/ keys in metrics.jsonl.")
        return section
    _metric_plots(section, series, f"loop-{re.sub(r'[^a-zA-Z0-9]+', '-', name)}",
                  name, "loop")
    section.tables.append(Table(
        f"{name}/ keys: first and last step", ["key", "first", "last", "steps"],
        [[key, fmt(points[0][1]), fmt(points[-1][1]), len(points)]
         for key, points in series.items()]))
    return section


def other_metrics_section(run: RunData) -> Section:
    """Every numeric key no other section draws: a plug-in loop's own metrics (``drill/...``),
    the curriculum's, sync and staleness; grouped by their first word."""
    section = Section("Other metrics (logged by the loop)", "other-metrics")
    series = {k: v for k, v in numeric_series(run.metrics, ("",)).items()
              if k not in ("step", "time", "final") and not claimed(k, run.loop)}
    if not series:
        section.lines.append("no other metrics: every key in metrics.jsonl is drawn above.")
        return section
    groups: dict[str, dict[str, list[tuple]]] = defaultdict(dict)
    for key, points in series.items():
        groups[key.split("/", 1)[0] if "/" in key else "(no prefix)"][key] = points
    section.lines.append(
        f"{len(series)} keys in metrics.jsonl that no section above draws, by prefix: "
        + ", ".join(f"{g} ({len(v)})" for g, v in sorted(groups.items())) + "."
    )
    for group, members in sorted(groups.items()):
        safe = re.sub(r"[^a-zA-Z0-9]+", "-", group).strip("-") or "none"
        _metric_plots(section, members, f"other-{safe}", group.capitalize(), "other")
    for plot in section.plots:  # many small curves: drawn on the page, no PNG each (slow)
        plot.png = False
    section.lines.append("these figures are drawn on the page only (no PNG files).")
    return section


SCORE_KEYS = ("eval/accuracy", "eval/reasoning/mean")


def score_key(rows: list[dict]) -> str | None:
    """The held-out score of the compute curve: eval accuracy, reasoning transfer, else the win
    rate against the first evaluation opponent."""
    keys = {k for r in rows for k in r}
    for key in SCORE_KEYS:
        if key in keys:
            return key
    wins = sorted(k for k in keys if k.startswith("eval/") and k.endswith("/win")
                  and k.count("/") == 3)
    return wins[0] if wins else None


def compute_points(rows: list[dict], key: str) -> list[tuple[float, float, int]]:
    """(tokens generated before the evaluation, score, step) per evaluation row.

    An evaluation logged at step s ran before step s's rollouts, so its compute is the tokens
    of the steps before s (tokens per step = rollout/tokens_per_s × rollout/seconds)."""
    spent, cumulative = {}, 0.0
    for row in sorted(rows, key=lambda r: (r["step"], bool(r.get("final")))):
        spent.setdefault(row["step"], cumulative)
        if not row.get("final"):
            cumulative += row.get("rollout/tokens_per_s", 0.0) * row.get("rollout/seconds", 0.0)
            spent[row["step"] + 1] = cumulative
    return [(spent[r["step"]], float(r[key]), r["step"]) for r in rows if key in r]


def compute_section(run: RunData) -> Section:
    section = Section("Compute curve", "compute")
    key = score_key(run.metrics)
    if key is None:
        section.lines.append("no held-out score in metrics.jsonl (no eval/ keys).")
        return section
    points = compute_points(run.metrics, key)
    c = [p[0] for p in points]
    r = [p[1] for p in points]
    series = [Series(f"{key} (measured)", c, r, "markers")]
    try:
        fit = compute.fit_compute_curve(c, r, fit_fraction=0.67,
                                        bounds_a=(0.0, 1.0) if all(0 <= v <= 1 for v in r)
                                        else (-np.inf, np.inf))
    except compute.ComputeFitError as exc:
        section.lines.append(
            f"{exc} ({len(points)} evaluations of {key}; a fit needs more: train longer or "
            f"evaluate more often, e.g. `{run.loop}.eval_every: 1`)."
        )
        fit = None
    if fit is not None:
        order = sorted((x, y) for x, y in zip(c, r, strict=True) if x > 0)
        held = order[fit.fitted_points:]
        series = [Series(f"{key}: before training", [0.0], [fit.r0], "markers"),
                  Series(f"{key}: fitted", [x for x, _ in order[:fit.fitted_points]],
                         [y for _, y in order[:fit.fitted_points]], "markers")]
        if held:
            series.append(Series(f"{key}: held out (checks the fit)", [x for x, _ in held],
                                 [y for _, y in held], "markers"))
        grid = np.linspace(0.0, max(c) * 1.5, 80)
        series.append(Series("ScaleRL fit", grid.tolist(), fit.predict(grid).tolist(), "lines"))
        series.append(Series(f"asymptote A = {fit.a:.3f}", [0.0, float(grid[-1])], [fit.a, fit.a],
                             "lines", True))
        section.lines.append(fit.sentence("tokens"))
    rate = all(0 <= v <= 1 for v in r)
    section.add(Plot("compute-curve", f"{titles.describe(key)[0]} against compute ({key})",
                     "tokens generated", titles.describe(key)[1] or key, series, rate=rate))
    return section


def evaluations_section(run: RunData) -> Section:
    """What `selfplay evaluate` and `selfplay crossplay` left in the folder."""
    section = Section("Held-out evaluations and cross-play", "evaluations")
    rows = run.evaluations
    if rows:
        ks = sorted({k for r in rows for k in r if k.startswith("pass@")}, key=lambda k: int(k[5:]))
        section.tables.append(Table(
            "selfplay evaluate (RUN/evaluations.jsonl)",
            ["suite", "step", "setting", "problems", "samples", "accuracy", *ks],
            [[r.get("suite"), r.get("step"), r.get("setting"), r.get("problems"),
              r.get("samples"), fmt(r.get("accuracy")), *[fmt(r.get(k)) for k in ks]]
             for r in rows]))
        series: dict[str, list[tuple]] = defaultdict(list)
        for r in rows:
            if isinstance(r.get("accuracy"), int | float) and isinstance(r.get("step"), int):
                series[f"{r.get('suite')} {r.get('setting')}"].append((r["step"], r["accuracy"]))
        steps_seen = {x for points in series.values() for x, _ in points}
        if len(steps_seen) > 1:
            section.add(line_plot("evaluations-accuracy", "held-out accuracy by snapshot",
                                  "accuracy", {k: sorted(v) for k, v in series.items()},
                                  rate=True))
    else:
        section.lines.append("no evaluations yet: `selfplay evaluate RUN --suite reasoning-gym`.")
    if run.crossplay:
        result = run.crossplay
        section.lines.append(
            f"cross-play ({result.get('kind')}) of snapshots at steps {result.get('snapshots')}: "
            "see crossplay/index.html next to this run's report folder."
        )
    return section
