"""The task buffer: what every loop knows about each task it can draw (docs/algorithms.md#samplers).

A task is whatever a loop draws and grades as a group: a reasoning-gym item, a family ×
difficulty level, a generated question, a document, a game. Per task the buffer keeps

- ``attempts`` and ``successes`` (lifetime; successes may be fractional scores in [0, 1]),
- ``p_hat``: the recent pass rate, an exponential moving average over the task's groups
  (``ema`` = weight of the newest group; 1.0 = the last group only), and ``p_prev`` (its value
  before the newest group) for learning progress |Δp̂|, and ``p_last`` (the newest group's rate),
- ``last_seen``: the step the task was last drawn (−1: never; PLR's staleness),
- ``score``: mean |advantage| of its latest group (PLR's score),
- ``family`` and ``difficulty`` labels (difficulty NaN when unknown) and the task's ``arm``,
  its family × difficulty level ("chain_sum@2"), with the arm's own p̂ (an EMA over the groups
  of all its tasks: what a sampler falls back on for a task seen rarely or never),
- ``retired``: ScaleRL's rule: set once p̂ ≥ the retire threshold; a retired task is never drawn.

Every column is a numpy array, so samplers compute over 100,000 tasks without a Python loop;
the id → index dict is touched only by ``add``/``record``. Every group recorded is also kept in
an append-only history (step, task, successes, attempts, score) for analysis, capped at
``history_limit`` rows (the oldest are dropped).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

COLUMNS = {
    "attempts": np.int64,
    "successes": np.float64,
    "p_hat": np.float64,
    "p_prev": np.float64,
    "p_last": np.float64,
    "last_seen": np.int64,
    "score": np.float64,
    "family": np.int32,
    "arm": np.int32,
    "difficulty": np.float64,
    "retired": np.bool_,
}
HISTORY = np.dtype(
    [
        ("step", np.int64),
        ("task", np.int64),
        ("successes", np.float64),
        ("attempts", np.int64),
        ("score", np.float64),
    ]
)
UNSEEN = {"p_hat": np.nan, "p_prev": np.nan, "p_last": np.nan, "last_seen": -1, "score": np.nan}


class TaskBuffer:
    """Per-task statistics in numpy columns; see the module docstring."""

    def __init__(self, ema: float = 0.5, history_limit: int = 200_000) -> None:
        if not 0 < ema <= 1:
            raise ValueError(f"ema must be in (0, 1], got {ema}")
        self.ema = ema
        self.history_limit = history_limit
        self.ids: list[str] = []
        self.families: list[str] = []  # family code → name
        self._index: dict[str, int] = {}
        self._family_code: dict[str, int] = {}
        self.arms: list[str] = []  # arm code → "family@level"
        self._arm_code: dict[str, int] = {}
        self.arm_p_hat = np.zeros(0)
        self.arm_attempts = np.zeros(0, np.int64)
        self._size = 0
        self._columns = {name: np.zeros(0, dtype) for name, dtype in COLUMNS.items()}
        self._history = np.zeros(0, HISTORY)
        self._history_rows = 0
        self.version = 0  # bumped when tasks are added
        self.updates = 0  # bumped by every record (samplers cache what depends on the scores)

    # ------------------------------------------------------------------ columns
    def __len__(self) -> int:
        return self._size

    def __contains__(self, task_id: str) -> bool:
        return task_id in self._index

    def column(self, name: str) -> np.ndarray:
        """A view of one column over the tasks added so far."""
        return self._columns[name][: self._size]

    attempts = property(lambda self: self.column("attempts"))
    successes = property(lambda self: self.column("successes"))
    p_hat = property(lambda self: self.column("p_hat"))
    p_prev = property(lambda self: self.column("p_prev"))
    last_seen = property(lambda self: self.column("last_seen"))
    score = property(lambda self: self.column("score"))
    family = property(lambda self: self.column("family"))
    arm = property(lambda self: self.column("arm"))
    difficulty = property(lambda self: self.column("difficulty"))
    retired = property(lambda self: self.column("retired"))

    @property
    def seen(self) -> np.ndarray:
        return self.attempts > 0

    @property
    def pass_rate(self) -> np.ndarray:
        """Lifetime successes / attempts (NaN for unseen tasks)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.seen, self.successes / np.maximum(self.attempts, 1), np.nan)

    @property
    def progress(self) -> np.ndarray:
        """Absolute learning progress |p̂ − p̂ before the last group| (NaN until seen twice)."""
        return np.abs(self.p_hat - self.p_prev)

    # ------------------------------------------------------------------ adding tasks
    def _grow(self, needed: int) -> None:
        capacity = len(self._columns["attempts"])
        if needed <= capacity:
            return
        new_capacity = max(needed, 2 * capacity, 64)
        for name, old in self._columns.items():
            grown = np.zeros(new_capacity, old.dtype)
            grown[: self._size] = old[: self._size]
            self._columns[name] = grown

    def family_code(self, family: str) -> int:
        code = self._family_code.get(family)
        if code is None:
            code = self._family_code[family] = len(self.families)
            self.families.append(family)
        return code

    def arm_code(self, family: str, difficulty: float) -> int:
        label = f"{family}@{level_label(difficulty)}"
        code = self._arm_code.get(label)
        if code is None:
            code = self._arm_code[label] = len(self.arms)
            self.arms.append(label)
            self.arm_p_hat = np.append(self.arm_p_hat, np.nan)
            self.arm_attempts = np.append(self.arm_attempts, 0)
        return code

    def add(self, task_id: str, family: str = "", difficulty: float = math.nan) -> int:
        """Add one task (adding a known id again returns its index and changes nothing)."""
        return int(self.add_many([task_id], [family], [difficulty])[0])

    def add_many(
        self, task_ids: list[str], families: list[str], difficulties: list[float]
    ) -> np.ndarray:
        """Add tasks in bulk (fast for 100,000); returns their indices."""
        indices = np.empty(len(task_ids), np.int64)
        new = [i for i, task_id in enumerate(task_ids) if task_id not in self._index]
        self._grow(self._size + len(new))
        start = self._size
        for offset, i in enumerate(new):
            self._index[task_ids[i]] = start + offset
            self.ids.append(task_ids[i])
        end = start + len(new)
        if new:
            chosen = np.asarray(new)
            codes = [self.family_code(families[i]) for i in new]
            self._columns["family"][start:end] = codes
            self._columns["arm"][start:end] = [
                self.arm_code(families[i], float(difficulties[i])) for i in new
            ]
            self._columns["difficulty"][start:end] = np.asarray(difficulties, float)[chosen]
            for name, value in UNSEEN.items():
                self._columns[name][start:end] = value
            self._size = end
            self.version += 1
        for i, task_id in enumerate(task_ids):
            indices[i] = self._index[task_id]
        return indices

    def index(self, task_id: str) -> int:
        try:
            return self._index[task_id]
        except KeyError:
            raise KeyError(f"task {task_id!r} is not in the buffer") from None

    # ------------------------------------------------------------------ recording results
    def record(
        self,
        task: str | int,
        successes: float,
        attempts: int,
        step: int,
        mean_abs_adv: float = math.nan,
    ) -> None:
        """One graded group of ``attempts`` answers, ``successes`` of them right (or the sum of
        their scores in [0, 1]); ``mean_abs_adv`` is PLR's score for the group."""
        if attempts <= 0:
            raise ValueError(f"attempts must be positive, got {attempts}")
        i = task if isinstance(task, int | np.integer) else self.index(task)
        cols = self._columns
        rate = successes / attempts
        self.updates += 1
        cols["attempts"][i] += attempts
        cols["successes"][i] += successes
        old = cols["p_hat"][i]
        cols["p_prev"][i] = old
        cols["p_hat"][i] = rate if np.isnan(old) else (1 - self.ema) * old + self.ema * rate
        cols["p_last"][i] = rate
        arm = cols["arm"][i]
        old_arm = self.arm_p_hat[arm]
        self.arm_p_hat[arm] = (
            rate if np.isnan(old_arm) else (1 - self.ema) * old_arm + self.ema * rate
        )
        self.arm_attempts[arm] += attempts
        cols["last_seen"][i] = step
        if not np.isnan(mean_abs_adv):
            cols["score"][i] = mean_abs_adv
        self._append_history(step, int(i), successes, attempts, mean_abs_adv)

    def retire(self, threshold: float | None, min_attempts: int = 1) -> int:
        """ScaleRL: retire every task whose p̂ ≥ ``threshold`` after ≥ ``min_attempts``
        attempts; returns how many were newly retired (a retired task stays retired)."""
        if threshold is None:
            return 0
        with np.errstate(invalid="ignore"):
            due = (self.p_hat >= threshold) & (self.attempts >= min_attempts) & ~self.retired
        self._columns["retired"][: self._size] |= due
        return int(due.sum())

    def _append_history(self, step, task, successes, attempts, score) -> None:
        if self.history_limit <= 0:
            return
        if self._history_rows == len(self._history):
            if self._history_rows >= self.history_limit:  # drop the oldest half
                keep = self._history[self._history_rows // 2 : self._history_rows].copy()
                self._history = np.zeros(self.history_limit, HISTORY)
                self._history[: len(keep)] = keep
                self._history_rows = len(keep)
            else:
                grown = np.zeros(min(max(64, 2 * len(self._history)), self.history_limit), HISTORY)
                grown[: self._history_rows] = self._history[: self._history_rows]
                self._history = grown
        self._history[self._history_rows] = (step, task, successes, attempts, score)
        self._history_rows += 1

    @property
    def history(self) -> np.ndarray:
        """Every recorded group (oldest dropped past ``history_limit``): a structured array."""
        return self._history[: self._history_rows]

    # ------------------------------------------------------------------ views
    def table(self) -> list[dict]:
        """One row per task: the run folder's ``curriculum/tasks.csv``."""
        rows = []
        pass_rate = self.pass_rate
        for i, task_id in enumerate(self.ids):
            rows.append(
                {
                    "task_id": task_id,
                    "family": self.families[self.family[i]],
                    "arm": self.arms[self.arm[i]],
                    "difficulty": _clean(self.difficulty[i]),
                    "attempts": int(self.attempts[i]),
                    "successes": float(self.successes[i]),
                    "pass_rate": _clean(pass_rate[i]),
                    "p_hat": _clean(self.p_hat[i]),
                    "progress": _clean(self.progress[i]),
                    "score": _clean(self.score[i]),
                    "last_seen": int(self.last_seen[i]),
                    "retired": bool(self.retired[i]),
                }
            )
        return rows

    def write_csv(self, path: Path) -> Path:
        """Write the per-task table atomically (a reader never sees half a file)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        rows = self.table()
        with tmp.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["task_id"])
            writer.writeheader()
            writer.writerows(rows)
        tmp.replace(path)
        return path

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        return {
            "ema": self.ema,
            "history_limit": self.history_limit,
            "ids": list(self.ids),
            "families": list(self.families),
            "arms": list(self.arms),
            "arm_p_hat": self.arm_p_hat.copy(),
            "arm_attempts": self.arm_attempts.copy(),
            "columns": {name: self.column(name).copy() for name in COLUMNS},
            "history": self.history.copy(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.ema, self.history_limit = state["ema"], state["history_limit"]
        self.ids = list(state["ids"])
        self.families = list(state["families"])
        self._index = {task_id: i for i, task_id in enumerate(self.ids)}
        self._family_code = {name: i for i, name in enumerate(self.families)}
        self.arms = list(state["arms"])
        self._arm_code = {name: i for i, name in enumerate(self.arms)}
        self.arm_p_hat = np.array(state["arm_p_hat"], float)
        self.arm_attempts = np.array(state["arm_attempts"], np.int64)
        self._size = len(self.ids)
        self._columns = {name: np.array(state["columns"][name], COLUMNS[name]) for name in COLUMNS}
        self._history = np.array(state["history"], HISTORY)
        self._history_rows = len(self._history)
        self.version += 1
        self.updates += 1


def level_label(difficulty: float) -> str:
    """A difficulty as a label: "2" for 2.0, "1.5", "?" when unknown."""
    if math.isnan(difficulty):
        return "?"
    return str(int(difficulty)) if float(difficulty).is_integer() else f"{difficulty:g}"


def _clean(value: float) -> float | None:
    return None if np.isnan(value) else float(value)
