"""The sections of a run's page about its tasks: difficulty (the solver's p̂ per step, groups
with no learning signal, p̂ against the target band), and, for loops that generate tasks
(tasks.jsonl), their validity, answers and tool use, their diversity, and pseudo-label accuracy.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from curricula.analysis import difficulty, diversity, tasks
from selfplay.analysis import debugging
from selfplay.analysis.plots import Plot, Series
from selfplay.analysis.rundata import RunData
from selfplay.analysis.sections import Options, Section, Table, fmt, line_plot, numeric_series

HIST_BINS = 10


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
        return section.note("no tasks.jsonl: this loop generates no tasks.")
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
        section.add(line_plot("pseudo-label-accuracy",
                              "pseudo-label accuracy (logged by the loop)", "accuracy", series,
                              rate=True))
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
