"""Run logging: metrics.jsonl, episodes on disk before training, wandb, a rich progress bar."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
import uuid
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from selfplay.types import Collected, Episode, TaskRow

console = Console(stderr=True)


def episode_record(episode: Episode, step: int, tokenizer=None) -> dict:
    record = dataclasses.asdict(episode)
    record["step"] = step
    # p̂ and `correct` are typed fields (ADPO, the run page read them); on disk they stay
    # where docs/run-folder.md puts them
    for key in ("pass_rate", "correct"):
        value = record.pop(key)
        if value is not None:
            record["info"][key] = value
    for turn in record["turns"]:
        if turn.get("choice") is None:  # a written reply: its row as before scored moves
            turn.pop("choice", None)
        if tokenizer is not None and not turn.get("prompt_text"):
            turn["prompt_text"] = tokenizer.decode(turn["prompt_ids"])
    return record


def episode_metrics(episodes: list[Episode]) -> dict[str, float]:
    """What every loop's step reports: the mean reward of each role, and the mean completion
    length and number of model turns."""
    metrics: dict[str, float] = {}
    for role in sorted({role for e in episodes for role in e.rewards}):
        values = [e.rewards[role] for e in episodes if role in e.rewards]
        metrics[f"reward/{role}"] = sum(values) / len(values)
    turns = [t for e in episodes for t in e.turns]
    if turns:
        tokens = sum(len(t.completion_ids) for t in turns)
        metrics["rollout/completion_tokens"] = tokens / len(turns)
        metrics["rollout/turns"] = float(len(turns))
    return metrics


class RunLogger:
    def __init__(self, run_dir: Path, config, resume: bool = False) -> None:
        self.run_dir = run_dir
        self.metrics_path = run_dir / "metrics.jsonl"
        self.episodes_dir = run_dir / "episodes"
        self.tasks_path = run_dir / "tasks.jsonl"
        self.episodes_dir.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.wandb = None
        self.progress: Progress | None = None
        self.task = None
        self._start_wandb(resume)

    # ---------------------------------------------------------------- resume hygiene
    def truncate_to(self, next_step: int, eval_files: tuple[str, ...] = ()) -> None:
        """Drop rows and set aside episodes of steps ≥ next_step (they will be redone); also
        the rows of the loop's ``eval_files``.

        A crash while a line was appended (SIGKILL, a full disk) can leave it cut short: such a
        line is not JSON, is dropped, and the console says so in one line per file. Episode
        files are written whole (``write_episodes``); one whose last line was cut anyway (a
        copy of the run folder stopped midway) keeps its whole lines, and says so too."""
        appended = (self.metrics_path, self.tasks_path, self.run_dir / "sync.jsonl",
                    *(self.run_dir / name for name in eval_files))
        for path in appended:
            _keep_rows_before(path, next_step)  # the later ones are written again when redone
        interrupted = self.episodes_dir / "interrupted"
        for path in sorted(self.episodes_dir.glob("step-*.jsonl")):
            if int(path.stem.split("-")[1]) >= next_step:
                interrupted.mkdir(exist_ok=True)
                shutil.move(str(path), interrupted / f"{path.stem}-{int(time.time())}.jsonl")
            else:
                _drop_cut_tail(path)
        for leftover in self.episodes_dir.glob("step-*.tmp"):  # a write the crash cut short
            leftover.unlink()

    # ---------------------------------------------------------------- writing
    def write_episodes(self, step: int, episodes: list[Episode], tokenizer=None) -> Path:
        """Written (and fsynced) before the learner sees them: nothing generated is lost. The
        file appears whole or not at all (a failed write, e.g. a full disk, leaves nothing)."""
        path = self.episodes_dir / f"step-{step:06d}.jsonl"
        tmp = path.with_suffix(".tmp")
        try:
            with tmp.open("w") as handle:
                for episode in episodes:
                    handle.write(json.dumps(episode_record(episode, step, tokenizer)) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return path

    def write_collected(self, step: int, collected: Collected, tokenizer=None) -> None:
        """A step's episodes, task rows and loop files, before anything trains on them."""
        self.write_episodes(step, collected.episodes, tokenizer)
        self.write_tasks(collected.tasks)
        self.write_files(collected.files)

    def write_tasks(self, rows: list[TaskRow]) -> None:
        """Append generated tasks to ``tasks.jsonl`` (schema: docs/run-folder.md)."""
        if not rows:
            return
        with self.tasks_path.open("a") as handle:
            handle.write("".join(json.dumps(dataclasses.asdict(row)) + "\n" for row in rows))
            handle.flush()
            os.fsync(handle.fileno())

    def append_rows(self, files: dict[str, list[dict]], declared: tuple[str, ...]) -> None:
        """Append an evaluation's rows to run-folder JSONL files (``Loop.evaluation_rows``),
        each one of the loop's declared ``eval_files``."""
        for relative, rows in files.items():
            if relative not in declared:
                raise ValueError(f"evaluation rows for {relative!r}, which the loop's "
                                 f"spec.eval_files does not declare ({', '.join(declared)})")
            path = self.run_dir / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as handle:
                handle.write("".join(json.dumps(row) + "\n" for row in rows))
                handle.flush()
                os.fsync(handle.fileno())

    def write_files(self, files: dict[str, list[dict]]) -> None:
        """JSONL files of the run folder a step produced (relative paths), written atomically."""
        for relative, rows in files.items():
            path = self.run_dir / relative
            if self.run_dir.resolve() not in path.resolve().parents:
                raise ValueError(f"a loop may write only inside the run folder, not {relative}")
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            try:
                tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
                os.replace(tmp, path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise

    def log_sync(self, step: int, figures: dict[str, float]) -> None:
        """One weight sync: seconds, bytes moved, the probe's log-prob gap (``sync.jsonl``)."""
        with (self.run_dir / "sync.jsonl").open("a") as handle:
            handle.write(json.dumps({"step": step, "time": time.time(), **figures}) + "\n")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, "time": time.time(), **metrics}
        with self.metrics_path.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        if self.wandb is not None:
            self.wandb.log(metrics, step=step)

    # ---------------------------------------------------------------- wandb
    def _start_wandb(self, resume: bool) -> None:
        mode = self.config.logging.wandb
        if mode == "disabled":
            return
        try:
            import wandb
        except ImportError:
            return
        id_file = self.run_dir / "wandb-id"
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
        id_file.write_text(run_id)
        os.environ.setdefault("WANDB_SILENT", "true")
        self.wandb = wandb.init(
            project=self.config.logging.project,
            name=self.run_dir.name,
            id=run_id,
            dir=str(self.run_dir),
            mode=mode,
            config=self.config.model_dump(mode="json"),
            resume="allow" if resume else None,
            reinit="finish_previous",
        )

    # ---------------------------------------------------------------- progress
    def start_progress(self, total: int, done: int) -> None:
        if not self.config.logging.progress:
            return
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("step {task.completed}/{task.total}"),
            TextColumn("reward {task.fields[reward]}"),
            TextColumn("{task.fields[tps]} tok/s"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
        )
        self.progress.start()
        self.task = self.progress.add_task(
            self.config.name, total=total, completed=done, reward="-", tps="-"
        )

    def advance(self, reward: float | None, tokens_per_s: float) -> None:
        if self.progress is not None:
            self.progress.update(
                self.task,
                advance=1,
                reward="-" if reward is None else f"{reward:.3f}",
                tps=f"{tokens_per_s:.0f}",
            )

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
        if self.wandb is not None:
            self.wandb.finish()


def _row_step(line: str) -> int | None:
    """A row's step (-1 when it has none); None for a line that is not JSON (cut short)."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    try:
        return int(row["step"])
    except (ValueError, KeyError, TypeError):
        return -1


def _whole_lines(path: Path) -> list[str]:
    # bytes: a line cut inside a multi-byte character must not stop the reading
    return [line for line in path.read_bytes().decode("utf-8", "replace").splitlines()
            if line.strip()]


def _rewrite(path: Path, lines: list[str]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    os.replace(tmp, path)


def _keep_rows_before(path: Path, next_step: int) -> None:
    """Keep the rows of ``path`` whose step is below ``next_step``; drop cut-short lines."""
    if not path.exists():
        return
    lines = _whole_lines(path)
    steps = [_row_step(line) for line in lines]
    cut = steps.count(None)
    if cut:
        console.print(f"{path}: dropped {cut} line{'s' if cut > 1 else ''} a crash cut short",
                      soft_wrap=True, markup=False)
    _rewrite(path, [line for line, step in zip(lines, steps, strict=True)
                    if step is not None and step < next_step])


def _drop_cut_tail(path: Path) -> None:
    """An episode file whose last line was cut keeps its whole lines (and says so)."""
    with path.open("rb") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() == 0:
            return
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return  # written whole: the usual case, read no further
    lines = _whole_lines(path)
    whole = [line for line in lines if _row_step(line) is not None]
    console.print(f"{path}: its last line was cut short (a crash while it was copied or "
                  f"written); kept its {len(whole)} whole episodes", soft_wrap=True, markup=False)
    _rewrite(path, whole)


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
