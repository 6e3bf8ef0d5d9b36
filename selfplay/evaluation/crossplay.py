"""``selfplay crossplay RUN``: the run's saved snapshots against each other
(docs/algorithms.md#curriculum-analysis-metrics).

- **Games** (SPIRAL): every snapshot against every other, seats alternating, ``games`` games per
  ordered pair; a win-rate matrix (a draw counts ½; an invalid move loses) and ratings from
  openskill (Plackett–Luce), whose ordinal μ − 3σ ranks the snapshots.
- **Challenger/solver loops** (Agent0, SPICE): the challenger of snapshot i against the solver of
  snapshot j: solver j's pass rate on the questions generated while i's weights were live
  (``tasks.jsonl`` rows with step in [step_i, step_{i+1})), graded against the task's answer.
  SPICE reports a fixed solver falling on later challengers (down a column) and a fixed
  challenger's tasks getting easier for later solvers (along a row). Loops that generate no
  tasks (rlvr) use the prompts their solver saw in that step range.

Snapshots: step 0 (the base model: LoRA starts at zero), the kept checkpoints and the archive
(``checkpoint.archive_every``). They sit side by side in one engine as LoRA adapters, so the
run must be LoRA-trained. Results: ``RUN/crossplay/`` (JSON, PNG heatmap, an HTML page).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import defaultdict
from pathlib import Path

from curricula.answers import answers_equal, extract_answer
from selfplay.analysis.plots import Plot
from selfplay.analysis.rundata import RunData
from selfplay.analysis.sections import Section, Table, fmt
from selfplay.core.errors import UserError
from selfplay.evaluation.run_model import RunModel, Snapshot
from selfplay.loops.base import prompt_request
from selfplay.stats.ratings import GameResult, rate

SEED = 77_000


# ------------------------------------------------------------------ pure parts
def win_matrix(results: list[GameResult], count: int) -> list[list[float | None]]:
    """W[i][j] = share of i's games against j that i won, a draw counting ½ (None on the
    diagonal and for pairs that never met). W[i][j] + W[j][i] = 1."""
    score = defaultdict(float)
    games = defaultdict(int)
    for r in results:
        for me, other, reward in ((r.first, r.second, r.reward_first),
                                  (r.second, r.first, -r.reward_first)):
            score[(me, other)] += 1.0 if reward > 0 else 0.5 if reward == 0 else 0.0
            games[(me, other)] += 1
    return [[score[(i, j)] / games[(i, j)] if games[(i, j)] else None for j in range(count)]
            for i in range(count)]


def ratings(results: list[GameResult], names: list[str], seed: int = 0) -> list[dict]:
    """openskill Plackett–Luce ratings of the snapshots (``selfplay.stats.ratings.rate``),
    sorted best first by ordinal."""
    rows = [{"snapshot": r["name"], "mu": r["mu"], "sigma": r["sigma"], "ordinal": r["ordinal"]}
            for r in rate(results, names, seed)]
    return sorted(rows, key=lambda row: -row["ordinal"])


def task_ranges(tasks: list[dict], steps: list[int]) -> list[list[dict]]:
    """The tasks of each snapshot: rows with step in [steps[i], steps[i+1])."""
    bounds = [*steps[1:], float("inf")]
    return [[t for t in tasks if start <= int(t.get("step") or 0) < end]
            for start, end in zip(steps, bounds, strict=True)]


def gold(task: dict) -> str | None:
    """The answer a solver is graded against: the task's answer, else its pseudo-label."""
    value = task.get("answer")
    if value is None or str(value).strip() == "":
        value = task.get("pseudo_label")
    return None if value is None else str(value)


# ------------------------------------------------------------------ running
def _select(snapshots: list[Snapshot], limit: int) -> list[Snapshot]:
    if len(snapshots) <= limit:
        return snapshots
    picks = sorted({round(i * (len(snapshots) - 1) / (limit - 1)) for i in range(limit)})
    return [snapshots[i] for i in picks]


def _adapter(step: int) -> str:
    return f"snapshot-{step}"


def game_crossplay(model: RunModel, snapshots: list[Snapshot], games: int) -> dict:
    from selfplay.loops.spiral import ROLE, Seat, SpiralLoop

    loop = SpiralLoop(model.config)
    adapter = model.config.roles[ROLE].adapter_name(ROLE)
    for snap in snapshots:
        model.install(snap, {adapter: _adapter(snap.step)})
    specs = loop.settings.games
    jobs, meta = [], []
    for i in range(len(snapshots)):
        for j in range(i + 1, len(snapshots)):
            for g in range(games):
                spec = specs[g % len(specs)]
                first, second = (i, j) if g % 2 == 0 else (j, i)  # seats alternate
                seats = {0: Seat("adapter", _adapter(snapshots[first].step)),
                         1: Seat("adapter", _adapter(snapshots[second].step))}
                seed = SEED + 1000 * (i * len(snapshots) + j) + g
                jobs.append(loop.play(model.policy, spec, seed, seats))
                meta.append((first, second, spec.id))
    outcomes = asyncio.run(model.policy.gather(jobs)) if jobs else []
    results = []
    for (first, second, _), (game, record) in zip(meta, outcomes, strict=True):
        results.append(GameResult(first, second, SpiralLoop.eval_rewards(game, record)[0]))
    names = [f"step {s.step}" for s in snapshots]
    return {"kind": "games", "snapshots": [s.step for s in snapshots], "games_per_pair": games,
            "matrix": win_matrix(results, len(snapshots)), "ratings": ratings(results, names),
            "invalid_share": sum(r.invalid_by is not None for _, r in outcomes) / max(
                len(outcomes), 1)}


def solver_crossplay(model: RunModel, snapshots: list[Snapshot], per_snapshot: int,
                     samples: int) -> dict:
    from roles import RolePromptError, load_role
    from selfplay.evaluation.evaluate import solver_role

    run = model.run
    tasks = [t for t in run.tasks if t.get("valid") and t.get("question") and gold(t)]
    source = "tasks.jsonl"
    if not tasks:  # a loop that generates no tasks: the prompts its solver saw
        seen = {}
        for e in run.episodes:
            info = e.get("info") or {}
            if info.get("question") and info.get("gold") is not None:
                seen.setdefault((e.get("step", 0), info["question"]),
                                {"step": e.get("step", 0), "question": info["question"],
                                 "answer": str(info["gold"])})
        tasks, source = list(seen.values()), "episodes (prompts the solver saw)"
    if not tasks:
        raise UserError(f"{run.path}: no tasks with an answer in tasks.jsonl or episodes/")
    steps = [s.step for s in snapshots]
    rng = random.Random(SEED)
    ranges = [rng.sample(r, min(per_snapshot, len(r))) for r in task_ranges(tasks, steps)]
    role = solver_role(model.config)
    adapter = model.config.roles[role].adapter_name(role)
    try:
        prompt = load_role(model.config.roles[role].prompt)
        prompt.render(question="?")
    except RolePromptError:
        prompt = load_role("solver_terse")
    for snap in snapshots:
        model.install(snap, {adapter: _adapter(snap.step)})

    loop_rng = random.Random(SEED + 1)

    async def solve(question: str, answer: str, solver: int) -> bool:
        request = prompt_request(prompt, "eval", _adapter(snapshots[solver].step),
                                 _sampling(model, loop_rng.randrange(2**31)), question=question)
        text = (await model.policy(request)).reply
        return answers_equal(extract_answer(text, lenient=True)[0], answer)

    jobs, meta = [], []
    for i, chosen in enumerate(ranges):
        for j in range(len(snapshots)):
            for task in chosen:
                for _ in range(samples):
                    jobs.append(solve(task["question"], gold(task), j))
                    meta.append((i, j))
    correct = asyncio.run(model.policy.gather(jobs)) if jobs else []
    hits, total = defaultdict(int), defaultdict(int)
    for (i, j), ok in zip(meta, correct, strict=True):
        hits[(i, j)] += ok
        total[(i, j)] += 1
    matrix = [[hits[(i, j)] / total[(i, j)] if total[(i, j)] else None
               for j in range(len(snapshots))] for i in range(len(snapshots))]
    return {"kind": "solver", "snapshots": steps, "source": source,
            "tasks_per_snapshot": [len(r) for r in ranges], "samples": samples,
            "matrix": matrix}


def _sampling(model: RunModel, seed: int):
    from selfplay.types import SamplingParams

    base = model.config.sampling
    return SamplingParams(temperature=base.temperature, top_p=base.top_p,
                          max_new_tokens=base.max_new_tokens, seed=seed)


def crossplay(run_dir: Path, games: int = 8, tasks: int = 16, samples: int = 4,
              max_snapshots: int = 8) -> tuple[dict, Path]:
    """Run cross-play on the run's snapshots; returns (results, page)."""
    run = RunData.open(run_dir)
    run.require_episodes()
    model = RunModel(run_dir)
    if not model.lora:
        raise UserError("crossplay holds several snapshots as LoRA adapters: the run needs "
                        "train.finetune: lora")
    snapshots = _select(model.snapshots(), max_snapshots)
    if len(snapshots) < 2:
        raise UserError(f"{run_dir}: crossplay needs 2 snapshots or more (found "
                        f"{len(snapshots)}); keep them with checkpoint.archive_every")
    try:
        if model.config.loop == "spiral":
            result = game_crossplay(model, snapshots, games)
        else:
            result = solver_crossplay(model, snapshots, tasks, samples)
    finally:
        model.close()
    return result, write_crossplay(run, result)


def write_crossplay(run: RunData, result: dict) -> Path:
    from selfplay.analysis.page import page_html, write_page, write_pngs

    out = run.path / "crossplay"
    out.mkdir(exist_ok=True)
    (out / "crossplay.json").write_text(json.dumps(result, indent=1))
    steps = result["snapshots"]
    z = result["matrix"]
    labels = [f"step {s}" for s in steps]
    section = Section("Cross-play", "crossplay")
    if result["kind"] == "games":
        title, ylabel, xlabel = "win rate of row against column (draw = ½)", "player", "opponent"
        section.lines.append(f"{result['games_per_pair']} games per pair, seats alternating; "
                             f"invalid moves ended {result['invalid_share']:.0%} of the games.")
        section.tables.append(Table("openskill (Plackett–Luce) ratings, best first",
                                    ["snapshot", "mu", "sigma", "ordinal (mu − 3 sigma)"],
                                    [[r["snapshot"], fmt(r["mu"], 2), fmt(r["sigma"], 2),
                                      fmt(r["ordinal"], 2)] for r in result["ratings"]]))
    else:
        title = "pass rate of the column's solver on the row's questions"
        xlabel, ylabel = "solver snapshot", "challenger snapshot (questions)"
        section.lines.append(
            f"questions from {result['source']}; per snapshot: "
            + ", ".join(f"step {s}: {n}" for s, n in zip(steps, result["tasks_per_snapshot"],
                                                         strict=True))
            + f"; {result['samples']} samples each. Down a column: one solver on later "
            "challengers; along a row: one challenger's questions for later solvers.")
    plot = Plot("crossplay-matrix", title, xlabel, ylabel,
                heatmap=(labels, labels, z), zlabel="rate", rate=True)
    section.plots.append(plot)
    if result["kind"] == "games":  # every ordered pair played games_per_pair games
        counts = [[result["games_per_pair"]] * len(row) for row in z]
    else:  # row i's questions, each answered `samples` times by every solver
        counts = [[n * result["samples"]] * len(z) for n in result["tasks_per_snapshot"]]
    section.tables.append(Table(title + " (n: games or answers per cell)", ["", *labels], [
        [labels[i], *[f"{fmt(v)} (n={n})" if v is not None else "–"
                      for v, n in zip(row, counts[i], strict=True)]]
        for i, row in enumerate(z)]))
    pngs = write_pngs([plot], out)
    header = f"<p class='note'>run {run.path}</p>"
    return write_page(out, page_html(f"cross-play: {run.name}", header, [section], None, pngs))
