"""``selfplay sweep``: every combination of a grid × seeds as a normal run folder under one sweep
folder, with a manifest (docs/sweeps.md).

    SWEEP/sweep.json                  experiment, overrides, grid, seeds, arms, runs + status
    SWEEP/<arm>-seed<k>/              a run folder like any other (config.yaml written up front)
    SWEEP/report/index.html           the sweep's page (selfplay analyze SWEEP)

Everything is checked before the sweep folder exists: each grid value is applied to the
experiment and validated (an unknown key is one line), each arm's loop is built once (bad games,
roles, tasks), and on this machine each arm must fit the devices. The folder is then written
whole (under a temporary name, renamed when complete), so bad input leaves nothing behind.

Runs go one after another, each in a child process (its memory, a GPU's included, is given back
when it ends, and one run that crashes does not end the sweep), or in parallel as Ray tasks
(``--ray auto|host:port|local``), each task holding ``--cpus-per-run``/``--gpus-per-run`` and
running in a fresh worker process. A run killed mid-way is resumed from its checkpoint by the
runner's own resume; a run that finished (its final metrics row) is never run again.
``selfplay sweep --resume SWEEP`` (or the same command again with ``--out SWEEP``) finishes what
is unfinished.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from selfplay.analysis.sweepdata import MANIFEST, read_manifest, run_finished
from selfplay.config import ExperimentConfig
from selfplay.config_files import dump, find_experiment
from selfplay.core.errors import UserError
from selfplay.core.paths import make_folder
from selfplay.loops import load_experiment, make_loop
from selfplay.running.tracking import console

MAX_FOLDER = 100  # longer arm names fall back to arm0, arm1, ...


@dataclass(frozen=True)
class Spec:
    """What a sweep is: the experiment, overrides for every run, the grid and the seed count."""

    experiment: str
    overrides: tuple[str, ...]
    grid: tuple[tuple[str, tuple[str, ...]], ...]  # (key, values) in the order given
    seeds: int

    def as_manifest(self) -> dict:
        return {
            "experiment": self.experiment,
            "overrides": list(self.overrides),
            "grid": {k: list(v) for k, v in self.grid},
            "seeds": self.seeds,
        }


def parse_grid(items: list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``["train.lr=1e-5,3e-5", "loss=grpo,dr_grpo"]`` → ((key, values), ...)."""
    grid: dict[str, tuple[str, ...]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        values = tuple(v.strip() for v in raw.split(",")) if sep else ()
        if not key or not values or any(v == "" for v in values):
            raise UserError(f"--grid {item!r}: give key=value1,value2,... (no empty values)")
        if key == "seed":
            raise UserError("--grid seed: seeds come from --seeds (seed = 0..N-1)")
        if key in grid:
            raise UserError(f"--grid {key}: given twice")
        if len(set(values)) != len(values):
            raise UserError(f"--grid {item!r}: a value is repeated")
        grid[key] = values
    return tuple(grid.items())


def make_spec(experiment: str, overrides: list[str], grid: list[str], seeds: int | None) -> Spec:
    if seeds is None:
        raise UserError("--seeds N is required (runs with seed = 0..N-1)")
    if seeds < 1:
        raise UserError(f"--seeds {seeds}: a sweep needs at least one seed")
    for override in overrides:
        if override.partition("=")[0].strip() == "seed":
            raise UserError(f"{override}: seeds come from --seeds (seed = 0..N-1)")
    path = find_experiment(experiment)  # an unknown experiment: one line, before anything
    if Path(experiment).suffix in (".yaml", ".yml"):
        experiment = str(path.resolve())
    return Spec(experiment, tuple(overrides), parse_grid(grid), seeds)


def arms_of(spec: Spec) -> list[dict]:
    """Every combination of the grid's values, first key slowest: name and overrides."""
    keys = [k for k, _ in spec.grid]
    arms = []
    for values in itertools.product(*[v for _, v in spec.grid]):
        overrides = [f"{k}={v}" for k, v in zip(keys, values, strict=True)]
        arms.append({"name": ",".join(overrides) or "base", "overrides": overrides})
    return arms


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=,+-]", "_", name)


def run_entries(arms: list[dict], seeds: int) -> list[dict]:
    slugs = [_slug(a["name"]) for a in arms]
    if len(set(slugs)) < len(slugs) or any(len(s) > MAX_FOLDER for s in slugs):
        slugs = [f"arm{i}" for i in range(len(arms))]
    return [
        {
            "folder": f"{slug}-seed{seed}",
            "arm": arm["name"],
            "seed": seed,
            "status": "pending",
            "error": None,
        }
        for arm, slug in zip(arms, slugs, strict=True)
        for seed in range(seeds)
    ]


def run_config(manifest: dict, entry: dict) -> ExperimentConfig:
    arm = next(a for a in manifest["arms"] if a["name"] == entry["arm"])
    return load_experiment(
        manifest["experiment"], [*manifest["overrides"], *arm["overrides"], f"seed={entry['seed']}"]
    )


def check(spec: Spec, local: bool) -> tuple[list[dict], list[dict], list[ExperimentConfig]]:
    """Arms, run entries and their configs, every one validated; ``local``: also this
    machine's checks of ``selfplay run`` (the model resolves, the arm fits the devices)."""
    load_experiment(spec.experiment, [*spec.overrides, "seed=0"])  # the overrides alone first
    arms = arms_of(spec)
    manifest = spec.as_manifest() | {"arms": arms}
    entries = run_entries(arms, spec.seeds)
    configs = []
    for entry in entries:
        try:
            configs.append(run_config(manifest, entry))
        except UserError as exc:
            raise UserError(f"arm {entry['arm']}: {exc}") from exc
    from selfplay.engines.models import resolve_model_path
    from selfplay.running.plan import check as check_fits

    for index in range(0, len(configs), spec.seeds):  # one config per arm
        config = configs[index]
        try:
            make_loop(config).close()  # bad games, roles or tasks: one line
            if local:
                resolve_model_path(config.model.path)
                check_fits(config)
        except UserError as exc:
            raise UserError(f"arm {entries[index]['arm']}: {exc}") from exc
    return arms, entries, configs


# ------------------------------------------------------------------ the folder
def write_manifest(sweep_dir: Path, manifest: dict) -> None:
    tmp = sweep_dir / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, sweep_dir / MANIFEST)


def default_folder(config: ExperimentConfig) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(config.run_dir) / f"{config.name}-sweep-{stamp}"


def create(
    spec: Spec,
    out: Path,
    arms: list[dict],
    entries: list[dict],
    configs: list[ExperimentConfig],
    ray: str | None,
) -> Path:
    """The sweep folder, whole or not at all: written under a temporary name, then renamed."""
    out = out.resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not a sweep folder (no {MANIFEST})")
    make_folder(out.parent, f"sweep folder {out}", exist_ok=True)  # /proc/nope: one line
    tmp = out.parent / f".{out.name}.creating-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        for entry, config in zip(entries, configs, strict=True):
            config.run_dir = str(out)
            (tmp / entry["folder"]).mkdir()
            (tmp / entry["folder"] / "config.yaml").write_text(dump(config))
        manifest = spec.as_manifest() | {
            "arms": arms,
            "runs": entries,
            "ray": ray,
            "created": datetime.now().isoformat(timespec="seconds"),
        }
        write_manifest(tmp, manifest)
        if out.exists():
            out.rmdir()  # an empty folder named by --out
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def same_sweep(manifest: dict, spec: Spec) -> bool:
    return all(manifest.get(k) == v for k, v in spec.as_manifest().items())


# ------------------------------------------------------------------ one run
def run_one(run_dir: Path) -> None:
    """Finish one run of a sweep in this process: nothing if it finished, the runner's resume
    if it has a checkpoint, else a fresh start in its folder (as ``selfplay run`` starts)."""
    from selfplay.engines.models import resolve_model_path
    from selfplay.running import inputs
    from selfplay.running.checkpoint import Checkpointer
    from selfplay.running.plan import check as check_fits
    from selfplay.running.runner import build, load_run_config, resume, run

    if run_finished(run_dir):
        return
    if Checkpointer(run_dir).latest() is not None:
        resume(run_dir)
        return
    config = load_run_config(run_dir)
    loop = make_loop(config)
    resolve_model_path(config.model.path)
    check_fits(config)
    inputs.freeze(config, run_dir, loop)  # prompts, plug-ins, versions: as `selfplay run` does
    console.print(f"[bold]run[/] {run_dir}")
    world = build(config, run_dir, resume=(run_dir / "wandb-id").exists(), loop=loop)
    run(world, 0)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:500] if lines else "failed"


def _in_child(run_dir: Path) -> str | None:
    """``run_one`` in a child process; its stderr passes through, its last line is kept as
    the error. None when the child succeeded."""
    process = subprocess.Popen(
        [sys.executable, "-m", "selfplay.running.sweep", str(run_dir)],
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    tail: deque[str] = deque(maxlen=20)

    def forward() -> None:
        for line in process.stderr:
            sys.stderr.write(line)
            tail.append(line)

    thread = threading.Thread(target=forward, daemon=True)
    thread.start()
    try:
        code = process.wait()
    except BaseException:  # Ctrl-C reached the child too; give it a moment to stop
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(30)
        if process.poll() is None:
            process.kill()
        raise
    thread.join(5)
    return None if code == 0 else _last_line("".join(tail)) + f" (exit {code})"


def _here(run_dir: Path) -> str | None:
    try:
        run_one(run_dir)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _ray_job(run_dir: str, cwd: str) -> None:
    """A run as a Ray task (a fresh worker process: ``max_calls=1``)."""
    if os.path.isdir(cwd):
        os.chdir(cwd)  # relative paths in configs mean what they meant to the driver
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    run_one(Path(run_dir))


# ------------------------------------------------------------------ the sweep
def _mark(sweep_dir: Path, manifest: dict, entry: dict, status: str, error: str | None) -> None:
    run_dir = sweep_dir / entry["folder"]
    if status in ("finished", "failed") and error is None and not run_finished(run_dir):
        status, error = "failed", "the run ended without its final metrics row"
    entry["status"], entry["error"] = status, error
    write_manifest(sweep_dir, manifest)


def connect_ray(address: str) -> None:
    from selfplay.engines.ray_pool import connect

    try:
        connect(None if address == "local" else address)
    except ConnectionError as exc:
        raise UserError(
            f"--ray {address}: no Ray cluster there ({exc}); start one with "
            "`ray start --head`, or use --ray local"
        ) from exc


def run_sweep(
    sweep_dir: Path,
    ray: str | None = None,
    cpus_per_run: float = 1.0,
    gpus_per_run: float | None = None,
    processes: bool = True,
) -> list[dict]:
    """Run every unfinished run of the sweep; the manifest's run entries after. ``processes``
    (sequential only): each run in a child process (False: in this one, for tests)."""
    manifest = read_manifest(sweep_dir)
    todo = []
    for entry in manifest["runs"]:
        if run_finished(sweep_dir / entry["folder"]):
            entry["status"], entry["error"] = "finished", None
        else:
            if not (sweep_dir / entry["folder"] / "config.yaml").exists():  # removed by hand
                (sweep_dir / entry["folder"]).mkdir(exist_ok=True)
                config = run_config(manifest, entry)
                config.run_dir = str(sweep_dir)
                (sweep_dir / entry["folder"] / "config.yaml").write_text(dump(config))
            todo.append(entry)
    write_manifest(sweep_dir, manifest)
    total = len(manifest["runs"])
    console.print(
        f"[bold]sweep[/] {sweep_dir}: {total - len(todo)} of {total} runs finished, "
        f"{len(todo)} to run" + (f" on Ray ({ray})" if ray else " one after another")
    )
    if ray:
        _on_ray(sweep_dir, manifest, todo, ray, cpus_per_run, gpus_per_run)
    else:
        for index, entry in enumerate(todo):
            run_dir = sweep_dir / entry["folder"]
            console.print(f"[bold]sweep[/] run {index + 1}/{len(todo)}: {entry['folder']}")
            _mark(sweep_dir, manifest, entry, "running", None)
            try:
                error = _in_child(run_dir) if processes else _here(run_dir)
            except KeyboardInterrupt:
                _mark(sweep_dir, manifest, entry, "interrupted", None)
                console.print(
                    f"sweep interrupted: `selfplay sweep --resume {sweep_dir}` finishes it"
                )
                raise
            _mark(sweep_dir, manifest, entry, "failed" if error else "finished", error)
    return manifest["runs"]


def _on_ray(
    sweep_dir: Path, manifest: dict, todo: list[dict], address: str, cpus: float, gpus: float | None
) -> None:
    import ray
    from ray.exceptions import RayError, RayTaskError

    connect_ray(address)
    if gpus is None:
        gpus = 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0
    task = ray.remote(num_cpus=cpus, num_gpus=gpus, max_calls=1, max_retries=0)(_ray_job)
    pending = {}
    for entry in todo:
        pending[task.remote(str(sweep_dir / entry["folder"]), os.getcwd())] = entry
        entry["status"] = "running"  # or queued on the cluster
    write_manifest(sweep_dir, manifest)
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            entry = pending.pop(done[0])
            try:
                ray.get(done[0])
                error = None
            except RayTaskError as exc:
                cause = exc.cause if exc.cause is not None else exc
                error = f"{type(cause).__name__}: {_last_line(str(cause))}"
            except RayError as exc:  # the worker died (killed, out of memory)
                error = f"{type(exc).__name__}: {_last_line(str(exc))}"
            _mark(sweep_dir, manifest, entry, "failed" if error else "finished", error)
            console.print(
                f"[bold]sweep[/] {entry['folder']}: {entry['status']}"
                + (f" ({error})" if error else "")
            )
    except KeyboardInterrupt:
        for ref, entry in pending.items():
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
            entry["status"] = "interrupted"
        write_manifest(sweep_dir, manifest)
        console.print(f"sweep interrupted: `selfplay sweep --resume {sweep_dir}` finishes it")
        raise


def sweep(
    experiment: str | None = None,
    overrides: list[str] | None = None,
    grid: list[str] | None = None,
    seeds: int | None = None,
    out: Path | None = None,
    resume: Path | None = None,
    ray: str | None = None,
    cpus_per_run: float = 1.0,
    gpus_per_run: float | None = None,
    processes: bool = True,
) -> tuple[Path, list[dict]]:
    """``selfplay sweep``: make the sweep folder (or find it), then run what is unfinished."""
    if resume is not None:
        if experiment or overrides or grid or seeds is not None or out is not None:
            raise UserError(
                "--resume SWEEP continues the sweep as it was made: give no "
                "experiment, overrides, --grid, --seeds or --out"
            )
        sweep_dir = Path(resume).resolve()
        read_manifest(sweep_dir)  # not a sweep folder: one line
    else:
        if not experiment:
            raise UserError("give an experiment (or --resume SWEEP)")
        spec = make_spec(experiment, overrides or [], grid or [], seeds)
        if out is not None and (Path(out) / MANIFEST).is_file():
            sweep_dir = Path(out).resolve()
            if not same_sweep(read_manifest(sweep_dir), spec):
                raise UserError(
                    f"{sweep_dir} holds a different sweep; `selfplay sweep --resume "
                    f"{sweep_dir}` continues that one"
                )
        else:
            arms, entries, configs = check(spec, local=ray is None)
            if ray:
                connect_ray(ray)  # no cluster there: one line, before the folder exists
            sweep_dir = create(
                spec, Path(out) if out else default_folder(configs[0]), arms, entries, configs, ray
            )
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    entries = run_sweep(sweep_dir, ray, cpus_per_run, gpus_per_run, processes)
    _report(sweep_dir)
    return sweep_dir, entries


def _report(sweep_dir: Path) -> None:
    """The sweep's page, without PNGs (``selfplay analyze SWEEP`` adds them); a failure is a
    warning (the runs are safe on disk)."""
    try:
        from selfplay.analysis.sweep_page import analyze_sweep

        page = analyze_sweep(sweep_dir, pngs=False)
        console.print(f"sweep page: {page}")
    except Exception as exc:
        console.print(
            f"[yellow]sweep page not written ({type(exc).__name__}: {exc}); "
            f"`selfplay analyze {sweep_dir}` retries[/]"
        )


def print_entries(sweep_dir: Path, entries: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"sweep: {sweep_dir}")
    for column in ("run folder", "arm", "seed", "status", "error"):
        table.add_column(column)
    for e in entries:
        table.add_row(e["folder"], e["arm"], str(e["seed"]), e["status"], e.get("error") or "")
    Console().print(table)


def main(argv: list[str]) -> int:
    """``python -m selfplay.running.sweep RUN_DIR``: one run of a sweep (the child process)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers

    transformers.logging.set_verbosity_error()
    try:
        run_one(Path(argv[0]))
    except UserError as exc:
        print(f"selfplay: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
