"""``selfplay compare``: every loop at equal compute (docs/compare.md).

Each experiment runs with ``train.token_budget`` = the budget for ``--seeds`` seeds (``train.steps``
stays an upper bound), and the base model (the run's step-0 LoRA adapters, with that seed's
sampling) and each final policy are evaluated on ONE held-out suite, the same problems for every
loop, so the comparison is paired. The folder:

    COMPARE/compare.json             experiments, seeds, budget, suite (what the comparison is)
    COMPARE/<experiment>/            a sweep folder (selfplay sweep's layout): base-seed<k>/ runs
    COMPARE/evaluations.jsonl        one row per evaluation (run folder, base|final, accuracies)
    COMPARE/runs.jsonl               one row per run attempt and its wall time
    COMPARE/results.{md,csv,json}    the table; COMPARE/report/index.html + gain.png its page

Everything is checked before the folder exists (an unknown experiment, a fully fine-tuned one,
whose base model has no step-0 snapshot to evaluate, a bad suite). Re-running the same command
with ``--out COMPARE`` skips finished runs and evaluations.
"""

from __future__ import annotations

import json
import os
import resource
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
    TIMES,
    read_compare,
    summarize,
    write_results,
)
from selfplay.running import sweep as sweeps
from selfplay.running.tracking import console

DEFAULT_SUITE = "compare"
WHICH = ("base", "final")  # step 0 (the base model) and the run's last checkpoint


@dataclass(frozen=True)
class CompareSpec:
    """What a comparison is: two with the same spec share a folder."""

    experiments: tuple[str, ...]
    seeds: int
    budget: int
    suite: str = DEFAULT_SUITE
    suite_size: int = 32
    samples: int = 4  # sampled answers per problem (temperature 1), besides the greedy one
    first_seed: int = 0
    eval_tokens: int = 48  # the evaluation's max_new_tokens, the same for every loop
    # for every run (train.steps=100: a higher bound), or for one experiment's runs
    # (EXPERIMENT:spiral.eval_games=0: its own evaluations off, where only that loop has the key)
    overrides: tuple[str, ...] = ()

    def as_manifest(self) -> dict:
        return asdict(self) | {"experiments": list(self.experiments),
                               "overrides": list(self.overrides)}


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
                        ("--suite-size", spec.suite_size), ("--samples", spec.samples),
                        ("--eval-tokens", spec.eval_tokens)):
        if value is None or value < 1:
            raise UserError(f"{flag} {value}: must be a positive integer")
    if spec.first_seed < 0:
        raise UserError(f"--first-seed {spec.first_seed}: must be 0 or more")
    for override in spec.overrides:
        key, _, _ = override.partition("=")
        target, colon, key = key.rpartition(":")
        if colon and target not in spec.experiments:
            raise UserError(f"--set {override}: {target} is not one of the experiments compared")
        if key.strip() == "train.token_budget":
            raise UserError(f"{override}: the budget comes from --budget")
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
            experiment, [*own, f"train.token_budget={spec.budget}"], [], spec.seeds)
        arms, entries, configs = sweeps.check(sweep_spec, local=True)
    except UserError as exc:
        raise UserError(f"{experiment}: {exc}") from exc
    if configs[0].train.finetune != "lora":
        raise UserError(f"{experiment}: train.finetune is {configs[0].train.finetune}; compare "
                        "evaluates the base model as the run's step-0 LoRA adapters, so it needs "
                        "train.finetune: lora")
    for entry, config in zip(entries, configs, strict=True):  # seeds first_seed.. on
        entry["seed"] += spec.first_seed
        entry["folder"] = f"base-seed{entry['seed']}"
        config.seed = entry["seed"]
    return Arm(configs[0].name, sweep_spec, arms, entries, configs)


def check(spec: CompareSpec) -> list[Arm]:
    """Every experiment and the suite, before any folder exists; a UserError in one line."""
    from selfplay.evaluation.evaluate import load_suite

    _positive(spec)
    arms = [check_arm(e, spec) for e in spec.experiments]
    names = [a.name for a in arms]
    if len(set(names)) < len(names):
        raise UserError(f"experiments named twice: {', '.join(sorted(names))}")
    load_suite(spec.suite, arms[0].configs[0], spec.suite_size)  # a bad suite: one line
    return arms


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


def open_folder(spec: CompareSpec, out: Path | None) -> Path:
    """The folder of ``spec``: found again (same spec) or made after every check."""
    if out is not None and (Path(out) / MANIFEST).is_file():
        folder = Path(out).resolve()
        manifest = read_compare(folder)
        if {k: manifest.get(k) for k in spec.as_manifest()} != spec.as_manifest():
            raise UserError(f"{folder} holds a different comparison (experiments, seeds, budget "
                            "or suite differ); give another --out")
        return folder
    return create(spec, Path(out) if out else default_folder(), check(spec))


def _append(path: Path, row: dict) -> None:
    with path.open("a") as handle:
        handle.write(json.dumps(row) + "\n")


# ------------------------------------------------------------------ the work
@dataclass
class Job:
    name: str  # the experiment's folder
    entry: dict  # its sweep manifest's run entry
    which: str  # "run", "base" or "final"

    @property
    def label(self) -> str:
        return f"{self.name} seed {self.entry['seed']}: {self.which}"


def jobs(folder: Path, manifest: dict) -> list[Job]:
    """Per run, in order: the run, then its base and final evaluations."""
    return [Job(name, entry, which)
            for name in manifest["names"]
            for entry in read_manifest(folder / name)["runs"]
            for which in ("run", *WHICH)]


def evaluated(folder: Path) -> set[tuple[str, str, str]]:
    return {(r["experiment"], r["folder"], r["which"])
            for r in read_jsonl(folder / EVALUATIONS)}


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children: on a shared
    machine the wall time depends on the neighbours, this does much less."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_job(folder: Path, job: Job, processes: bool) -> None:
    """A run (in a child process unless ``processes`` is False, as sweeps run theirs) with its
    wall time recorded, finished by the runner's resume if it was cut short."""
    sweep_dir = folder / job.name
    run_dir = sweep_dir / job.entry["folder"]
    sweep_manifest = read_manifest(sweep_dir)
    entry = next(e for e in sweep_manifest["runs"] if e["folder"] == job.entry["folder"])
    start, cpu = time.perf_counter(), _cpu_seconds()
    sweeps._mark(sweep_dir, sweep_manifest, entry, "running", None)
    error = sweeps._in_child(run_dir) if processes else sweeps._here(run_dir)
    sweeps._mark(sweep_dir, sweep_manifest, entry, "failed" if error else "finished", error)
    _append(folder / TIMES, {"experiment": job.name, "folder": entry["folder"],
                             "seconds": time.perf_counter() - start,
                             "cpu_seconds": _cpu_seconds() - cpu, "error": error})
    if error:
        console.print(f"[red]{job.label} failed:[/] {error}")


def eval_job(folder: Path, manifest: dict, job: Job) -> None:
    """The run's base model (step 0) or final policy on the comparison's suite."""
    from selfplay.evaluation.evaluate import evaluate

    run_dir = folder / job.name / job.entry["folder"]
    start, cpu = time.perf_counter(), _cpu_seconds()
    try:
        rows = evaluate(run_dir, manifest["suite"], manifest["suite_size"], manifest["samples"],
                        ks=(1,), step=0 if job.which == "base" else None,
                        overrides=[f"sampling.max_new_tokens={manifest['eval_tokens']}"])
    except Exception as exc:  # one evaluation failing leaves the others (retried next time)
        console.print(f"[red]{job.label} evaluation failed:[/] {type(exc).__name__}: {exc}")
        return
    greedy = next(r for r in rows if r["setting"] == "greedy")
    sampled = next(r for r in rows if r["setting"] == "sampled")
    _append(folder / EVALUATIONS, {
        "experiment": job.name, "folder": job.entry["folder"], "seed": job.entry["seed"],
        "which": job.which, "step": greedy["step"], "problems": greedy["problems"],
        "greedy": greedy["accuracy"], "sampled": sampled["accuracy"],
        "families": {k[len("accuracy/"):]: v for k, v in greedy.items()
                     if k.startswith("accuracy/")},
        "seconds": time.perf_counter() - start, "cpu_seconds": _cpu_seconds() - cpu,
    })


def run_all(folder: Path, processes: bool = True) -> None:
    """Every unfinished run and evaluation, with a progress bar over them."""
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
            if job.which == "run" and not run_finished(run_dir):
                console.print(f"[bold]compare[/] {job.label}")
                run_job(folder, job, processes)
            elif (job.which in WHICH and run_finished(run_dir)
                  and (job.name, job.entry["folder"], job.which) not in done):
                console.print(f"[bold]compare[/] {job.label} evaluation")
                eval_job(folder, manifest, job)
            progress.advance(task)


def compare(spec: CompareSpec, out: Path | None = None, processes: bool = True) -> Path:
    """``selfplay compare``: the folder (made or found), its runs and evaluations, the table."""

    folder = open_folder(spec, out)
    console.print(f"[bold]compare[/] {folder}")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    run_all(folder, processes)
    write_results(folder, summarize(folder))
    return folder
