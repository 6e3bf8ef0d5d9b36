"""A sweep folder as data: its manifest (``sweep.json``) and the run folders it lists.

``selfplay sweep`` (selfplay.running.sweep) writes the folder; this module reads it back, for
``selfplay analyze SWEEP`` and for the sweep's own resume. The manifest::

    {"experiment": "rlvr-sanity",            # as given: a name, or a YAML path made absolute
     "overrides": ["train.steps=50"],         # applied to every run
     "grid": {"train.lr": ["1e-5", "3e-5"]},  # key → values, in the order given
     "seeds": 3,                              # seed = 0 .. seeds-1 (the `seed` config key)
     "arms": [{"name": "train.lr=1e-5", "overrides": ["train.lr=1e-5"]}, ...],
     "runs": [{"folder": "train.lr=1e-5-seed0", "arm": "train.lr=1e-5", "seed": 0,
               "status": "finished", "error": null}, ...],
     "ray": null, "created": "2026-11-24T12:00:00"}

A run's status in the manifest is what the sweep last saw (pending, running, finished, failed);
whether a run is finished is read from its folder (a final row in metrics.jsonl), so a killed
sweep's manifest never hides work that is done, nor claims work that is not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from selfplay.analysis.rundata import RunData, read_jsonl
from selfplay.core.errors import UserError

MANIFEST = "sweep.json"
STATUSES = ("pending", "running", "finished", "failed", "interrupted")


def is_sweep(path: Path | str) -> bool:
    return (Path(path) / MANIFEST).is_file()


def run_finished(run_dir: Path) -> bool:
    """A final row in metrics.jsonl: the run wrote its end-of-run evaluation (runner.run)."""
    return any(row.get("final") for row in read_jsonl(run_dir / "metrics.jsonl"))


def read_manifest(path: Path) -> dict:
    """The manifest of the sweep folder ``path``, checked; a UserError in one line otherwise."""
    if not path.is_dir():
        raise UserError(f"{path} is not a sweep folder (no such directory)")
    file = path / MANIFEST
    if not file.is_file():
        raise UserError(f"{path} is not a sweep folder (no {MANIFEST})")
    try:
        data = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{file}: unreadable ({exc})") from exc
    problem = _problem(data)
    if problem:
        raise UserError(f"{file}: {problem}")
    return data


def _problem(data) -> str | None:
    if not isinstance(data, dict):
        return "not a JSON object"
    for key, kind in (
        ("experiment", str),
        ("grid", dict),
        ("seeds", int),
        ("arms", list),
        ("runs", list),
        ("overrides", list),
    ):
        if not isinstance(data.get(key), kind):
            return f"missing or malformed {key!r}"
    arms = {a.get("name") for a in data["arms"] if isinstance(a, dict)}
    for run in data["runs"]:
        if not (
            isinstance(run, dict)
            and isinstance(run.get("folder"), str)
            and run.get("arm") in arms
            and isinstance(run.get("seed"), int)
        ):
            return f"malformed run entry {run!r}"
        folder = Path(run["folder"])
        if folder.is_absolute() or len(folder.parts) != 1 or run["folder"] in (".", ".."):
            return f"run folder {run['folder']!r} must be a plain name inside the sweep folder"
    return None


@dataclass
class SweepData:
    path: Path

    @classmethod
    def open(cls, path: Path | str) -> SweepData:
        sweep = cls(Path(path))
        sweep.manifest  # noqa: B018 (read and checked now: bad input fails before any work)
        return sweep

    @cached_property
    def manifest(self) -> dict:
        return read_manifest(self.path)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def arms(self) -> list[str]:
        return [arm["name"] for arm in self.manifest["arms"]]

    @property
    def entries(self) -> list[dict]:
        return self.manifest["runs"]

    @cached_property
    def runs(self) -> dict[str, RunData]:
        """Run folder name → its data (folders not made yet are left out)."""
        return {
            e["folder"]: RunData(self.path / e["folder"])
            for e in self.entries
            if (self.path / e["folder"] / "config.yaml").exists()
        }

    def runs_of(self, arm: str) -> dict[int, RunData]:
        """seed → run of one arm (the runs that exist)."""
        return {
            e["seed"]: self.runs[e["folder"]]
            for e in self.entries
            if e["arm"] == arm and e["folder"] in self.runs
        }
