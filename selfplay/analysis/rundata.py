"""A run folder as data: config, metrics rows, episodes, generated tasks, pools, checkpoints.

Everything is read tolerantly: a killed run may end in a half-written JSON line, miss its final
row, or have no checkpoints; what is there is returned and what is broken is counted in
``problems`` (shown on the page), never raised.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from selfplay.core import yamlfile
from selfplay.core.errors import UserError


def read_jsonl(path: Path, problems: list[str] | None = None) -> list[dict]:
    """Rows of a JSONL file; unreadable lines (a killed writer's last line) are skipped."""
    rows, bad = [], 0
    try:
        text = path.read_text()
    except OSError:
        return []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(row, dict):
            rows.append(row)
    if bad and problems is not None:
        problems.append(f"{path.name}: {bad} unreadable line(s) skipped (a half-written run?)")
    return rows


@dataclass
class RunData:
    path: Path
    problems: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, path: Path | str) -> RunData:
        path = Path(path)
        if not path.is_dir():
            raise UserError(f"{path} is not a run folder (no such directory)")
        if not (path / "config.yaml").exists():
            raise UserError(f"{path} is not a run folder (no config.yaml)")
        return cls(path)

    @property
    def name(self) -> str:
        return self.path.name

    @cached_property
    def config_text(self) -> str:
        path = self.path / "config.yaml"
        return path.read_text() if path.exists() else ""

    @cached_property
    def config(self) -> dict:
        if not self.config_text:  # a folder built by hand (tests) rather than by the runner
            return {}
        # a user may edit a run's config.yaml: the same strict reading as an experiment file
        data = yamlfile.loads(self.config_text, str(self.path / "config.yaml"))
        if not isinstance(data, dict):
            raise UserError(f"{self.path / 'config.yaml'}: not a YAML mapping")
        return data

    @property
    def loop(self) -> str:
        return str(self.config.get("loop", "?"))

    @cached_property
    def metrics(self) -> list[dict]:
        rows = read_jsonl(self.path / "metrics.jsonl", self.problems)
        return [r for r in rows if isinstance(r.get("step"), int | float)]

    @property
    def training_rows(self) -> list[dict]:
        return [r for r in self.metrics if not r.get("final")]

    @property
    def finished(self) -> bool:
        return any(r.get("final") for r in self.metrics)

    def episode_files(self) -> list[Path]:
        folder = self.path / "episodes"
        return sorted(folder.glob("step-*.jsonl")) if folder.is_dir() else []

    def iter_episodes(self) -> Iterator[dict]:
        for path in self.episode_files():
            yield from read_jsonl(path, self.problems)

    @cached_property
    def episodes(self) -> list[dict]:
        """Every episode, its token-id lists dropped (analysis needs lengths, not ids)."""
        slim = []
        for episode in self.iter_episodes():
            for turn in episode.get("turns") or []:
                turn["completion_ids"] = [0] * len(turn.get("completion_ids") or [])
                for key in ("prompt_ids", "logprobs", "loss_mask"):
                    turn.pop(key, None)
            slim.append(episode)
        return slim

    @cached_property
    def tasks(self) -> list[dict]:
        return read_jsonl(self.path / "tasks.jsonl", self.problems)

    @cached_property
    def evaluations(self) -> list[dict]:
        """Rows `selfplay evaluate` appended to evaluations.jsonl."""
        return read_jsonl(self.path / "evaluations.jsonl", self.problems)

    @cached_property
    def crossplay(self) -> dict | None:
        path = self.path / "crossplay" / "crossplay.json"
        try:
            return json.loads(path.read_text()) if path.exists() else None
        except json.JSONDecodeError:
            self.problems.append("crossplay/crossplay.json: unreadable")
            return None

    @cached_property
    def pools(self) -> dict[int, list[dict]]:
        folder = self.path / "pools"
        pools = {}
        for path in sorted(folder.glob("iter-*.jsonl")) if folder.is_dir() else []:
            try:
                pools[int(path.stem.split("-")[1])] = read_jsonl(path, self.problems)
            except ValueError:
                continue
        return pools

    def checkpoints(self) -> list[tuple[int, Path]]:
        """(next step, folder) of every saved checkpoint, archived snapshots included."""
        root = self.path / "checkpoints"
        found: dict[int, Path] = {}
        for folder in [root / "archive", root]:
            for path in folder.glob("step-*") if folder.is_dir() else []:
                if (path / "state.pt").exists():
                    found.setdefault(int(path.name.split("-")[1]), path)
        return sorted(found.items())

    def require_episodes(self) -> None:
        if not self.episode_files() and not self.tasks:
            raise UserError(f"{self.path} has no episodes yet (episodes/ is empty)")
