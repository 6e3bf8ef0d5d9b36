"""``selfplay compare``: every loop at equal compute, paired, powered, with learning curves
(docs/compare.md).

Each experiment runs with ``train.token_budget`` = the budget for ``--seeds`` seeds (``train.steps``
stays an upper bound), archiving its weights at every step (``checkpoint.archive_every=1``). After
a run, its policy is evaluated on ONE held-out suite at ``--points`` points of its budget (the
steps where its generated tokens first reach 1/P, 2/P, ... of it; the last is the final policy),
and the base model (the step-0 LoRA adapters) once per (model, suite, seed) — once in all where
answers are greedy, since greedy answers do not depend on the seed — and reused by every run that
shares it. Every evaluation keeps one record per problem (``selfplay.evaluation.heldout``), so
gains are paired per problem and across seeds (``selfplay.stats.paired``). The folder:

    COMPARE/compare.json             experiments, seeds, budget, suite, measures, points
    COMPARE/<experiment>/            a sweep folder (selfplay sweep's layout): base-seed<k>/ runs
    COMPARE/evaluations.jsonl        one row per evaluation (base or a run's point): summary, cost
    COMPARE/records/                 one JSONL per evaluation: one record per problem
    COMPARE/runs.jsonl               one row per run attempt and its wall and CPU time
    COMPARE/results.{md,csv,json}    the table; COMPARE/report/index.html its page (gain, curves)

Everything is checked before the folder exists (an unknown experiment, a fully fine-tuned one,
whose base model has no step-0 snapshot to evaluate, a bad suite, fewer than 3 curve points, a
suite too small for the ``--mde`` asked). Re-running the same command with ``--out COMPARE`` skips
finished runs and evaluations; the same command with more experiments after its own adds them
(their runs and points; the base evaluations they share are reused).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from selfplay.analysis.rundata import read_jsonl
from selfplay.analysis.sweepdata import read_manifest, run_finished
from selfplay.core.errors import UserError
from selfplay.core.paths import make_folder
from selfplay.evaluation.compare_page import (
    EVALUATIONS,
    MANIFEST,
    RECORDS,
    TIMES,
    curve_points,
    read_compare,
    summarize,
    write_results,
)
from selfplay.evaluation.heldout import (
    Measures,
    base_key,
    cpu_seconds,
    load_average,
    problems_for,
    record_evaluation,
)
from selfplay.loops.spiral.settings import SpiralSettings
from selfplay.running import sweep as sweeps
from selfplay.running.tracking import console
from selfplay.stats.power import ALPHA, POWER, flip_rate, mcnemar_mde, mcnemar_sample_size

DEFAULT_SUITE = "compare"
DEFAULT_SUITE_SIZE = 720  # MDE ≤ 0.05 at the base model's flip rate (docs/compare.md#the-suite)
DEFAULT_POINTS = 4
DEFAULT_CURVE_SIZE = 160
MIN_POINTS = 3  # a curve: the base and at least three points after it
# every step's weights archived, so that any step can be a curve point
CURVE_OVERRIDES = ("checkpoint.every=1", "checkpoint.archive_every=1")


@dataclass(frozen=True)
class CompareSpec:
    """What a comparison is: two with the same spec share a folder."""

    experiments: tuple[str, ...]
    seeds: int
    budget: int
    suite: str = DEFAULT_SUITE
    suite_size: int = DEFAULT_SUITE_SIZE
    samples: int = 0  # sampled answers per problem (temperature 1), besides the greedy one
    first_seed: int = 0
    eval_tokens: int = 16  # the evaluation's max_new_tokens, the same for every loop
    # for every run (train.steps=100: a higher bound), or for one experiment's runs
    # (EXPERIMENT:spiral.eval_games=0: its own evaluations off, where only that loop has the key)
    overrides: tuple[str, ...] = ()
    points: int = DEFAULT_POINTS  # evaluations along each run's budget, the final one included
    likelihood: bool = True  # the reference answer's mean log-prob per token
    # problems of the points before the last (the first of each family; the curve is read on
    # them at every point): a curve needs less precision than the final gain
    curve_size: int = DEFAULT_CURVE_SIZE

    def as_manifest(self) -> dict:
        return asdict(self) | {"experiments": list(self.experiments),
                               "overrides": list(self.overrides)}

    @property
    def measures(self) -> Measures:
        return Measures(self.suite, self.suite_size, self.samples, self.eval_tokens,
                        self.likelihood)


@dataclass
class Arm:
    """One experiment's runs: a sweep folder with no grid, the budget as its override."""

    name: str
    spec: sweeps.Spec
    arms: list[dict]
    entries: list[dict]
    configs: list


# ------------------------------------------------------------------ checks
def _positive(spec: CompareSpec) -> None:
    if not spec.experiments:
        raise UserError("give at least one experiment")
    for flag, value in (("--seeds", spec.seeds), ("--budget", spec.budget),
                        ("--suite-size", spec.suite_size), ("--eval-tokens", spec.eval_tokens),
                        ("--curve-size", spec.curve_size)):
        if value is None or value < 1:
            raise UserError(f"{flag} {value}: must be a positive integer")
    if spec.samples is None or spec.samples < 0:
        raise UserError(f"--samples {spec.samples}: must be 0 (greedy only) or more")
    if spec.points is None or spec.points < MIN_POINTS:
        raise UserError(f"--points {spec.points}: a learning curve needs at least {MIN_POINTS} "
                        "evaluation points")
    if spec.first_seed < 0:
        raise UserError(f"--first-seed {spec.first_seed}: must be 0 or more")
    for override in spec.overrides:
        key, _, _ = override.partition("=")
        target, colon, key = key.rpartition(":")
        if colon and target not in spec.experiments:
            raise UserError(f"--set {override}: {target} is not one of the experiments compared")
        if key.strip() == "train.token_budget":
            raise UserError(f"{override}: the budget comes from --budget")
        if key.strip() in ("checkpoint.every", "checkpoint.archive_every"):
            raise UserError(f"{override}: compare archives every step for its learning curves")
    if spec.suite == "reasoning-gym":
        raise UserError("--suite reasoning-gym leaves out each run's own families, so loops would "
                        "see different problems; use compare (the default) or rg:<family>,...")


def overrides_for(experiment: str, overrides: tuple[str, ...]) -> list[str]:
    """The overrides for every experiment, and those given as ``experiment:key=value``."""
    chosen = []
    for override in overrides:
        key, sep, value = override.partition("=")
        target, colon, key = key.rpartition(":")
        if not colon:
            chosen.append(override)
        elif target == experiment:
            chosen.append(f"{key}{sep}{value}")
    return chosen


def check_arm(experiment: str, spec: CompareSpec) -> Arm:
    """One experiment under the budget, validated as ``selfplay sweep`` validates an arm."""
    try:
        own = overrides_for(experiment, spec.overrides)
        sweep_spec = sweeps.make_spec(
            experiment, [*own, f"train.token_budget={spec.budget}", *CURVE_OVERRIDES], [],
            spec.seeds)
        arms, entries, configs = sweeps.check(sweep_spec, local=True)
    except UserError as exc:
        raise UserError(f"{experiment}: {exc}") from exc
    if configs[0].train.finetune != "lora":
        raise UserError(f"{experiment}: train.finetune is {configs[0].train.finetune}; compare "
                        "evaluates the base model as the run's step-0 LoRA adapters, so it needs "
                        "train.finetune: lora")
    settings = configs[0].settings
    if isinstance(settings, SpiralSettings) and settings.action == "scored":
        raise UserError(f"{experiment}: spiral.action is scored: its moves are scored, not "
                        "generated, so a budget of generated tokens never ends its runs; compare "
                        "the free-text form (spiral-kuhn-text-cpu, or --set "
                        f"{experiment}:spiral.action=text)")
    for entry, config in zip(entries, configs, strict=True):  # seeds first_seed.. on
        entry["seed"] += spec.first_seed
        entry["folder"] = f"base-seed{entry['seed']}"
        config.seed = entry["seed"]
    return Arm(configs[0].name, sweep_spec, arms, entries, configs)


def distinct(names: list[str]) -> list[str]:
    """``names``, each an experiment's folder: one named twice is refused in one line."""
    if len(set(names)) < len(names):
        raise UserError(f"experiments named twice: {', '.join(sorted(names))}")
    return names


def check(spec: CompareSpec) -> tuple[list[Arm], int]:
    """Every experiment and the suite, before any folder exists; a UserError in one line.
    Returns the arms and the number of problems the suite has."""
    _positive(spec)
    arms = [check_arm(e, spec) for e in spec.experiments]
    distinct([a.name for a in arms])
    problems = problems_for(spec.measures, arms[0].configs[0])  # a bad suite: one line
    return arms, len(problems)


# ------------------------------------------------------------------ power
CORRELATION = 0.5  # phi correlation of base and trained correctness, when ψ is not given
DEFAULT_EFFECT = 0.05  # the effect ψ is worked out at when no --mde is asked


@dataclass(frozen=True)
class PowerAsk:
    """What the user asks of the comparison's power: nothing is required."""

    mde: float | None = None  # refuse a suite that cannot detect this gain
    flip_rate: float | None = None
    base_accuracy: float | None = None

    def check(self) -> None:
        for flag, value in (("--mde", self.mde), ("--flip-rate", self.flip_rate)):
            if value is not None and not 0 < value <= 1:
                raise UserError(f"{flag} {value}: must be in (0, 1]")
        if self.base_accuracy is not None and not 0 <= self.base_accuracy <= 1:
            raise UserError(f"--base-accuracy {self.base_accuracy}: must be in [0, 1]")


def assumed_flip_rate(ask: PowerAsk, base_accuracy: float | None) -> tuple[float, str]:
    """ψ and a sentence saying where it comes from."""
    if ask.flip_rate is not None:
        return ask.flip_rate, f"flip rate ψ {ask.flip_rate:.3f} (given)"
    effect = ask.mde or DEFAULT_EFFECT
    worst = base_accuracy is None
    p = 0.5 - effect / 2 if worst else base_accuracy
    p = min(max(p, 0.0), 1.0 - effect)
    psi = max(flip_rate(p, p + effect, CORRELATION), effect)
    where = ("the worst base accuracy" if worst else f"base accuracy {p:.3f}")
    return psi, (f"flip rate ψ {psi:.3f} assumed (phi correlation {CORRELATION} between base and "
                 f"trained answers, {where} → +{effect:.2f}; --flip-rate sets it)")


def check_power(spec, problems: int, ask: PowerAsk, base_accuracy: float | None = None) -> None:
    """A suite too small for the ``--mde`` asked: one line naming the size that would do."""
    ask.check()
    if ask.mde is None:
        return
    psi, _ = assumed_flip_rate(ask, base_accuracy if base_accuracy is not None
                               else ask.base_accuracy)
    detectable = mcnemar_mde(problems, psi)
    if detectable > ask.mde:
        needed = math.ceil(mcnemar_sample_size(ask.mde, psi))
        asked = (f"the suite has {problems} problems" if problems < spec.suite_size
                 else f"--suite-size {problems}")
        raise UserError(f"{asked} detects gains of {detectable:.3f} or more (paired, flip rate "
                        f"ψ {psi:.3f}, α {ALPHA}, power {POWER}); a gain of {ask.mde} needs "
                        f"{needed} problems: --suite-size {needed}")


# ------------------------------------------------------------------ the folder
def default_folder() -> Path:
    return Path("runs") / f"compare-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def create(spec: CompareSpec, out: Path, arms: list[Arm]) -> Path:
    """The comparison folder with one sweep folder per experiment; removed again on failure."""
    out = out.resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not a comparison folder (no {MANIFEST})")
    make_folder(out, f"compare folder {out}", exist_ok=True)
    try:
        for arm in arms:
            sweeps.create(arm.spec, out / arm.name, arm.arms, arm.entries, arm.configs, None)
        manifest = spec.as_manifest() | {
            "names": [a.name for a in arms],
            "created": datetime.now().isoformat(timespec="seconds"),
        }
        (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    return out


def open_folder(spec: CompareSpec, out: Path | None, power: PowerAsk | None = None) -> Path:
    """The folder of ``spec``: found again (same spec) or made after every check (with
    ``power``: the suite must be large enough for the effect it asks)."""
    if out is not None and (Path(out) / MANIFEST).is_file():
        folder = Path(out).resolve()
        manifest = read_compare(folder)
        if {k: manifest.get(k) for k in spec.as_manifest()} != spec.as_manifest():
            extend(folder, manifest, spec)
        return folder
    arms, problems = check(spec)
    if power is not None:
        check_power(spec, problems, power)
    return create(spec, Path(out) if out else default_folder(), arms)


def extend(folder: Path, manifest: dict, spec: CompareSpec) -> None:
    """More experiments for a comparison: the command that made it with experiments added after
    its own (nothing else changed) adds their sweep folders, so they join its table and reuse
    its base evaluations and finished runs; anything else is refused in one line."""
    before = manifest["experiments"]
    same = {k: v for k, v in spec.as_manifest().items() if k != "experiments"}
    if ({k: manifest.get(k) for k in same} != same
            or list(spec.experiments[:len(before)]) != before):
        raise UserError(f"{folder} holds a different comparison (experiments, seeds, budget, "
                        "suite or measures differ); give another --out, or its experiments "
                        f"({' '.join(before)}) first and new ones after them to add those")
    _positive(spec)
    arms = [check_arm(e, spec) for e in spec.experiments[len(before):]]
    names = distinct(manifest["names"] + [a.name for a in arms])
    created = []
    try:
        for arm in arms:
            sweeps.create(arm.spec, folder / arm.name, arm.arms, arm.entries, arm.configs, None)
            created.append(folder / arm.name)
    except BaseException:
        for path in created:
            shutil.rmtree(path, ignore_errors=True)
        raise
    manifest |= {"experiments": list(spec.experiments), "names": names}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    console.print(f"[bold]compare[/] added {', '.join(a.name for a in arms)} to {folder}: its "
                  "base evaluations and finished runs are reused")


def _append(path: Path, row: dict) -> None:
    with path.open("a") as handle:
        handle.write(json.dumps(row) + "\n")


# ------------------------------------------------------------------ the work
@dataclass
class Job:
    name: str  # the experiment's folder
    entry: dict  # its sweep manifest's run entry

    @property
    def label(self) -> str:
        return f"{self.name} seed {self.entry['seed']}"


def jobs(folder: Path, manifest: dict) -> list[Job]:
    return [Job(name, entry) for name in manifest["names"]
            for entry in read_manifest(folder / name)["runs"]]


def measures_of(manifest: dict, curve: bool = False) -> Measures:
    """The measures of the comparison's evaluations; ``curve``: of a point before the last,
    on the first ``curve_size`` problems."""
    size = manifest["suite_size"]
    if curve:
        size = min(size, manifest.get("curve_size", size))
    return Measures(manifest["suite"], size, manifest["samples"], manifest["eval_tokens"],
                    manifest.get("likelihood", True))


def run_job(folder: Path, job: Job, processes: bool) -> None:
    """A run (in a child process unless ``processes`` is False, as sweeps run theirs) with its
    wall and CPU time recorded, finished by the runner's resume if it was cut short."""
    sweep_dir = folder / job.name
    run_dir = sweep_dir / job.entry["folder"]
    sweep_manifest = read_manifest(sweep_dir)
    entry = next(e for e in sweep_manifest["runs"] if e["folder"] == job.entry["folder"])
    start, cpu = time.perf_counter(), cpu_seconds()
    sweeps._mark(sweep_dir, sweep_manifest, entry, "running", None)
    error = sweeps._in_child(run_dir) if processes else sweeps._here(run_dir)
    sweeps._mark(sweep_dir, sweep_manifest, entry, "failed" if error else "finished", error)
    _append(folder / TIMES, {"experiment": job.name, "folder": entry["folder"],
                             "seconds": time.perf_counter() - start,
                             "cpu_seconds": cpu_seconds() - cpu, "error": error,
                             "load_average": load_average()})
    if error:
        console.print(f"[red]{job.label} failed:[/] {error}")


def _evaluate(folder: Path, manifest: dict, run_dir: Path, step: int, row: dict,
              records_path: Path, curve: bool = False) -> bool:
    return record_evaluation(folder, run_dir, step, measures_of(manifest, curve), row,
                             records_path, EVALUATIONS)


def evaluate_run(folder: Path, manifest: dict, job: Job, done: dict) -> None:
    """The run's base model (unless a run sharing its key was evaluated) and its curve points
    (those not yet evaluated); archived steps that are no points are removed after."""
    from selfplay.evaluation.run_model import load_run_config

    run_dir = folder / job.name / job.entry["folder"]
    measures = measures_of(manifest)
    key = base_key(load_run_config(run_dir), measures, job.entry["seed"])
    base = {"experiment": job.name, "folder": job.entry["folder"], "seed": job.entry["seed"]}
    if ("base", key) not in done:
        console.print(f"[bold]compare[/] base model ({key}) from {job.label}")
        if _evaluate(folder, manifest, run_dir, 0, base | {"which": "base", "key": key,
                                                            "tokens": 0},
                     folder / RECORDS / f"base-{key}.jsonl"):
            done[("base", key)] = True
    points = curve_points(run_dir, manifest["budget"], manifest["points"])
    for number, point in enumerate(points):
        if (job.name, job.entry["folder"], point["step"]) in done:
            continue
        console.print(f"[bold]compare[/] {job.label}: step {point['step']} "
                      f"({point['tokens']:.0f} tokens)")
        path = folder / RECORDS / job.name / job.entry["folder"] / f"step-{point['step']}.jsonl"
        if _evaluate(folder, manifest, run_dir, point["step"],
                     base | {"which": "point", "key": key, "tokens": point["tokens"]}, path,
                     curve=number < len(points) - 1):
            done[(job.name, job.entry["folder"], point["step"])] = True
    if all((job.name, job.entry["folder"], p["step"]) in done for p in points):
        _prune_archive(run_dir, {p["step"] for p in points})


def _prune_archive(run_dir: Path, kept: set[int]) -> None:
    """Archived weights of steps that are no curve point (a few MB each with LoRA, one per
    step): removed once every point is evaluated."""
    for path in (run_dir / "checkpoints" / "archive").glob("step-*"):
        if int(path.name.split("-")[1]) not in kept:
            shutil.rmtree(path, ignore_errors=True)


def evaluated(folder: Path) -> dict:
    done: dict = {}
    for row in read_jsonl(folder / EVALUATIONS):
        if row["which"] == "base":
            done[("base", row["key"])] = True
        else:
            done[(row["experiment"], row["folder"], row["step"])] = True
    return done


def run_all(folder: Path, processes: bool = True) -> None:
    """Every unfinished run and evaluation, with a progress bar over the runs."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    manifest = read_compare(folder)
    todo = jobs(folder, manifest)
    done = evaluated(folder)
    with Progress(TextColumn("[bold]compare[/] {task.description}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                  disable=not console.is_terminal) as progress:
        task = progress.add_task("", total=len(todo))
        for job in todo:
            progress.update(task, description=job.label)
            run_dir = folder / job.name / job.entry["folder"]
            if not run_finished(run_dir):
                console.print(f"[bold]compare[/] {job.label}")
                run_job(folder, job, processes)
            if run_finished(run_dir):
                evaluate_run(folder, manifest, job, done)
            progress.advance(task)


def compare(spec: CompareSpec, out: Path | None = None, processes: bool = True,
            power: PowerAsk | None = None) -> Path:
    """``selfplay compare``: the folder (made or found), its runs and evaluations, the table."""

    folder = open_folder(spec, out, power)
    console.print(f"[bold]compare[/] {folder}")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    run_all(folder, processes)
    write_results(folder, summarize(folder))
    return folder
