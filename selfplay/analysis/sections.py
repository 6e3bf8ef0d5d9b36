"""The sections of a run's analysis page, each built from what the run folder holds.

A section whose data is absent becomes one line saying so (never an empty plot): an rlvr or
SPIRAL run has no ``tasks.jsonl`` and so no task sections; a killed run shows what it wrote.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from curricula.analysis import difficulty, diversity, tasks
from selfplay.analysis import debugging, titles
from selfplay.analysis.plots import Plot, Series
from selfplay.analysis.rundata import RunData
from selfplay.stats import compute, games

HIST_BINS = 10


@dataclass
class Table:
    caption: str
    headers: list[str]
    rows: list[list]


@dataclass
class Section:
    title: str
    anchor: str
    plots: list[Plot] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # findings and "why this is missing" notes
    html: list[str] = field(default_factory=list)  # blocks already escaped (transcripts)

    def add(self, plot: Plot, missing: str | None = None) -> None:
        """Keep a plot that has data; otherwise note why it is not there."""
        if plot.empty:
            if missing:
                self.lines.append(missing)
            return
        self.plots.append(plot)


@dataclass
class Options:
    embeddings: bool = True  # MiniLM embeddings for dispersion/clusters/near-duplicates
    max_texts: int = 300  # per iteration, for BLEU and embeddings (seeded sample)
    near_duplicate: float = 0.95  # cosine similarity that counts as a near duplicate
    cluster_threshold: float = 0.5  # BLEU and embedding cluster cut
    pngs: bool = True  # also save every figure as a PNG (slow-ish: ~0.1–0.3 s each)


def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        return f"{value:.{digits}f}"
    return str(value)


# ------------------------------------------------------------------ training curves
RATE_WORDS = ("accuracy", "rate", "win", "draw", "loss", "invalid", "share", "frac")
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


def is_rate(key: str, values: list[float]) -> bool:
    """A 0–1 quantity (drawn on a fixed 0–1 axis): every value lies in [0, 1] and the name says
    rate, accuracy, share or an evaluation outcome. Learner losses are never rates."""
    if not all(0.0 <= v <= 1.0 for v in values):
        return False
    last = key.rsplit("/", 1)[-1]
    if key.startswith("train/"):
        return last == "clip_frac"
    return key.startswith("eval/") or any(word in last for word in RATE_WORDS)


def numeric_series(rows: list[dict], prefixes: tuple[str, ...]) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = defaultdict(list)
    for row in rows:
        for key, value in row.items():
            if not key.startswith(prefixes) or isinstance(value, bool):
                continue
            if key.startswith("eval/") and key.count("/") > 3:
                continue  # per-seat evaluation rows: the games section shows them
            if isinstance(value, int | float) and math.isfinite(value):
                out[key].append((row["step"], float(value)))
    return dict(sorted(out.items()))


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
        plot = _lines(f"{panel}-rates", f"{title}: rates", "share (0–1)", rates, rate=True)
        for line, label in zip(plot.series, labels, strict=True):
            line.label = label
        section.add(plot)
    for key, points in series.items():
        if key in rates:
            continue
        safe = re.sub(r"[^a-zA-Z0-9]+", "-", key).strip("-")
        section.add(_lines(f"{stem}-{safe}", titles.title(key), titles.describe(key)[1] or key,
                           {titles.describe(key)[0]: points}))


def claimed(key: str) -> bool:
    """A metric key a known section draws (the training panels, pseudo-label accuracy)."""
    return key.startswith(tuple(p for _, prefixes, _ in PANELS for p in prefixes)) or (
        "pseudo_label_accuracy" in key)


def other_metrics_section(run: RunData) -> Section:
    """Every numeric key no other section draws: a plug-in loop's own metrics (``drill/...``),
    the curriculum's, sync and staleness; grouped by their first word."""
    section = Section("Other metrics (logged by the loop)", "other-metrics")
    series = {k: v for k, v in numeric_series(run.metrics, ("",)).items()
              if k not in ("step", "time", "final") and not claimed(k)}
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


def _lines(name, title, ylabel, series: dict[str, list[tuple]], rate=False, xlabel="step") -> Plot:
    return Plot(
        name, title, xlabel, ylabel,
        [Series(k, [x for x, _ in v], [y for _, y in v]) for k, v in series.items()],
        rate=rate,
    )


# ------------------------------------------------------------------ difficulty
def difficulty_section(run: RunData) -> Section:
    section = Section("Difficulty", "difficulty")
    # loops whose solver logs `correct` (SPICE's reasoner) beside other roles (its challenger):
    # p̂ is the solver's, never the share of a challenger's attempts that scored
    solver = [e for e in run.episodes if "correct" in (e.get("info") or {})]
    groups = difficulty.groups_from_episodes(solver or run.episodes)
    if solver:
        played = sorted({int(e.get("step", 0)) for e in run.episodes})
        empty = [s for s in played if s not in {g.step for g in groups}]
        if empty:
            shown = ", ".join(map(str, empty[:20])) + (" …" if len(empty) > 20 else "")
            section.lines.append(
                f"no solver group at step(s) {shown}: nothing was answered there (no valid "
                "question): those steps have no p̂, not a p̂ of 0."
            )
    if groups:
        steps = sorted({g.step for g in groups})
        hist = difficulty.histograms_by([(g.step, g.p_hat) for g in groups], HIST_BINS)
        section.add(_heatmap("difficulty-phat-per-step", "solver p̂ per training step "
                             "(groups of samples of one prompt)", "step", hist))
        per_step = defaultdict(list)
        for g in groups:
            per_step[g.step].append(g)
        section.add(Plot(
            "difficulty-zero-variance", "groups with no learning signal", "step", "share",
            [Series("zero-variance groups (all rewards equal)", steps,
                    [difficulty.zero_variance_share(per_step[s]) for s in steps]),
             Series("mean p̂", steps, [float(np.mean([g.p_hat for g in per_step[s]]))
                                      for s in steps], dash=True)],
            rate=True,
        ))
        flat = sum(g.zero_variance for g in groups)
        section.lines.append(
            f"{len(groups)} groups over {len(steps)} steps: mean p̂ "
            f"{np.mean([g.p_hat for g in groups]):.3f} (n = {len(groups)} groups), zero-variance "
            f"share {debugging.count_rate(int(flat), len(groups))} (these groups give no "
            "gradient)."
        )
    scored = [t for t in run.tasks if isinstance(t.get("p_hat"), int | float)]
    if scored:
        by = tasks.group_tasks(scored)
        hist = difficulty.histograms_by([(k, t["p_hat"]) for k, ts in by.items() for t in ts],
                                        HIST_BINS)
        label = "iteration" if any(t.get("iteration") is not None for t in scored) else "step"
        section.add(_heatmap("difficulty-task-phat", f"generated tasks: solver p̂ per {label}",
                             label, hist))
        band = difficulty.target_band(run.config)
        keys = list(by)
        series = [Series("mean p̂ achieved", keys, [float(np.mean([t["p_hat"] for t in by[k]]))
                                                    for k in keys])]
        if band:
            low, high, source = band
            series += [Series(f"target low ({source})", keys, [low] * len(keys), "lines", True)]
            if high != low:
                series += [Series(f"target high ({source})", keys, [high] * len(keys), "lines",
                                  True)]
                series += [Series("share of tasks in the band", keys,
                                  [difficulty.band_share([t["p_hat"] for t in by[k]], low, high)
                                   for k in keys])]
            section.lines.append(
                f"target p̂ {low:g}–{high:g} ({source}); achieved mean "
                f"{np.mean([t['p_hat'] for t in scored]):.3f} over {len(scored)} scored tasks."
            )
        section.add(Plot("difficulty-target", "target p̂ against achieved", label, "p̂ / share",
                         series, rate=True))
    if not section.plots:
        section.lines.append(
            "no p̂ to show: no groups of several samples per prompt in episodes/ and no scored "
            "tasks in tasks.jsonl (games are one sample per game: see Games)."
        )
    return section


def _heatmap(name: str, title: str, xlabel: str, hist: dict[int, np.ndarray]) -> Plot:
    keys = list(hist)
    edges = np.linspace(0, 1, HIST_BINS + 1)
    labels = [f"{edges[i]:.1f}–{edges[i + 1]:.1f}" for i in range(HIST_BINS)]
    z = [[int(hist[k][b]) for k in keys] for b in range(HIST_BINS)]
    return Plot(name, title, xlabel, "p̂ bin", heatmap=(keys, labels, z), zlabel="count")


# ------------------------------------------------------------------ generated tasks
def _phase_groups(run: RunData) -> tuple[str, dict[int, list[dict]]]:
    """Tasks per iteration; loops without iterations are cut into at most 8 step ranges."""
    rows = run.tasks
    if any(t.get("iteration") is not None for t in rows):
        return "iteration", tasks.group_tasks(rows, "iteration")
    steps = [int(t.get("step") or 0) for t in rows]
    width = max(1, math.ceil((max(steps) + 1) / 8)) if steps else 1
    grouped: dict[int, list[dict]] = defaultdict(list)
    for t, s in zip(rows, steps, strict=True):
        grouped[(s // width) * width].append(t)
    label = "step" if width == 1 else f"steps (bins of {width})"
    return label, dict(sorted(grouped.items()))


def validity_section(run: RunData) -> Section:
    section = Section("Validity, answers and tools", "validity")
    if not run.tasks:
        section.lines.append("no tasks.jsonl: this loop generates no tasks.")
        return section
    label, by = _phase_groups(run)
    keys = list(by)
    section.add(Plot("tasks-rates", "generated tasks: rates", label, "share", [
        Series("valid", keys, [tasks.validity_rate(by[k]) for k in keys]),
        Series("degenerate answer (of valid)", keys, [tasks.degenerate_rate(by[k]) for k in keys]),
        Series("tool used (of scored)", keys, [tasks.tool_use_rate(by[k]) for k in keys]),
        Series("kept by the filter", keys,
               [tasks.share([t for t in by[k] if t.get("kept") is not None],
                            lambda t: t["kept"]) for k in keys]),
    ], rate=True))
    types = sorted({a for k in keys for a in tasks.answer_type_mix(by[k])})
    section.add(Plot("tasks-answer-types", "answer-type mix (valid tasks)", label, "share",
                     [Series(a, keys, [tasks.answer_type_mix(by[k]).get(a, 0.0) for k in keys],
                             "bar") for a in types], rate=True),
                "no valid task has an answer type.")
    section.add(Plot("tasks-tool-calls", "tool calls per task (mean per solver rollout)", label,
                     "tool calls", [Series("tool calls", keys,
                                           [tasks.tool_calls_per_task(by[k]) for k in keys])]),
                "no task logs tool calls (the solver had no tool).")
    section.add(Plot("tasks-count", "tasks generated", label, "tasks",
                     [Series("tasks", keys, [len(by[k]) for k in keys], "bar")]))
    top = tasks.top_answers(run.tasks)
    section.lines.append(
        f"{len(run.tasks)} tasks; valid {_count(run.tasks, lambda t: t.get('valid') is True)}; "
        f"degenerate answers {_degenerate(run.tasks)}; most frequent answers: "
        + ", ".join(f"{a[:30]!r} {s:.0%}" for a, s in top)
    )
    return section


def _count(rows: list[dict], predicate) -> str:
    return debugging.count_rate(sum(bool(predicate(r)) for r in rows), len(rows))


def _degenerate(rows: list[dict]) -> str:
    valid = [t for t in rows if t.get("valid")]
    if not valid:
        return "– (no valid task)"
    return _count(valid, lambda t: tasks.is_degenerate_answer(t.get("answer"), t.get("question")))


def diversity_section(run: RunData, options: Options) -> Section:
    section = Section("Diversity", "diversity")
    if not run.tasks:
        section.lines.append("no tasks.jsonl: nothing generated to measure.")
        return section
    label, by = _phase_groups(run)
    keys = list(by)
    texts = {k: diversity._sample([t.get("question") or "" for t in by[k] if t.get("valid")],
                                  options.max_texts, 0) for k in keys}
    rows = []
    metrics: dict[str, list] = defaultdict(list)
    earlier, earlier_texts = None, []
    for k in keys:
        batch = [t for t in texts[k] if t.strip()]
        row = {
            "self-BLEU": diversity.self_bleu(batch, limit=options.max_texts),
            "distinct-1": diversity.distinct_n(batch, 1),
            "distinct-2": diversity.distinct_n(batch, 2),
            "exact duplicates": diversity.exact_duplicate_share(batch),
            "repeats of earlier": diversity.exact_repeat_share(batch, earlier_texts),
            "BLEU clusters": len(set(diversity.bleu_clusters(batch, options.cluster_threshold)))
            if len(batch) <= 150 else None,
        }
        if options.embeddings and batch:
            vectors = diversity.embed_texts(batch)
            row |= {
                "embedding dispersion": diversity.embedding_dispersion(vectors),
                "embedding clusters": len(set(diversity.embedding_clusters(
                    vectors, options.cluster_threshold))),
                "near-duplicates within": diversity.near_duplicate_share(
                    vectors, min_similarity=options.near_duplicate),
                "near-duplicates of earlier": diversity.near_duplicate_share(
                    vectors, earlier, options.near_duplicate) if earlier is not None else None,
            }
            earlier = vectors if earlier is None else np.vstack([earlier, vectors])
        earlier_texts += batch
        for name, value in row.items():
            metrics[name].append(value)
        rows.append([k, len(batch), *[fmt(v) for v in row.values()]])
    if not any(texts.values()):
        section.lines.append("no valid task with a question.")
        return section
    headers = [label, "valid tasks", *metrics]
    section.tables.append(Table(f"diversity per {label} (valid questions)", headers, rows))
    rate_names = ["self-BLEU", "distinct-1", "distinct-2", "exact duplicates", "repeats of earlier",
                  "embedding dispersion", "near-duplicates within", "near-duplicates of earlier"]
    section.add(Plot("diversity-rates", "diversity of generated questions", label, "0–1",
                     [Series(n, keys, metrics[n]) for n in rate_names if n in metrics],
                     rate=True))
    section.add(Plot("diversity-clusters", "clusters of generated questions", label, "clusters",
                     [Series(n, keys, metrics[n]) for n in ("BLEU clusters", "embedding clusters")
                      if n in metrics]))
    if not options.embeddings:
        section.lines.append("embeddings skipped (--no-embeddings).")
    return section


def pseudo_label_section(run: RunData) -> Section:
    section = Section("Pseudo-label accuracy", "pseudo-labels")
    series = {k: v for k, v in numeric_series(run.metrics, ("",)).items()
              if "pseudo_label_accuracy" in k}
    if series:
        section.add(_lines("pseudo-label-accuracy", "pseudo-label accuracy (logged by the loop)",
                           "accuracy", series, rate=True))
    with_labels = [t for t in run.tasks if t.get("pseudo_label") is not None]
    if with_labels:
        label, by = _phase_groups(run)
        keys = list(by)
        section.add(Plot("pseudo-label-agreement",
                         "majority pseudo-label = proposer's own answer", label, "share",
                         [Series("agreement", keys,
                                 [tasks.pseudo_label_accuracy(by[k]) for k in keys])], rate=True))
    if not section.plots:
        section.lines.append("no pseudo-labels: no metrics key contains `pseudo_label_accuracy` "
                             "and no task has a pseudo_label.")
    return section


# ------------------------------------------------------------------ games and responses
def games_section(run: RunData) -> Section:
    section = Section("Games", "games")
    game_episodes = [e for e in run.episodes if "winner" in (e.get("info") or {})]
    evals = games.eval_game_rows(run.metrics)
    if not game_episodes and not evals:
        section.lines.append("no games in this run.")
        return section
    if game_episodes:
        per_step = games.rates_per_step(game_episodes)
        steps = list(per_step)
        counts = Counter(int(e.get("step", 0)) for e in game_episodes)
        low, high = min(counts.values()), max(counts.values())
        per_step_n = f"{low}" if low == high else f"{low}–{high}"
        section.add(Plot("games-training-rates",
                         f"Training games (all seats; {per_step_n} games per step)", "step",
                         "share of games", [
            Series(name, steps, [per_step[s][name] for s in steps])
            for name in ("invalid", "draw", "seat0_win")], rate=True))
        section.tables.append(Table(
            "training games per game, opponent and seat (whole run)",
            ["game", "opponent", "seat", "games", "win", "draw", "loss", "invalid"],
            [[r["game"], r["opponent"], r["seat"], r["games"],
              *[debugging.count_rate(round(r[k] * r["games"]), r["games"]) for k in
                ("win", "draw", "loss", "invalid")]] for r in games.game_rates(game_episodes)]))
        reasons = debugging.invalid_reason_table(game_episodes)
        if not reasons:
            section.lines.append(f"no training game ended on an invalid move "
                                 f"(0 of {len(game_episodes)}).")
        else:
            section.tables.append(Table(
                "how training games ended, per step (games; the last column: share of all games)",
                *reasons))
    combos = sorted({(r["game"], r["opponent"]) for r in evals})
    for game_id, opponent in combos:
        chosen = [r for r in evals if r["game"] == game_id and r["opponent"] == opponent]
        series = {}
        for r in chosen:
            seat = "both seats" if r["seat"] is None else f"seat {r['seat']}"
            series.setdefault(f"{r['outcome']} ({seat})", []).append((r["step"], r["value"]))
        safe = re.sub(r"[^a-zA-Z0-9]+", "-", f"{game_id}-{opponent}")
        section.add(_lines(f"games-eval-{safe}", f"evaluation: {game_id} vs {opponent}", "rate",
                           series, rate=True))
    if evals:
        last = max(r["step"] for r in evals)
        table = defaultdict(dict)
        for r in evals:
            if r["step"] == last:
                table[(r["game"], r["opponent"], "both" if r["seat"] is None else r["seat"])][
                    r["outcome"]] = r["value"]
        per = (run.config.get(run.loop) or {}).get("eval_games")
        section.tables.append(Table(
            f"evaluation at step {last} (greedy, seats alternating"
            + (f", {per} games per game and opponent)" if per else ")"),
            ["game", "opponent", "seat", "win", "draw", "loss", "invalid"],
            [[*k, *[_eval_cell(v.get(o), per, k[2]) for o in ("win", "draw", "loss", "invalid")]]
             for k, v in sorted(table.items(), key=str)]))
    return section


def _eval_cell(rate, games_per_pair, seat) -> str:
    """An evaluation rate with its count where the number of games is known (``eval_games``
    per game and opponent, seats alternating: seat 0 gets the odd one)."""
    if not isinstance(games_per_pair, int) or not isinstance(rate, int | float):
        return fmt(rate)
    n = games_per_pair if seat == "both" else (games_per_pair + (seat == 0)) // 2
    return debugging.count_rate(round(rate * n), n)


def responses_section(run: RunData) -> Section:
    section = Section("Response length", "responses")
    lengths = games.response_lengths(run.episodes)
    steps = list(lengths)
    section.add(Plot("response-tokens", "mean response length (model turns)", "step", "tokens",
                     [Series("tokens", steps, [lengths[s][0] for s in steps])]),
                "no model turns in episodes/.")
    section.add(Plot("response-chars", "mean response length (model turns)", "step",
                     "characters", [Series("characters", steps, [lengths[s][1] for s in steps])]))
    plot, lines = debugging.truncation_plot_and_lines(run)
    if plot is not None:
        section.add(plot)
    section.lines += lines
    budget = (run.config.get("sampling") or {}).get("max_new_tokens")
    if lengths and budget:
        first, last = lengths[steps[0]][0], lengths[steps[-1]][0]
        section.lines.append(
            f"tokens per response {first:.1f} → {last:.1f} (budget {budget}); a steady fall "
            "is SPIRAL's 'thinking collapse', a climb to the budget means truncation."
        )
    return section


def transcripts_section(run: RunData) -> Section:
    section = Section("Transcripts", "transcripts")
    blocks, shown = debugging.transcripts_html(run)
    if not shown:
        section.lines.append("no model turns in episodes/ to show.")
        return section
    section.lines.append(
        "sampled episodes of the first and the latest step, per game: the prompt (click to "
        "open), the reply, the action parsed from it, and why a move was invalid."
    )
    section.html += blocks
    return section


# ------------------------------------------------------------------ compute curve
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
            section.add(_lines("evaluations-accuracy", "held-out accuracy by snapshot", "accuracy",
                               {k: sorted(v) for k, v in series.items()}, rate=True))
    else:
        section.lines.append("no evaluations yet: `selfplay evaluate RUN --suite reasoning-gym`.")
    if run.crossplay:
        result = run.crossplay
        section.lines.append(
            f"cross-play ({result.get('kind')}) of snapshots at steps {result.get('snapshots')}: "
            "see crossplay/index.html next to this run's report folder."
        )
    return section


def overview_lines(run: RunData) -> list[str]:
    config = run.config
    steps_planned = (config.get("train") or {}).get("steps")
    done = max((r["step"] for r in run.training_rows), default=-1) + 1
    lines = [
        f"loop {run.loop}; model {(config.get('model') or {}).get('path')}; "
        f"{done} of {steps_planned} steps logged"
        + ("" if run.finished else " — the run did not finish (no final row): partial report"),
        f"{len(run.episode_files())} episode files, {len(run.episodes)} episodes; "
        f"{len(run.tasks)} generated tasks; {len(run.pools)} task pools; "
        f"{len(run.checkpoints())} checkpoints",
    ]
    return lines


def build_sections(run: RunData, options: Options | None = None) -> list[Section]:
    options = options or Options()
    return [
        training_section(run),
        difficulty_section(run),
        validity_section(run),
        diversity_section(run, options),
        pseudo_label_section(run),
        games_section(run),
        transcripts_section(run),
        responses_section(run),
        other_metrics_section(run),
        compute_section(run),
        evaluations_section(run),
    ]
