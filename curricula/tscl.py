"""Teacher-Student Curriculum Learning (Matiisen et al. 2017), the ``tscl`` sampler: a bandit
over arms (family × difficulty level, or family) whose reward is the arm's score change since it
was last drawn (docs/algorithms.md#samplers; the other samplers are in ``samplers.py``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from curricula.buffer import TaskBuffer
from curricula.samplers import Sampler
from curricula.settings import CurriculumSettings


@dataclass
class Arms:
    labels: list[str]
    code: np.ndarray  # arm of every task


class TsclSampler(Sampler):
    """Teacher-Student Curriculum Learning: a bandit over arms on absolute learning progress."""

    name = "tscl"

    def __init__(self, settings: CurriculumSettings, seed: int = 0) -> None:
        super().__init__(settings, seed)
        self.q: dict[str, float] = {}  # arm → Q (EMA of Δscore)
        self.last_score: dict[str, float] = {}  # arm → score when it was last observed
        self.rewards: dict[str, list[float]] = {}  # arm → its last `tscl_window` rewards

    def arms(self, buffer: TaskBuffer) -> Arms:
        """The buffer's family × level arms, or its families (``tscl_arms: family``)."""
        if self.settings.tscl_arms == "level":
            return Arms(buffer.arms, buffer.arm)
        return Arms(buffer.families, buffer.family)

    def arm_tasks(self, buffer: TaskBuffer, arm: int) -> np.ndarray:
        """The tasks of one arm (grouped once per task set, then sliced)."""
        key = (buffer.version, self.settings.tscl_arms)
        if getattr(self, "_groups_key", None) != key:
            code = self.arms(buffer).code
            self._grouped = np.argsort(code, kind="stable")
            self._starts = np.concatenate([[0], np.cumsum(np.bincount(code))])
            self._groups_key = key
        return self._grouped[self._starts[arm] : self._starts[arm + 1]]

    def arm_values(self, labels: list[str]) -> np.ndarray:
        """Each arm's value for the greedy choice: |Q| (Thompson: |one of its recent rewards|,
        drawn afresh at each call), +inf for arms never observed (the exploration prior)."""
        if self.settings.tscl_mode == "thompson":
            return self.thompson_draw(*self.windows(labels))
        return np.asarray([abs(self.q[lb]) if lb in self.q else math.inf for lb in labels], float)

    def windows(self, labels: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Each arm's recent rewards as a zero-padded matrix, and how many each has."""
        windows = [self.rewards.get(label) or [] for label in labels]
        lengths = np.asarray([len(w) for w in windows], np.int64)
        padded = np.zeros((len(labels), max(int(lengths.max(initial=0)), 1)))
        for row, window in enumerate(windows):
            padded[row, : len(window)] = window
        return padded, lengths

    def thompson_draw(self, padded: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """|one reward drawn at random from each arm's window|; +inf for empty windows."""
        picks = (self.rng.random(len(lengths)) * np.maximum(lengths, 1)).astype(np.int64)
        values = np.abs(padded[np.arange(len(lengths)), picks])
        return np.where(lengths > 0, values, math.inf)

    def choose_arm(self, available: np.ndarray, values) -> int:
        """ε-greedy on |Q| or a Thompson draw; ``values()`` gives each arm's value (a fresh
        draw for Thompson); ties at random."""
        arms = np.flatnonzero(available)
        explore = self.settings.tscl_epsilon if self.settings.tscl_mode == "epsilon" else 0.0
        if self.rng.random() < explore:
            return int(arms[self.rng.integers(len(arms))])
        chosen = values()[arms]
        best = np.flatnonzero(chosen == chosen.max())
        return int(arms[best[self.rng.integers(len(best))]])

    def probabilities(self, buffer, step, exclude=None) -> np.ndarray:
        """ε spread over the available arms plus 1 − ε on the best (Thompson: one draw's best);
        uniform within an arm."""
        info = self.arms(buffer)
        active = self.active(buffer, exclude)
        per_arm = np.bincount(info.code[active], minlength=len(info.labels))
        available = per_arm > 0
        result = np.zeros(len(buffer))
        if not available.any():
            return result
        values = self.arm_values(info.labels)
        values[~available] = -math.inf
        best = np.flatnonzero(values == values.max())
        eps = self.settings.tscl_epsilon if self.settings.tscl_mode == "epsilon" else 0.0
        arm_p = np.zeros(len(info.labels))
        arm_p[available] += eps / available.sum()
        arm_p[best] += (1 - eps) / len(best)
        result[active] = arm_p[info.code[active]] / per_arm[info.code[active]]
        return result

    def sample(self, buffer, n, step, exclude=None, replace=False) -> np.ndarray:
        """Arms slot by slot (an arm whose tasks are used up drops out), then tasks uniformly
        within each chosen arm."""
        if len(buffer) == 0 or n <= 0:
            return np.zeros(0, np.int64)
        info = self.arms(buffer)
        active = self.active(buffer, exclude)
        remaining = np.bincount(info.code[active], minlength=len(info.labels))
        slots = np.zeros(len(info.labels), np.int64)
        if self.settings.tscl_mode == "epsilon":  # |Q| does not change within a batch
            fixed = self.arm_values(info.labels)
            values = lambda: fixed  # noqa: E731
        else:
            padded, lengths = self.windows(info.labels)
            values = lambda: self.thompson_draw(padded, lengths)  # noqa: E731
        for _ in range(n):
            available = remaining > 0
            if not available.any():
                break
            arm = self.choose_arm(available, values)
            slots[arm] += 1
            if not replace:
                remaining[arm] -= 1
        chosen = []
        for arm in np.flatnonzero(slots):
            pool = self.arm_tasks(buffer, arm)
            pool = pool[active[pool]]
            if replace:
                chosen.append(pool[self.rng.integers(len(pool), size=slots[arm])])
            else:
                chosen.append(pool[self.rng.permutation(len(pool))[: slots[arm]]])
        picked = np.concatenate(chosen) if chosen else np.zeros(0, np.int64)
        picked = picked[self.rng.permutation(len(picked))]  # no arm order within the batch
        return picked if replace else self.fill(buffer, picked, n, active, exclude)

    def observe(self, buffer: TaskBuffer, indices: np.ndarray, step: int) -> None:
        """Per arm drawn: score x = mean pass rate of its groups just graded; reward
        r = x − x_prev (the arm's score when last observed), Q ← Q + α(r − Q)."""
        info = self.arms(buffer)
        indices = np.asarray(indices, np.int64)
        if len(indices) == 0:
            return
        last = buffer.column("p_last")[indices]
        codes = info.code[indices]
        for arm in np.unique(codes):
            label = info.labels[arm]
            score = float(np.nanmean(last[codes == arm]))
            if label in self.last_score:
                reward = score - self.last_score[label]
                q = self.q.get(label, 0.0)
                self.q[label] = q + self.settings.tscl_alpha * (reward - q)
                window = self.rewards.setdefault(label, [])
                window.append(reward)
                del window[: -self.settings.tscl_window]
            else:  # first observation: seen, no progress measured yet
                self.q.setdefault(label, 0.0)
                self.rewards.setdefault(label, [0.0])
            self.last_score[label] = score

    def state_dict(self) -> dict:
        return {
            **super().state_dict(),
            "q": dict(self.q),
            "last_score": dict(self.last_score),
            "rewards": {k: list(v) for k, v in self.rewards.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.q = dict(state["q"])
        self.last_score = dict(state["last_score"])
        self.rewards = {k: list(v) for k, v in state["rewards"].items()}
