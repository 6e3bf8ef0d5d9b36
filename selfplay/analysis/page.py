"""Self-contained HTML pages: one per run and one per comparison of runs.

Every page draws its figures with uPlot (``vendor/``, MIT, 51 kB), loaded once from
``uPlot.iife.min.js`` beside it (written with the page: no CDN, it works offline and from a
file), carries its figures as JSON (``Plot.chart``), and has the run's config at the top and a
searchable, sortable table of the generated tasks. Each figure is also saved as a PNG next to
the page (for papers).
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

import numpy as np
from rich.progress import Progress

from curricula.analysis import difficulty
from selfplay.analysis import titles
from selfplay.analysis.game_sections import (
    exploitability_section,
    games_section,
    responses_section,
    transcripts_section,
)
from selfplay.analysis.metric_sections import (
    compute_section,
    evaluations_section,
    loop_section,
    other_metrics_section,
    score_key,
    training_section,
)
from selfplay.analysis.plots import Plot, Series
from selfplay.analysis.rundata import RunData
from selfplay.analysis.sections import Options, Section, Table, fmt, numeric_series
from selfplay.analysis.task_sections import (
    difficulty_section,
    diversity_section,
    pseudo_label_section,
    validity_section,
)
from selfplay.stats import games

MAX_TABLE_ROWS = 20_000

CSS = """
body{font-family:system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:1em 2em;color:#222}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-top:.6em}
.note{color:#444;margin:.3em 0}.problem{color:#a40}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:1em}
.plot{border:1px solid #eee;border-radius:4px;padding:4px;min-width:0;overflow:hidden}
.plot a{font-size:.8em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ddd;padding:3px 6px;vertical-align:top}th{background:#f4f4f4}
#tasks th{cursor:pointer;user-select:none}#tasks td.q{max-width:520px;white-space:pre-wrap}
pre{background:#f8f8f8;padding:.6em;max-height:320px;overflow:auto;font-size:.8em}
nav a{margin-right:1em}
pre.turn{white-space:pre-wrap;max-height:240px;margin:.2em 0}td.bad{color:#a40;font-weight:600}
table.transcript{width:100%}table.transcript td:nth-child(2){width:65%}
details.episode{margin:.5em 0}details.episode>summary{cursor:pointer}
.gallery img{max-width:48%;margin:2px;border:1px solid #eee}
.u-title{font-size:13px;font-weight:600;text-align:left;padding-left:4px}
.u-legend{font-size:11px}.u-legend .u-series>*{padding:1px 3px}.u-inline tr{margin-right:8px}
.hm-info{font-size:11px;min-height:1.4em;color:#333}
.cbar{display:flex;align-items:center;gap:6px;font-size:11px;color:#333}
.cbar i{display:inline-block;width:160px;height:10px;border:1px solid #ccc}
.chart-missing{color:#a40;padding:1em 0}
"""

HERE = Path(__file__).parent


@lru_cache(maxsize=2)
def _asset(name: str) -> str:
    return (HERE / name).read_text()


VENDOR = HERE / "vendor"
SCRIPT_FILE = "uPlot.iife.min.js"  # written beside every page, loaded once by it
STALE_FILES = ("plotly.min.js",)  # what an earlier version wrote beside the page (4.8 MB)


@lru_cache(maxsize=1)
def chart_js() -> str:
    """uPlot's code with its MIT licence on top (the licence travels with the copy)."""
    licence = (VENDOR / "uPlot.LICENSE").read_text().strip().replace("*/", "* /")
    return f"/*! uPlot (npm uplot 1.6.32)\n{licence}\n*/\n" + (VENDOR / SCRIPT_FILE).read_text()


@lru_cache(maxsize=1)
def chart_css() -> str:
    return (VENDOR / "uPlot.min.css").read_text()


def write_page(out: Path, text: str) -> Path:
    """``out/index.html`` and, once per folder, the uPlot script it loads."""
    out.mkdir(parents=True, exist_ok=True)
    script = out / SCRIPT_FILE
    code = chart_js()
    if not script.exists() or script.read_text() != code:
        script.write_text(code)
    for stale in STALE_FILES:
        (out / stale).unlink(missing_ok=True)
    (out / "index.html").write_text(text)
    return out / "index.html"


def _script_json(value) -> str:
    """JSON safe inside <script>: no '</' can close the tag early."""
    return json.dumps(value, default=_default).replace("</", "<\\/")


def _default(value):
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


# ------------------------------------------------------------------ pieces
def _table_html(table: Table) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in table.headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
        for row in table.rows
    )
    return (f"<table><caption>{html.escape(table.caption)}</caption><thead><tr>{head}</tr>"
            f"</thead><tbody>{body}</tbody></table>")


def _section_html(section: Section, figures: dict) -> str:
    parts = [f"<h2 id='{section.anchor}'>{html.escape(section.title)}</h2>"]
    parts += [f"<p class='note{' problem' if line.startswith('⚠') else ''}'>"
              f"{html.escape(line)}</p>" for line in section.lines]
    if section.plots:
        parts.append("<div class='grid'>")
        for plot in section.plots:
            figures[f"plot-{plot.name}"] = plot.chart()
            link = f"<a href='{plot.name}.png'>PNG</a>" if plot.png else ""
            parts.append(f"<div class='plot'><div id='plot-{plot.name}'></div>{link}</div>")
        parts.append("</div>")
    parts += [_table_html(t) for t in section.tables]
    parts += section.html
    return "\n".join(parts)


def page_html(
    title: str, header: str, sections: list[Section], tasks: dict | None, pngs: list[str]
) -> str:
    figures: dict = {}
    body_sections = [_section_html(s, figures) for s in sections]
    nav = "".join(f"<a href='#{s.anchor}'>{html.escape(s.title)}</a>" for s in sections)
    task_html = ""
    if tasks is not None:
        heads = "".join(f"<th data-name='{html.escape(c)}'>{html.escape(c)}</th>"
                        for c in tasks["columns"])
        task_html = (
            f"<h2 id='tasks-table'>{html.escape(tasks['title'])}</h2>"
            f"<p class='note'>{html.escape(tasks['note'])}</p>"
            "<input id='task-search' type='search' placeholder='filter tasks…' size='40'> "
            "<span id='task-count'></span>"
            f"<table id='tasks'><thead><tr>{heads}</tr></thead><tbody></tbody></table>"
            "<button id='task-more'>show more</button>"
            f"<script type='application/json' id='tasks-data'>{_script_json(tasks)}</script>"
            f"<script>{_asset('tasks_table.js')}</script>"
        )
        nav += "<a href='#tasks-table'>tasks</a>"
    gallery = "".join(f"<img src='{p}' alt='{p}' loading='eager'>" for p in pngs)
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{chart_css()}{CSS}</style>"
        f"<script src='{SCRIPT_FILE}'></script></head><body>"
        f"<h1>{html.escape(title)}</h1>{header}<nav>{nav}</nav>"
        + "\n".join(body_sections)
        + task_html
        + (f"<h2 id='pngs'>PNG figures</h2><details><summary>{len(pngs)} PNG files next to this "
           f"page</summary><div class='gallery'>{gallery}</div></details>" if pngs else "")
        + f"<script type='application/json' id='figures-data'>{_script_json(figures)}</script>"
        f"<script>{_asset('plots.js')}</script></body></html>"
    )


def write_pngs(plots: list[Plot], out: Path, progress: Progress | None = None) -> list[str]:
    for stale in out.glob("*.png"):  # figures of an earlier analysis that has none now
        stale.unlink()
    names = []
    plots = [p for p in plots if p.png]
    task = progress.add_task("PNG figures", total=len(plots)) if progress else None
    for plot in plots:
        plot.save_png(out)
        names.append(f"{plot.name}.png")
        if progress:
            progress.advance(task)
    return names


# ------------------------------------------------------------------ the task table
def task_table(run: RunData) -> dict | None:
    """The generated tasks (tasks.jsonl), else the prompts the solver saw (episodes)."""
    if run.tasks:
        columns = ["step", "iteration", "phase", "question", "answer", "answer_type", "p_hat",
                   "valid", "kept", "pseudo_label", "tool_calls"]
        rows = [[t.get(c) if not isinstance(t.get(c), bool) else str(t.get(c)).lower()
                 for c in columns] for t in run.tasks[:MAX_TABLE_ROWS]]
        return {"title": "Generated tasks", "columns": columns, "rows": rows,
                "note": f"{len(run.tasks)} rows of tasks.jsonl"
                + (f" (first {MAX_TABLE_ROWS})" if len(run.tasks) > MAX_TABLE_ROWS else "")
                + "; click a header to sort, type to filter."}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for e in run.episodes:
        info = e.get("info") or {}
        if "question" in info:
            groups[(e.get("step", 0), e.get("group_id"))].append(e)
    if not groups:
        return None
    columns = ["step", "group", "question", "answer", "p_hat", "samples", "answered"]
    rows = []
    for (step, group), members in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        info = members[0]["info"]
        rows.append([step, group, info.get("question"), info.get("gold"),
                     sum(difficulty.solved(m) for m in members) / len(members), len(members),
                     sum((m["info"].get("answer") is not None) for m in members) / len(members)])
    return {"title": "Tasks the solver saw", "columns": columns, "rows": rows[:MAX_TABLE_ROWS],
            "note": "this loop generates no tasks; these are its training prompts with the "
                    "solver's p̂ per step (answer = gold). Click a header to sort, type to filter."}


# ------------------------------------------------------------------ pages
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
    """A run page's sections, in the order the page shows them."""
    options = options or Options()
    return [
        training_section(run),
        difficulty_section(run),
        validity_section(run),
        diversity_section(run, options),
        pseudo_label_section(run),
        games_section(run),
        exploitability_section(run),
        transcripts_section(run),
        responses_section(run),
        loop_section(run),
        other_metrics_section(run),
        compute_section(run),
        evaluations_section(run),
    ]


def write_run_page(run: RunData, out: Path | None = None, options: Options | None = None) -> Path:
    options = options or Options()
    out = out or run.path / "report"
    out.mkdir(parents=True, exist_ok=True)
    sections = build_sections(run, options)
    pngs = []
    if options.pngs:
        with Progress(transient=True) as progress:
            pngs = write_pngs([p for s in sections for p in s.plots], out, progress)
    lines = overview_lines(run) + [f"⚠ {p}" for p in run.problems]
    header = (
        "".join(f"<p class='note{' problem' if line.startswith('⚠') else ''}'>"
                f"{html.escape(line)}</p>" for line in lines)
        + f"<details open><summary>config.yaml</summary><pre>{html.escape(run.config_text)}"
        "</pre></details>"
    )
    return write_page(out, page_html(run.name, header, sections, task_table(run), pngs))


def comparison_rows(runs: list[RunData]) -> list[list]:
    rows = []
    for run in runs:
        key = score_key(run.metrics)
        scores = [r[key] for r in run.metrics if key and key in r]
        reward = next((k for k in sorted({k for r in run.metrics for k in r})
                       if k.startswith("reward/")), None)
        rewards = [r[reward] for r in run.training_rows if reward and reward in r]
        groups = difficulty.groups_from_episodes(run.episodes)
        rows.append([
            run.name, run.loop, len(run.training_rows), "yes" if run.finished else "no",
            key or "–", fmt(scores[0]) if scores else "–", fmt(scores[-1]) if scores else "–",
            fmt(rewards[0]) if rewards else "–", fmt(rewards[-1]) if rewards else "–",
            fmt(difficulty.zero_variance_share(groups)), len(run.tasks),
            fmt(sum(t.get("valid") is True for t in run.tasks) / len(run.tasks))
            if run.tasks else "–",
        ])
    return rows


def _config_differences(runs: list[RunData]) -> list[list]:
    flat = [_flatten(r.config) for r in runs]
    keys = sorted(set().union(*flat))
    return [[k, *[str(f.get(k, "–")) for f in flat]] for k in keys
            if len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flat}) > 1]


def _flatten(node, prefix: str = "") -> dict:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            out |= _flatten(v, f"{prefix}{k}.")
        return out
    return {prefix[:-1]: node}


def write_comparison_page(runs: list[RunData], out: Path, pngs: bool = True) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    names = [r.name for r in runs]
    section = Section("Curves, one line per run", "curves")
    shared = sorted(set.intersection(*[
        set(numeric_series(r.metrics, ("reward/", "eval/", "rollout/accuracy", "game/invalid",
                                       "game/draw", "rollout/completion_tokens")))
        for r in runs]))
    for key in shared:
        series = [Series(r.name, [x for x, _ in pts], [y for _, y in pts])
                  for r in runs for pts in [numeric_series(r.metrics, (key,)).get(key, [])]]
        values = [y for s in series for y in s.y]
        safe = "".join(ch if ch.isalnum() else "-" for ch in key)
        section.add(Plot(f"compare-{safe}", titles.title(key), "step",
                         titles.describe(key)[1] or key.rsplit("/", 1)[-1], series,
                         rate=all(0 <= v <= 1 for v in values) and not key.startswith("reward/")))
    phat = []
    for run in runs:
        per = defaultdict(list)
        for g in difficulty.groups_from_episodes(run.episodes):
            per[g.step].append(g.p_hat)
        if per:
            phat.append(Series(run.name, list(per), [float(np.mean(v)) for v in per.values()]))
    section.add(Plot("compare-mean-phat", "mean solver p̂ per step", "step", "p̂", phat,
                     rate=True), "no run has groups of samples (p̂).")
    lengths = []
    for run in runs:
        per_step = games.response_lengths(run.episodes)
        if per_step:
            lengths.append(Series(run.name, list(per_step), [v[0] for v in per_step.values()]))
    section.add(Plot("compare-response-tokens", "mean response length", "step", "tokens",
                     lengths))
    if not shared:
        section.lines.append("the runs share no training metric (different loops?).")
    summary = Section("Summary", "summary")
    summary.tables.append(Table("one row per run", [
        "run", "loop", "steps", "finished", "score", "first", "last", "reward first",
        "reward last", "zero-variance groups", "tasks", "valid"], comparison_rows(runs)))
    differences = _config_differences(runs)
    summary.tables.append(Table("config keys that differ", ["key", *names], differences))
    pngs = write_pngs(section.plots, out) if pngs else []
    links = "".join(
        f"<li><a href='{html.escape(str((r.path / 'report' / 'index.html').resolve()))}'>"
        f"{html.escape(r.name)}</a></li>" for r in runs
    )
    header = f"<p class='note'>runs compared (their own pages):</p><ul>{links}</ul>"
    return write_page(out, page_html("comparison: " + " vs ".join(names), header,
                                     [summary, section], None, pngs))
